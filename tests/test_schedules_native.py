"""Every scheduler preset against the native scheduler, run in its own framework.

Each framework runs in its own worker process (``tests/workers/run_schedules.py``), all
three at once. For each case the lr the native optimizer ran with at each of >= 50 steps
must equal the preset's ``schedule(t)``:

* Python-float natives (torch, Paddle, MindSpore's lr lists): within 1e-12 relative;
* float32 natives (MindSpore Cells and experimental schedulers, and the lr a MindSpore
  optimizer applied, read back from a weight update): within float32 rounding, which the
  recursive experimental schedulers accumulate step by step: ``(t + 4)`` float32 ulps of
  the largest lr of the run (measured: at most 2 ulps), except where a case says more.

Each comparison also proves its power: the same schedule read one step late must fail
wherever the native lr changes.
"""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from workers.run_schedules import decode

import unified_opt as uo

STEPS = 60
TORCH, PADDLE = "torch.optim.lr_scheduler", "paddle.optimizer.lr"
NN, EXP = "mindspore.nn", "mindspore.experimental.optim.lr_scheduler"
FN = {"$fn": "inverse"}
WOBBLE = {"$fn": "wobble"}

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
        "base_lr": 0.01, "max_lr": 0.1, "step_size_up": 4, "scale_fn": {"$fn": "soft_scale"},
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
        "learning_rate": {"$scheduler": [f"{PADDLE}.CosineAnnealingDecay",
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


#: float32 natives whose recursion amplifies rounding: MindSpore's experimental
#: CosineAnnealingLR multiplies (lr - eta_min) by (1 + cos t) / (1 + cos(t-1)) in float32;
#: near the trough 1 + cos is ~0.006, so the relative error it carries up the next rise is
#: ~100x eps (measured 43 ulps of the peak at t = 39, T_max = 20).
FLOAT32_ULPS = {"ms-exp-cosine": 64}


def _framework(qualified):
    return qualified.split(".")[0]


def _installed():
    return [f for f in ("torch", "paddle", "mindspore") if importlib.util.find_spec(f)]


def schedule_of(qualified, kwargs, base_lr):
    """The preset for a case (``$fn`` / ``$scheduler`` markers read on the preset side)."""
    kwargs = decode(kwargs, lambda q, kw: uo.schedules.preset(q, **kw))
    if base_lr is not None:
        kwargs = {"base_lr": base_lr, **kwargs}
    return uo.schedules.preset(qualified, **kwargs)


@pytest.fixture(scope="module")
def native_runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("schedules")
    worker = Path(__file__).parent / "workers" / "run_schedules.py"
    procs = {}
    for fw in _installed():
        jobs = [{"id": i, "qualified": q, "kwargs": kw, "steps": STEPS, "base_lr": base}
                for i, q, kw, base in CASES if _framework(q) == fw]
        (out / f"{fw}.json").write_text(json.dumps(jobs))
        procs[fw] = subprocess.Popen([sys.executable, str(worker), fw, str(out / f"{fw}.json"),
                                      str(out / f"{fw}.out.json")],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    results = {}
    for fw, proc in procs.items():
        log = proc.communicate(timeout=300)[0].decode()
        assert proc.returncode == 0, log[-3000:]
        results[fw] = json.loads((out / f"{fw}.out.json").read_text())
    return results


def _float32_native(qualified):
    """Cells (capitalised names in mindspore.nn) and experimental schedulers."""
    module, _, name = qualified.rpartition(".")
    return module == EXP or (module == NN and name[0].isupper())


def mismatch(got, want, float32, ulps=0):
    """Steps where ``got`` (ours) and ``want`` (native) differ beyond the rounding rule."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if float32:
        ulps = np.maximum(np.arange(len(want)) + 4, ulps)
        tol = ulps * np.finfo(np.float32).eps * np.abs(want).max()
    else:
        tol = 1e-12 * np.maximum(np.abs(got), np.abs(want))
    return np.flatnonzero(~(np.abs(got - want) <= tol))


@pytest.mark.parametrize("case_id, qualified, kwargs, base_lr", CASES,
                         ids=[c[0] for c in CASES])
def test_preset_gives_the_native_lr_at_every_step(native_runs, case_id, qualified, kwargs,
                                                  base_lr):
    fw = _framework(qualified)
    if fw not in native_runs:
        pytest.skip(f"{fw} is not installed")
    run = native_runs[fw][case_id]
    assert "error" not in run, run.get("error")
    schedule = schedule_of(qualified, kwargs, base_lr)
    ours = [schedule(t) for t in range(STEPS)]
    late = [schedule(max(t - 1, 0)) for t in range(STEPS)]
    checks = [("lr", run["lr"], ours, late, _float32_native(qualified))]
    if "used" in run:            # MindSpore: what the optimizer applied, in float32
        checks.append(("used", run["used"], ours, late, True))
    if schedule.momentum(0) is not None:
        checks.append(("momentum", run["momentum"], [schedule.momentum(t) for t in range(STEPS)],
                       [schedule.momentum(max(t - 1, 0)) for t in range(STEPS)], False))
    for what, native, want, shifted, float32 in checks:
        assert len(native) == STEPS
        ulps = FLOAT32_ULPS.get(case_id, 0)
        bad = mismatch(want, native, float32, ulps)
        assert not bad.size, (f"{what} differs at steps {bad.tolist()[:5]}: ours "
                              f"{[want[t] for t in bad[:3]]}, "
                              f"native {[native[t] for t in bad[:3]]}")
        if np.ptp(native) > 0:   # the rule has power: one step late is caught
            assert mismatch(shifted, native, float32, ulps).size, \
                f"{what}: a shift went unnoticed"


def test_every_native_scheduler_has_a_preset_or_a_stated_refusal(native_runs):
    covered = set(uo.schedules.presets()) | set(uo.schedules.presets(refused=True))
    for fw, run in native_runs.items():
        missing = sorted(set(run["__natives__"]) - covered)
        assert not missing, f"{fw}: no preset and no refusal for {missing}"


def test_momentum_cycling_is_the_native_one(native_runs):
    """torch cycles SGD momentum too; with cycle_momentum=False it is left alone."""
    if "torch" not in native_runs:
        pytest.skip("torch is not installed")
    run = native_runs["torch"]["torch-onecycle"]
    assert min(run["momentum"]) == pytest.approx(0.85) and run["momentum"][0] == 0.95
    off = uo.schedules.preset(f"{TORCH}.OneCycleLR", max_lr=0.5, total_steps=STEPS,
                              cycle_momentum=False)
    assert off.momentum(10) is None and off(10) == schedule_of(
        f"{TORCH}.OneCycleLR", {"max_lr": 0.5, "total_steps": STEPS}, None)(10)


def test_presets_take_the_native_arguments_and_defaults(native_runs):
    """Same names, order and defaults as the native constructor (without the optimizer);
    torch / MindSpore-experimental presets add ``base_lr`` first where the native has none."""
    from unified_opt.schedules._preset_registry import REGISTRY
    for fw, run in native_runs.items():
        for qualified, native_params in run["__signatures__"].items():
            if qualified not in REGISTRY.names():
                continue
            ours = [[p.name, "<required>" if p.default is p.empty else p.default]
                    for p in REGISTRY.signature(qualified).parameters.values()]
            if ours[0][0] == "base_lr" and native_params[:1] != [["base_lr", "<required>"]]:
                ours = ours[1:]
            assert ours == native_params, qualified


@pytest.mark.parametrize("case_id, qualified, kwargs, base_lr",
                         [c for c in CASES if "$fn" not in json.dumps(c[2])],
                         ids=[c[0] for c in CASES if "$fn" not in json.dumps(c[2])])
def test_presets_round_trip_through_json(case_id, qualified, kwargs, base_lr):
    schedule = schedule_of(qualified, kwargs, base_lr)
    again = uo.schedules.schedule_from_dict(json.loads(json.dumps(schedule.to_dict())))
    assert again == schedule
    assert [again(t) for t in range(STEPS)] == [schedule(t) for t in range(STEPS)]
