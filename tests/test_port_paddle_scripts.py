"""A Paddle training script of PaddleNLP's shape ported to torch by ``unified-opt port``
runs as the Paddle script runs: a LinearWarmup around a CosineAnnealingDecay, AdamW with
``apply_decay_param_fun=lambda x: x in decay_params`` over a name test, and
``grad_clip=paddle.nn.ClipGradByGlobalNorm``. Before, the port refused all three, and
with them the optimizer. Both runs (each framework in a process of its own,
``port_paddle_worker.py``) start from the same weights and get the same gradients; each
follows the float64 oracle of the spec the port read within the conformance rule (the
floor from the suite's float32 references), the lr included."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support import Replay, installed_frameworks

from unified_opt.conformance.compare import compare
from unified_opt.conformance.trajectory import Trajectory, floor_trajectories, reference_trajectory
from unified_opt.porting.script import port_source

HERE = Path(__file__).parent
STEPS = 30
SCRIPT = """\
import paddle

scheduler = paddle.optimizer.lr.LinearWarmup(
    learning_rate=paddle.optimizer.lr.CosineAnnealingDecay(learning_rate=0.05, T_max=30),
    warmup_steps=5, start_lr=0.0, end_lr=0.05)
decay_params = [p.name for n, p in model.named_parameters()
                if not any(nd in n for nd in ["bias", "norm"])]
optimizer = paddle.optimizer.AdamW(
    learning_rate=scheduler, parameters=model.parameters(), weight_decay=0.1,
    apply_decay_param_fun=lambda x: x in decay_params,
    grad_clip=paddle.nn.ClipGradByGlobalNorm(1.0))
for step in range(steps):
    feed(step)
    optimizer.step()
    record(optimizer.get_lr())
    scheduler.step()
    optimizer.clear_grad()
"""
SHAPES = {"fc.weight": (3, 4), "fc.bias": (3,), "norm.weight": (3,), "norm.bias": (3,)}


def _stream():
    rng = np.random.default_rng(7)
    init = {n: rng.standard_normal(s).astype(np.float32) for n, s in SHAPES.items()}
    # every third step small enough that the global norm clip leaves it alone
    grads = [{n: (rng.standard_normal(s) * (0.05 if t % 3 == 2 else 1.0)).astype(np.float32)
              for n, s in SHAPES.items()} for t in range(STEPS)]
    return init, grads


def _run(tmp_path: Path, framework: str, source: str, init, grads) -> Trajectory:
    np.savez(tmp_path / "init.npz", **init)
    np.savez(tmp_path / "grads.npz", **{f"{t}/{n}": g for t, step in enumerate(grads)
                                        for n, g in step.items()})
    out = tmp_path / f"{framework}.npz"
    job = tmp_path / f"{framework}.json"
    job.write_text(json.dumps({"framework": framework, "source": source, "steps": STEPS,
                               "init": str(tmp_path / "init.npz"),
                               "grads": str(tmp_path / "grads.npz"), "out": str(out)}))
    done = subprocess.run([sys.executable, str(HERE / "port_paddle_worker.py"), str(job)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    saved = np.load(out)
    return Trajectory(saved["lr"], {n: saved[n] for n in SHAPES}, {})


@pytest.mark.skipif(not {"torch", "paddle"} <= set(installed_frameworks()),
                    reason="needs torch and paddle")
def test_a_paddle_nlp_shape_ported_to_torch_follows_the_paddle_run(tmp_path):
    ported = port_source(SCRIPT, "torch")
    assert ported.refusals == [], ported.refusals
    assert "decay_params" not in ported.source and "paddle.optimizer" not in ported.source
    spec = ported.rewrites[0].spec
    assert spec.no_decay_names == ("*bias*", "*norm*") and spec.weight_decay == 0.1
    assert spec.grad_clip.max_norm == 1.0
    init, grads = _stream()
    replay = Replay(spec, init, tuple(grads))
    oracle = reference_trajectory(spec, replay)
    floors = floor_trajectories(spec, replay)
    paddle_run = _run(tmp_path, "paddle", SCRIPT, init, grads)
    torch_run = _run(tmp_path, "torch", ported.source, init, grads)
    for label, run in (("paddle", paddle_run), ("torch", torch_run)):
        result = compare(run, oracle, floors, state=False)
        assert result.passed, f"{label}: {result.detail}"
    # the comparison has power: the warm-up, the clip and the name rule all show
    assert paddle_run.lrs[0] == 0.0 and paddle_run.lrs[5] == pytest.approx(0.05)
    for changed in (spec.replace(no_decay_names=()), spec.replace(grad_clip=None),
                    spec.replace(lr=0.05)):
        case = Replay(changed, init, tuple(grads))
        assert not compare(paddle_run, reference_trajectory(changed, case),
                           floor_trajectories(changed, case), state=False).passed, changed
