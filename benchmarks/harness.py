"""What the CPU step-time benchmarks share (``native_vs_own.py``, ``realistic_sets.py``,
``step_time.py``, ``algorithm_step_time.py``, ``mindspore_graph_forms.py``):
one framework's parameters, gradients, thread setting and step, interleaved timing and
the machine's description.

A measurement process imports one framework only (importing paddle before mindspore
breaks mindspore) and sets its threads before the first step: ``OMP_NUM_THREADS`` (the
own kernels read it at every parallel phase; Paddle resets it to 1 when imported, so it
is written again after the import), ``torch.set_num_threads``, MindSpore's
``device_context.cpu.op_tuning.threads_num`` (its own kernels' count) and
``runtime_num_threads`` (``set_context``: what the own path's kernels follow, as
``threads_num`` cannot be read back; a count set only through ``threads_num`` left them
on 2 threads on a 2-core machine) and Paddle's (``paddle.base.core.set_num_threads``).

Timing: the optimizers of a row step in interleaved rounds (each round steps every one
once, the order rotating, so load from other processes falls on all alike), each step
with the next of :data:`GRADIENT_SETS` fresh random gradient sets drawn once, after
:data:`WARMUP` untimed rounds; the own path's background kernel compile lands in further
untimed steps (at most :data:`COMPILE_WAIT_S`).
"""

from __future__ import annotations

import os
import platform
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from unified_opt.devices import cpu_info

#: gradient sets drawn once per parameter set and used in turn
GRADIENT_SETS = 3
#: untimed rounds before timing
WARMUP = 3
#: the most seconds the untimed steps wait for the generated kernels' background compile
COMPILE_WAIT_S = 90.0
#: torch peers per algorithm, from the ``peers`` extra: (qualified class, kwargs)
TORCH_PEERS = {
    "came": [("pytorch_optimizer.CAME", {"lr": 1e-4}), ("came_pytorch.CAME", {"lr": 1e-4})],
    "lamb": [("pytorch_optimizer.Lamb", {"lr": 1e-3, "weight_decay": 0.01}),
             ("torch_optimizer.Lamb", {"lr": 1e-3, "weight_decay": 0.01})],
    "lars": [("pytorch_optimizer.LARS", {"lr": 0.1, "weight_decay": 1e-4}),
             ("torch_optimizer.LARS", {"lr": 0.1, "weight_decay": 1e-4})],
    "lion": [("pytorch_optimizer.Lion", {"lr": 1e-4})],
    "adafactor": [("pytorch_optimizer.AdaFactor", {"lr": 1e-3}),
                  ("torch_optimizer.Adafactor", {"lr": 1e-3})],
    "adan": [("pytorch_optimizer.Adan", {"lr": 1e-3})],
    "ademamix": [("pytorch_optimizer.AdEMAMix", {"lr": 1e-3, "weight_decouple": True})],
    "schedule_free_sgd": [("schedulefree.SGDScheduleFree", {"lr": 0.1})],
    "schedule_free_adamw": [("schedulefree.AdamWScheduleFree", {"lr": 2.5e-3})],
    "muon": [("harness.pytorch_optimizer_muon", {"lr": 0.02, "weight_decay": 0.1})],
}


def pytorch_optimizer_muon(params, **kwargs):
    """``pytorch_optimizer.Muon`` over ``params`` as its Muon group (it takes groups
    that say ``use_muon``; its numbers are not this project's Muon's, its bfloat16
    iteration is)."""
    import pytorch_optimizer

    return pytorch_optimizer.Muon([{"params": list(params), "use_muon": True}], **kwargs)


def framework(backend: str) -> str:
    """``"mindspore-graph"`` -> ``"mindspore"``."""
    return backend.split("-")[0]


def thread_env(threads: int) -> dict[str, str]:
    """The environment of a measurement process on ``threads`` threads."""
    n = str(threads)
    return {"OMP_NUM_THREADS": n, "MKL_NUM_THREADS": n, "OPENBLAS_NUM_THREADS": n}


class Harness:
    """One backend's parameters, gradients and step, on ``threads`` threads."""

    def __init__(self, backend: str, threads: int = 1):
        """``threads``: 0 leaves the framework's own defaults (what a script that sets
        nothing gets)."""
        self.backend, self.name, self.threads = backend, framework(backend), threads
        self.fw = __import__(self.name)
        if threads:
            self._set_threads(threads)
        if backend == "mindspore-graph":
            self.fw.set_context(mode=self.fw.GRAPH_MODE)
        self.counter = 0

    def _set_threads(self, threads: int) -> None:
        os.environ["OMP_NUM_THREADS"] = str(threads)     # paddle's import sets it to 1
        if self.name == "torch":
            self.fw.set_num_threads(threads)
        elif self.name == "paddle":
            self.fw.base.core.set_num_threads(threads)
        elif self.name == "mindspore":
            self.fw.set_context(runtime_num_threads=threads)
            self.fw.device_context.cpu.op_tuning.threads_num(threads)

    def params(self, arrays: list[np.ndarray]) -> list:
        """(name, parameter) pairs holding copies of ``arrays``."""
        out = []
        for a in arrays:
            self.counter += 1
            name = f"p{self.counter}"
            if self.name == "torch":
                out.append((name, self.fw.nn.Parameter(self.fw.from_numpy(a.copy()))))
            elif self.name == "paddle":
                out.append((name, self.fw.create_parameter(
                    shape=list(a.shape), dtype="float32", name=name,
                    default_initializer=self.fw.nn.initializer.Assign(a))))
            else:
                out.append((name, self.fw.Parameter(self.fw.Tensor(a.copy()), name=name)))
        return out

    def seeded_params(self, shapes) -> list:
        """(name, parameter) pairs of ``shapes``, standard normal values drawn from seed 0
        (every call the same values)."""
        rng = np.random.default_rng(0)
        return self.params([rng.standard_normal(shape, dtype=np.float32) for shape in shapes])

    def grads(self, named, kind: str = "random", sets: int = 4) -> "Gradients":
        """The parameters' gradients for the steps to come (:class:`Gradients`): ``sets``
        draws of standard normal values (random signs, as training gradients have), or
        with ``kind="constant"`` all ones."""
        return Gradients(self, named, kind, sets)

    def hand_built(self, qualified: str, kwargs: dict, named):
        """The native optimizer ``qualified`` over ``named``'s parameters, built as a
        script builds it (Paddle's takes ``parameters=``)."""
        from unified_opt.native import import_native

        params = [p for _, p in named]
        if self.name == "paddle":
            return import_native(qualified)(parameters=params, **kwargs)
        return import_native(qualified)(params, **kwargs)

    def gradient_sets(self, shapes, rng, sets: int = GRADIENT_SETS) -> list:
        """``sets`` sets of standard normal gradients of ``shapes``."""
        return [self.tensors([rng.standard_normal(s, dtype=np.float32) for s in shapes])
                for _ in range(sets)]

    def tensors(self, arrays: list[np.ndarray]):
        """One gradient set: the framework's tensors of ``arrays`` (MindSpore's a tuple,
        as its optimizers take them)."""
        if self.name == "torch":
            return [self.fw.from_numpy(g) for g in arrays]
        if self.name == "paddle":
            return [self.fw.to_tensor(g) for g in arrays]
        return tuple(self.fw.Tensor(g) for g in arrays)

    def set_grads(self, named, grads) -> None:
        if self.name in ("torch", "paddle"):
            for (_, p), g in zip(named, grads):
                p.grad = g

    def step(self, optimizer, grads) -> None:
        """One step on ``grads``: a :class:`Gradients` (its next set: a few pointer
        assignments, no copy), or the set in place (MindSpore's: the tuple its optimizer
        is called with)."""
        if isinstance(grads, Gradients):
            grads = grads.next()
        if self.name == "mindspore":
            from unified_opt.backends.mindspore.kernels import drain

            optimizer(grads)
            drain()        # MindSpore runs asynchronously
        else:
            optimizer.step()

    def timed_step(self, optimizer, named, grads) -> float:
        """Seconds of one step of ``optimizer`` over ``named``, its gradients ``grads``
        set untimed (MindSpore's queue drained before the clock starts, as ``step``
        drains it before the clock stops: it runs asynchronously)."""
        self.set_grads(named, grads)
        if self.name == "mindspore":
            from unified_opt.backends.mindspore.kernels import drain

            drain()
        start = time.perf_counter()
        self.step(optimizer, grads)
        return time.perf_counter() - start


class Gradients:
    """Gradient sets for ``named``, one per step in turn: each step reads other values
    (``sets`` random draws made up front, so drawing costs no step time)."""

    def __init__(self, harness: Harness, named, kind: str = "random", sets: int = 4):
        if kind not in ("random", "constant"):
            raise ValueError(f"kind {kind!r}")
        self.harness, self.named, self.count = harness, named, 0
        shapes = [tuple(p.shape) for _, p in named]
        self.sets = (harness.gradient_sets(shapes, np.random.default_rng(1), sets)
                     if kind == "random" else
                     [harness.tensors([np.ones(s, np.float32) for s in shapes])])

    def next(self):
        """Install the next set (torch, Paddle: ``.grad``); MindSpore: return it."""
        chosen = self.sets[self.count % len(self.sets)]
        self.count += 1
        self.harness.set_grads(self.named, chosen)
        return chosen if self.harness.name == "mindspore" else None


def interleaved_medians(harness: Harness, runs, repeats: int, warmup: int = 3) -> list[float]:
    """Median step time (ms) of each ``(optimizer, grads)`` in ``runs``, timed in
    interleaved rounds (each round steps every optimizer once, in one order) so that load
    from other processes and cache effects fall on all of them alike."""
    for optimizer, grads in runs:
        for _ in range(warmup):
            harness.step(optimizer, grads)
    times: list[list[float]] = [[] for _ in runs]
    for _ in range(repeats):
        for (optimizer, grads), out in zip(runs, times):
            start = time.perf_counter()
            harness.step(optimizer, grads)
            out.append((time.perf_counter() - start) * 1e3)
    return [statistics.median(t) for t in times]


def compiling() -> bool:
    """Whether a generated kernel is being compiled in the background."""
    return any(t.name == "unified_opt kernel" and t.is_alive() for t in threading.enumerate())


def kernels_loaded() -> int:
    """How many generated kernels this process has loaded."""
    from unified_opt.kernels import runtime

    return len(runtime._kernels)


def interleaved(harness: Harness, runs: list[tuple[Any, list]], grads: list, repeats: int,
                own: tuple[int, ...] = (), warmup: int = WARMUP) -> list[list[float]]:
    """Step times in seconds of each ``(optimizer, named parameters)`` of ``runs``:
    ``warmup`` untimed rounds, untimed steps of the runs in ``own`` (indices) while a
    kernel compiles and ``warmup`` more, then ``repeats`` timed rounds in rotating
    order."""
    k = 0

    def one(optimizer, named) -> float:
        nonlocal k
        k += 1
        return harness.timed_step(optimizer, named, grads[(k - 1) % len(grads)])

    for _ in range(warmup):
        for run in runs:
            one(*run)
    if own:
        waited = time.perf_counter()
        while compiling() and time.perf_counter() - waited < COMPILE_WAIT_S:
            for i in own:
                one(*runs[i])          # the generated kernels land meanwhile
        for _ in range(warmup):
            for i in own:
                one(*runs[i])
    times: list[list[float]] = [[] for _ in runs]
    for r in range(repeats):
        shift = r % len(runs)
        for i in list(range(len(runs)))[shift:] + list(range(len(runs)))[:shift]:
            times[i].append(one(*runs[i]))
    return times


def with_rows_of_others(kept: list[dict], rows: list[dict], backends: str) -> list[dict]:
    """``--update``: the ``kept`` rows of the backends not in ``backends`` (comma
    separated: those measured now), then ``rows``."""
    measured = set(backends.split(","))
    return [r for r in kept if r["backend"] not in measured] + rows


def fastest_and_median_ms(seconds: list[float]) -> tuple[float, float]:
    """(fastest, median) of step times in seconds, in ms rounded to 4 places."""
    return round(min(seconds) * 1e3, 4), round(statistics.median(seconds) * 1e3, 4)


def environment(threads: int | list[int] = 1) -> dict:
    """The machine: CPU model, core count, threads measured on, Python and platform."""
    cpu = cpu_info()[0] or platform.processor() or platform.machine()
    return {"device": "cpu", "cpu": cpu, "cpu_count": os.cpu_count(), "threads": threads,
            "python": platform.python_version(), "platform": platform.platform()}


def versions(extra: tuple[tuple[str, str], ...] = ()) -> dict:
    """Installed versions of the frameworks (and of ``extra``: (name, distribution))."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name, dist in (("torch", "torch"), ("paddle", "paddlepaddle"),
                       ("mindspore", "mindspore")) + extra:
        try:
            out[name] = version(dist)
        except PackageNotFoundError:
            pass
    return out


def load_average() -> str:
    """``/proc/loadavg``'s three averages ("" where unreadable)."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return ""


