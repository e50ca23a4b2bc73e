"""The training-loop core on numpy: groups, clipping, the gradient pre-step, per-step
hyperparameters, in the reference (the oracle every backend is compared with)."""

import numpy as np
import pytest

import unified_opt as uo
from unified_opt.groups import plan_parameters
from unified_opt.ops import numpy_ops
from unified_opt.pre_step import centralized, prepare_gradients
from unified_opt.schedules import Cosine, Linear

# Margins (rtol from 1e-15 to 1e-12, numpy's default rtol=1e-7, pytest.approx): the
# reference computes in float64 and the expected numbers are its formulas worked out in
# float64, mostly the same operations in the same order. +, -, *, / and sqrt round
# correctly whatever vector code numpy runs (SSE, AVX2, AVX-512, NEON) and numpy's sums
# keep their order; exp, log and power may move by an ulp or so from one CPU to another.
# The two sides agree to a few ulps (2.2e-16 each) on every CPU, within these margins.

PARAMS = {"w": np.arange(12, dtype=np.float64).reshape(3, 4) / 7.0,
          "bias": np.linspace(-1.0, 1.0, 4), "ln.gamma": np.ones(4)}


def grads(scale=1.0):
    rng = np.random.default_rng(3)
    return {n: rng.standard_normal(p.shape) * scale for n, p in PARAMS.items()}


# -- groups ----------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, error, text", [
    ({"match": "*", "lr": 0.1, "lr_scale": 2.0}, ValueError, "lr or lr_scale, not both"),
    ({"match": 3}, TypeError, "match must be a pattern"),
    ({"match": ()}, TypeError, "non-empty tuple"),
    ({"match": "*", "lr_scale": -1.0}, ValueError, "lr_scale must be >= 0, got -1.0"),
    ({"match": "*", "exclude_from": ("lr",)}, ValueError, r"got \['lr'\]"),
    ({"match": "*", "exclude_from": "grad_clip"}, TypeError, "exclude_from must be a tuple"),
    ({"match": "*", "weight_decay": 0.1, "exclude_from": ("weight_decay",)}, ValueError,
     "contradicts weight_decay=0.1"),
])
def test_bad_groups_raise_naming_argument_and_value(kwargs, error, text):
    with pytest.raises(error, match=text):
        uo.Group(**kwargs)


def test_first_matching_group_wins_and_overrides_the_name_rule():
    spec = uo.AdamW(weight_decay=0.1, no_decay_names=("*gamma*", "*bias*"))
    groups = [uo.Group(match="ln.*", weight_decay=0.05, lr_scale=0.5),
              uo.Group(match=("*gamma", "w"), lr=0.25, exclude_from=("grad_clip",))]
    w, bias, gamma = plan_parameters(spec, ["w", "bias", "ln.gamma"], groups)
    assert (w.group, w.fixed_lr, w.clipped, w.spec.weight_decay) == (1, 0.25, False, 0.1)
    assert (bias.group, bias.spec.weight_decay) == (None, 0.0)     # the spec's own rule
    # inside a group the name rule is off (MindSpore's group rule): gamma decays
    assert (gamma.group, gamma.lr(0.01), gamma.spec.weight_decay) == (0, 0.005, 0.05)


def test_group_rules_need_names_and_constant_lr_for_an_absolute_lr():
    with pytest.raises(ValueError, match="need parameter names"):
        plan_parameters(uo.SGD(), [None], [uo.Group(match="*")])
    with pytest.raises(ValueError, match="give the group lr_scale= instead"):
        plan_parameters(uo.SGD(lr=Cosine(lr=0.1, T_max=10)), ["w"],
                        [uo.Group(match="w", lr=0.5)])
    with pytest.raises(TypeError, match=r"groups\[0\] must be a uo.Group"):
        plan_parameters(uo.SGD(), ["w"], [{"params": "w"}])


def test_group_json_round_trip_and_callables_refuse_to_serialise():
    group = uo.Group(match=("*.bias", "ln.*"), lr_scale=0.5, exclude_from=("weight_decay",))
    assert uo.Group.from_dict(group.to_dict()) == group
    with pytest.raises(TypeError, match="cannot be serialised"):
        uo.Group(match=lambda name: "bias" in name).to_dict()


def test_reference_applies_group_lr_and_decay():
    spec = uo.SGD(lr=0.1, weight_decay=0.5)
    zero = {n: np.zeros_like(p) for n, p in PARAMS.items()}
    ref = uo.reference(spec, PARAMS, groups=[uo.Group(match="bias", lr_scale=0.5),
                                              uo.Group(match="w", weight_decay=0.0)])
    ref.step(zero)
    np.testing.assert_array_equal(ref.params["w"], PARAMS["w"])
    np.testing.assert_allclose(ref.params["bias"], PARAMS["bias"] * (1 - 0.05 * 0.5))
    np.testing.assert_allclose(ref.params["ln.gamma"], PARAMS["ln.gamma"] * (1 - 0.1 * 0.5))


# -- clipping and the pre-step ---------------------------------------------------------------

def test_global_norm_clip_matches_its_formula():
    g = grads()
    total = np.sqrt(sum(np.sum(x * x) for x in g.values()))
    for eps in (0.0, 1e-6):
        clipped = uo.ClipByGlobalNorm(max_norm=1.0, eps=eps).apply(list(g.values()), numpy_ops)
        for got, x in zip(clipped, g.values()):
            np.testing.assert_allclose(got, x * (1.0 / (total + eps)), rtol=1e-15)
    # below the threshold nothing changes, and a zero gradient stays zero (no 0/0)
    small = uo.ClipByGlobalNorm(max_norm=1e6).apply(list(g.values()), numpy_ops)
    for got, x in zip(small, g.values()):
        np.testing.assert_array_equal(got, x)
    with np.errstate(divide="ignore"):
        (zero,) = uo.ClipByGlobalNorm(max_norm=1.0).apply([np.zeros(3)], numpy_ops)
    np.testing.assert_array_equal(zero, np.zeros(3))


def test_per_tensor_and_value_clips():
    g = grads()
    clipped = uo.ClipByNorm(max_norm=0.5).apply(list(g.values()), numpy_ops)
    for got in clipped:
        assert np.linalg.norm(got) == pytest.approx(0.5, rel=1e-12)
    (value,) = uo.ClipByValue(max=0.25).apply([np.array([-3.0, 0.1, 2.0])], numpy_ops)
    np.testing.assert_array_equal(value, [-0.25, 0.1, 0.25])
    with pytest.raises(ValueError, match="min must be <= max, got min=1.0, max=0.5"):
        uo.ClipByValue(max=0.5, min=1.0)
    with pytest.raises(ValueError, match="max_norm must be > 0, got 0.0"):
        uo.ClipByGlobalNorm(max_norm=0.0)


def test_pre_step_unscales_before_clipping_and_skips_non_finite():
    g = grads(scale=1024.0)
    spec = uo.SGD(loss_scale=1024.0, grad_clip=uo.ClipByGlobalNorm(max_norm=1.0),
                  skip_nonfinite=True)
    plans = plan_parameters(spec, list(g), None)
    out = prepare_gradients(spec, plans, list(g.values()), numpy_ops)
    unscaled = [x / 1024.0 for x in g.values()]
    total = np.sqrt(sum(np.sum(x * x) for x in unscaled))
    for got, x in zip(out, unscaled):
        np.testing.assert_allclose(got, x / total, rtol=1e-14)
    g["bias"][1] = np.inf
    assert prepare_gradients(spec, plans, list(g.values()), numpy_ops) is None


def test_per_group_norm_and_clip_exclusion():
    g = grads()
    groups = [uo.Group(match="w", lr_scale=1.0), uo.Group(match="ln.*",
                                                         exclude_from=("grad_clip",))]
    spec = uo.SGD(grad_clip=uo.ClipByGlobalNorm(max_norm=0.1, per_group=True))
    out = prepare_gradients(spec, plan_parameters(spec, list(g), groups), list(g.values()),
                            numpy_ops)
    assert np.linalg.norm(out[0]) == pytest.approx(0.1, rel=1e-12)   # group 0 alone
    assert np.linalg.norm(out[1]) == pytest.approx(0.1, rel=1e-12)   # default group alone
    np.testing.assert_array_equal(out[2], g["ln.gamma"])              # excluded


def test_centralization_removes_the_mean_over_all_but_the_first_axis():
    g = np.random.default_rng(0).standard_normal((3, 4, 5))
    got = centralized(g, numpy_ops)
    np.testing.assert_allclose(got, g - g.mean(axis=(1, 2), keepdims=True), atol=1e-15)
    vector = np.arange(3.0)
    assert centralized(vector, numpy_ops) is vector


def test_loss_scale_with_scaled_gradients_equals_plain_training():
    plain = uo.reference(uo.Adam(lr=0.01, weight_decay=0.1), PARAMS)
    scaled = uo.reference(uo.Adam(lr=0.01, weight_decay=0.1, loss_scale=8.0), PARAMS)
    for t in range(5):
        plain.step(grads())
        scaled.step(grads(scale=8.0))
    for name in PARAMS:
        np.testing.assert_array_equal(scaled.params[name], plain.params[name])


def test_a_skipped_step_changes_nothing_and_does_not_advance_the_schedule():
    spec = uo.Adam(lr=Linear(lr=0.1, start_factor=1.0, end_factor=0.0, total_steps=10),
                   skip_nonfinite=True)
    ref = uo.reference(spec, PARAMS)
    ref.step(grads())
    before = {n: p.copy() for n, p in ref.params.items()}
    state = {n: {k: a.copy() for k, a in s.items()} for n, s in ref.state.items()}
    bad = grads()
    bad["w"][0, 0] = np.nan
    assert ref.step(bad) == pytest.approx(0.09)
    assert ref.skipped == [False, True] and ref.step_count == 1
    for name in PARAMS:
        np.testing.assert_array_equal(ref.params[name], before[name])
        for key in state[name]:
            np.testing.assert_array_equal(ref.state[name][key], state[name][key])
    assert ref.step(grads()) == pytest.approx(0.09)   # the lr of the step not taken


# -- per-step hyperparameters ------------------------------------------------------------

def test_weight_decay_schedule_decays_by_its_value_at_each_step():
    decay = Linear(lr=0.5, start_factor=1.0, end_factor=0.0, total_steps=4)
    ref = uo.reference(uo.SGD(lr=0.1, weight_decay=decay), {"w": np.ones(2)})
    expected = 1.0
    for t in range(6):
        ref.step({"w": np.zeros(2)})
        expected *= 1.0 - 0.1 * decay(t)
        np.testing.assert_allclose(ref.params["w"], expected, rtol=1e-15)


def test_momentum_cycling_sets_the_momentum_of_each_step():
    cycling = uo.schedules.preset("torch.optim.lr_scheduler.OneCycleLR", max_lr=0.1,
                                  total_steps=20)
    spec = uo.AdamW(lr=cycling)
    assert spec.at_step(0).betas == (0.95, 0.999)
    assert spec.at_step(19).betas[0] == pytest.approx(0.95)
    assert 0.85 <= spec.at_step(6).betas[0] < spec.at_step(1).betas[0]
    sgd = uo.SGD(lr=cycling, momentum=0.9)
    assert sgd.at_step(6).momentum == pytest.approx(cycling.momentum(6))
    with pytest.raises(ValueError, match="Adagrad has neither momentum nor betas"):
        uo.reference(uo.Adagrad(lr=cycling), {"w": np.ones(2)})


def test_training_fields_round_trip_through_json_and_are_checked():
    spec = uo.AdamW(weight_decay=Cosine(lr=0.1, T_max=10), loss_scale=128.0,
                    grad_clip=uo.ClipByValue(max=1.0), skip_nonfinite=True,
                    grad_centralization=True)
    assert uo.spec_from_dict(spec.to_dict()) == spec
    assert "loss_scale" not in uo.AdamW().to_dict()["hyperparameters"]
    with pytest.raises(ValueError, match="loss_scale must be > 0, got 0.0"):
        uo.SGD(loss_scale=0.0)
    with pytest.raises(TypeError, match="grad_clip must be None or"):
        uo.SGD(grad_clip=1.0)
    with pytest.raises(TypeError, match="skip_nonfinite must be a bool"):
        uo.SGD(skip_nonfinite=1)


def test_a_group_that_matches_nothing_is_an_error():
    with pytest.raises(ValueError, match=r"groups\[1\] \(match='bais'\) matches no parameter"):
        plan_parameters(uo.SGD(), ["w", "bias"], [uo.Group(match="w", lr_scale=2.0),
                                                  uo.Group(match="bais", weight_decay=0.0)])
    with pytest.raises(ValueError, match=r"max must be >= 0 when min is not given"):
        uo.ClipByValue(max=-1.0)
    with pytest.raises(TypeError, match="Group takes keyword arguments only"):
        uo.Group("*")


def test_a_fixed_group_lr_is_exact_and_follows_an_lr_changed_from_outside():
    (plan,) = plan_parameters(uo.SGD(lr=0.1), ["b"], [uo.Group(match="b", lr=0.05)])
    assert plan.lr(0.1) == 0.05                  # exactly the group's lr
    assert plan.lr(0.01) == pytest.approx(0.005)  # a plateau scheduler cut the lr by 10


def test_lowering_judges_scheduled_decay_without_crashing():
    spec = uo.get("lars", weight_decay=Cosine(lr=0.1, T_max=10), always_adapt=True)
    for backend in ("torch", "paddle", "mindspore"):
        assert uo.explain(spec, backend).path == "own"
