"""Peak memory of Paddle's own-path AdamW against ``paddle.optimizer.AdamW`` (issue 41,
point 8b).

    python benchmarks/paddle_own_memory.py [--elements 50000000] [--steps 3]
                                           [--out benchmarks/results]

One float32 parameter of ``--elements`` elements on the CPU, its gradient a constant
tensor made once. Each row runs in a process of its own (one framework per process;
the peak resident size is the process's): the parameter and gradient are made, the
optimizer built, one step taken, then ``--steps`` more. Rows:

* native: ``paddle.optimizer.AdamW(learning_rate=1e-3, weight_decay=0.01)``;
* own: ``uo.build(uo.AdamW(lr=1e-3, weight_decay=0.01), [w], path="own")``, the default
  engine on the CPU (the kernel VM, in place over the parameter's and accumulators'
  memory);
* own eager: the same with ``options={"compile": False}``: the spec's update one Paddle
  operation at a time (what a parameter off the CPU runs), which makes its temporaries
  by the update contract (the spec returns new arrays).

Figures (MiB, from ``/proc/self/status``): "peak" is the run's peak resident size (the
highest ``VmHWM`` of the three parts below, each measured from a reset of it:
``/proc/self/clear_refs`` 5); "build rise" how far the peak rose above the resident size
before the build while building, "first step rise" above the size before the first step
while it ran (Paddle's own class makes its accumulators there), "later steps rise" above
the size after the first step while the later steps ran. Nothing reads a value back
(indexing a Paddle tensor copies all of it: measured, a 191 MiB rise for ``w[0]``).
Writes ``OUT/paddle_own_memory.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
from pathlib import Path

from peak_memory import reset_peak, status_mib  # this folder's

ROWS = {
    "native": "paddle.optimizer.AdamW",
    "own": 'uo.build(..., path="own") (kernel VM)',
    "own eager": 'uo.build(..., path="own", options={"compile": False})',
}


def measure(row: str, elements: int, steps: int) -> dict:
    """In this process: build ``row``'s optimizer over one parameter and step it."""
    import paddle

    import unified_opt as uo

    w = paddle.create_parameter([elements], "float32",
                                default_initializer=paddle.nn.initializer.Constant(1.0))
    grad = paddle.full([elements], 0.5, dtype="float32")
    before_build = status_mib("VmRSS")
    reset_peak()
    if row == "native":
        optimizer = paddle.optimizer.AdamW(learning_rate=1e-3, parameters=[w],
                                           weight_decay=0.01)
    else:
        options = {"compile": False} if row == "own eager" else {}
        optimizer = uo.build(uo.AdamW(lr=1e-3, weight_decay=0.01), [w], path="own",
                             options=options)
    peaks = [status_mib("VmHWM")]
    build_rise = peaks[-1] - before_build
    address = w.data_ptr()
    w.grad = grad       # Paddle keeps a copy: resident before the first step
    before_first = status_mib("VmRSS")
    reset_peak()
    optimizer.step()
    peaks.append(status_mib("VmHWM"))
    first_rise = peaks[-1] - before_first
    after_first = status_mib("VmRSS")
    reset_peak()
    for _ in range(steps):
        w.grad = grad
        optimizer.step()
    peaks.append(status_mib("VmHWM"))
    step_rise = peaks[-1] - after_first
    # each reset starts VmHWM again: the run's peak is the highest of the three
    return {"peak_mib": round(max(peaks), 1), "build_rise_mib": round(build_rise, 1),
            "first_step_rise_mib": round(first_rise, 1), "step_rise_mib": round(step_rise, 1),
            "resident_mib": round(status_mib("VmRSS"), 1),
            "parameter_in_place": w.data_ptr() == address}


def _run(row: str, elements: int, steps: int) -> dict:
    """``row`` in a process of its own: its figures and its whole-run peak."""
    out = subprocess.run([sys.executable, __file__, "--measure", row, "--elements",
                          str(elements), "--steps", str(steps)],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"{row}: exit {out.returncode}\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--elements", type=int, default=50_000_000)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.elements < 1 or args.steps < 1:
        raise SystemExit(f"--elements and --steps must be >= 1, got {args.elements} and "
                         f"{args.steps}")
    if args.measure is not None:
        print(json.dumps(measure(args.measure, args.elements, args.steps)))
        return

    import paddle

    from unified_opt.files import write_text

    rows = {row: _run(row, args.elements, args.steps) for row in ROWS}
    result = {"elements": args.elements, "dtype": "float32", "steps": 1 + args.steps,
              "data_mib": round(args.elements * 4 / 2 ** 20, 1),
              "paddle": paddle.__version__, "machine": platform.machine(),
              "rows": rows}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "paddle_own_memory.json", json.dumps(result, indent=2) + "\n")
    lines = [
        "# Paddle own-path AdamW memory",
        "",
        f"One float32 parameter of {args.elements:,} elements ({result['data_mib']} MiB) "
        f"on the CPU, Paddle {paddle.__version__}, {1 + args.steps} steps; each row in a "
        "process of its own. Written by `benchmarks/paddle_own_memory.py` (its docstring "
        "defines the columns). MiB.",
        "",
        "| row | peak (VmHWM) | build rise | first step rise | later steps rise | "
        "resident after | parameter in place |",
        "|---|---|---|---|---|---|---|",
    ]
    for row, f in rows.items():
        lines.append(f"| {row}: {ROWS[row]} | {f['peak_mib']} | {f['build_rise_mib']} | "
                     f"{f['first_step_rise_mib']} | {f['step_rise_mib']} | {f['resident_mib']} | "
                     f"{'yes' if f['parameter_in_place'] else 'no'} |")
    write_text(out / "paddle_own_memory.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
