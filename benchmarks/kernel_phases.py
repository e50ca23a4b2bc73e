"""Where a generated CPU kernel's step goes, phase by phase.

    python benchmarks/kernel_phases.py [--algorithm came] [--shape 512,512,3,3]
                                       [--steps 20] [--threads 1] [--dtype float32]
                                       [--json FILE]

One parameter of ``--shape``, the algorithm's benchmark spec (its record's), the kernel
written with ``codegen.kernel_source(..., clock=True)``: each phase adds the ticks it
takes (``phases.h``'s ``clock_ticks``: the time-stamp counter on x86-64, nanoseconds
elsewhere). A fresh random gradient every step, the state from ``spec.init``, three
warm-up steps, then ``--steps`` timed ones. Prints one row per phase: its axes (B, R, C
of the kernels' (B, R, C) view; a tile run's phases run tile after tile, each tile's
phases in turn), its operations, ticks per parameter element per step and the phase's
share of all phases' ticks, then the median step in ms (the clock's reads cost about
20 cycles a chunk, so the clocked kernel is a little slower than the plain one).

What it is for: the kernels of Adafactor and CAME on a conv weight's rows of 3 spend
their time in a few phases (the ones with a square root and a division, the sums over
rows of 3); this finds which, before and after a change. It reads the kernels' own
modules (``unified_opt.kernels``), as the tests do.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
import time

import numpy as np

from unified_opt.kernels import build
from unified_opt.kernels.bytecode import AXES, DTYPES, SELECT, decode
from unified_opt.kernels.codegen import _NAMES, kernel_source
from unified_opt.kernels.runtime import KernelRunner
from unified_opt.kernels.trace import canonical_dims
from unified_opt.ops import numpy_ops
from unified_opt.records import record_of


def _axes(domain: int) -> str:
    if domain == SELECT:
        return "top-k"
    return " ".join(name[1] for name, bit in sorted(AXES.items(), key=lambda kv: kv[1])
                    if domain & bit) or "scalar"


def _operations(instructions) -> str:
    """The phase's arithmetic, in order, without loads and stores."""
    names = [_NAMES[ins[0]] for ins in instructions]
    return " ".join(n for n in names if n not in ("load", "store", "copy"))


def phase_table(algorithm: str, shape: tuple[int, ...], steps: int = 20, threads: int = 1,
                dtype: str = "float32", seed: int = 0) -> dict:
    """Each phase's ticks per element and share, and the median step (module doc)."""
    if not isinstance(shape, tuple) or not all(isinstance(n, int) and n > 0 for n in shape):
        raise ValueError(f"kernel_phases: shape must be a tuple of positive ints, got {shape!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"kernel_phases: steps must be an int >= 1, got {steps!r}")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"kernel_phases: threads must be an int >= 1, got {threads!r}")
    if dtype not in DTYPES:
        raise ValueError(f"kernel_phases: dtype must be one of {sorted(DTYPES)}, "
                         f"got {dtype!r}")
    spec = record_of(algorithm).benchmark
    if spec is None:
        raise ValueError(f"kernel_phases: algorithm {algorithm!r} has no benchmark spec")
    runner = KernelRunner(specialize=False)
    kernel_shape, code, scalars, _ = runner.program(spec, shape, dtype, spec.lr_at(1), 2)
    decoded = decode(code)
    library = build.load_kernel(kernel_source(code, clock=True))
    library.uo_kernel_phase_ticks.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_int]
    library.uo_kernel_set_threads(threads)
    rng = np.random.default_rng(seed)
    param = rng.standard_normal(shape).astype(dtype)
    state = {k: np.array(v, dtype=dtype, order="C")
             for k, v in spec.init(param, numpy_ops).items()}
    arrays = [param, None] + [state[k] for k in runner.state_order(spec, shape, dtype)]
    dims = np.array(canonical_dims(kernel_shape), dtype=np.int64)
    scalars = np.ascontiguousarray(scalars, dtype=np.float64)
    ticks = (ctypes.c_uint64 * len(decoded.phases))()
    times = []
    for step in range(3 + steps):
        arrays[1] = rng.standard_normal(shape).astype(dtype)
        addresses = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
        if step == 3:
            library.uo_kernel_phase_ticks(ticks, len(ticks))     # the warm-up's cleared
        start = time.perf_counter()
        code_returned = library.uo_kernel_run(DTYPES[dtype], addresses,
                                              dims.ctypes.data, scalars.ctypes.data)
        if step >= 3:
            times.append(time.perf_counter() - start)
        if code_returned != 0:
            raise RuntimeError(f"kernel_phases: the kernel returned {code_returned}")
    library.uo_kernel_phase_ticks(ticks, len(ticks))
    elements = int(np.prod(shape))
    total = sum(ticks) or 1
    runs = {first + k: first for first, count in decoded.tiles for k in range(count)}
    rows = [{"phase": number,
             "tile_run": runs.get(number),
             "axes": _axes(domain),
             "operations": _operations(instructions),
             "ticks_per_element": ticks[number] / steps / elements,
             "share": ticks[number] / total}
            for number, (domain, instructions) in enumerate(decoded.phases)]
    return {"algorithm": algorithm, "spec": repr(spec), "shape": list(shape),
            "dtype": dtype, "threads": threads, "steps": steps,
            "median_step_ms": 1e3 * statistics.median(times), "phases": rows}


def markdown(table: dict) -> str:
    lines = [f"{table['algorithm']} {tuple(table['shape'])} {table['dtype']}, "
             f"{table['threads']} thread(s), {table['steps']} steps: median step "
             f"{table['median_step_ms']:.3f} ms", "",
             "| phase | tile run | axes | ticks / element | share | operations |",
             "|---|---|---|---|---|---|"]
    for row in table["phases"]:
        run = "" if row["tile_run"] is None else f"from {row['tile_run']}"
        lines.append(f"| {row['phase']} | {run} | {row['axes']} | "
                     f"{row['ticks_per_element']:.3f} | {100 * row['share']:.1f} % | "
                     f"{row['operations']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--algorithm", default="came")
    parser.add_argument("--shape", default="512,512,3,3")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--json", default=None, help="also write the table here")
    args = parser.parse_args(argv)
    try:
        shape = tuple(int(n) for n in args.shape.split(","))
    except ValueError:
        parser.error(f"--shape: comma-separated ints, got {args.shape!r}")
    table = phase_table(args.algorithm, shape, args.steps, args.threads, args.dtype)
    print(markdown(table))
    if args.json:
        from unified_opt.files import write_text
        write_text(args.json, json.dumps(table, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
