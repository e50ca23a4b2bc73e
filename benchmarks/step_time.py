"""Step time of optimizers built by ``uo.build`` against the same native optimizer built
by hand, and of the own-implementation path against the native one.

    python benchmarks/step_time.py [--backends torch,paddle,mindspore] [--repeats 15]
                                   [--update] [--out benchmarks/results]

Each backend runs in its own process (never two frameworks in one). Every step sees
fresh random gradients, as in training (a pool of four random draws, taken in turn:
``harness.Gradients``), so a kernel whose speed depends on the values shows it. Two
parameter sets: "model" (4 x 1024x1024 + 4 x 1024, like a few layers) and "big" (one 4096x4096).
Reports medians in ms and the ratios ``uo/hand`` (the adapter's overhead: 1.0 is
free) and ``own/hand`` (the generic own path against the native kernel) as
``OUT/step_time.json`` and a Markdown table ``OUT/step_time.md``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

from harness import Harness, interleaved_medians, with_rows_of_others  # this folder's

from unified_opt.files import write_text

PARAMETER_SETS = {
    "model": [(1024, 1024)] * 4 + [(1024,)] * 4,
    "big": [(4096, 4096)],
}

# spec registry name, spec kwargs, and per backend the hand-built class and kwargs.
OPTIMIZERS = [
    ("sgd", {"lr": 0.01, "momentum": 0.9}, {
        "torch": ("torch.optim.SGD", {"lr": 0.01, "momentum": 0.9}),
        "paddle": ("paddle.optimizer.Momentum", {"learning_rate": 0.01, "momentum": 0.9}),
        "mindspore": ("mindspore.nn.SGD", {"learning_rate": 0.01, "momentum": 0.9})}),
    ("adam", {"lr": 1e-3}, {
        "torch": ("torch.optim.Adam", {"lr": 1e-3}),
        "paddle": ("paddle.optimizer.Adam", {"learning_rate": 1e-3}),
        "mindspore": ("mindspore.experimental.optim.AdamW", {"lr": 1e-3, "weight_decay": 0.0})}),
    ("adamw", {"lr": 1e-3, "weight_decay": 0.01}, {
        "torch": ("torch.optim.AdamW", {"lr": 1e-3, "weight_decay": 0.01}),
        "paddle": ("paddle.optimizer.AdamW", {"learning_rate": 1e-3, "weight_decay": 0.01}),
        "mindspore": ("mindspore.experimental.optim.AdamW",
                      {"lr": 1e-3, "weight_decay": 0.01})}),
]


def run_backend(backend, repeats):
    import unified_opt as uo

    harness = Harness(backend, threads=0)      # the framework's own thread defaults
    rows = []
    for set_name, shapes in PARAMETER_SETS.items():
        for algorithm, spec_kwargs, hand in OPTIMIZERS:
            spec = uo.get(algorithm, **spec_kwargs)
            row = {"backend": backend, "parameters": set_name, "algorithm": algorithm,
                   "native": hand[backend][0]}
            runs = []
            for variant in ("hand", "uo", "own"):
                named = harness.seeded_params(shapes)
                grads = harness.grads(named)
                if variant == "hand":
                    optimizer = harness.hand_built(*hand[backend], named)
                else:
                    optimizer = uo.build(spec, named, path="auto" if variant == "uo" else "own")
                    if variant == "uo":
                        row["uo_path"] = uo.explain(optimizer).native
                runs.append((optimizer, grads))
            for variant, ms in zip(("hand", "uo", "own"),
                                   interleaved_medians(harness, runs, repeats)):
                row[f"{variant}_ms"] = round(ms, 3)
            del runs
            row["uo_over_hand"] = round(row["uo_ms"] / row["hand_ms"], 3)
            row["own_over_hand"] = round(row["own_ms"] / row["hand_ms"], 3)
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    return rows


def table(rows):
    lines = ["| backend | parameters | algorithm | native | hand ms | uo ms | own ms | uo/hand "
             "| own/hand |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['backend']} | {r['parameters']} | {r['algorithm']} | {r['native']} "
                     f"| {r['hand_ms']} | {r['uo_ms']} | {r['own_ms']} | {r['uo_over_hand']} "
                     f"| {r['own_over_hand']} |")
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="torch,paddle,mindspore")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--update", action="store_true",
                        help="replace only the rows of these backends in OUT/step_time.json")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(run_backend(args.worker, args.repeats)))
        return
    rows = []
    for backend in args.backends.split(","):
        if importlib.util.find_spec(backend) is None:
            print(f"{backend}: not installed, skipped", file=sys.stderr)
            continue
        done = subprocess.run([sys.executable, __file__, "--worker", backend, "--repeats",
                               str(args.repeats)], stdout=subprocess.PIPE, check=True, text=True)
        rows += json.loads(done.stdout.strip().splitlines()[-1])
    out = Path(args.out)
    if args.update:
        rows = with_rows_of_others(json.loads((out / "step_time.json").read_text())["rows"],
                                   rows, args.backends)
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / "step_time.json", json.dumps({"rows": rows}, indent=1))
    write_text(out / "step_time.md", table(rows))
    print(table(rows))


if __name__ == "__main__":
    main()
