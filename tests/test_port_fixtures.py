"""The four training-script shapes of ``tests/port_fixtures/`` ported by ``unified-opt
port`` to Paddle and MindSpore run as the torch script runs: started from the same weights
and fed the same gradients (computed in torch by the script's own loss), the ported
optimizer, scheduler, clip and lr lines follow the torch run within the conformance rule
for 60 steps, the lr included. The oracle is torch running the original script in
float64 on those gradients; the float32 reference (the noise floor) is the torch float32
run, the same with its float hyperparameters held in float32, and, where
``uo.from_native`` reads the torch optimizer and scheduler, the suite's numpy float32
reference of what it reads (its float32 arithmetic is the suite's noise floor: torch
computes ``1 - lr * weight_decay`` in double, Paddle in float32). Each framework runs in
a process of its own (``port_fixture_worker.py``)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import installed_frameworks

from unified_opt.conformance.compare import compare
from unified_opt.conformance.trajectory import Trajectory
from unified_opt.porting.script import port_source

HERE = Path(__file__).parent
FIXTURES = sorted(p.stem for p in (HERE / "port_fixtures").glob("*.py"))
WORKER = HERE / "port_fixture_worker.py"
STEPS = 60
TARGETS = [f for f in ("paddle", "mindspore") if f in installed_frameworks()]


def _jobs(directory: Path, framework: str, mode: str, dtype: str = "float32",
          rounded: bool = False) -> list:
    jobs = []
    for stem in FIXTURES:
        source = (HERE / "port_fixtures" / f"{stem}.py").read_text()
        if framework != "torch":
            ported = port_source(source, framework)
            assert ported.refusals == [], (stem, framework, ported.refusals)
            # the target's process imports no torch: the script's model and its torch
            # imports are ported by hand (the worker's model); the fixture (d) class's
            # torch base stands for the LightningModule
            source = "\n".join(line for line in ported.source.splitlines()
                               if not line.startswith(("import torch", "from transformers")))
            source = source.replace("class Classifier(torch.nn.Module):", "class Classifier:")
        label = f"{framework}-{dtype}{'-rounded' if rounded else ''}-{stem}"
        jobs.append({"fixture": stem, "source": source, "framework": framework, "mode": mode,
                     "dtype": dtype, "steps": STEPS, "stream": str(directory / stem),
                     "float32_hyperparameters": rounded,
                     "trajectory": str(directory / f"{label}.npz")})
    return jobs


def _start(directory: Path, label: str, jobs: list) -> subprocess.Popen:
    job_file = directory / f"{label}.json"
    job_file.write_text(json.dumps(jobs))
    return subprocess.Popen([sys.executable, str(WORKER), str(job_file)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait(process: subprocess.Popen, label: str) -> None:
    out, _ = process.communicate(timeout=900)
    assert process.returncode == 0, f"{label}:\n{out[-4000:]}"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    if "torch" not in installed_frameworks() or not TARGETS:
        pytest.skip("needs torch and another framework")
    directory = tmp_path_factory.mktemp("port_fixtures")
    _wait(_start(directory, "record", _jobs(directory, "torch", "record")), "torch record")
    processes = {"torch replays": _start(directory, "torch", [
        *_jobs(directory, "torch", "replay", "float64"),
        *_jobs(directory, "torch", "replay", "float32", rounded=True)])}
    processes.update({to: _start(directory, to, _jobs(directory, to, "replay"))
                      for to in TARGETS})
    for label, process in processes.items():
        _wait(process, label)
    return directory


def _trajectory(directory: Path, label: str) -> Trajectory:
    return Trajectory.load(directory / f"{label}.npz")


def _numpy_float32(directory: Path, stem: str) -> list[Trajectory]:
    """The suite's numpy float32 reference of what ``uo.from_native`` read of the torch
    optimizer and scheduler, on the recorded gradients (none where the lr is set by hand:
    there is no scheduler object to read)."""
    import numpy as np

    import unified_opt as uo
    from unified_opt.schedules import Schedule

    read = directory / f"{stem}.spec.json"
    if not read.exists():
        return []
    saved = json.loads(read.read_text())
    spec = uo.spec_from_dict(saved["spec"])
    groups = [uo.Group.from_dict(g) for g in saved["groups"]]
    init = dict(np.load(directory / f"{stem}.init.npz"))
    grads = np.load(directory / f"{stem}.grads.npz")
    reference = uo.reference(spec, init, dtype="float32", groups=groups or None)
    lrs, params = [], {name: [] for name in init}
    for t in range(STEPS):
        lrs.append(spec.lr(t) if isinstance(spec.lr, Schedule) else spec.lr)
        reference.step({name: grads[f"{t}/{name}"] for name in init})
        for name in init:
            params[name].append(np.array(reference.params[name]))
    return [Trajectory(np.asarray(lrs, dtype=np.float64),
                       {name: np.stack(v) for name, v in params.items()}, {})]


#: measured: Paddle's own paddle.optimizer.AdamW, stepped with set_lr on the same weights
#: and gradients, is bit for bit the ported run here, and lands 8.73 x the floor on
#: head.bias at step 7 (the rule's limit is 8): decay on every parameter (biases and the
#: norm included) at lr 0.02, weight_decay 0.02; the fixtures decaying only matrices pass
#: at 1.1-2.3 x. A finding about the native kernel's float32 arithmetic, not the port's.
PADDLE_ADAMW_DECAY_ON_VECTORS = pytest.mark.xfail(
    strict=True, reason="paddle.optimizer.AdamW itself: 8.73 x the float32 floor")


@pytest.mark.parametrize("framework, stem", [
    pytest.param(framework, stem, marks=PADDLE_ADAMW_DECAY_ON_VECTORS)
    if (framework, stem) == ("paddle", "lightning_scheduler_dict") else (framework, stem)
    for framework in TARGETS for stem in FIXTURES])
def test_the_ported_fixture_follows_the_torch_run(runs, framework, stem):
    oracle = _trajectory(runs, f"torch-float64-{stem}")
    # the float32 references: the torch run, and the same with its float hyperparameters
    # held in float32 (as the conformance suite's two references)
    float32 = [_trajectory(runs, f"torch-float32-{stem}"),
               _trajectory(runs, f"torch-float32-rounded-{stem}"), *_numpy_float32(runs, stem)]
    got = _trajectory(runs, f"{framework}-float32-{stem}")
    assert got.steps == STEPS
    result = compare(got, oracle, float32, state=False)
    assert result.passed, f"{framework} {stem}: {result.detail}"
    # the torch float32 run itself passes the same rule (the rule's own sanity)
    assert compare(float32[0], oracle, float32, state=False).passed


@pytest.mark.parametrize("stem", FIXTURES)
def test_the_runs_have_a_schedule_and_decay_to_follow(runs, stem):
    """The comparison has power: the lr moves where the script schedules it, and the
    parameters move away from where they started."""
    import numpy as np

    oracle = _trajectory(runs, f"torch-float64-{stem}")
    lrs = np.asarray(oracle.lrs)
    if stem == "gpt_module_types":
        assert np.all(lrs == lrs[0])                       # a constant lr there
    else:
        assert lrs.max() > 2 * lrs.min(), lrs
    for name, values in oracle.params.items():
        assert np.abs(values[-1] - values[0]).max() > 1e-3, name
