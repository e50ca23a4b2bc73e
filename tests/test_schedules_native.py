"""Every scheduler preset against the native scheduler, run in its own framework.

Each case is the framework's SGD with its own scheduler built by hand and stepped the
framework's usual way (a conformance case with ``Case.native``), run by the
conformance worker of that framework; the session runs them once (conftest.py). The
lr the optimizer runs with at each step, and the parameters it moves, follow the float64
oracle of SGD with the preset (the conformance rule: the lr within a few float32 ulps,
where MindSpore's Cells and experimental schedulers compute in float32; the lr a
MindSpore optimizer applied shows in the parameters). Each comparison also proves its
power: the same schedule read one step late fails wherever the native lr changes.

The natives' names and signatures are read in this process, one framework per test.
"""

import importlib
import inspect
import json

import pytest
from conftest import require
from support import SMALL_PARAMS, installed_frameworks

import unified_opt as uo
from unified_opt.conformance.cases import Case, Native
from unified_opt.conformance.explainer import shifted
from unified_opt.schedules.examples import FUNCTIONS

STEPS = 60
TORCH, PADDLE = "torch.optim.lr_scheduler", "paddle.optimizer.lr"
NN, EXP = "mindspore.nn", "mindspore.experimental.optim.lr_scheduler"
FN = {"$function": "wavy_decay"}
WOBBLE = {"$function": "times_alternating"}

# (id, qualified, native kwargs, base_lr: the optimizer lr torch/experimental scale)
CASES = [
    ("torch-lambda", f"{TORCH}.LambdaLR", {"lr_lambda": FN}, 0.1),
    ("torch-multiplicative", f"{TORCH}.MultiplicativeLR", {"lr_lambda": WOBBLE}, 0.1),
    ("torch-step", f"{TORCH}.StepLR", {"step_size": 7, "gamma": 0.5}, 0.1),
    ("torch-multistep", f"{TORCH}.MultiStepLR", {"milestones": [30, 10, 10, 45],
                                                 "gamma": 0.5}, 0.1),
    ("torch-constant", f"{TORCH}.ConstantLR", {"factor": 0.25, "total_iters": 13}, 0.1),
    ("torch-constant-default", f"{TORCH}.ConstantLR", {}, 0.3),
    ("torch-linear", f"{TORCH}.LinearLR", {"start_factor": 0.1, "end_factor": 0.9,
                                           "total_iters": 37}, 0.1),
    ("torch-exponential", f"{TORCH}.ExponentialLR", {"gamma": 0.93}, 0.1),
    ("torch-sequential", f"{TORCH}.SequentialLR", {"schedulers": [
        ["LinearLR", {"start_factor": 0.1, "total_iters": 5}],
        ["CosineAnnealingLR", {"T_max": 45, "eta_min": 0.001}]], "milestones": [5]}, 0.1),
    ("torch-sequential-3", f"{TORCH}.SequentialLR", {"schedulers": [
        ["ConstantLR", {"factor": 0.5, "total_iters": 4}],
        ["ExponentialLR", {"gamma": 0.9}],
        ["CosineAnnealingWarmRestarts", {"T_0": 7, "T_mult": 2}]], "milestones": [10, 30]},
     0.1),
    ("torch-polynomial", f"{TORCH}.PolynomialLR", {"total_iters": 40, "power": 2.0}, 0.1),
    ("torch-cosine", f"{TORCH}.CosineAnnealingLR", {"T_max": 20, "eta_min": 0.001}, 0.1),
    ("torch-cosine-to-zero", f"{TORCH}.CosineAnnealingLR", {"T_max": 25}, 0.1),
    ("torch-chained", f"{TORCH}.ChainedScheduler", {"schedulers": [
        ["ConstantLR", {"factor": 0.1, "total_iters": 2}], ["ExponentialLR", {"gamma": 0.9}],
        ["LinearLR", {"start_factor": 0.5, "total_iters": 20}],
        ["MultiplicativeLR", {"lr_lambda": WOBBLE}]]}, 0.1),
    ("torch-cyclic-triangular2", f"{TORCH}.CyclicLR", {
        "base_lr": 0.01, "max_lr": 0.1, "step_size_up": 8, "step_size_down": 5,
        "mode": "triangular2"}, None),
    ("torch-cyclic-exp-range", f"{TORCH}.CyclicLR", {
        "base_lr": 0.01, "max_lr": 0.1, "step_size_up": 6, "mode": "exp_range",
        "gamma": 0.97}, None),
    ("torch-cyclic-scale-fn", f"{TORCH}.CyclicLR", {
        "base_lr": 0.01, "max_lr": 0.1, "step_size_up": 4,
        "scale_fn": {"$function": "half_per_cycle"},
        "scale_mode": "iterations"}, None),
    ("torch-warm-restarts", f"{TORCH}.CosineAnnealingWarmRestarts",
     {"T_0": 5, "T_mult": 2, "eta_min": 0.001}, 0.1),
    ("torch-warm-restarts-1", f"{TORCH}.CosineAnnealingWarmRestarts", {"T_0": 9}, 0.1),
    ("torch-onecycle", f"{TORCH}.OneCycleLR", {"max_lr": 0.5, "total_steps": STEPS}, None),
    ("torch-onecycle-3", f"{TORCH}.OneCycleLR", {
        "max_lr": 0.5, "epochs": 6, "steps_per_epoch": 10, "pct_start": 0.25,
        "anneal_strategy": "linear", "three_phase": True, "div_factor": 10.0,
        "final_div_factor": 100.0}, None),
    ("paddle-noam", f"{PADDLE}.NoamDecay", {"d_model": 64, "warmup_steps": 20,
                                           "learning_rate": 2.0}, None),
    ("paddle-piecewise", f"{PADDLE}.PiecewiseDecay", {"boundaries": [10, 25],
                                                      "values": [0.1, 0.05, 0.01]}, None),
    ("paddle-natural-exp", f"{PADDLE}.NaturalExpDecay", {"learning_rate": 0.1, "gamma": 0.05},
     None),
    ("paddle-inverse-time", f"{PADDLE}.InverseTimeDecay", {"learning_rate": 0.1,
                                                           "gamma": 0.3}, None),
    ("paddle-polynomial", f"{PADDLE}.PolynomialDecay", {
        "learning_rate": 0.1, "decay_steps": 20, "end_lr": 0.001, "power": 1.5}, None),
    ("paddle-polynomial-cycle", f"{PADDLE}.PolynomialDecay", {
        "learning_rate": 0.1, "decay_steps": 20, "end_lr": 0.001, "power": 1.5,
        "cycle": True}, None),
    ("paddle-warmup-cosine", f"{PADDLE}.LinearWarmup", {
        "learning_rate": {"$call": [f"{PADDLE}.CosineAnnealingDecay",
                                         {"learning_rate": 0.1, "T_max": 40}]},
        "warmup_steps": 10, "start_lr": 0.0, "end_lr": 0.1}, None),
    ("paddle-warmup-float", f"{PADDLE}.LinearWarmup", {
        "learning_rate": 0.05, "warmup_steps": 15, "start_lr": 0.01, "end_lr": 0.08}, None),
    ("paddle-exponential", f"{PADDLE}.ExponentialDecay", {"learning_rate": 0.1, "gamma": 0.95},
     None),
    ("paddle-multistep", f"{PADDLE}.MultiStepDecay", {
        "learning_rate": 0.1, "milestones": [10, 20, 40], "gamma": 0.5}, None),
    ("paddle-step", f"{PADDLE}.StepDecay", {"learning_rate": 0.1, "step_size": 9,
                                            "gamma": 0.7}, None),
    ("paddle-lambda", f"{PADDLE}.LambdaDecay", {"learning_rate": 0.1, "lr_lambda": FN}, None),
    ("paddle-cosine", f"{PADDLE}.CosineAnnealingDecay", {
        "learning_rate": 0.1, "T_max": 20, "eta_min": 0.001}, None),
    ("paddle-multiplicative", f"{PADDLE}.MultiplicativeDecay", {
        "learning_rate": 0.1, "lr_lambda": WOBBLE}, None),
    ("paddle-onecycle", f"{PADDLE}.OneCycleLR", {"max_learning_rate": 0.3,
                                                 "total_steps": STEPS}, None),
    ("paddle-onecycle-3", f"{PADDLE}.OneCycleLR", {
        "max_learning_rate": 0.3, "total_steps": STEPS, "phase_pct": 0.2,
        "end_learning_rate": 0.001, "anneal_strategy": "linear", "three_phase": True}, None),
    ("paddle-cyclic", f"{PADDLE}.CyclicLR", {"base_learning_rate": 0.01,
                                             "max_learning_rate": 0.1, "step_size_up": 7,
                                             "mode": "triangular2"}, None),
    ("paddle-cyclic-exp-range", f"{PADDLE}.CyclicLR", {
        "base_learning_rate": 0.01, "max_learning_rate": 0.1, "step_size_up": 5,
        "step_size_down": 9, "mode": "exp_range", "exp_gamma": 0.98}, None),
    ("paddle-linear", f"{PADDLE}.LinearLR", {"learning_rate": 0.1, "total_steps": 30,
                                             "start_factor": 0.2, "end_factor": 0.8}, None),
    ("paddle-warm-restarts", f"{PADDLE}.CosineAnnealingWarmRestarts", {
        "learning_rate": 0.1, "T_0": 5, "T_mult": 2, "eta_min": 0.001}, None),
    ("paddle-warm-restarts-3", f"{PADDLE}.CosineAnnealingWarmRestarts", {
        "learning_rate": 0.1, "T_0": 4, "T_mult": 3}, None),
    ("ms-piecewise-list", f"{NN}.piecewise_constant_lr", {
        "milestone": [10, 25, STEPS], "learning_rates": [0.1, 0.05, 0.01]}, None),
    ("ms-exponential-list", f"{NN}.exponential_decay_lr", {
        "learning_rate": 0.1, "decay_rate": 0.9, "total_step": STEPS, "step_per_epoch": 3,
        "decay_epoch": 2}, None),
    ("ms-exponential-list-stair", f"{NN}.exponential_decay_lr", {
        "learning_rate": 0.1, "decay_rate": 0.9, "total_step": STEPS, "step_per_epoch": 3,
        "decay_epoch": 2, "is_stair": True}, None),
    ("ms-natural-exp-list", f"{NN}.natural_exp_decay_lr", {
        "learning_rate": 0.1, "decay_rate": 0.1, "total_step": STEPS, "step_per_epoch": 2,
        "decay_epoch": 3}, None),
    ("ms-natural-exp-list-stair", f"{NN}.natural_exp_decay_lr", {
        "learning_rate": 0.1, "decay_rate": 0.1, "total_step": STEPS, "step_per_epoch": 2,
        "decay_epoch": 3, "is_stair": True}, None),
    ("ms-inverse-list", f"{NN}.inverse_decay_lr", {
        "learning_rate": 0.1, "decay_rate": 0.5, "total_step": STEPS, "step_per_epoch": 2,
        "decay_epoch": 3}, None),
    ("ms-inverse-list-stair", f"{NN}.inverse_decay_lr", {
        "learning_rate": 0.1, "decay_rate": 0.5, "total_step": STEPS, "step_per_epoch": 2,
        "decay_epoch": 3, "is_stair": True}, None),
    ("ms-cosine-list", f"{NN}.cosine_decay_lr", {
        "min_lr": 0.001, "max_lr": 0.1, "total_step": STEPS, "step_per_epoch": 3,
        "decay_epoch": 12}, None),
    ("ms-polynomial-list", f"{NN}.polynomial_decay_lr", {
        "learning_rate": 0.1, "end_learning_rate": 0.001, "total_step": STEPS,
        "step_per_epoch": 2, "decay_epoch": 7, "power": 2.0}, None),
    ("ms-polynomial-list-update", f"{NN}.polynomial_decay_lr", {
        "learning_rate": 0.1, "end_learning_rate": 0.001, "total_step": STEPS,
        "step_per_epoch": 2, "decay_epoch": 7, "power": 2.0, "update_decay_epoch": True}, None),
    ("ms-warmup-list", f"{NN}.warmup_lr", {
        "learning_rate": 0.1, "total_step": STEPS, "step_per_epoch": 4, "warmup_epoch": 5}, None),
    ("ms-cosine-cell", f"{NN}.CosineDecayLR", {"min_lr": 0.001, "max_lr": 0.1,
                                               "decay_steps": 40}, None),
    ("ms-exponential-cell", f"{NN}.ExponentialDecayLR", {
        "learning_rate": 0.1, "decay_rate": 0.9, "decay_steps": 7}, None),
    ("ms-exponential-cell-stair", f"{NN}.ExponentialDecayLR", {
        "learning_rate": 0.1, "decay_rate": 0.9, "decay_steps": 7, "is_stair": True}, None),
    ("ms-natural-exp-cell", f"{NN}.NaturalExpDecayLR", {
        "learning_rate": 0.1, "decay_rate": 0.05, "decay_steps": 5}, None),
    ("ms-natural-exp-cell-stair", f"{NN}.NaturalExpDecayLR", {
        "learning_rate": 0.1, "decay_rate": 0.05, "decay_steps": 5, "is_stair": True}, None),
    ("ms-inverse-cell", f"{NN}.InverseDecayLR", {
        "learning_rate": 0.1, "decay_rate": 0.5, "decay_steps": 6}, None),
    ("ms-inverse-cell-stair", f"{NN}.InverseDecayLR", {
        "learning_rate": 0.1, "decay_rate": 0.5, "decay_steps": 6, "is_stair": True}, None),
    ("ms-polynomial-cell", f"{NN}.PolynomialDecayLR", {
        "learning_rate": 0.1, "end_learning_rate": 0.001, "decay_steps": 20, "power": 2.0},
     None),
    ("ms-polynomial-cell-update", f"{NN}.PolynomialDecayLR", {
        "learning_rate": 0.1, "end_learning_rate": 0.001, "decay_steps": 20, "power": 2.0,
        "update_decay_steps": True}, None),
    ("ms-warmup-cell", f"{NN}.WarmUpLR", {"learning_rate": 0.1, "warmup_steps": 20}, None),
    ("ms-exp-step", f"{EXP}.StepLR", {"step_size": 7, "gamma": 0.5}, 0.1),
    ("ms-exp-linear", f"{EXP}.LinearLR", {"start_factor": 0.1, "end_factor": 0.9,
                                          "total_iters": 37}, 0.1),
    ("ms-exp-exponential", f"{EXP}.ExponentialLR", {"gamma": 0.93}, 0.1),
    ("ms-exp-polynomial", f"{EXP}.PolynomialLR", {"total_iters": 40, "power": 2.0}, 0.1),
    ("ms-exp-multiplicative", f"{EXP}.MultiplicativeLR", {"lr_lambda": WOBBLE}, 0.1),
    ("ms-exp-constant", f"{EXP}.ConstantLR", {"factor": 0.25, "total_iters": 13}, 0.1),
    ("ms-exp-multistep", f"{EXP}.MultiStepLR", {"milestones": [10, 10, 30], "gamma": 0.5},
     0.1),
    ("ms-exp-lambda", f"{EXP}.LambdaLR", {"lr_lambda": FN}, 0.1),
    ("ms-exp-sequential", f"{EXP}.SequentialLR", {"schedulers": [
        ["LinearLR", {"start_factor": 0.1, "total_iters": 5}],
        ["CosineAnnealingLR", {"T_max": 45, "eta_min": 0.001}]], "milestones": [5]}, 0.1),
    ("ms-exp-cyclic", f"{EXP}.CyclicLR", {"base_lr": 0.01, "max_lr": 0.1, "step_size_up": 8,
                                          "step_size_down": 5, "mode": "triangular2"}, 0.1),
    ("ms-exp-warm-restarts", f"{EXP}.CosineAnnealingWarmRestarts", {
        "T_0": 5, "T_mult": 2, "eta_min": 0.001}, 0.1),
    ("ms-exp-cosine", f"{EXP}.CosineAnnealingLR", {"T_max": 20, "eta_min": 0.001}, 0.1),
]


#: float32 natives whose recursion amplifies rounding beyond the float32 floor, and the
#: most floors such a run is off (the run fails the rule, by at most this much):
#: * MindSpore's experimental CosineAnnealingLR multiplies (lr - eta_min) by
#:   (1 + cos t) / (1 + cos(t-1)) in float32; near the trough 1 + cos is ~0.006, so the
#:   relative error it carries up the next rise is ~100x eps (measured 43 ulps of the
#:   peak at t = 39, T_max = 20; the parameters that integrate it: 35 floors);
#: * its MultiplicativeLR rounds lr_{t-1} * f(t) to float32 at every step: the lr stays
#:   within the floor, but its rounding errors add up in the same direction, and the
#:   parameters, which sum lr * g over the steps, leave the floor (measured 9.6 floors
#:   at step 38 on ``bias``).
DRIFTS = {"ms-exp-cosine": ("lr", 48.0), "ms-exp-multiplicative": ("param", 16.0)}


def _framework(qualified):
    return qualified.split(".")[0]


def _decoded(value):
    """The case's markers read on the preset side: functions, nested presets."""
    if isinstance(value, dict) and set(value) == {"$function"}:
        return FUNCTIONS[value["$function"]]
    if isinstance(value, dict) and set(value) == {"$call"}:
        qualified, kwargs = value["$call"]
        return uo.schedules.preset(qualified, **_decoded(kwargs))
    if isinstance(value, dict):
        return {k: _decoded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decoded(v) for v in value]
    return value


def schedule_of(qualified, kwargs, base_lr):
    """The preset for a case."""
    kwargs = _decoded(kwargs)
    if base_lr is not None:
        kwargs = {"base_lr": base_lr, **kwargs}
    return uo.schedules.preset(qualified, **kwargs)


def _members(namespace, kwargs):
    """SequentialLR / ChainedScheduler members, built on the optimizer in the worker."""
    if "schedulers" not in kwargs:
        return kwargs
    return {**kwargs, "schedulers": [{"$scheduler": [f"{namespace}.{name}", kw]}
                                     for name, kw in kwargs["schedulers"]]}


def spec_and_native(qualified, kwargs, base_lr):
    """SGD with the preset, and the framework's SGD with its scheduler, built by hand."""
    schedule = schedule_of(qualified, kwargs, base_lr)
    if qualified.startswith(TORCH):
        spec = uo.preset("torch.optim.SGD", lr=0.1, momentum=0.9)
        native = Native("torch.optim.SGD", {"lr": base_lr or 0.1, "momentum": 0.9},
                        scheduler=qualified, scheduler_kwargs=_members(TORCH, kwargs))
    elif qualified.startswith(PADDLE):
        spec = uo.preset("paddle.optimizer.SGD", learning_rate=0.1)
        native = Native("paddle.optimizer.SGD", {}, scheduler=qualified,
                        scheduler_kwargs=kwargs)
    elif qualified.startswith(EXP):
        spec = uo.preset("mindspore.experimental.optim.SGD", lr=base_lr)
        native = Native("mindspore.experimental.optim.SGD", {"lr": base_lr},
                        scheduler=qualified, scheduler_kwargs=_members(EXP, kwargs))
    else:            # an nn list function or LearningRateSchedule Cell as learning_rate
        spec = uo.preset("mindspore.nn.SGD", learning_rate=0.1)
        native = Native("mindspore.nn.SGD", {"learning_rate": {"$call": [qualified, kwargs]}})
    return spec.replace(lr=schedule), native


def _case(case_id, qualified, kwargs, base_lr):
    spec, native = spec_and_native(qualified, kwargs, base_lr)
    return Case(id=f"scheduler_{case_id}", spec=spec, params=SMALL_PARAMS, steps=STEPS,
                native=native)


#: run by the session's conformance runner (conftest.py): one worker per framework
WORKER_CASES = [_case(*c) for c in CASES if _framework(c[1]) in installed_frameworks()]


@pytest.mark.parametrize("case_id, qualified, kwargs, base_lr",
                         [pytest.param(*c, marks=require(_framework(c[1]))) for c in CASES],
                         ids=[c[0] for c in CASES])
def test_preset_gives_the_native_lr_at_every_step(worker_runs, case_id, qualified, kwargs,
                                                  base_lr):
    from unified_opt.conformance.compare import compare
    from unified_opt.conformance.trajectory import floor_trajectories, reference_trajectory

    case = _case(case_id, qualified, kwargs, base_lr)
    fw = _framework(qualified)
    result = worker_runs.result(case.id, fw, "hand")
    if case_id in DRIFTS:
        quantity, bound = DRIFTS[case_id]
        comparison = result["comparison"]
        assert result["status"] == "fail", comparison
        assert comparison["failing_quantity"].split(":")[0] == quantity, comparison
        assert comparison["worst_ratio"] <= bound, comparison
    else:
        worker_runs.assert_passes(case.id, fw, "hand")
    run = worker_runs.trajectory(case.id, fw, "hand")
    if run.lrs.max() > run.lrs.min():   # the rule has power: one step late is caught
        late = shifted(case.spec, -1)
        assert not compare(run, reference_trajectory(late, case),
                           floor_trajectories(late, case), state=False).passed, \
            "a shift went unnoticed"


# -- the natives' names and signatures (in this process, one framework per test) ---------

def _natives(framework):
    if framework == "torch":
        import torch.optim.lr_scheduler as m
        return [f"torch.optim.lr_scheduler.{n}" for n in m.__all__]
    if framework == "paddle":
        import paddle.optimizer.lr as m
        return [f"paddle.optimizer.lr.{n}" for n in m.__all__]
    from mindspore.experimental.optim import lr_scheduler
    from mindspore.nn import dynamic_lr, learning_rate_schedule
    names = [f"mindspore.nn.{n}" for n in dynamic_lr.__all__ + learning_rate_schedule.__all__]
    return (names + ["mindspore.nn.learning_rate_schedule.LearningRateSchedule"]
            + [f"mindspore.experimental.optim.lr_scheduler.{n}" for n in lr_scheduler.__all__])


def _native(qualified):
    module, _, name = qualified.rpartition(".")
    return getattr(importlib.import_module(module), name)


FRAMEWORKS = [pytest.param(f, marks=require(f)) for f in ("torch", "paddle", "mindspore")]


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_every_native_scheduler_has_a_preset_or_a_stated_refusal(framework):
    covered = set(uo.schedules.presets()) | set(uo.schedules.presets(refused=True))
    missing = sorted(set(_natives(framework)) - covered)
    assert not missing, f"{framework}: no preset and no refusal for {missing}"


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_presets_take_the_native_arguments_and_defaults(framework):
    """Same names, order and defaults as the native constructor (without the optimizer);
    torch / MindSpore-experimental presets add ``base_lr`` first where the native has none."""
    from unified_opt.schedules._preset_registry import REGISTRY
    for qualified in _natives(framework):
        if qualified not in REGISTRY.names():
            continue
        params = inspect.signature(_native(qualified)).parameters.values()
        native_params = [[p.name, "<required>" if p.default is p.empty else p.default]
                         for p in params if p.name != "optimizer" or p.default is None]
        ours = [[p.name, "<required>" if p.default is p.empty else p.default]
                for p in REGISTRY.signature(qualified).parameters.values()]
        if ours[0][0] == "base_lr" and native_params[:1] != [["base_lr", "<required>"]]:
            ours = ours[1:]
        assert ours == native_params, qualified


@require("torch")
def test_momentum_cycling_is_the_native_one():
    """torch cycles SGD momentum too; with cycle_momentum=False it is left alone."""
    import torch

    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.5, total_steps=STEPS)
    momentum = []
    for _ in range(STEPS):
        momentum.append(opt.param_groups[0]["momentum"])
        p.grad = torch.ones(1)
        opt.step()
        sched.step()
    preset = schedule_of(f"{TORCH}.OneCycleLR", {"max_lr": 0.5, "total_steps": STEPS}, None)
    assert momentum == [preset.momentum(t) for t in range(STEPS)]
    # torch's Python floats: the bottom of the cycle is 0.85 to an ulp or two
    assert min(momentum) == pytest.approx(0.85) and momentum[0] == 0.95
    off = uo.schedules.preset(f"{TORCH}.OneCycleLR", max_lr=0.5, total_steps=STEPS,
                              cycle_momentum=False)
    assert off.momentum(10) is None and off(10) == preset(10)


@pytest.mark.parametrize("case_id, qualified, kwargs, base_lr",
                         [c for c in CASES if "$function" not in json.dumps(c[2])],
                         ids=[c[0] for c in CASES if "$function" not in json.dumps(c[2])])
def test_presets_round_trip_through_json(case_id, qualified, kwargs, base_lr):
    schedule = schedule_of(qualified, kwargs, base_lr)
    again = uo.schedules.schedule_from_dict(json.loads(json.dumps(schedule.to_dict())))
    assert again == schedule
    assert [again(t) for t in range(STEPS)] == [schedule(t) for t in range(STEPS)]
