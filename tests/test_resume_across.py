"""A run trained for 50 steps in one framework continues in another from its state file
(``uo.save_state`` there, ``uo.load_state`` into ``uo.build``'s optimizer here) and stays
on the uninterrupted run's trajectory: the first 50 steps from the first framework and
the last 50 from the second, stitched, pass the conformance rule against the float64
oracle of the whole 100-step run (lr, parameters and, where both halves record it, the
state under the spec's names), for every ordered pair of installed frameworks and three
configurations:

* ``adamw_cosine_groups``: AdamW, a cosine schedule, a no-decay group and a half-lr group;
* ``lamb_warmup_exclude``: Paddle's Lamb preset, linear warm-up into a cosine, biases and
  norms excluded from the decay;
* ``torch_adamw_onecycle``: AdamW with OneCycleLR, which cycles beta1 with the lr; from
  torch, a plain ``torch.optim.AdamW`` + ``OneCycleLR`` built by hand, whose checkpoint
  must carry the cycle's position into the uo-built optimizer of the other framework.

Each framework runs in a process of its own (``resume_worker.py``): 3 processes train,
then 3 resume. A control run resumes without loading the state, and must fail.
"""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support import DENSE_PARAMS, installed_frameworks

import unified_opt as uo
from unified_opt.conformance.cases import Case, Native
from unified_opt.conformance.compare import compare
from unified_opt.conformance.trajectory import Trajectory, floor_trajectories, reference_trajectory
from unified_opt.schedules import Cosine

STEPS, SWITCH = 100, 50
WORKER = Path(__file__).parent / "resume_worker.py"
FRAMEWORKS = [f for f in ("torch", "paddle", "mindspore") if f in installed_frameworks()]
PAIRS = [(a, b) for a in FRAMEWORKS for b in FRAMEWORKS if a != b]
NO_DECAY = ("bias", "ln.*")

ONE_CYCLE = dict(max_lr=0.01, total_steps=STEPS)
WARM = dict(warmup_steps=10, start_lr=0.0, end_lr=0.01)
COSINE = dict(learning_rate=0.01, T_max=80, eta_min=1e-4)
CONFIGS = {
    "adamw_cosine_groups": (
        uo.AdamW(lr=Cosine(lr=0.01, T_max=STEPS, eta_min=1e-4), weight_decay=0.05),
        (uo.Group(match=NO_DECAY, weight_decay=0.0), uo.Group(match="w3d", lr_scale=0.5))),
    "lamb_warmup_exclude": (
        uo.preset("paddle.optimizer.Lamb", lamb_weight_decay=0.05,
                  learning_rate=uo.schedules.preset(
                      "paddle.optimizer.lr.LinearWarmup", **WARM,
                      learning_rate=uo.schedules.preset(
                          "paddle.optimizer.lr.CosineAnnealingDecay", **COSINE))),
        (uo.Group(match=NO_DECAY, exclude_from=("weight_decay",)),)),
    "torch_adamw_onecycle": (
        uo.preset("torch.optim.AdamW", lr=1e-3, weight_decay=0.05).replace(
            lr=uo.schedules.preset("torch.optim.lr_scheduler.OneCycleLR", **ONE_CYCLE)),
        ()),
}
#: the torch side of torch_adamw_onecycle: the user's own optimizer and scheduler
TORCH_BY_HAND = Native("torch.optim.AdamW", {"lr": 1e-3, "weight_decay": 0.05},
                       scheduler="torch.optim.lr_scheduler.OneCycleLR",
                       scheduler_kwargs=ONE_CYCLE)


def case_of(config: str, source: str | None = None) -> Case:
    spec, groups = CONFIGS[config]
    native = TORCH_BY_HAND if (config == "torch_adamw_onecycle" and source == "torch") \
        else None
    return Case(id=f"resume_{config}", spec=spec, params=DENSE_PARAMS, steps=STEPS,
                groups=groups, native=native, seed=7)


def _launch(framework: str, jobs: list[dict], directory: Path) -> subprocess.Popen:
    job_file = directory / f"{framework}.{jobs[0]['phase']}.json"
    job_file.write_text(json.dumps(jobs))
    return subprocess.Popen([sys.executable, str(WORKER), framework, str(job_file)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait(processes: dict) -> None:
    for framework, process in processes.items():
        out, _ = process.communicate(timeout=900)
        assert process.returncode == 0, f"{framework} worker failed:\n{out[-4000:]}"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every train half, every resumed half, and the control run; by file name."""
    directory = tmp_path_factory.mktemp("resume")

    def files(config, source):
        stem = directory / f"{config}__{source}"
        return {"state": f"{stem}.safetensors", "params": f"{stem}.params.npz"}

    trains = {fw: [{"phase": "train", "case": case_of(c, fw).to_dict(), "switch": SWITCH,
                    "trajectory": str(directory / f"{c}__{fw}.train.npz"), **files(c, fw)}
                   for c in CONFIGS] for fw in FRAMEWORKS}
    _wait({fw: _launch(fw, jobs, directory) for fw, jobs in trains.items()})
    resumes = {fw: [] for fw in FRAMEWORKS}
    for source, target in PAIRS:
        for c in CONFIGS:
            resumes[target].append({"phase": "resume", "case": case_of(c).to_dict(),
                                    "switch": SWITCH, **files(c, source), "trajectory": str(
                                        directory / f"{c}__{source}__{target}.npz")})
    if PAIRS:   # the control: no state loaded, the optimizer restarts from zero
        source, target = PAIRS[0]
        control = dict(resumes[target][0], phase="fresh", trajectory=str(
            directory / "control.npz"))
        resumes[target].append(control)
    _wait({fw: _launch(fw, jobs, directory) for fw, jobs in resumes.items() if jobs})
    return directory


def _stitched(first: Trajectory, second: Trajectory) -> tuple[Trajectory, bool]:
    """The two halves as one trajectory; the state only where both halves have it."""
    has_state = all(first.state.get(n) for n in first.params) and all(
        second.state.get(n) for n in second.params)
    state = {n: {k: np.concatenate([first.state[n][k], second.state[n][k]])
                 for k in second.state[n]} for n in second.params} if has_state else {}
    return Trajectory(np.concatenate([first.lrs, second.lrs]),
                      {n: np.concatenate([first.params[n], second.params[n]])
                       for n in first.params}, state), has_state


def _judge(first: Trajectory, second: Trajectory, config: str):
    case = case_of(config)
    oracle = reference_trajectory(case.spec, case, "float64")
    stitched, has_state = _stitched(first, second)
    return compare(stitched, oracle, floor_trajectories(case.spec, case), state=has_state)


@pytest.mark.skipif(not PAIRS, reason="needs two installed frameworks")
@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("source, target", PAIRS)
def test_a_run_continues_in_another_framework(runs, source, target, config):
    first = Trajectory.load(runs / f"{config}__{source}.train.npz")
    second = Trajectory.load(runs / f"{config}__{source}__{target}.npz")
    assert (first.steps, second.steps) == (SWITCH, STEPS - SWITCH)
    result = _judge(first, second, config)
    assert result.passed, f"{source} -> {target}, {config}: {result.detail}"
    # the uo-built runs record the state on both sides: it crossed too
    by_hand = config == "torch_adamw_onecycle" and source == "torch"
    assert bool(first.state.get("w")) == (not by_hand)
    assert second.state["w"], "the resumed run records its state"


@pytest.mark.skipif(not PAIRS, reason="needs two installed frameworks")
def test_resuming_without_the_state_leaves_the_trajectory(runs):
    source, target = PAIRS[0]
    config = list(CONFIGS)[0]
    first = Trajectory.load(runs / f"{config}__{source}.train.npz")
    fresh = Trajectory.load(runs / "control.npz")
    result = _judge(first, fresh, config)
    assert not result.passed and result.first_failing_step == SWITCH + 1, result.detail


def test_the_configurations_are_what_the_docstring_says():
    spec, groups = CONFIGS["torch_adamw_onecycle"]
    assert spec.lr.cycle_momentum and spec.betas[0] == 0.9
    assert dataclasses.replace(case_of("torch_adamw_onecycle", "torch")).native is not None
    assert case_of("torch_adamw_onecycle", "paddle").native is None
