"""One name-matching rule: shell-style patterns over whole parameter names, for
``uo.Group(match=...)``, a spec's ``no_decay_names`` and LARS's ``exclude_names``; a rule
that matches no parameter is an error (a typo would silently change which parameters
decay)."""

import numpy as np
import pytest

import unified_opt as uo

PARAMS = {"encoder.weight": np.ones(3), "encoder.bias": np.ones(2), "norm.gamma": np.ones(2)}
GRADS = {n: np.zeros_like(p) for n, p in PARAMS.items()}


def _decayed(spec) -> dict[str, bool]:
    ref = uo.reference(spec, PARAMS)
    ref.step(GRADS)   # a zero gradient: only the decay moves a parameter
    return {n: bool(ref.params[n][0] != 1.0) for n in PARAMS}


def test_no_decay_names_are_globs_over_whole_names():
    # "*bias" was a substring before, which no name contains: the biases were decayed
    assert _decayed(uo.AdamW(lr=0.1, weight_decay=0.1, no_decay_names=("*bias",))) == {
        "encoder.weight": True, "encoder.bias": False, "norm.gamma": True}
    assert _decayed(uo.SGD(lr=0.1, weight_decay=0.1, no_decay_names=("norm.*", "*.bias"))) == {
        "encoder.weight": True, "encoder.bias": False, "norm.gamma": False}
    # a bare word is a whole name, not a part of one
    assert _decayed(uo.SGD(lr=0.1, weight_decay=0.1, no_decay_names=("encoder.bias",))) == {
        "encoder.weight": True, "encoder.bias": False, "norm.gamma": True}


def test_a_rule_that_matches_no_parameter_is_an_error():
    with pytest.raises(ValueError, match=r"no_decay_names=\('bias',\) matches no parameter"):
        uo.reference(uo.AdamW(weight_decay=0.1, no_decay_names=("bias",)), PARAMS)
    with pytest.raises(ValueError, match=r"exclude_names=\('\*LayerNorm\*',\) matches no"):
        uo.reference(uo.LARS(exclude_names=("*LayerNorm*",)), PARAMS)
    # a rule acts only with a decay: without one it is not checked
    uo.reference(uo.AdamW(weight_decay=0.0, no_decay_names=("bias",)), PARAMS)
    # one pattern of a rule may match nothing (MindSpore's beta/gamma on a gamma-only net)
    uo.reference(uo.AdamW(weight_decay=0.1, no_decay_names=("*beta*", "*gamma*")), PARAMS)


def test_mindspore_s_default_filter_may_match_nothing():
    """MindSpore's nn optimizers skip the decay of names holding beta or gamma; a network
    without such names decays everything there, and the preset's spec too."""
    plain = {"dense.weight": np.ones(3), "dense.bias": np.ones(2)}
    spec = uo.preset("mindspore.nn.Adam", learning_rate=0.1, weight_decay=0.1)
    assert spec.no_decay_names == ("*beta*", "*gamma*")
    ref = uo.reference(spec, plain)
    ref.step({n: np.zeros_like(a) for n, a in plain.items()})
    # zero gradients: only the decay moved the parameters, every one of them
    assert all((ref.params[n] < 1).all() for n in plain)
    with pytest.raises(ValueError, match=r"no_decay_names=\('\*beta\*',\) matches no"):
        uo.reference(spec.replace(no_decay_names=("*beta*",)), plain)


def test_groups_and_name_rules_match_alike():
    group = uo.Group(match="*bias", weight_decay=0.0)
    by_group = uo.reference(uo.AdamW(lr=0.1, weight_decay=0.1), PARAMS, groups=[group])
    by_rule = uo.reference(uo.AdamW(lr=0.1, weight_decay=0.1, no_decay_names=("*bias",)),
                           PARAMS)
    for ref in (by_group, by_rule):
        ref.step(GRADS)
    for name in PARAMS:
        np.testing.assert_array_equal(by_group.params[name], by_rule.params[name])


def test_mindspore_presets_spell_their_filter_as_globs():
    spec = uo.preset("mindspore.nn.Adam", weight_decay=0.1)
    assert spec.no_decay_names == ("*beta*", "*gamma*")
    lars = uo.preset("mindspore.nn.LARS", optimizer=uo.preset(
        "mindspore.nn.Momentum", learning_rate=0.1, momentum=0.9))
    assert lars.exclude_names == ("*LayerNorm*", "*bias*")
    paddle_lars = uo.preset("paddle.incubate.optimizer.LarsMomentumOptimizer",
                            learning_rate=0.1, momentum=0.9,
                            exclude_from_weight_decay=["bias"])
    assert paddle_lars.no_decay_names == ("*bias*",)   # Paddle matches substrings
