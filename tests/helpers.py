"""Shared test helpers: gradient streams and 'follows the oracle' checks."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import unified_opt as uo

SHAPES = {"w": (8, 6), "bias": (6,), "ln.gamma": (6,), "v22": (22,), "w3d": (3, 4, 5),
          "empty": (0,)}


def initial_params(shapes=SHAPES, seed=0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.normal(size=s).astype(np.float32) for n, s in shapes.items()}


def gradient_stream(shapes=SHAPES, steps=100, seed=1):
    """Seeded float32 gradients with adversarial steps (zeros, 1e-30, 500, mixed)."""
    rng = np.random.default_rng(seed)
    for t in range(steps):
        out = {}
        for n, s in shapes.items():
            g = rng.normal(size=s)
            kind = t % 6
            if kind == 1:
                g = np.zeros(s)
            elif kind == 2:
                g = g * 1e-30
            elif kind == 3:
                g = g * 500.0
            elif kind == 4 and g.size:
                g = g * rng.choice([0.0, 1e-30, 1.0, 500.0], size=s)
            out[n] = g.astype(np.float32)
        yield out


def assert_follows_reference(run_step, read_params, spec, params, grads, factor=10.0,
                             read_state=None):
    """Drive ``run_step(grads) -> lr`` and check params (and state) against the float64
    oracle at every step, within ``factor`` times the float32 reference's own error
    (floored at a few float32 ulps of the values)."""
    oracle = uo.reference(spec, params, dtype="float64")
    floor32 = uo.reference(spec, params, dtype="float32")
    for t, g in enumerate(grads):
        lr = run_step(g)
        assert lr == oracle.step(g), f"lr differs at step {t}"
        floor32.step(g)
        got = read_params()
        pairs = [(f"param {n}", got[n], oracle.params[n], floor32.params[n]) for n in params]
        if read_state is not None:
            state = read_state()
            for n in params:
                for k, want in oracle.state[n].items():
                    pairs.append((f"state {n}.{k}", state[n][k], want, floor32.state[n][k]))
        assert_pairs_within_floor(pairs, t, factor)


def assert_pairs_within_floor(pairs, t: int, factor: float) -> None:
    """Each ``(what, value, float64 oracle, float32 reference)`` of step ``t``: the
    value within ``factor`` times the float32 reference's error (floored at a few
    float32 ulps of the values)."""
    for what, value, want, f32 in pairs:
        assert value.shape == want.shape, f"{what} shape {value.shape} != {want.shape}"
        if not want.size:
            continue
        error = np.abs(value.astype(np.float64) - want).max()
        floor = max(np.abs(f32.astype(np.float64) - want).max(),
                    4 * np.finfo(np.float32).eps * np.abs(want).max(), 1e-37)
        assert error <= factor * floor, (
            f"{what} at step {t}: error {error:.3e} > {factor} x floor {floor:.3e}")


# -- cross-framework runs: one worker process per framework ----------------------------

FRAMEWORKS = ("torch", "paddle", "mindspore")


def installed_frameworks() -> list[str]:
    import importlib.util

    return [f for f in FRAMEWORKS if importlib.util.find_spec(f) is not None]


def run_framework_jobs(jobs: dict, out_dir) -> None:
    """Run ``jobs`` (framework -> list of job dicts, see ``workers/run_jobs.py``), one
    worker process per framework, at most two at a time; trajectories land in
    ``out_dir/<job id>.npz`` (or ``.error``)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    worker = Path(__file__).parent / "workers" / "run_jobs.py"
    pending = [(fw, j) for fw, j in jobs.items() if j]
    running = []
    while pending or running:
        while pending and len(running) < 2:
            fw, fw_jobs = pending.pop(0)
            path = Path(out_dir) / f"{fw}.jobs.json"
            path.write_text(json.dumps(fw_jobs))
            running.append(subprocess.Popen(
                [sys.executable, str(worker), fw, str(path), str(out_dir)],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        proc = running.pop(0)
        output = proc.communicate(timeout=600)[0]
        assert proc.returncode == 0, output.decode(errors="replace")[-3000:]


def load_trajectory(path) -> dict:
    error = path.with_suffix(".error")
    assert not error.exists(), error.read_text()
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


def reference_trajectories(spec, shapes, steps, groups=None):
    """(float64 oracle, float32 floor references) parameter trajectories over the
    ``gradient_stream`` of ``shapes``; the floor includes float32-held hyperparameters."""
    from unified_opt.reference import with_float32_hyperparameters

    arrays = initial_params(shapes=shapes)
    runs = [uo.reference(spec, arrays, "float64", groups=groups),
            uo.reference(spec, arrays, "float32", groups=groups),
            uo.reference(with_float32_hyperparameters(spec), arrays, "float32",
                         groups=groups)]
    traces = [{n: [] for n in arrays} for _ in runs]
    for g in gradient_stream(shapes=shapes, steps=steps):
        for ref, trace in zip(runs, traces):
            ref.step(g)
            for n in arrays:
                trace[n].append(ref.params[n].copy())
    stacked = [{n: np.stack(v) for n, v in t.items()} for t in traces]
    return stacked[0], stacked[1:]


def built_elsewhere(spec, shapes, steps, frameworks, out_dir, label, groups=None) -> dict:
    """``spec`` (with ``groups``) built by ``uo.build`` on each of ``frameworks``, one
    worker process per framework, over the ``gradient_stream`` of ``shapes``:
    framework -> parameter trajectory (name -> (steps, *shape))."""
    job = {"mode": "build", "steps": steps, "shapes": shapes, "spec": spec.to_dict(),
           "groups": [g.to_dict() for g in groups or ()]}
    run_framework_jobs({fw: [dict(job, id=f"{label}@{fw}")] for fw in frameworks}, out_dir)
    return {fw: load_trajectory(Path(out_dir) / f"{label}@{fw}.npz") for fw in frameworks}


def worst_ratio(got, oracle, floors) -> float:
    """Largest error / float32 noise floor over steps and parameters (the conformance
    rule: floor = max(float32 references' error, 4 float32 ulps of the values))."""
    worst = 0.0
    for n, want in oracle.items():
        steps = want.shape[0]
        if not want[0].size:
            continue
        flat = want.reshape(steps, -1)
        error = np.abs(got[n].astype(np.float64).reshape(steps, -1) - flat).max(axis=1)
        floor = 4 * np.finfo(np.float32).eps * np.abs(flat).max(axis=1)
        for f in floors:
            floor = np.maximum(floor, np.abs(f[n].reshape(steps, -1) - flat).max(axis=1))
        worst = max(worst, float((error / np.maximum(floor, 1e-37)).max()))
    return worst
