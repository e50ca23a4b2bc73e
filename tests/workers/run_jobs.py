"""Run optimizer jobs in ONE framework in this process and save the trajectories.

    python tests/workers/run_jobs.py FRAMEWORK JOBS.json OUT_DIR

Each job is ``{"id", "mode": "native" | "build", "steps", ...}``. "native" builds the
framework's own class by hand (``"qualified"`` name and ``"kwargs"``); "build" runs
``uo.build`` on the spec in ``"spec"`` (a ``to_dict``) through the backend's driver.
Parameters and gradients come from ``tests/helpers.py`` (seeded), and ``OUT_DIR/<id>.npz``
holds every parameter after every step (``np.savez``; read without pickle).
"""

from __future__ import annotations

import importlib
import inspect
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from helpers import gradient_stream, initial_params  # noqa: E402


def native_class(qualified):
    module, _, name = qualified.rpartition(".")
    return getattr(importlib.import_module(module), name)


class NativeTorch:
    def __init__(self, job, arrays):
        import torch
        self.torch = torch
        self.params = {n: torch.nn.Parameter(torch.from_numpy(a.copy())) for n, a in arrays.items()}
        self.opt = native_class(job["qualified"])(list(self.params.values()), **job["kwargs"])

    def step(self, grads):
        for n, p in self.params.items():
            p.grad = self.torch.from_numpy(grads[n].copy())
        self.opt.step()

    def values(self):
        return {n: p.detach().numpy().copy() for n, p in self.params.items()}


class NativePaddle:
    def __init__(self, job, arrays):
        import paddle
        self.paddle = paddle
        self.params = {n: paddle.create_parameter(
            shape=list(a.shape), dtype="float32", name=f"{job['id']}.{n}",
            default_initializer=paddle.nn.initializer.Assign(a)) for n, a in arrays.items()}
        cls = native_class(job["qualified"])
        # incubate classes still take the old-style parameter_list=
        keyword = ("parameter_list" if "parameter_list" in inspect.signature(cls).parameters
                   else "parameters")
        self.opt = cls(**{keyword: list(self.params.values())}, **job["kwargs"])

    def step(self, grads):
        for n, p in self.params.items():
            p.grad = self.paddle.to_tensor(grads[n])
        self.opt.step()
        self.opt.clear_grad(set_to_zero=False)

    def values(self):
        return {n: p.numpy().copy() for n, p in self.params.items()}


class NativeMindSpore:
    def __init__(self, job, arrays):
        import mindspore as ms
        self.ms = ms
        # Parameter names are what MindSpore's default weight-decay filter reads.
        self.params = {n: ms.Parameter(ms.Tensor(a.copy()), name=n) for n, a in arrays.items()}
        self.opt = native_class(job["qualified"])(list(self.params.values()), **job["kwargs"])

    def step(self, grads):
        self.opt(tuple(self.ms.Tensor(grads[n]) for n in self.params))

    def values(self):
        return {n: p.asnumpy().copy() for n, p in self.params.items()}


NATIVE = {"torch": NativeTorch, "paddle": NativePaddle, "mindspore": NativeMindSpore}


class Built:
    def __init__(self, framework, job, arrays):
        import unified_opt as uo
        module = importlib.import_module(f"unified_opt.conformance.drivers.{framework}")
        driver_cls = next(v for v in vars(module).values() if isinstance(v, type)
                          and v.__module__ == module.__name__ and hasattr(v, "apply"))
        groups = [uo.Group.from_dict(g) for g in job.get("groups", [])] or None
        self.driver = driver_cls(uo.spec_from_dict(job["spec"]), arrays,
                                 total_steps=job["steps"], groups=groups)

    def step(self, grads):
        self.driver.step(grads)

    def values(self):
        return self.driver.params_numpy()


def run(framework, job, out_dir):
    arrays = initial_params(shapes={n: tuple(s) for n, s in job["shapes"].items()})
    runner = (NATIVE[framework] if job["mode"] == "native" else
              lambda j, a: Built(framework, j, a))(job, arrays)
    trajectory = {n: [] for n in arrays}
    for grads in gradient_stream(shapes=arrays and {n: a.shape for n, a in arrays.items()},
                                 steps=job["steps"]):
        runner.step(grads)
        for n, value in runner.values().items():
            trajectory[n].append(value)
    np.savez(out_dir / f"{job['id']}.npz", **{n: np.stack(v) for n, v in trajectory.items()})


def main(argv):
    framework, jobs_file, out_dir = argv
    out_dir = Path(out_dir)
    for job in json.loads(Path(jobs_file).read_text()):
        try:
            run(framework, job, out_dir)
        except Exception as exc:  # reported per job; the test decides what it means
            (out_dir / f"{job['id']}.error").write_text(f"{type(exc).__name__}: {exc}")


if __name__ == "__main__":
    main(sys.argv[1:])
