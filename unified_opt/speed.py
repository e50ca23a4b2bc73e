"""``prefer="speed"``: the measured speed table and the rule that reads it.

Where a native class computes a spec exactly, ``uo.build`` has two exact paths: that
class, and the own implementation (the spec's update on the kernel VM on the CPU, on
the Triton kernels on CUDA). ``prefer="native"`` always takes the class;
``prefer="speed"`` (the default) takes the own implementation where the table says it
is at least :data:`THRESHOLD` times faster than the class for this framework, device
kind, algorithm and size, and the class everywhere else: a class that is only a little
slower keeps the framework's own checkpoint format and tooling.

The table is data (``unified_opt/speed_table.json``), made by
``benchmarks/speed_table.py`` from the committed benchmark results (the CPU's
``benchmarks/results/native_vs_own.json``, CUDA's ``gpu_step_time.json``); a test checks
that the committed table is what the script makes of them. A row: the backend
(``mindspore-graph``: MindSpore in GRAPH_MODE), the device kind, the algorithm, the
native class, the size class and both step times. Sizes are classes of the build's total
number of elements (:data:`SIZE_CLASSES`); a size class the table has no row for takes
the nearest measured one, and says so.

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
   and where it was measured.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

#: how the build chooses between exact paths (``uo.build(..., prefer=...)``)
PREFERENCES = ("speed", "native")
#: how many times faster the own implementation must be measured to replace a class
THRESHOLD = 1.5
#: size classes of a build's total number of elements: (name, smallest count). "small"
#: runs on the kernel VM only (the generated kernels start at 2**16 elements per tensor:
#: :data:`unified_opt.kernels.runtime.SPECIALIZE_MIN`)
SIZE_CLASSES = (("small", 0), ("medium", 1 << 16), ("large", 1 << 21))
#: the benchmark's parameter set per class: 4 d x d weights and 4 d biases
REPRESENTATIVE = (64, 256, 1024)
#: the class a decision without parameters is made for (``uo.explain(spec)``)
UNSIZED = "large"
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


def describe_class(name: str) -> str:
    """``"the large class (2,097,152 elements or more)"``."""
    names = [n for n, _ in SIZE_CLASSES]
    i = names.index(name)
    low = SIZE_CLASSES[i][1]
    if i + 1 < len(SIZE_CLASSES):
        return f"the {name} class ({low:,} to {SIZE_CLASSES[i + 1][1] - 1:,} elements)"
    return f"the {name} class ({low:,} elements or more)"


@lru_cache(maxsize=1)
def table() -> dict:
    """The committed speed table (``speed_table.json``)."""
    return json.loads(TABLE.read_text())


@dataclass(frozen=True)
class Measured:
    """One row of the table as a decision cites it."""

    backend: str
    device: str
    algorithm: str
    native: str
    size_class: str
    elements: int
    native_ms: float
    own_ms: float
    ratio: float              # native_ms / own_ms: > 1, the own path is faster
    where: str                # the machine and the results file
    nearest: bool = False     # the build's size class has no row; this is the nearest

    def __str__(self) -> str:
        size = f"{self.size_class} size class, {self.elements:,} elements"
        if self.nearest:
            size += ", the nearest measured class"
        return (f"{self.native} {self.native_ms:.3g} ms, own implementation "
                f"{self.own_ms:.3g} ms per step; {self.backend} on {self.device}, {size}; "
                f"measured on {self.where}")


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
           elements: int | None) -> Measured | None:
    """The row for this build, or None where nothing was measured."""
    data = table()
    rows = [r for r in data["rows"] if r["backend"] == backend and r["device"] == device
            and r["algorithm"] == algorithm and r["native"] == native]
    if not rows:
        return None
    wanted = UNSIZED if elements is None else size_class(elements)
    order = [n for n, _ in SIZE_CLASSES]
    row = min(rows, key=lambda r: (abs(order.index(r["size_class"]) - order.index(wanted)),
                                   -order.index(r["size_class"])))
    source = data["sources"][row["source"]]
    return Measured(backend, device, algorithm, native, row["size_class"], row["elements"],
                    row["native_ms"], row["own_ms"], row["native_over_own"],
                    f"{source['machine']}, {source['file']}",
                    nearest=row["size_class"] != wanted)


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
    elements = getattr(context, "elements", None)
    measured = lookup(where, device, algorithm, native, elements)
    if measured is None:
        return Choice("speed", False, f"prefer='speed': no measurement of {native} against "
                      f"the own implementation for {where} on {device} ({algorithm}), so the "
                      "native class")
    measured_text = str(measured)
    if elements is None:
        measured_text += f"; no parameters given: read for {describe_class(UNSIZED)}"
    if measured.ratio < THRESHOLD:
        return Choice("speed", False, f"prefer='speed' keeps {native}: the own "
                      f"implementation is not {THRESHOLD:g}x faster ({measured.ratio:g}x: "
                      f"{measured_text})", measured)
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
                  f"exactly ({measured_text}); prefer='native' builds {native}", measured)

