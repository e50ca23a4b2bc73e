"""The large-batch optimizers' specs (lamb, lars): the numpy reference against numbers
worked out by hand from each algorithm's formulas, argument checks, the frameworks'
presets and the power of their conformance cases (``conformance/cases/large_batch.py``).
The backends: test_algorithms.py."""

import math

import numpy as np
import pytest
from support import assert_planted_deviation_fails, reference_steps

import unified_opt as uo
from unified_opt.conformance.cases import large_batch

# Margins (rtol from 1e-15 to 1e-12, numpy's default rtol=1e-7, pytest.approx): the
# reference computes in float64 and the expected numbers are its formulas worked out in
# float64, mostly the same operations in the same order. +, -, *, / and sqrt round
# correctly whatever vector code numpy runs (SSE, AVX2, AVX-512, NEON) and numpy's sums
# keep their order; exp, log and power may move by an ulp or so from one CPU to another.
# The two sides agree to a few ulps (2.2e-16 each) on every CPU, within these margins.

P, G = [3.0, 4.0], [2.0, -1.0]          # ||p|| = 5; after step 1, m_hat = g, v_hat = g^2


# -- lamb ---------------------------------------------------------------------------
def test_lamb_paper_step_is_the_trust_ratio_times_adam_plus_decay():
    # r = m_hat / sqrt(v_hat) = sign(g) = (1, -1); u = r + 0.5 p = (2.5, 1)
    ref = reference_steps(uo.Lamb(lr=0.1, eps=0.0, weight_decay=0.5), {"p": P}, {"p": G})
    ratio = 5.0 / math.sqrt(2.5 ** 2 + 1.0)
    np.testing.assert_allclose(ref.params["p"], [3 - 0.1 * ratio * 2.5, 4 - 0.1 * ratio * 1.0],
                               rtol=1e-14)


def test_lamb_without_decay_is_adam_unless_always_adapt():
    plain = reference_steps(uo.Lamb(lr=0.1, eps=0.0, weight_decay=0.0), {"p": P}, {"p": G})
    np.testing.assert_allclose(plain.params["p"], [2.9, 4.1], rtol=1e-14)
    adapted = reference_steps(uo.Lamb(lr=0.1, eps=0.0, weight_decay=0.0, always_adapt=True),
                              {"p": P}, {"p": G})
    step = 0.1 * 5.0 / math.sqrt(2.0)
    np.testing.assert_allclose(adapted.params["p"], [3 - step, 4 + step], rtol=1e-14)


def test_lamb_clamp_trust_eps_and_the_zero_norm_rule():
    u_norm = math.sqrt(2.5 ** 2 + 1.0)
    clamped = reference_steps(uo.Lamb(lr=0.1, eps=0.0, weight_decay=0.5, weight_norm_clamp=2.0),
                              {"p": P}, {"p": G})
    np.testing.assert_allclose(clamped.params["p"][0], 3 - 0.1 * 2.0 / u_norm * 2.5, rtol=1e-14)
    eps = reference_steps(uo.Lamb(lr=0.1, eps=0.0, weight_decay=0.5, trust_eps=1.0),
                          {"p": P}, {"p": G})
    np.testing.assert_allclose(eps.params["p"][0], 3 - 0.1 * 5.0 / (u_norm + 1) * 2.5, rtol=1e-14)
    zero = reference_steps(uo.Lamb(lr=0.1, eps=0.0, weight_decay=0.5), {"p": [0.0, 0.0]}, {"p": G})
    np.testing.assert_allclose(zero.params["p"], [-0.1, 0.1], rtol=1e-14)   # ratio 1


def test_lamb_bias_correction_forms():
    # uncorrected at step 1: m / sqrt(v) = 0.1 g / sqrt(0.001 g^2) = sqrt(10) sign(g)
    none = reference_steps(uo.Lamb(lr=0.1, eps=0.0, weight_decay=0.0, bias_correction="none"),
                           {"p": P}, {"p": G})
    np.testing.assert_allclose(none.params["p"], [3 - 0.1 * math.sqrt(10), 4 + 0.1 * math.sqrt(10)],
                               rtol=1e-14)
    step = reference_steps(uo.Lamb(lr=0.1, eps=0.0, weight_decay=0.0, bias_correction="step"),
                           {"p": P}, {"p": G})
    factor = 0.1 * math.sqrt(1 - 0.999) / (1 - 0.9) * math.sqrt(10)
    np.testing.assert_allclose(step.params["p"], [3 - factor, 4 + factor], rtol=1e-12)


def test_lamb_no_decay_names_drop_decay_and_with_it_the_ratio():
    spec = uo.Lamb(lr=0.1, eps=0.0, weight_decay=0.5, no_decay_names=("*bias*",))
    ref = reference_steps(spec, {"w": P, "bias": P}, {"w": G, "bias": G})
    np.testing.assert_allclose(ref.params["bias"], [2.9, 4.1], rtol=1e-14)
    assert abs(ref.params["w"][0] - 2.9) > 1e-3
    with pytest.raises(ValueError, match="no_decay_names"):
        spec.for_parameter(None)          # a name rule needs names


# -- lars ---------------------------------------------------------------------------
LP, LG = [3.0, 4.0], [0.6, 0.8]          # ||p|| = 5, ||g|| = 1


def test_lars_paddle_step_keeps_the_lr_in_the_velocity():
    spec = uo.LARS(lr=0.5, momentum=0.9, weight_decay=0.1, trust_coefficient=0.01)
    ref = reference_steps(spec, {"p": LP}, {"p": LG}, steps=2)
    # step 1: ratio = 0.01 * 5 / (1 + 0.1 * 5) = 1/30; d = (g + 0.1 p) / 30 = (0.03, 0.04)
    v1 = 0.5 * np.array([0.03, 0.04])
    p1 = np.array(LP) - v1
    n1 = np.linalg.norm(p1)
    v2 = 0.9 * v1 + 0.5 * 0.01 * n1 / (1 + 0.1 * n1) * (np.array(LG) + 0.1 * p1)
    np.testing.assert_allclose(ref.params["p"], p1 - v2, rtol=1e-14)
    np.testing.assert_allclose(ref.state["p"]["momentum_buffer"], v2, rtol=1e-14)


@pytest.mark.parametrize("rule, direction", [
    ("one_if_norm_zero", [0.3, 0.4]),            # ratio 1, the decay stays
    ("raw_if_norm_zero", [0.0, 0.0]),            # the raw (zero) gradient
    ("one_if_denominator_zero", [0.03, 0.04]),   # 0.01 * 5 / (0 + 0.5) = 0.1
    ("none", [0.03, 0.04]),
])
def test_lars_zero_gradient_norm_rules(rule, direction):
    spec = uo.LARS(lr=0.5, momentum=0.9, weight_decay=0.1, trust_coefficient=0.01,
                   zero_norm_rule=rule)
    ref = reference_steps(spec, {"p": LP}, {"p": [0.0, 0.0]})
    np.testing.assert_allclose(ref.params["p"], np.array(LP) - 0.5 * np.array(direction),
                               rtol=1e-14)


def test_lars_clip_exclusions_and_outside_lr():
    clip = uo.LARS(lr=0.5, momentum=0.9, weight_decay=0.1, trust_coefficient=0.6, clip=True,
                   lr_placement="outside")
    ref = reference_steps(clip, {"p": LP}, {"p": LG})   # ratio 0.6 * 5 / 1.5 = 2; / lr = 4 -> 1
    np.testing.assert_allclose(ref.params["p"], np.array(LP) - 0.5 * np.array([0.9, 1.2]),
                               rtol=1e-14)
    spec = uo.LARS(lr=0.5, momentum=0.9, weight_decay=0.1, trust_coefficient=0.01,
                   exclude_names=("*bias*",), exclude_1d=True)
    ref = reference_steps(spec, {"bias": [[3.0, 4.0]], "v": LP}, {"bias": [LG], "v": LG})
    np.testing.assert_allclose(ref.params["bias"], [[3 - 0.3, 4 - 0.4]], rtol=1e-14)
    np.testing.assert_allclose(ref.params["v"], [3 - 0.3, 4 - 0.4], rtol=1e-14)



# -- argument checks, presets, JSON -----------------------------------------------------
@pytest.mark.parametrize("make, error, words", [
    (lambda: uo.Lamb(bias_correction="paper"), ValueError, "bias_correction"),
    (lambda: uo.Lamb(weight_norm_clamp=0.0), ValueError, "weight_norm_clamp"),
    (lambda: uo.LARS(zero_norm_rule="zero"), ValueError, "zero_norm_rule"),
    (lambda: uo.LARS(exclude_names="bias"), TypeError, "exclude_names"),
])
def test_bad_arguments_name_the_argument(make, error, words):
    with pytest.raises(error, match=words):
        make()


def test_presets_carry_each_frameworks_conventions():
    paddle = uo.preset("paddle.optimizer.Lamb", learning_rate=0.01)
    assert (paddle.weight_decay, paddle.always_adapt, paddle.eps) == (0.01, False, 1e-6)
    ms = uo.preset("mindspore.nn.Lamb", learning_rate=0.01, weight_decay=0.1)
    assert ms.always_adapt and ms.no_decay_names == ("*beta*", "*gamma*")
    inner = uo.preset("mindspore.nn.Momentum", learning_rate=0.1, momentum=0.9, weight_decay=0.1)
    lars = uo.preset("mindspore.nn.LARS", optimizer=inner)
    assert (lars.lr_placement, lars.exclude_names, lars.zero_norm_rule) == (
        "outside", ("*LayerNorm*", "*bias*"), "none")


@pytest.mark.parametrize("name, kwargs, error, words", [
    ("paddle.optimizer.Lamb", {"exclude_from_weight_decay_fn": lambda p: True},
     NotImplementedError, "no_decay_names"),
    ("mindspore.nn.LARS", {"optimizer": uo.Adam()}, NotImplementedError, "momentum optimizer"),
    ("mindspore.nn.LARS", {"optimizer": uo.SGD(), "lars_filter": lambda p: True},
     NotImplementedError, "exclude_names"),
])
def test_presets_refuse_what_a_spec_cannot_carry(name, kwargs, error, words):
    with pytest.raises(error, match=words):
        uo.preset(name, **kwargs)


def test_specs_round_trip_through_json():
    for spec in (uo.Lamb(no_decay_names=("*bias*",)), uo.LARS(exclude_names=("*bias*",))):
        assert uo.spec_from_dict(spec.to_dict()) == spec


# -- the conformance cases have power -------------------------------------------------
PLANTED = {"lamb_no_decay_is_adam": "always_adapt", "lamb_no_bias_correction_clamp":
           "weight_norm_clamp", "lars_default": "zero_norm_rule='none'"}


@pytest.mark.parametrize("case_id, planted", sorted(PLANTED.items()))
def test_a_planted_deviation_fails_its_case(case_id, planted):
    assert_planted_deviation_fails(large_batch.cases(), case_id, planted)

