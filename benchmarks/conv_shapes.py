"""The own CPU path on a conv weight against the same elements as a matrix.

    python benchmarks/conv_shapes.py [--frameworks torch,paddle,mindspore] [--steps 12]
                                     [--out benchmarks/results]

One tensor of 2,359,296 elements stepped as a conv weight (512, 512, 3, 3) and as the
matrix (512, 4608), one thread, fresh random gradients every step, the two shapes
interleaved in one process (each framework in its own process: paddle and mindspore do
not share one). The own path runs on the kernels (``compile=True``: every program
compiled before the first step, so no step waits on a build). A row's ``ms`` is the
fastest step of each shape after two warm-up steps (on a shared machine the fastest is
the update's own cost; another process's time slice lands in a step now and then),
``median_ms`` the median, and ``conv_over_matrix`` the ratio of the fastest steps. The
target is at most 1.2 for every update that is elementwise but for whole-tensor sums
(the kernels run those as 1-D). Adafactor and CAME factor their second moment over the
last two axes, as their spec defines, so a conv weight's moments are per 3x3 kernel and
the two shapes are different math: their rows also give ``conv_over_adamw``, the conv
step against own AdamW's on the same conv tensor in the same run (the kernels walk
several rows of 3 per chunk, so that the rows' count does not set the cost).

Writes ``conv_shapes.json`` and ``conv_shapes.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONV, MATRIX = (512, 512, 3, 3), (512, 4608)
#: registry name -> constructor keywords
SPECS = {"adamw": {"lr": 1e-3, "weight_decay": 0.01}, "lion": {"lr": 1e-4},
         "lamb": {"lr": 1e-3, "weight_decay": 0.01}, "lars": {"lr": 0.1},
         "adafactor": {"lr": 1e-2}, "came": {"lr": 1e-3}}
#: the updates whose conv/matrix ratio has a target (run as 1-D)
TARGET = 1.2
RANK_BLIND = ("adamw", "lion", "lamb", "lars")

_CHILD = r"""
import json, statistics, sys, time
import numpy as np
framework, steps = sys.argv[1], int(sys.argv[2])
shapes = [tuple(s) for s in json.loads(sys.argv[3])]
specs = json.loads(sys.argv[4])
import unified_opt as uo
if framework == "torch":
    import torch
    torch.set_num_threads(1)
    def parameter(shape):
        return torch.nn.Parameter(torch.zeros(shape))
    def set_grad(p, g):
        p.grad = torch.from_numpy(g)
elif framework == "paddle":
    import paddle
    def parameter(shape):
        return paddle.create_parameter(list(shape), "float32")
    def set_grad(p, g):
        p._set_grad_ivar(paddle.to_tensor(g))
else:
    import mindspore as ms
    ms.set_context(mode=ms.PYNATIVE_MODE, runtime_num_threads=1)   # one thread, as the others
    def parameter(shape):
        return ms.Parameter(ms.Tensor(np.zeros(shape, np.float32)), name="w")
rows = []
rng = np.random.default_rng(0)
for name, kwargs in specs.items():
    spec = uo.get(name, **kwargs)
    built = {}
    for shape in shapes:
        p = parameter(shape)
        built[shape] = (p, uo.build(spec, [p], path="own", options={"compile": True}))
    times = {shape: [] for shape in shapes}
    for step in range(steps):
        for shape in shapes:                      # interleaved
            p, opt = built[shape]
            g = rng.standard_normal(shape, dtype=np.float32)
            if framework == "mindspore":
                grads = (ms.Tensor(g),)
                start = time.perf_counter()
                opt(grads)
            else:
                set_grad(p, g)
                start = time.perf_counter()
                opt.step()
            times[shape].append(time.perf_counter() - start)
    rows.append({"framework": framework, "algorithm": name,
                 "ms": {"x".join(map(str, s)): 1e3 * min(t[2:]) for s, t in times.items()},
                 "median_ms": {"x".join(map(str, s)): 1e3 * statistics.median(t[2:])
                               for s, t in times.items()}})
print(json.dumps(rows))
"""


def _run(framework: str, steps: int, specs: dict) -> list[dict]:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", _CHILD, framework, str(steps),
                           json.dumps([CONV, MATRIX]), json.dumps(specs)],
                          capture_output=True, text=True, env=env, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"{framework}: {done.stderr[-3000:]}")
    rows = json.loads(done.stdout.strip().splitlines()[-1])
    conv, matrix = "x".join(map(str, CONV)), "x".join(map(str, MATRIX))
    for row in rows:
        row["conv_over_matrix"] = round(row["ms"][conv] / row["ms"][matrix], 3)
        row["target"] = TARGET if row["algorithm"] in RANK_BLIND else None
    adamw = [r for r in rows if r["algorithm"] == "adamw"]
    for row in rows:
        if adamw and row["algorithm"] not in RANK_BLIND:
            row["conv_over_adamw"] = round(row["ms"][conv] / adamw[0]["ms"][conv], 3)
    return rows


def markdown(result: dict) -> str:
    lines = ["# The own CPU path: a conv weight against the same elements as a matrix", "",
             f"Generated by `benchmarks/conv_shapes.py` on {result['machine']}, one "
             f"thread, the fastest of {result['steps'] - 2} steps after 2 warm-up steps "
             "(medians in the JSON). "
             f"Conv {list(CONV)} against matrix {list(MATRIX)}; target "
             f"<= {TARGET} for the updates run as 1-D.", "",
             "| framework | algorithm | conv ms | matrix ms | conv / matrix | target "
             "| conv / AdamW conv |",
             "|---|---|---|---|---|---|---|"]
    conv, matrix = "x".join(map(str, CONV)), "x".join(map(str, MATRIX))
    for row in result["rows"]:
        target = "" if row["target"] is None else f"<= {row['target']}"
        lines.append(f"| {row['framework']} | {row['algorithm']} | {row['ms'][conv]:.2f} | "
                     f"{row['ms'][matrix]:.2f} | {row['conv_over_matrix']:.2f} | {target} | "
                     f"{row.get('conv_over_adamw', '')} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", default="torch,paddle,mindspore")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--algorithms", default=",".join(SPECS),
                        help="registry names among " + ", ".join(SPECS))
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    if args.steps < 3:
        parser.error(f"--steps must be at least 3, got {args.steps}")
    names = args.algorithms.split(",")
    unknown = [n for n in names if n not in SPECS]
    if unknown:
        parser.error(f"--algorithms: {unknown} not among {list(SPECS)}")
    rows = []
    for framework in args.frameworks.split(","):
        rows += _run(framework, args.steps, {n: SPECS[n] for n in names})
        print(f"{framework}: done", flush=True)
    result = {"machine": f"{platform.processor() or platform.machine()}, "
                         f"{os.cpu_count()} cores",
              "created": time.strftime("%Y-%m-%d"), "steps": args.steps, "rows": rows}
    from unified_opt.files import write_text

    args.out.mkdir(parents=True, exist_ok=True)
    write_text(args.out / "conv_shapes.json", json.dumps(result, indent=1) + "\n")
    write_text(args.out / "conv_shapes.md", markdown(result))
    print(markdown(result))
    missed = [r for r in rows if r["target"] is not None and r["conv_over_matrix"] > TARGET]
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
