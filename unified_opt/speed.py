"""``prefer="speed"``: the measured speed table and the rule that reads it.

Where a native class computes a spec exactly, ``uo.build`` has two exact paths: that
class, and the own implementation (the spec's update on the kernel VM on the CPU, on
the Triton kernels on CUDA). ``prefer="native"`` always takes the class;
``prefer="speed"`` (the default) takes the own implementation where the table says it
is at least :data:`THRESHOLD` times faster than the class, for this framework, device
kind, algorithm, thread count and the measured parameter set nearest the build's, and
the class everywhere else. With :data:`THRESHOLD` at 1.1, the path taken is never more
than 10 % slower than the other on the set its row measured: the own path where the
class is 1.1 times slower or more, the class where the own path is not that much
faster (a class within 10 % keeps the framework's own checkpoint format and tooling).

The table is data (``unified_opt/speed_table.json``), made by
``benchmarks/speed_table.py`` from the committed benchmark results (the CPU's
``benchmarks/results/realistic_sets.json``, CUDA's ``gpu_step_time.json``); a test checks
that the committed table is what the script makes of them, and that on every measured
set the default is within 10 % of the faster path. A row: the backend
(``mindspore-graph``: MindSpore in GRAPH_MODE), the device kind, the threads (CPU rows),
the algorithm, the native class, the measured set and its :class:`SetModel`, and both
step times.

A parameter set's model (:class:`SetModel`): its element count, its tensor count, the
share of its elements in tensors of three or more dimensions (conv weights) and the
share in tensors of at most one (biases, norms). Step time follows all four: per-tensor
overhead dominates many small tensors, and a path may walk a conv weight slower than a
matrix of the same elements (``benchmarks/results/realistic_sets.md`` has the measured
figures: a class faster on one set can be slower on another). The row read is
the measured set nearest the build's model by :meth:`SetModel.distance`: the sum of the
absolute differences of log10 elements, of log10 tensors, of conv shares and of 1-D
shares (a decade of elements or of tensors weighs as much as going
from no conv weights to only conv weights). The measured CPU sets: GPT-2-like (76
tensors, 23.2 M elements), ResNet-18 (62 tensors, 11.7 M, 96 % conv weights), one
4096 x 4096 tensor and a 64-wide MLP (8 tensors, 16,640 elements); CUDA: GPT-2 small.
Threads: among the nearest set's rows, the measured count nearest :func:`threads`
(what the kernels run on), the fewer on a tie. A decision without parameters
(``uo.explain(spec)``) reads the largest measured set, and says so.

The rule, in order (each step that keeps the class says why in the decision):

1. no row for this backend, device kind, algorithm and class: the class (nothing was
   measured);
2. the row's ``native_ms / own_ms`` below :data:`THRESHOLD`: the class;
3. what the measurement does not cover keeps the class: native implementation options
   given (``options={"foreach": ...}``), an own engine other than the measured one
   (``compile=False`` or ``"inductor"``), dtypes other than float32 / float64 (the
   kernels' dtypes), DTensor parameters (their update runs eagerly), parameters on
   several devices;
4. the own path's fast engine not available here (no kernel VM: no C++ compiler; no
   Triton on CUDA): the table does not apply, the class;
5. else the own implementation, its decision naming the class it replaces, the ratio
   and the measured row (set, model, threads, where).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

#: how the build chooses between exact paths (``uo.build(..., prefer=...)``)
PREFERENCES = ("speed", "native")
#: how many times faster the own implementation must be measured to replace a class
#: (at most 1.1: the path taken is never more than 10 % slower than the other)
THRESHOLD = 1.1
#: size classes of a build's total number of elements: (name, smallest count), what
#: ``benchmarks/native_vs_own.py`` measures (its d x d sets); decisions read set models
SIZE_CLASSES = (("small", 0), ("medium", 1 << 16), ("large", 1 << 21))
#: native_vs_own.py's parameter set per class: 4 d x d weights and 4 d biases
REPRESENTATIVE = (64, 256, 1024)
TABLE = Path(__file__).with_name("speed_table.json")


def check_prefer(prefer: Any, caller: str) -> str:
    """``prefer`` checked: a TypeError or ValueError naming it."""
    if not isinstance(prefer, str):
        raise TypeError(f"{caller}: prefer must be a str, one of {PREFERENCES}; got "
                        f"{prefer!r} of type {type(prefer).__name__}")
    if prefer not in PREFERENCES:
        raise ValueError(f"{caller}: prefer must be one of {PREFERENCES}, got {prefer!r}")
    return prefer


def size_class(elements: int) -> str:
    """The size class of a build of ``elements`` elements in all."""
    name = SIZE_CLASSES[0][0]
    for candidate, low in SIZE_CLASSES:
        if elements >= low:
            name = candidate
    return name


@dataclass(frozen=True)
class SetModel:
    """What the speed of a step over a parameter set follows: its ``elements`` and
    ``tensors``, ``conv_share`` (the share of its elements in tensors of three or more
    dimensions: conv weights) and ``vector_share`` (the share in tensors of at most one
    dimension: biases, norm weights).

    Example:
        >>> SetModel.of([(64, 3, 7, 7), (64,), (64,)]).tensors
        3
    """

    elements: int
    tensors: int
    conv_share: float
    vector_share: float

    @classmethod
    def of(cls, shapes: Any) -> "SetModel":
        """The model of parameters of ``shapes`` (each a sequence of ints).

        Args:
            shapes: the parameters' shapes.

        Returns:
            Their :class:`SetModel` (shares 0 when there are no elements).
        """
        sizes = []
        for shape in shapes:
            count = 1
            for n in tuple(shape):
                count *= int(n)
            sizes.append((count, len(tuple(shape))))
        total = sum(c for c, _ in sizes)
        conv = sum(c for c, rank in sizes if rank >= 3)
        vector = sum(c for c, rank in sizes if rank <= 1)
        return cls(total, len(sizes), conv / total if total else 0.0,
                   vector / total if total else 0.0)

    @classmethod
    def from_dict(cls, data: dict) -> "SetModel":
        return cls(int(data["elements"]), int(data["tensors"]), float(data["conv_share"]),
                   float(data["vector_share"]))

    def to_dict(self) -> dict:
        return {"elements": self.elements, "tensors": self.tensors,
                "conv_share": round(self.conv_share, 4),
                "vector_share": round(self.vector_share, 4)}

    def distance(self, other: "SetModel") -> float:
        """The sum of the absolute differences of log10 elements, of log10 tensors, of
        conv shares and of 1-D shares (counts below 1 read as 1)."""
        return (abs(math.log10(max(self.elements, 1)) - math.log10(max(other.elements, 1)))
                + abs(math.log10(max(self.tensors, 1)) - math.log10(max(other.tensors, 1)))
                + abs(self.conv_share - other.conv_share)
                + abs(self.vector_share - other.vector_share))

    def __str__(self) -> str:
        return (f"{self.tensors} tensors, {self.elements:,} elements, "
                f"{self.conv_share:.0%} in conv weights, {self.vector_share:.1%} in 1-D "
                "tensors")


def threads() -> int:
    """The threads a CPU step runs on, as the own kernels count them: ``OMP_NUM_THREADS``
    where it is set to a positive number (Paddle sets it to 1 when imported), else the
    CPU count."""
    try:
        value = int(os.environ.get("OMP_NUM_THREADS", ""))
    except ValueError:
        value = 0
    return value if value > 0 else (os.cpu_count() or 1)


@lru_cache(maxsize=1)
def table() -> dict:
    """The committed speed table (``speed_table.json``)."""
    return json.loads(TABLE.read_text())


@dataclass(frozen=True)
class Measured:
    """One row of the table as a decision cites it: ``set`` and ``model``, the measured
    parameter set; ``wanted``, the build's model (None: no parameters given, or only
    ``wanted_elements``) and ``distance`` between the two; ``threads``, the measured
    thread count (None on CUDA)."""

    backend: str
    device: str
    algorithm: str
    native: str
    set: str
    model: SetModel
    native_ms: float
    own_ms: float
    ratio: float              # native_ms / own_ms: > 1, the own path is faster
    where: str                # the machine and the results file
    threads: int | None = None
    wanted: SetModel | None = None
    distance: float = 0.0
    wanted_elements: int | None = None      # a build known by its element count only

    @property
    def elements(self) -> int:
        return self.model.elements

    def __str__(self) -> str:
        on = f"{self.backend} on {self.device}" + (
            f", {self.threads} thread{'s' * (self.threads != 1)}" if self.threads else "")
        text = (f"{self.native} {self.native_ms:.3g} ms, own implementation "
                f"{self.own_ms:.3g} ms per step; {on}, the {self.set} set ({self.model})")
        if self.wanted is None and self.wanted_elements is not None:
            text += (f", the measured set nearest {self.wanted_elements:,} elements "
                     f"(distance {self.distance:.2f})")
        elif self.wanted is None:
            text += ", the largest measured set: no parameters given"
        else:
            text += (f", the measured set nearest this build's ({self.wanted}; distance "
                     f"{self.distance:.2f})")
        return text + f"; measured on {self.where}"


@dataclass(frozen=True)
class Choice:
    """What ``prefer`` decided for a spec a native class computes exactly."""

    prefer: str
    own: bool                       # True: the own implementation replaces the class
    text: str                       # why, in words
    measured: Measured | None = None


def device_kind(device: str) -> str:
    """A framework's device name as the table's kind: "cpu", "cuda", "gpu", "npu"...
    (torch "cuda", Paddle "gpu:0", MindSpore "GPU" / "Ascend")."""
    kind = device.split(":")[0].strip().lower()
    return {"ascend": "npu"}.get(kind, kind)


def table_backend(backend: str) -> str:
    """The table's backend: MindSpore in GRAPH_MODE is "mindspore-graph" (read where
    mindspore is imported already: a build over its parameters)."""
    if backend == "mindspore" and "mindspore" in sys.modules:
        ms = sys.modules["mindspore"]
        try:
            if ms.get_context("mode") == ms.GRAPH_MODE:
                return "mindspore-graph"
        except Exception:           # a partly imported mindspore: PyNative, its default
            pass
    return backend


def lookup(backend: str, device: str, algorithm: str, native: str,
           elements: int | None = None, *, model: SetModel | None = None,
           thread_count: int | None = None) -> Measured | None:
    """The row for a build over parameters of ``model``, or None where nothing was
    measured.

    ``model`` None and ``elements`` given: a build known by its element count only, the
    measured set nearest in log10 elements; both None: no parameters, the largest
    measured set. ``thread_count`` (None: :func:`threads`) picks among the CPU rows'
    thread counts (see the module for the nearest set and threads)."""
    data = table()
    rows = [r for r in data["rows"] if r["backend"] == backend and r["device"] == device
            and r["algorithm"] == algorithm and r["native"] == native]
    if not rows:
        return None
    models = [(r, SetModel.from_dict(r["model"])) for r in rows]
    if model is not None:
        row, found = min(models, key=lambda pair: (model.distance(pair[1]), pair[0]["set"]))
        distance = model.distance(found)
    elif elements is not None:
        def apart(other: SetModel) -> float:
            return abs(math.log10(max(elements, 1)) - math.log10(max(other.elements, 1)))

        row, found = min(models, key=lambda pair: (apart(pair[1]), pair[0]["set"]))
        distance = apart(found)
    else:
        row, found = max(models, key=lambda pair: pair[1].elements)
        distance = 0.0
    # then, among that set's rows, the thread count nearest this process's
    counts = sorted({r["threads"] for r in rows if r["set"] == row["set"] and r.get("threads")})
    if counts:
        wanted_threads = threads() if thread_count is None else thread_count
        nearest = min(counts, key=lambda n: (abs(n - wanted_threads), n))
        row = next(r for r in rows if r["set"] == row["set"] and r.get("threads") == nearest)
    source = data["sources"][row["source"]]
    return Measured(backend, device, algorithm, native, row["set"], found, row["native_ms"],
                    row["own_ms"], row["native_over_own"],
                    f"{source['machine']}, {source['file']}", row.get("threads"), model,
                    distance, elements if model is None else None)


def fast_engine(device: str) -> str:
    """Why the own path's fast engine cannot run on ``device`` here ("" when it can):
    the kernel VM on the CPU (built on first use), the Triton kernels on CUDA."""
    if device == "cpu":
        from .kernels import build

        try:
            build.load()
        except build.KernelUnavailable as error:
            return f"the kernel VM is not available here ({error})"
        return ""
    if device == "cuda":
        if importlib.util.find_spec("triton") is None:
            return "Triton is not installed (the own path's CUDA kernels are Triton's)"
        return ""
    return f"the own path has no fast engine measured on {device}"


def uncovered(context: Any, backend: str) -> str:
    """What of the build the measurement does not cover ("" when nothing)."""
    if context.options:
        return (f"options {sorted(context.options)} are the native class's implementation "
                "flags")
    if context.own_compile is not None and context.own_compile not in ("auto", True):
        return (f"options compile={context.own_compile!r} is not the own engine the table "
                "measured (the kernels: compile='auto' or True)")
    odd = sorted(set(context.dtypes) - {"float32", "float64"})
    if odd:
        return (f"parameters of dtype {', '.join(odd)} (the table measured float32 "
                "parameters)")
    if context.sharded:
        return f"DTensor parameters {list(context.sharded)} (their own update runs eagerly)"
    if getattr(context, "process_group", None) is not None:
        return "a process group (the table measured one process)"
    return ""


def choose(backend: str, algorithm: str, native: str, context: Any) -> Choice:
    """``prefer="speed"`` for a spec ``native`` computes exactly (see the module)."""
    if "," in context.device:
        return Choice("speed", False, f"prefer='speed' keeps {native}: the table does not "
                      f"cover parameters on several devices ({context.device})")
    device = device_kind(context.device)
    where = table_backend(backend)
    # a context without shapes but with an element count (a caller that knows the size
    # only) reads the set nearest in elements
    shapes = getattr(context, "shapes", None)
    measured = lookup(where, device, algorithm, native, getattr(context, "elements", None),
                      model=None if shapes is None else SetModel.of(shapes))
    if measured is None:
        return Choice("speed", False, f"prefer='speed': no measurement of {native} against "
                      f"the own implementation for {where} on {device} ({algorithm}), so the "
                      "native class")
    if measured.ratio < THRESHOLD:
        return Choice("speed", False, f"prefer='speed' keeps {native}: the own "
                      f"implementation is not {THRESHOLD:g}x faster ({measured.ratio:g}x: "
                      f"{measured})", measured)
    missing = uncovered(context, backend)
    if missing:
        return Choice("speed", False, f"prefer='speed' keeps {native}: the table (own "
                      f"implementation {measured.ratio:g}x faster) does not cover {missing}",
                      measured)
    engine = fast_engine(device)
    if engine:
        return Choice("speed", False, f"prefer='speed' keeps {native}: {engine}, so the "
                      f"table (own implementation {measured.ratio:g}x faster) does not "
                      "apply", measured)
    return Choice("speed", True, f"prefer='speed': the own implementation is "
                  f"{measured.ratio:g}x faster than {native}, which also computes this spec "
                  f"exactly ({measured}); prefer='native' builds {native}", measured)
