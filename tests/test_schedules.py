"""Schedules without any framework: formulas, JSON round trips, validation errors, the
preset registry's errors and refusals. The native comparisons are in
``test_schedules_native.py``."""

import json
import math
import warnings

import numpy as np
import pytest

import unified_opt as uo
from unified_opt import schedules as S

# Margins (rel=1e-14 or so, pytest.approx's default rel=1e-6): a schedule computes in
# Python floats and the expected numbers are its formulas worked out so. +, -, *, / and
# sqrt round correctly on every CPU, and libm's cos, exp and pow may move by an ulp from
# one platform to another; no vector code is involved, so these margins hold everywhere.

TORCH, PADDLE = "torch.optim.lr_scheduler", "paddle.optimizer.lr"
NN, EXP = "mindspore.nn", "mindspore.experimental.optim.lr_scheduler"

COSINE = S.Cosine(lr=0.1, T_max=10, eta_min=0.01)
# One serialisable example of every registered schedule (callables: see below).
EXAMPLES = {
    "constant": S.Constant(lr=0.1),
    "step": S.Step(lr=0.1, step_size=3, gamma=0.5),
    "multi_step": S.MultiStep(lr=0.1, milestones=[2, 2, 7], gamma=0.5),
    "piecewise": S.Piecewise(boundaries=[3, 8], values=[0.1, 0.05, 0.01]),
    "exponential": S.Exponential(lr=0.1, gamma=0.9, decay_steps=4, staircase=True),
    "natural_exp": S.NaturalExp(lr=0.1, gamma=0.2, decay_steps=3),
    "inverse_time": S.InverseTime(lr=0.1, gamma=0.5, decay_steps=2),
    "polynomial": S.Polynomial(lr=0.1, decay_steps=6, end_lr=0.001, power=2.0, cycle=True),
    "linear": S.Linear(lr=0.1, total_steps=8, start_factor=0.25, end_factor=0.5),
    "noam": S.Noam(d_model=16, warmup_steps=4, lr=2.0),
    "cosine": S.Cosine(lr=0.1, T_max=10, eta_min=0.01, periodic=False),
    "cosine_warm_restarts": S.CosineWarmRestarts(lr=0.1, T_0=3, T_mult=2, eta_min=0.001),
    "one_cycle": S.OneCycle(max_lr=0.5, total_steps=100, start_lr=0.02, end_lr=1e-4,
                            three_phase=True, anneal="linear", cycle_momentum=True),
    "cyclic": S.Cyclic(base_lr=0.01, max_lr=0.1, step_size_up=4, step_size_down=6,
                       mode="exp_range", gamma=0.99, cycle_momentum=True),
    "linear_warmup": S.LinearWarmup(after=COSINE, warmup_steps=5, start_lr=0.001, end_lr=0.2),
    "sequential": S.Sequential(schedules=[S.Constant(lr=0.01), COSINE], milestones=[4]),
    "product": S.Product(lr=0.1, factors=[S.Step(lr=1.0, step_size=3),
                                          S.Exponential(lr=1.0, gamma=0.9)]),
    "per_epoch": S.PerEpoch(epoch_schedule=COSINE, steps_per_epoch=3),
    # the warm-up schedules (their formulas: test_warmup_schedules.py)
    "warmup_linear": S.WarmupLinear(lr=0.1, warmup_steps=10, total_steps=80),
    "warmup_cosine": S.WarmupCosine(lr=0.1, warmup_steps=10, total_steps=80, num_cycles=1.5),
    "warmup_constant": S.WarmupConstant(lr=0.1, warmup_steps=10),
    "warmup_cosine_to_min": S.WarmupCosineToMin(lr=0.1, min_lr=0.01, warmup_steps=10,
                                                decay_steps=80),
}


def test_every_schedule_is_registered_and_has_an_example():
    assert set(S.schedules()) == set(EXAMPLES) | {"lambda", "multiplicative"}


def test_the_first_five_names_still_import_from_basic():
    from unified_opt.schedules import basic
    for name in ("Constant", "Cosine", "Exponential", "LinearWarmup", "Step"):
        assert getattr(basic, name) is getattr(S, name)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_json_round_trip(name):
    schedule = EXAMPLES[name]
    again = S.schedule_from_dict(json.loads(json.dumps(schedule.to_dict())))
    assert again == schedule
    steps = range(101)
    assert [again(t) for t in steps] == [schedule(t) for t in steps]
    assert [again.momentum(t) for t in steps] == [schedule.momentum(t) for t in steps]


def test_a_spec_with_a_composite_schedule_round_trips():
    spec = uo.AdamW(lr=EXAMPLES["sequential"])
    assert uo.spec_from_dict(json.loads(spec.to_json())) == spec


@pytest.mark.parametrize("schedule, field", [
    (S.Lambda(fn=lambda t: 0.9 ** t, lr=0.1), "fn"),
    (S.Multiplicative(fn=lambda t: 0.9), "fn"),
    (S.Cyclic(base_lr=0.01, max_lr=0.1, step_size_up=3, scale_fn=lambda x: 1.0), "scale_fn"),
])
def test_callables_work_but_cannot_be_serialised(schedule, field):
    assert schedule(5) > 0
    with pytest.raises(TypeError, match=rf"{field}=.* is a Python callable and cannot be "
                                        "serialised"):
        schedule.to_dict()
    wrapped = S.LinearWarmup(after=schedule, warmup_steps=2)
    assert wrapped(4) == schedule(2)
    with pytest.raises(TypeError, match="cannot be serialised"):
        uo.SGD(lr=wrapped).to_dict()


def test_lambda_and_multiplicative_formulas():
    assert S.Lambda(fn=lambda t: 1.0 / (t + 1), lr=0.3)(2) == 0.3 * (1.0 / 3)
    assert S.Multiplicative(fn=lambda t: t / 10, lr=2.0)(3) == 2.0 * 0.1 * 0.2 * 0.3


@pytest.mark.parametrize("schedule, expected", [
    (S.Step(lr=0.1, step_size=3, gamma=0.5), {0: 0.1, 2: 0.1, 3: 0.05, 6: 0.025}),
    (S.MultiStep(lr=1.0, milestones=[2, 2, 7], gamma=0.5), {1: 1.0, 2: 0.25, 7: 0.125}),
    (S.Piecewise(boundaries=[3, 8], values=[0.1, 0.05, 0.01]), {2: 0.1, 3: 0.05, 99: 0.01}),
    (S.Exponential(lr=1.0, gamma=0.25, decay_steps=2), {1: 0.5, 4: 0.0625}),
    (S.Exponential(lr=1.0, gamma=0.25, decay_steps=2, staircase=True), {1: 1.0, 3: 0.25}),
    # natural-exp: the stair width does not divide the exponent (Paddle, MindSpore)
    (S.NaturalExp(lr=1.0, gamma=0.5, decay_steps=3), {2: math.exp(-1.0)}),
    (S.NaturalExp(lr=1.0, gamma=0.5, decay_steps=3, staircase=True), {2: 1.0, 4: math.exp(-1.5)}),
    (S.InverseTime(lr=1.0, gamma=0.5, decay_steps=2), {3: 1 / 1.75}),
    (S.InverseTime(lr=1.0, gamma=0.5, decay_steps=2, staircase=True), {3: 1 / 1.5}),
    (S.Polynomial(lr=1.0, decay_steps=4, end_lr=0.0, power=2.0), {2: 0.25, 4: 0.0, 9: 0.0}),
    (S.Polynomial(lr=1.0, decay_steps=4, end_lr=0.0, power=1.0, cycle=True),
     {0: 1.0, 4: 0.0, 6: 0.25}),
    (S.Linear(lr=1.0, total_steps=4, start_factor=0.0), {0: 0.0, 1: 0.25, 4: 1.0, 9: 1.0}),
    (S.Noam(d_model=4, warmup_steps=4, lr=1.0), {0: 0.0, 2: 0.5 * 2 / 8, 16: 0.5 / 4}),
    (S.Cosine(lr=1.0, T_max=4), {0: 1.0, 2: 0.5, 4: 0.0, 6: 0.5}),
    (S.Cosine(lr=1.0, T_max=4, periodic=False), {4: 0.0, 6: 0.0}),
    (S.CosineWarmRestarts(lr=1.0, T_0=2, T_mult=2), {0: 1.0, 1: 0.5, 2: 1.0, 4: 0.5, 6: 1.0}),
    (S.LinearWarmup(after=S.Constant(lr=0.4), warmup_steps=4), {0: 0.0, 1: 0.1, 4: 0.4}),
    (S.LinearWarmup(after=S.Constant(lr=0.4), warmup_steps=2, start_lr=0.2, end_lr=0.6),
     {1: 0.4, 2: 0.4}),
    (S.Sequential(schedules=[S.Constant(lr=0.5), S.Step(lr=1.0, step_size=2)],
                  milestones=[3]), {2: 0.5, 3: 1.0, 5: 0.1}),
    (S.Product(lr=2.0, factors=[S.Step(lr=1.0, step_size=2, gamma=0.5),
                                S.Constant(lr=0.5)]), {1: 1.0, 2: 0.5}),
    (S.PerEpoch(epoch_schedule=S.Step(lr=1.0, step_size=1, gamma=0.5), steps_per_epoch=3),
     {2: 1.0, 3: 0.5, 6: 0.25}),
])
def test_formulas(schedule, expected):
    for step, lr in expected.items():
        assert schedule(step) == pytest.approx(lr, rel=1e-15, abs=1e-300), step


def test_one_cycle_phases_and_momentum():
    s = S.OneCycle(max_lr=1.0, total_steps=21, start_lr=0.1, end_lr=0.0, pct_start=0.5,
                   anneal="linear", cycle_momentum=True)
    # phase ends at step 0.5 * 21 - 1 = 9.5 and 20
    assert s(0) == 0.1 and s(19) == pytest.approx((1 - 9.5 / 10.5))
    assert s.momentum(0) == 0.95 and s.momentum(20) == pytest.approx(0.95)
    assert s(21) < 0.0 + 1e-12         # step == total_steps is allowed (torch computes it)
    with pytest.raises(ValueError, match="step 22 is past total_steps=21"):
        s(22)


def test_cyclic_triangle():
    s = S.Cyclic(base_lr=0.0, max_lr=1.0, step_size_up=2, step_size_down=4, mode="triangular2")
    assert [s(t) for t in range(7)] == pytest.approx([0.0, 0.5, 1.0, 0.75, 0.5, 0.25, 0.0],
                                                     rel=1e-15, abs=1e-16)
    assert (s(7), s(8)) == pytest.approx((0.5 * 0.5, 0.5), rel=1e-14)  # cycle 2: halved
    assert s.momentum(1) is None


@pytest.mark.parametrize("cls, kwargs, error, text", [
    (S.Constant, {"lr": -0.1}, ValueError, r"Constant: lr must be >= 0, got -0\.1"),
    (S.Step, {"lr": 0.1, "step_size": 0}, ValueError, r"step_size must be >= 1, got 0"),
    (S.Step, {"lr": 0.1, "step_size": 2.0}, TypeError, r"step_size must be an int, got 2\.0"),
    (S.MultiStep, {"lr": 0.1, "milestones": [5, 3]}, ValueError,
     r"milestones must be sorted, got \[5, 3\]"),
    (S.MultiStep, {"lr": 0.1, "milestones": 5}, TypeError, r"milestones must be a list"),
    (S.Piecewise, {"boundaries": [3], "values": [0.1]}, ValueError,
     r"values must have len\(boundaries\) \+ 1 = 2 entries, got \[0\.1\]"),
    (S.Exponential, {"lr": 0.1, "gamma": 0.9, "staircase": 1}, TypeError,
     r"staircase must be a bool, got 1"),
    (S.NaturalExp, {"lr": 0.1, "gamma": -1.0}, ValueError, r"gamma must be >= 0, got -1\.0"),
    (S.Polynomial, {"lr": 0.1, "decay_steps": 0}, ValueError, r"decay_steps must be >= 1"),
    (S.Linear, {"lr": 0.1, "total_steps": 5, "start_factor": "0"}, TypeError,
     r"start_factor must be a real number, got '0'"),
    (S.Noam, {"d_model": 0, "warmup_steps": 4}, ValueError, r"d_model must be >= 1, got 0"),
    (S.Cosine, {"lr": 0.1, "T_max": 0}, ValueError, r"T_max must be >= 1, got 0"),
    (S.CosineWarmRestarts, {"lr": 0.1, "T_0": 2, "T_mult": 0}, ValueError,
     r"T_mult must be >= 1, got 0"),
    (S.OneCycle, {"max_lr": 1.0, "total_steps": 10, "start_lr": 0.1, "end_lr": 0.0,
                  "pct_start": 0.1}, ValueError,
     r"pct_start=0\.1 with total_steps=10 gives a phase of length 0"),
    (S.OneCycle, {"max_lr": 1.0, "total_steps": 10, "start_lr": 0.1, "end_lr": 0.0,
                  "anneal": "cosine"}, ValueError, r"anneal must be one of \('cos', 'linear'\)"),
    (S.Cyclic, {"base_lr": 0.0, "max_lr": 1.0, "step_size_up": 2, "mode": "saw"}, ValueError,
     r"mode must be one of"),
    (S.Cyclic, {"base_lr": 0.0, "max_lr": 1.0, "step_size_up": 2, "scale_mode": "iterations"},
     ValueError, r"scale_mode='iterations' applies only with scale_fn"),
    (S.Cyclic, {"base_lr": 0.0, "max_lr": 1.0, "step_size_up": 2, "scale_fn": 3}, TypeError,
     r"scale_fn must be a Python callable"),
    (S.Lambda, {"fn": 0.5}, TypeError, r"Lambda: fn must be a Python callable .*got 0\.5"),
    (S.LinearWarmup, {"after": 0.1, "warmup_steps": 3}, TypeError,
     r"after must be a Schedule, got 0\.1"),
    (S.Sequential, {"schedules": [COSINE, COSINE], "milestones": []}, ValueError,
     r"milestones must have len\(schedules\) - 1 = 1 entries, got \[\]"),
    (S.Sequential, {"schedules": [], "milestones": []}, ValueError,
     r"schedules must not be empty"),
    (S.Product, {"lr": 1.0, "factors": [COSINE, 2.0]}, TypeError,
     r"factors\[1\] must be a Schedule, got 2\.0"),
    (S.PerEpoch, {"epoch_schedule": COSINE, "steps_per_epoch": 0}, ValueError,
     r"steps_per_epoch must be >= 1, got 0"),
    (S.Cosine, {"lr": 0.1, "T_max": 5, "eta": 0.0}, TypeError,
     r"unexpected keyword argument\(s\) \['eta'\]"),
])
def test_bad_arguments_raise_naming_argument_and_value(cls, kwargs, error, text):
    with pytest.raises(error, match=text):
        cls(**kwargs)


def test_bad_steps_and_dicts():
    with pytest.raises(ValueError, match=r"step must be an int >= 0, got -1"):
        COSINE(-1)
    with pytest.raises(TypeError, match=r"step must be an int >= 0, got 3.0 of type float"):
        COSINE(3.0)
    assert COSINE(np.int64(3)) == COSINE(3)


@pytest.mark.parametrize("make, error, text", [
    (lambda: S.Lambda(fn=lambda t: -1.0), ValueError,
     r"Lambda: fn\(3\) gave -1.0; the lr factor must be finite and >= 0"),
    (lambda: S.Lambda(fn=lambda t: float("nan")), ValueError, r"Lambda: fn\(3\) gave nan"),
    (lambda: S.Lambda(fn=lambda t: "x"), TypeError,
     r"Lambda: fn\(3\) gave 'x' of type str; the lr factor must be a number"),
    (lambda: S.Multiplicative(fn=lambda t: 1.0 if t < 2 else -0.5), ValueError,
     r"Multiplicative: fn\(2\) gave -0.5"),
    (lambda: S.LinearWarmup(warmup_steps=1, start_lr=0.0, end_lr=0.1,
                            after=S.Lambda(fn=lambda t: -0.1)), ValueError,
     r"Lambda: fn\(\d\) gave -0.1"),
])
def test_a_user_function_giving_no_lr_is_refused_at_its_step(make, error, text):
    with pytest.raises(error, match=text):
        make()(3)


def test_unknown_schedules_in_dicts_are_refused():
    with pytest.raises(ValueError, match=r"unknown schedule 'warp'"):
        S.schedule_from_dict({"schedule": "warp"})


# -- the preset registry -------------------------------------------------------------------

def test_preset_errors_name_the_native_call():
    with pytest.raises(ValueError, match=r"no schedule preset for 'torch\.optim\.StepLR'"):
        S.preset("torch.optim.StepLR", base_lr=0.1, step_size=2)
    with pytest.raises(TypeError, match=r"missing required argument\(s\) \['base_lr'\]"):
        S.preset(f"{TORCH}.StepLR", step_size=2)
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['lr'\]"):
        S.preset(f"{PADDLE}.StepDecay", lr=0.1, step_size=2)
    with pytest.raises(ValueError, match=rf"{PADDLE}\.StepDecay: Step: step_size must be >= 1, "
                                         r"got 0"):
        S.preset(f"{PADDLE}.StepDecay", learning_rate=0.1, step_size=0)
    with pytest.raises(ValueError, match=r"ConstantLR: factor must be > 0 and <= 1, got 1\.5"):
        S.preset(f"{TORCH}.ConstantLR", base_lr=0.1, factor=1.5)


@pytest.mark.parametrize("qualified", [f"{TORCH}.ReduceLROnPlateau",
                                       f"{PADDLE}.ReduceOnPlateau", f"{EXP}.ReduceLROnPlateau"])
def test_plateau_schedulers_are_refused_with_the_native_way(qualified):
    assert qualified in S.presets(refused=True)
    assert "metric-driven" in S.refusal(qualified)
    with pytest.raises(NotImplementedError, match="metric-driven.*framework's own scheduler"):
        S.preset(qualified)


def test_unsupported_native_arguments_are_refused_not_dropped():
    with pytest.raises(NotImplementedError, match=r"last_epoch=4 \(resuming\)"):
        S.preset(f"{TORCH}.StepLR", base_lr=0.1, step_size=2, last_epoch=4)
    with pytest.raises(NotImplementedError, match=r"max_lr=\[0\.1, 0\.2\] gives one value per "
                                                  "parameter group"):
        S.preset(f"{TORCH}.OneCycleLR", max_lr=[0.1, 0.2], total_steps=10)
    with pytest.warns(UserWarning, match="verbose=True only prints"):
        S.preset(f"{PADDLE}.StepDecay", learning_rate=0.1, step_size=2, verbose=True)
    with pytest.warns(UserWarning, match=r"values \[0\.001\] past the first"):
        S.preset(f"{PADDLE}.PiecewiseDecay", boundaries=[2], values=[0.1, 0.01, 0.001])


def test_composite_presets_refuse_members_they_cannot_express():
    seq = f"{TORCH}.SequentialLR"
    with pytest.raises(NotImplementedError, match=r"schedulers\[1\]=MultiplicativeLR after a "
                                                  "milestone continues"):
        S.preset(seq, base_lr=0.1, milestones=[3], schedulers=[
            ("ConstantLR", {}), ("MultiplicativeLR", {"lr_lambda": lambda t: 0.9})])
    with pytest.raises(NotImplementedError, match=r"schedulers\[0\]=OneCycleLR.*initial_lr"):
        S.preset(seq, base_lr=0.1, milestones=[3], schedulers=[
            ("OneCycleLR", {"max_lr": 1.0, "total_steps": 3}), ("ConstantLR", {})])
    with pytest.raises(NotImplementedError, match=r"CosineAnnealingLR.*no product"):
        S.preset(f"{TORCH}.ChainedScheduler", base_lr=0.1,
                 schedulers=[("CosineAnnealingLR", {"T_max": 5})])
    with pytest.raises(TypeError, match=r"schedulers\[0\] must not set \['base_lr'\]"):
        S.preset(seq, base_lr=0.1, milestones=[], schedulers=[("StepLR", {"base_lr": 0.1,
                                                                          "step_size": 2})])
    with pytest.raises(ValueError, match=rf"must be a {TORCH} scheduler, got '{PADDLE}"):
        S.preset(seq, base_lr=0.1, milestones=[], schedulers=[
            (f"{PADDLE}.StepDecay", {"step_size": 2})])
    with pytest.raises(NotImplementedError, match="MultiStepLR._get_closed_form_lr"):
        S.preset(f"{EXP}.SequentialLR", base_lr=0.1, milestones=[3], schedulers=[
            ("ConstantLR", {}), ("MultiStepLR", {"milestones": [5]})])


def test_mindspore_presets_keep_the_step_convention():
    """Call t + 1 of a MindSpore optimizer reads entry t: WarmUpLR's first step is 0."""
    cell = S.preset(f"{NN}.WarmUpLR", learning_rate=0.4, warmup_steps=4)
    assert [cell(t) for t in range(6)] == [0.0, 0.1, 0.2, 0.30000000000000004, 0.4, 0.4]
    lst = S.preset(f"{NN}.cosine_decay_lr", min_lr=0.0, max_lr=0.4, total_step=6,
                   step_per_epoch=2, decay_epoch=2)
    assert isinstance(lst, S.PerEpoch)
    assert [lst(t) for t in range(6)] == pytest.approx([0.4, 0.4, 0.2, 0.2, 0.0, 0.0],
                                                       abs=1e-17)


def test_warnings_are_not_raised_by_plain_presets():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        S.preset(f"{PADDLE}.LinearWarmup", learning_rate=S.preset(
            f"{PADDLE}.CosineAnnealingDecay", learning_rate=0.1, T_max=10),
            warmup_steps=3, start_lr=0.0, end_lr=0.1)


def test_paddle_warmup_around_growing_restarts_warns_of_paddles_log():
    inner = S.preset(f"{PADDLE}.CosineAnnealingWarmRestarts", learning_rate=0.1, T_0=1,
                     T_mult=10)
    with pytest.warns(UserWarning, match="float log and can miss"):
        s = S.preset(f"{PADDLE}.LinearWarmup", learning_rate=inner, warmup_steps=4,
                     start_lr=0.0, end_lr=0.1)
    assert s(4 + 111) == 0.1     # a restart (Paddle: 0.0 there, measured)


@pytest.mark.parametrize("name, value", [("base_momentum", 1.2), ("max_momentum", 1.0)])
def test_momenta_a_cycle_would_reach_out_of_the_spec_s_range_are_refused_up_front(name,
                                                                                   value):
    """Refused when the oracle (or uo.build) is made, not at the step reaching them."""
    import numpy as np

    import unified_opt as uo

    cycle = {"base_momentum": 0.85, "max_momentum": 0.95, name: value}
    spec = uo.Adam(lr=S.OneCycle(max_lr=0.1, start_lr=0.01, end_lr=0.001, total_steps=10,
                                 cycle_momentum=True, **cycle))
    with pytest.raises(ValueError, match=rf"reference: OneCycle\({name}={value}\) cycles "
                                         rf"Adam's momentum out of its range: Adam: betas\[0\] "
                                         rf"must be >= 0 and < 1, got {value}"):
        uo.reference(spec, {"w": np.ones(2)})


@pytest.mark.parametrize("name, kwargs, error, words", [
    ("cosine_decay_lr", dict(min_lr=0.1, max_lr=0.01, total_step=12, step_per_epoch=2,
                             decay_epoch=3), ValueError, "max_lr must be greater than min_lr"),
    ("cosine_decay_lr", dict(min_lr=0, max_lr=0.1, total_step=12, step_per_epoch=2,
                             decay_epoch=3), TypeError, "min_lr must be a float, got 0"),
    ("exponential_decay_lr", dict(learning_rate=0.1, decay_rate=0.0, total_step=12,
                                  step_per_epoch=2, decay_epoch=1), ValueError,
     "decay_rate must be > 0"),
    ("polynomial_decay_lr", dict(learning_rate=0.1, end_learning_rate=0.01, total_step=12,
                                 step_per_epoch=2, decay_epoch=3, power=0.0), ValueError,
     "power must be > 0"),
    ("piecewise_constant_lr", dict(milestone=[0, 5], learning_rates=[0.1, 0.05]), ValueError,
     r"milestone\[0\] must be >= 1"),
    ("piecewise_constant_lr", dict(milestone=[2, 5], learning_rates=[0.1, 1]), TypeError,
     r"learning_rates\[1\] must be a float"),
    ("CosineDecayLR", dict(min_lr=0.1, max_lr=0.01, decay_steps=4), ValueError,
     "max_lr must be greater than min_lr"),
    ("ExponentialDecayLR", dict(learning_rate=1, decay_rate=0.9, decay_steps=3), TypeError,
     "learning_rate must be a float, got 1"),
])
def test_mindspore_dynamic_lr_presets_refuse_what_mindspore_refuses(name, kwargs, error, words):
    """MindSpore's own checks (``nn/dynamic_lr.py``, ``nn/learning_rate_schedule.py``):
    floats where it wants floats, positive rates and powers, milestones from 1, a cosine
    whose max exceeds its min."""
    with pytest.raises(error, match=words):
        uo.schedules.preset(f"mindspore.nn.{name}", **kwargs)
