"""Training-loop semantics on the MindSpore backend (issue 4): parameter groups, gradient
clipping, loss scale, overflow skipping, gradient centralization, dynamic weight decay and
momentum cycling, each against the float64 reference over 50 steps (the conformance rule
of tests/test_backend_mindspore.py: within K x the float32 floor at every step, for
parameters and states), and every native path bit-identical to the same MindSpore class
built by hand (group dicts with order_params, loss_scale, a weight-decay Cell).
"""

import warnings

import numpy as np
import pytest
from conftest import require
from test_backend_mindspore import assert_within_floor

import unified_opt as uo
from unified_opt.presets.mindspore_groups import mindspore_groups
from unified_opt.reference import with_float32_hyperparameters

STEPS = 50
EPS32 = float(np.finfo(np.float32).eps)
SHAPES = {"w": (4, 6), "bias": (6,), "ln.gamma": (6,), "w3d": (2, 3, 4), "empty": (0,)}
COSINE = uo.schedules.Cosine(lr=0.05, T_max=30, eta_min=0.002)
WD = uo.schedules.Cosine(lr=0.2, T_max=40, eta_min=0.01)          # a weight-decay schedule
ONE_CYCLE = uo.schedules.OneCycle(max_lr=0.05, total_steps=STEPS, start_lr=0.002, end_lr=2e-7,
                                  cycle_momentum=True)
ms_only = require("mindspore")


def arrays_of(shapes=SHAPES, seed=0):
    rng = np.random.default_rng(seed)
    return {n: rng.normal(size=s).astype(np.float32) for n, s in shapes.items()}


def gradient_stream(arrays, steps=STEPS, scale=1.0, nonfinite=(), seed=1):
    """Normal gradients times ``scale`` (a loss scale), with zero, 1e-30 and 500 steps;
    ``nonfinite``: steps where one element of "w" is inf (or NaN every other time)."""
    rng = np.random.default_rng(seed)
    for step in range(steps):
        grads = {}
        for name, a in arrays.items():
            g = rng.normal(size=a.shape) * {3: 0.0, 5: 1e-30, 7: 500.0}.get(step % 10, 1.0)
            if name == "w" and step in nonfinite:
                g.flat[2] = np.inf if nonfinite.index(step) % 2 == 0 else np.nan
            grads[name] = (g * scale).astype(np.float32)
        yield grads


def run(spec, *, groups=None, path="auto", by_hand=None, nonfinite=(), steps=STEPS,
        reference_spec=None, reference_groups="same"):
    """Drive ``spec`` with ``groups`` through the conformance driver, checking the lr,
    parameters and states at every step against the reference; ``by_hand(params)`` (a
    dict name -> Parameter copy of the non-empty parameters) builds the native class by
    hand, which must stay bit-identical."""
    from mindspore import Parameter, Tensor

    from unified_opt.backends.mindspore.native import native_state
    from unified_opt.conformance.drivers.mindspore import MindSporeDriver

    arrays = arrays_of()
    driver = MindSporeDriver(spec, arrays, path=path, total_steps=steps, groups=groups)
    reference_spec = reference_spec or spec
    reference_groups = groups if reference_groups == "same" else reference_groups
    ref64 = uo.reference(reference_spec, arrays, groups=reference_groups)
    refs32 = [uo.reference(s, arrays, dtype="float32", groups=reference_groups)
              for s in (reference_spec, with_float32_hyperparameters(reference_spec))]
    copies = {n: Parameter(Tensor(a.copy()), name=n) for n, a in arrays.items() if a.size}
    hand = by_hand(copies) if by_hand else None
    for step, grads in enumerate(gradient_stream(arrays, steps, spec.loss_scale, nonfinite)):
        lr, want = driver.step(grads), ref64.step(grads)
        for r in refs32:
            r.step(grads)
        if driver.decision.path == "own":
            assert lr == want, (step, lr, want)
        else:   # held in float32 (a scaled group's divided by its factor)
            assert lr == pytest.approx(want, rel=2 * EPS32, abs=0.0), (step, lr, want)
        assert_within_floor(driver.params_numpy(), ref64.params, [r.params for r in refs32],
                     f"step {step} params")
        states = driver.state_numpy()
        for name in arrays:
            assert sorted(states[name]) == sorted(ref64.state[name]), name
            assert_within_floor(states[name], ref64.state[name], [r.state[name] for r in refs32],
                         f"step {step} state {name}")
        if hand is not None:
            hand(tuple(Tensor(grads[n]) for n in copies))
            for name, p in copies.items():
                assert np.array_equal(p.asnumpy(), driver.params[name].asnumpy()), (step, name)
                plan = driver.record.plans[list(arrays).index(name)]
                theirs = native_state(driver.decision.native_class, hand, p, plan.spec)
                for key, value in driver.spec_state(name).items():
                    assert np.array_equal(theirs[key].asnumpy(), value.asnumpy()), (step, key)
    if driver.decision.path == "own":
        assert uo.skipped_steps(driver.optimizer) == ref64.skipped
    return driver, ref64


def nn_class(name):
    import mindspore.nn as nn
    return getattr(nn, name)


def experimental(name):
    from mindspore.experimental import optim
    return getattr(optim, name)


def decay_cell(schedule):
    """MindSpore's dynamic weight decay, by hand: a Cell of global_step."""
    from mindspore import Tensor, nn, ops

    class Decay(nn.Cell):
        def __init__(self):
            super().__init__()
            self.values = Tensor(np.array([schedule(t) for t in range(STEPS)], np.float32))

        def construct(self, global_step):
            return ops.gather(self.values, global_step, 0).reshape(())

    return Decay()


def per_step(schedule, scale=1.0):
    return [scale * schedule(t) for t in range(STEPS)]


def ordered(ps, *groups):
    """nn group dicts (names -> the copies) plus order_params in parameter order."""
    return [{**g, "params": [ps[n] for n in g["params"]]} for g in groups] + \
        [{"order_params": list(ps.values())}]


# (id, spec, groups, expected native class or "own", by hand)
CASES = [
    # -- parameter groups -------------------------------------------------------------
    ("nn-groups-lr-scale", uo.SGD(lr=COSINE, momentum=0.9, momentum_init="zeros",
                                  weight_decay=0.01),
     [uo.Group(match="*bias", lr_scale=2.0, weight_decay=0.0), uo.Group(match="w*", lr_scale=0.5)],
     "mindspore.nn.Momentum",
     lambda ps: nn_class("Momentum")(ordered(
         ps, {"params": ["w", "w3d"], "lr": per_step(COSINE, 0.5), "weight_decay": 0.01},
         {"params": ["bias"], "lr": per_step(COSINE, 2.0), "weight_decay": 0.0},
         {"params": ["ln.gamma"], "weight_decay": 0.01}),
         learning_rate=per_step(COSINE), momentum=0.9)),
    ("nn-groups-fixed-lr", uo.Adam(lr=0.01, eps_placement="eps_hat", weight_decay=0.1),
     [uo.Group(match="ln.*", lr=0.05, exclude_from=("weight_decay",))], "mindspore.nn.Adam",
     lambda ps: nn_class("Adam")(ordered(
         ps, {"params": ["w", "bias", "w3d"], "weight_decay": 0.1},
         {"params": ["ln.gamma"], "lr": 0.05, "weight_decay": 0.0}), learning_rate=0.01)),
    ("experimental-groups", uo.AdamW(lr=0.01, weight_decay=0.1),
     [uo.Group(match="bias", lr_scale=3.0, exclude_from=("weight_decay",))],
     "mindspore.experimental.optim.AdamW",
     lambda ps: experimental("AdamW")([
         {"params": [ps["w"]], "lr": 0.01, "weight_decay": 0.1},
         {"params": [ps["bias"]], "lr": 0.01 * 3.0, "weight_decay": 0.0},
         {"params": [ps["ln.gamma"], ps["w3d"]], "lr": 0.01, "weight_decay": 0.1}], lr=0.01)),
    # -- clipping (the train step's in MindSpore: own) -----------------------------------
    ("clip-global-exclude", uo.SGD(lr=0.05, momentum=0.9, weight_decay=0.01,
                                   grad_clip=uo.ClipByGlobalNorm(max_norm=1.0)),
     [uo.Group(match="bias", exclude_from=("grad_clip",))], "own", None),
    ("clip-global-per-group", uo.AdamW(lr=0.01, grad_clip=uo.ClipByGlobalNorm(
        max_norm=1.0, per_group=True)), [uo.Group(match="w*", lr_scale=0.5)], "own", None),
    ("clip-norm", uo.Adam(lr=0.01, weight_decay=0.1, grad_clip=uo.ClipByNorm(max_norm=0.5)),
     None, "own", None),
    ("clip-value", uo.SGD(lr=0.05, grad_clip=uo.ClipByValue(max=0.1, min=-0.2)), None, "own",
     None),
    # -- loss scale: natively where the class divides by it -----------------------------
    ("loss-scale-nn-sgd", uo.preset("mindspore.nn.SGD", learning_rate=0.05, momentum=0.9,
                                    weight_decay=0.01, loss_scale=1024), None,
     "mindspore.nn.SGD", lambda ps: nn_class("SGD")(list(ps.values()), learning_rate=0.05,
                                                    momentum=0.9, weight_decay=0.01,
                                                    loss_scale=1024)),
    ("loss-scale-nn-momentum", uo.preset("mindspore.nn.Momentum", learning_rate=COSINE,
                                         momentum=0.9, weight_decay=0.01, loss_scale=3.0),
     None, "mindspore.nn.Momentum",
     lambda ps: nn_class("Momentum")(list(ps.values()), learning_rate=per_step(COSINE),
                                     momentum=0.9, weight_decay=0.01, loss_scale=3.0)),
    ("loss-scale-nn-adam", uo.preset("mindspore.nn.Adam", learning_rate=0.01, eps=1e-3,
                                     weight_decay=0.1, use_amsgrad=True, loss_scale=128.0),
     None, "mindspore.nn.Adam",
     lambda ps: nn_class("Adam")(list(ps.values()), learning_rate=0.01, eps=1e-3,
                                 weight_decay=0.1, use_amsgrad=True, loss_scale=128.0)),
    ("loss-scale-nn-adam-offload", uo.preset("mindspore.nn.Adam", learning_rate=0.01,
                                             weight_decay=0.1, use_offload=True,
                                             loss_scale=64.0), None, "mindspore.nn.Adam",
     lambda ps: nn_class("Adam")(list(ps.values()), learning_rate=0.01, weight_decay=0.1,
                                 use_offload=True, loss_scale=64.0)),
    ("loss-scale-nn-adamax", uo.preset("mindspore.nn.AdaMax", learning_rate=0.01, eps=0.1,
                                       weight_decay=0.1, loss_scale=10.0), None,
     "mindspore.nn.AdaMax",
     lambda ps: nn_class("AdaMax")(list(ps.values()), learning_rate=0.01, eps=0.1,
                                   weight_decay=0.1, loss_scale=10.0)),
    ("loss-scale-nn-adagrad", uo.preset("mindspore.nn.Adagrad", learning_rate=0.01,
                                        weight_decay=0.1, loss_scale=256.0), None,
     "mindspore.nn.Adagrad",
     lambda ps: nn_class("Adagrad")(list(ps.values()), learning_rate=0.01, weight_decay=0.1,
                                    loss_scale=256.0)),
    ("loss-scale-nn-adadelta", uo.preset("mindspore.nn.Adadelta", epsilon=1e-3,
                                         weight_decay=0.1, loss_scale=32.0), None,
     "mindspore.nn.Adadelta",
     lambda ps: nn_class("Adadelta")(list(ps.values()), epsilon=1e-3, weight_decay=0.1,
                                     loss_scale=32.0)),
    ("loss-scale-nn-rmsprop", uo.preset("mindspore.nn.RMSProp", learning_rate=0.01,
                                        momentum=0.9, centered=True, weight_decay=0.1,
                                        loss_scale=16.0), None, "mindspore.nn.RMSProp",
     lambda ps: nn_class("RMSProp")(list(ps.values()), learning_rate=0.01, momentum=0.9,
                                    centered=True, weight_decay=0.1, loss_scale=16.0)),
    ("loss-scale-own", uo.AdamW(lr=0.01, weight_decay=0.1, loss_scale=512.0), None, "own",
     None),
    ("loss-scale-nn-adamweightdecay-own", uo.preset(
        "mindspore.nn.AdamWeightDecay", learning_rate=0.01, weight_decay=0.1).replace(
        loss_scale=8.0), None, "own", None),
    # -- overflow skipping and centralization (own) --------------------------------------
    ("skip-nonfinite", uo.SGD(lr=COSINE, momentum=0.9, weight_decay=0.01, loss_scale=64.0,
                              skip_nonfinite=True), None, "own", None),
    ("grad-centralization", uo.Adam(lr=0.01, eps_placement="eps_hat", weight_decay=0.1,
                                    grad_centralization=True), None, "own", None),
    # -- dynamic weight decay: the Cell form -------------------------------------------
    ("wd-schedule-nn-momentum", uo.preset("mindspore.nn.Momentum", learning_rate=0.05,
                                          momentum=0.9, weight_decay=WD, loss_scale=4.0),
     None, "mindspore.nn.Momentum",
     lambda ps: nn_class("Momentum")(list(ps.values()), learning_rate=0.05, momentum=0.9,
                                     weight_decay=decay_cell(WD), loss_scale=4.0)),
    ("wd-schedule-nn-adam-groups", uo.Adam(lr=COSINE, eps_placement="eps_hat", weight_decay=WD),
     [uo.Group(match="bias", weight_decay=0.05), uo.Group(match="w3d", lr_scale=0.5)],
     "mindspore.nn.Adam",
     lambda ps: nn_class("Adam")(ordered(
         ps, {"params": ["w", "ln.gamma"], "weight_decay": decay_cell(WD)},
         {"params": ["bias"], "weight_decay": 0.05},
         {"params": ["w3d"], "lr": per_step(COSINE, 0.5), "weight_decay": decay_cell(WD)}),
         learning_rate=per_step(COSINE))),
    ("wd-schedule-nn-adamweightdecay", uo.preset("mindspore.nn.AdamWeightDecay",
                                                 learning_rate=0.01, weight_decay=WD),
     None, "mindspore.nn.AdamWeightDecay",
     lambda ps: nn_class("AdamWeightDecay")(list(ps.values()), learning_rate=0.01,
                                            weight_decay=decay_cell(WD))),
    ("wd-schedule-nn-adamax", uo.preset("mindspore.nn.AdaMax", learning_rate=0.01, eps=0.1,
                                        weight_decay=WD), None, "mindspore.nn.AdaMax",
     lambda ps: nn_class("AdaMax")(list(ps.values()), learning_rate=0.01, eps=0.1,
                                   weight_decay=decay_cell(WD))),
    ("wd-schedule-nn-adagrad", uo.preset("mindspore.nn.Adagrad", learning_rate=0.01,
                                         weight_decay=WD), None, "mindspore.nn.Adagrad",
     lambda ps: nn_class("Adagrad")(list(ps.values()), learning_rate=0.01,
                                    weight_decay=decay_cell(WD))),
    ("wd-schedule-nn-adadelta", uo.preset("mindspore.nn.Adadelta", epsilon=1e-3,
                                          weight_decay=WD), None, "mindspore.nn.Adadelta",
     lambda ps: nn_class("Adadelta")(list(ps.values()), epsilon=1e-3,
                                     weight_decay=decay_cell(WD))),
    ("wd-schedule-nn-rmsprop", uo.preset("mindspore.nn.RMSProp", learning_rate=0.01,
                                         centered=True, weight_decay=WD), None,
     "mindspore.nn.RMSProp",
     lambda ps: nn_class("RMSProp")(list(ps.values()), learning_rate=0.01, centered=True,
                                    weight_decay=decay_cell(WD))),
    ("wd-schedule-nn-rprop", uo.preset("mindspore.nn.Rprop", learning_rate=0.01,
                                       weight_decay=WD), None, "mindspore.nn.Rprop",
     lambda ps: nn_class("Rprop")(list(ps.values()), learning_rate=0.01,
                                  weight_decay=decay_cell(WD))),
    ("wd-schedule-own", uo.SGD(lr=0.05, momentum=0.9, weight_decay=WD), None, "own", None),
    ("wd-schedule-experimental-own", uo.AdamW(lr=0.01, weight_decay=WD), None, "own", None),
    # -- momentum cycling (own) ---------------------------------------------------------
    ("one-cycle-momentum", uo.SGD(lr=ONE_CYCLE, momentum=0.9, momentum_init="zeros"), None,
     "own", None),
    ("one-cycle-beta1", uo.Adam(lr=ONE_CYCLE, eps_placement="eps_hat", weight_decay=0.01),
     [uo.Group(match="bias", lr_scale=0.1)], "own", None),
]


@ms_only
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_feature_matches_reference_and_native_by_hand(case):
    _, spec, groups, expected, by_hand = case
    driver, _ = run(spec, groups=groups, by_hand=by_hand)
    assert (driver.decision.native or "own") == expected, str(driver.decision)


@ms_only
def test_skipped_steps_change_nothing_and_are_reported():
    spec = uo.SGD(lr=COSINE, momentum=0.9, loss_scale=64.0, skip_nonfinite=True)
    nonfinite = (4, 11, 12, 30)
    driver, ref = run(spec, nonfinite=nonfinite)
    skipped = uo.skipped_steps(driver.optimizer)
    assert [i for i, s in enumerate(skipped) if s] == list(nonfinite)
    # the schedule position is the number of steps taken
    assert int(driver.optimizer.global_step.asnumpy()[0]) == STEPS - len(nonfinite)
    assert driver.optimizer.next_lr() == COSINE(STEPS - len(nonfinite))
    assert all(np.isfinite(p).all() for p in driver.params_numpy().values())


@ms_only
@pytest.mark.parametrize("spec,groups,wrong,wrong_groups", [
    (uo.SGD(lr=COSINE, momentum=0.9, momentum_init="zeros", weight_decay=0.01),
     [uo.Group(match="*bias", lr_scale=2.0)], {}, [uo.Group(match="*bias", lr_scale=2.5)]),
    (uo.preset("mindspore.nn.Momentum", learning_rate=0.05, momentum=0.9, weight_decay=0.05,
               loss_scale=8.0), None, {"weight_decay": 0.05 / 8.0}, None),
    (uo.preset("mindspore.nn.Momentum", learning_rate=0.05, momentum=0.9, weight_decay=WD),
     None, {"weight_decay": uo.schedules.Cosine(lr=0.25, T_max=40, eta_min=0.01)}, None),
], ids=["group-lr", "loss-scale", "wd-schedule"])
def test_comparison_flags_a_planted_deviation(spec, groups, wrong, wrong_groups):
    """The checks have power: a reference off by the feature under test fails them."""
    with pytest.raises(AssertionError, match="x floor"):
        run(spec, groups=groups, steps=20, reference_spec=spec.replace(**wrong),
            reference_groups=wrong_groups)


@pytest.mark.parametrize("spec,groups,native,phrase", [
    (uo.SGD(lr=0.1, loss_scale=8.0), None, "mindspore.nn.SGD", "computes exactly"),
    (uo.SGD(lr=0.1, loss_scale=8.0, grad_clip=uo.ClipByNorm(max_norm=1.0)), None, None,
     "the native class divides by loss_scale; clipping and overflow skipping belong"),
    (uo.AdamW(lr=0.01, loss_scale=8.0), None, None,
     "grad_clip=None, loss_scale=1, skip_nonfinite=False"),
    (uo.SGD(lr=0.1, momentum=0.9, momentum_init="zeros", weight_decay=WD), None,
     "mindspore.nn.Momentum", "computes exactly"),
    (uo.SGD(lr=0.1, momentum=0.9, weight_decay=WD), None, None, "constant weight decay"),
    (uo.SGD(lr=ONE_CYCLE, momentum=0.9, momentum_init="zeros"), None, None,
     "no momentum-cycling lr schedule"),
    # a group's decay would be silently lost on experimental.AdamW(weight_decay=0) as Adam
    (uo.Adam(lr=0.01), [uo.Group(match="w", weight_decay=0.1)], None,
     "every parameter group's hyperparameters meet these conditions too"),
    (uo.Adam(lr=0.01), [uo.Group(match="w", lr_scale=2.0)],
     "mindspore.experimental.optim.AdamW", "computes exactly"),
    (uo.preset("mindspore.nn.AdaFactor"), [uo.Group(match="w", lr_scale=2.0)], None,
     "no group lr and one weight decay for every parameter"),
])
def test_explain_names_path_and_reason(spec, groups, native, phrase):
    from unified_opt.backend import Context, load
    from unified_opt.groups import plan_parameters

    plans = tuple(plan_parameters(spec, list(SHAPES), groups))
    decision = load("mindspore").decide(spec, "auto", Context(plans=plans))
    assert (decision.path, decision.native) == ("native" if native else "own", native)
    assert phrase in str(decision)


@ms_only
def test_group_decay_on_a_class_without_it_runs_the_own_implementation():
    # experimental.AdamW(weight_decay=0) computes uo.Adam without decay; a group's decay
    # there would be lost, so the build takes the own path and follows the reference
    driver, _ = run(uo.Adam(lr=0.01), groups=[uo.Group(match="w*", weight_decay=0.1)],
                    steps=10)
    assert driver.decision.path == "own"


@ms_only
def test_current_lr_is_the_specs_when_every_group_is_scaled():
    groups = [uo.Group(match="*", lr_scale=0.5)]
    driver, ref = run(uo.SGD(lr=COSINE, momentum=0.9, momentum_init="zeros"), groups=groups,
                      steps=10)
    # run() compared current_lr() with the reference's lr at every step: read from a
    # group whose lr is 0.5 x the spec's, divided by 0.5
    assert driver.decision.native == "mindspore.nn.Momentum"
    assert {plan.lr_scale for plan in driver.record.plans} == {0.5}
    assert driver.optimizer.is_group_lr


@ms_only
def test_weight_decay_schedule_needs_no_total_steps_and_total_steps_limits_it():
    import mindspore as ms
    p = ms.Parameter(ms.Tensor(np.ones(3, np.float32)), name="w")
    momentum = uo.SGD(lr=0.1, momentum=0.9, momentum_init="zeros", weight_decay=WD)
    with pytest.raises(ValueError, match="is for a scheduled lr or weight decay"):
        uo.build(uo.SGD(lr=0.1), [("w", p)], options={"total_steps": 5})
    grad = (ms.Tensor(np.ones(3, np.float32)),)
    opt = uo.build(momentum, [("w", p)])       # on CPU: a ScheduleCell, no step limit
    assert uo.explain(opt).native == "mindspore.nn.Momentum"
    for _ in range(STEPS + 5):                 # past the end of any table of STEPS
        opt(grad)
    assert int(opt.global_step.asnumpy()[0]) == STEPS + 5
    limited = uo.build(momentum, [("w", p)], options={"total_steps": 2})   # a step limit
    limited(grad)
    limited(grad)
    before = p.asnumpy().copy()
    with pytest.raises(RuntimeError, match=r"mindspore.nn.Momentum was built with "
                                           r"options=\{'total_steps': 2\}: step 3 is past it"):
        limited(grad)
        p.asnumpy()
    assert np.array_equal(p.asnumpy(), before)
    assert int(limited.global_step.asnumpy()[0]) == 2


# -- presets ----------------------------------------------------------------------------

def test_presets_take_loss_scale_and_schedules():
    spec = uo.preset("mindspore.nn.Momentum", learning_rate=COSINE, momentum=0.9,
                     weight_decay=WD, loss_scale=128)
    assert (spec.lr, spec.weight_decay, spec.loss_scale) == (COSINE, WD, 128.0)
    assert spec.no_decay_names == ("*beta*", "*gamma*")
    assert uo.preset("mindspore.nn.Adam", loss_scale=4.0, use_offload=True).loss_scale == 4.0
    with pytest.raises(TypeError, match="loss_scale must be a float or an int, got True"):
        uo.preset("mindspore.nn.Adam", loss_scale=True)
    with pytest.raises(ValueError, match="loss_scale must be > 0, got 0"):
        uo.preset("mindspore.nn.SGD", loss_scale=0)
    with pytest.raises(TypeError, match="nn.SGD: weight_decay must be a float or int here"):
        uo.preset("mindspore.nn.SGD", weight_decay=WD)
    with pytest.raises(TypeError, match="lr must be a float here"):
        uo.preset("mindspore.experimental.optim.AdamW", lr=COSINE)
    with pytest.warns(UserWarning, match="loss_scale=8 is not applied by the class"):
        assert uo.preset("mindspore.nn.AdaFactor", loss_scale=8).loss_scale == 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        uo.preset("mindspore.nn.AdaFactor", loss_scale=1)


def test_mindspore_groups_reproduce_the_group_rule():
    spec = uo.preset("mindspore.nn.Momentum", learning_rate=COSINE, momentum=0.9,
                     weight_decay=5e-3)
    groups = mindspore_groups([
        {"params": ["conv[0].weight", "fc.w"], "weight_decay": 0.01,
         "lr": [0.25 * COSINE(t) for t in range(20)]},
        {"params": ["bn.gamma"], "weight_decay": 0.0},
        {"params": ["bn.beta", "fc.bias"]},
        {"order_params": ["fc.bias", "bn.beta", "bn.gamma", "conv[0].weight", "fc.w"]}], spec)
    assert groups == [
        uo.Group(match=("conv[[]0].weight", "fc.w"), weight_decay=0.01, lr_scale=0.25),
        uo.Group(match=("bn.gamma",), weight_decay=0.0),
        uo.Group(match=("bn.beta", "fc.bias"), weight_decay=5e-3)]
    from unified_opt.groups import plan_parameters
    plans = plan_parameters(spec, ["bn.beta", "conv[0].weight", "conv0.weight", "bn.gamma"],
                            groups)
    # the beta/gamma rule is off in groups: bn.beta decays by the optimizer's weight decay
    assert [p.spec.weight_decay for p in plans] == [5e-3, 0.01, 5e-3, 0.0]
    assert [p.group for p in plans] == [2, 0, None, 1]
    constant = uo.preset("mindspore.nn.Adam", learning_rate=0.01, weight_decay=0.1)
    assert mindspore_groups([{"params": ["a"], "lr": 0.5}], constant) == [
        uo.Group(match=("a",), lr=0.5, weight_decay=0.1)]


@pytest.mark.parametrize("group_params,spec,error,phrase", [
    ([{"params": ["a"], "lr": 0.1}], uo.SGD(lr=COSINE), NotImplementedError,
     "lr \\+ 1.0 - 1.0 in float32"),
    ([{"params": ["a"], "lr": [0.1, 0.2]}], uo.SGD(lr=0.1), NotImplementedError,
     "beside the optimizer's constant lr"),
    ([{"params": ["a"], "lr": [COSINE(0), 0.5 * COSINE(1)]}], uo.SGD(lr=COSINE), ValueError,
     r"not a multiple of the optimizer's schedule: lr\[1\]"),
    ([{"params": ["a"], "momentum": 0.9}], uo.SGD(lr=0.1), ValueError, "'momentum'"),
    ([{"params": ["a"]}, {"params": ["a"]}], uo.SGD(lr=0.1), ValueError,
     "'a' is in params\\[0\\] and params\\[1\\]"),
    ([{"params": ["a"]}, {"order_params": ["a", "b"]}], uo.SGD(lr=0.1), ValueError,
     "order_params must list every grouped parameter once"),
    ([{"params": ["a"], "grad_centralization": True}], uo.SGD(lr=0.1), NotImplementedError,
     "shape\\[1\\] % 16 == 0"),
    ([{"params": ["a"], "weight_decay": WD}], uo.SGD(lr=0.1), NotImplementedError,
     "per-group dynamic weight decay"),
    ([{"params": ["ln.gamma"]}], uo.preset("mindspore.nn.Momentum", learning_rate=0.1,
                                           momentum=0.9, weight_decay=WD),
     ValueError, "would spare \\['ln.gamma'\\]"),
    ([{"params": "a"}], uo.SGD(lr=0.1), TypeError, "non-empty list of parameter names"),
])
def test_mindspore_groups_refuse_what_has_no_exact_form(group_params, spec, error, phrase):
    with pytest.raises(error, match=phrase):
        mindspore_groups(group_params, spec)
