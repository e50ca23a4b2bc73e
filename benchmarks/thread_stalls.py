"""Own-path step times at one and two threads on a ResNet-18-shaped parameter set: do
the kernels' threads stall on a shared machine?

    python benchmarks/thread_stalls.py [--frameworks torch,paddle,mindspore]
                                       [--threads 1,2] [--steps 40]
                                       [--variant NAME:KEY=VALUE,...] [--label TEXT]
                                       [--out benchmarks/results]

One process per framework and thread count (one framework per process; the thread count
set the framework's way, by ``harness.Harness``: ``torch.set_num_threads``, Paddle's
``set_num_threads`` and ``OMP_NUM_THREADS`` before it is imported, MindSpore's
``runtime_num_threads``, which the own path's kernels follow, and
``device_context.cpu.op_tuning.threads_num``, which MindSpore's own kernels follow).
Each process builds, over copies of one parameter set, own AdamW and own CAME
(``path="own"``, ``compile="auto"``: the kernel VM, then each program's generated
kernel: the untimed steps wait for them to land) and the framework's native AdamW class
as the reference. The rows step in interleaved rounds, each round
with a fresh random gradient (drawn untimed), ``--steps`` rounds after 5 untimed ones.
Per row: minimum, median, p90 and maximum step ms, and median / minimum. The machine's
load average is recorded before and after each process; ``--variant`` adds runs under
extra environment variables (``passive:OMP_WAIT_POLICY=passive``), which is how the
cause was looked for.

The set (ResNet-18's parameters, torchvision's layout): 20 conv weights (one 7x7 stem,
3x3 blocks, three 1x1 downsamples), 20 BatchNorm weights and 20 biases, the classifier's
weight and bias: 62 tensors, 11,689,512 elements.

Writes ``OUT/thread_stalls.json`` and ``.md``; an existing JSON's runs are kept under
other labels (``--label`` names this run's, e.g. "after, load 3"), so before and after
sit in one file.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from harness import Harness, compiling  # this folder's
from realistic_sets import resnet18_shapes

from unified_opt.files import write_text

WARMUP = 5
#: the most seconds the untimed steps wait for the generated kernels to land
COMPILE_WAIT_S = 300.0
FRAMEWORKS = ("torch", "paddle", "mindspore")
NATIVE = {"torch": "torch.optim.AdamW", "paddle": "paddle.optimizer.AdamW",
          "mindspore": "mindspore.nn.AdamWeightDecay"}


def kernel_threads() -> int | None:
    """The thread count the VM's parallel phases ran on (None before the kernels read
    the framework's setting)."""
    from unified_opt.kernels import build, runtime

    reader = getattr(runtime, "threads_in_use", None)
    return reader(build.load()) if reader else None


def summary(times: list[float]) -> dict:
    ms = sorted(t * 1e3 for t in times)
    median = statistics.median(ms)
    return {"min_ms": round(ms[0], 3), "median_ms": round(median, 3),
            "p90_ms": round(ms[int(0.9 * (len(ms) - 1))], 3), "max_ms": round(ms[-1], 3),
            "median_over_min": round(median / ms[0], 3)}


def measure(name: str, threads: int, steps: int, rows: set) -> dict:
    """In this process: the rows of framework ``name`` at ``threads`` threads."""
    harness = Harness(name, threads)
    import unified_opt as uo

    shapes = resnet18_shapes()
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s, dtype=np.float32) * 0.05 for s in shapes]
    specs = {"own AdamW": (uo.AdamW(lr=1e-3, weight_decay=0.01), "own"),
             "own CAME": (uo.CAME(lr=1e-4), "own"),
             f"native {NATIVE[name]}": (uo.preset(NATIVE[name]), "native")}
    specs = {label: v for label, v in specs.items()
             if label.split()[0] == "native" or label.split()[1].lower() in rows}
    runs = {}
    for label, (spec, path) in specs.items():
        named = harness.params(arrays)
        runs[label] = (uo.build(spec, named, path=path), named)
    times: dict[str, list[float]] = {label: [] for label in runs}
    waited = time.perf_counter()
    round_ = 0
    waiting = False
    while True:
        grads = harness.tensors([rng.standard_normal(s, dtype=np.float32) for s in shapes])
        labels = list(runs) if round_ % 2 == 0 else list(runs)[::-1]
        for label in labels:
            seconds = harness.timed_step(*runs[label], grads)
            if round_ >= WARMUP and not waiting:
                times[label].append(seconds)
        waiting = compiling() and time.perf_counter() - waited < COMPILE_WAIT_S
        if waiting:
            round_ = 0
        round_ += 1
        if round_ >= WARMUP + steps:
            break
    from unified_opt.kernels import runtime

    return {"framework": name, "threads": threads, "steps": steps,
            "kernel_threads": kernel_threads(),
            "generated_kernels": len(runtime._kernels),
            "rows": {label: summary(t) for label, t in times.items()}}


def first_steps(name: str, row: str, steps: int) -> dict:
    """In this process (a cold kernel cache: ``UNIFIED_OPT_CACHE`` an empty folder): each
    of the first ``steps`` steps of own ``row`` ("adamw" or "came") alone, at the
    framework's default threads, then steps until every generated kernel has landed and
    10 more: their median is the warm step."""
    harness = Harness(name, 0)
    import unified_opt as uo
    from unified_opt.kernels import runtime

    spec = uo.AdamW(lr=1e-3, weight_decay=0.01) if row == "adamw" else uo.CAME(lr=1e-4)
    shapes = resnet18_shapes()
    rng = np.random.default_rng(0)
    named = harness.params([rng.standard_normal(s, dtype=np.float32) * 0.05
                            for s in shapes])
    start = time.perf_counter()
    optimizer = uo.build(spec, named, path="own")
    build_s = time.perf_counter() - start
    times, landed = [], []
    while True:
        grads = harness.tensors([rng.standard_normal(s, dtype=np.float32) for s in shapes])
        times.append(harness.timed_step(optimizer, named, grads))
        landed.append(len(runtime._kernels))
        if len(times) >= steps and not compiling():
            break
        if time.perf_counter() - start > COMPILE_WAIT_S:
            break
    # the first step that ran with every kernel the process ended with
    all_landed_step = landed.index(max(landed)) + 1 if landed else 0
    for _ in range(10):
        grads = harness.tensors([rng.standard_normal(s, dtype=np.float32) for s in shapes])
        times.append(harness.timed_step(optimizer, named, grads))
    warm = statistics.median(times[-10:])
    first = times[:steps]
    return {"framework": name, "row": row, "build_s": round(build_s, 3),
            "first_step_s": round(first[0], 3),
            "steps_ms": [round(t * 1e3, 2) for t in first],
            "kernels_landed": landed[:steps], "kernels_at_end": len(runtime._kernels),
            "steps_until_all_landed": all_landed_step,
            "seconds_until_all_landed": round(sum(times[:all_landed_step]), 2),
            "warm_ms": round(warm * 1e3, 3),
            "first_over_warm": round(first[0] / warm, 2),
            "max_after_first_over_warm": round(max(first[1:] or [0]) / warm, 2),
            "max_over_warm": round(max(first) / warm, 2)}


def run_cold(name: str, row: str, steps: int, extra: dict) -> dict:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="uo-cold-cache-") as cache:
        env = {**os.environ, "UNIFIED_OPT_CACHE": cache,
               "ZIG_GLOBAL_CACHE_DIR": os.path.join(cache, "zig"), **extra}
        load_before = os.getloadavg()[0]
        out = subprocess.run([sys.executable, __file__, "--first-steps", name, row,
                              "--steps", str(steps)], capture_output=True, text=True,
                             env=env)
        load_after = os.getloadavg()[0]
    if out.returncode != 0:
        return {"framework": name, "row": row,
                "error": (out.stderr.strip().splitlines() or ["?"])[-1]}
    return {**json.loads(out.stdout.strip().splitlines()[-1]), "env": extra,
            "load_before": round(load_before, 2), "load_after": round(load_after, 2)}


def run_one(name: str, threads: int, steps: int, rows: str, extra: dict) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), **extra}
    load_before = os.getloadavg()[0]
    out = subprocess.run([sys.executable, __file__, "--measure", name, str(threads),
                          "--steps", str(steps), "--rows", rows],
                         capture_output=True, text=True, env=env)
    load_after = os.getloadavg()[0]
    if out.returncode != 0:
        return {"framework": name, "threads": threads, "env": extra,
                "error": (out.stderr.strip().splitlines() or ["?"])[-1]}
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return {**result, "env": extra, "load_before": round(load_before, 2),
            "load_after": round(load_after, 2)}


def markdown(runs: list[dict], cold: list[dict]) -> str:
    lines = ["# Thread stalls: own-path steps on a ResNet-18-shaped set", "",
             "Made by `benchmarks/thread_stalls.py`: 62 tensors, 11,689,512 float32 "
             "elements; fresh random gradients each round, rows interleaved; ms per "
             "step. `load` is the 1-minute load average before / after the process "
             "(2-core machine shared with other jobs).", ""]
    for label in dict.fromkeys(r["label"] for r in runs):
        lines += [f"## {label}", "",
                  "| framework | threads | env | kernel threads | load | row | min | median "
                  "| p90 | max | median / min |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in (r for r in runs if r["label"] == label):
            env = " ".join(f"{k}={v}" for k, v in r.get("env", {}).items()) or "-"
            if "error" in r:
                lines.append(f"| {r['framework']} | {r['threads']} | {env} | | | error: "
                             f"{r['error']} | | | | | |")
                continue
            for row, s in r["rows"].items():
                lines.append(f"| {r['framework']} | {r['threads']} | {env} "
                             f"| {r.get('kernel_threads')} "
                             f"| {r['load_before']} / {r['load_after']} | {row} "
                             f"| {s['min_ms']} | {s['median_ms']} | {s['p90_ms']} "
                             f"| {s['max_ms']} | {s['median_over_min']} |")
        lines.append("")
    if cold:
        lines += ["## First steps on a cold kernel cache", "",
                  "`--cold`: a fresh `UNIFIED_OPT_CACHE`, one row per process at the "
                  "framework's default threads; the VM is built by the first step "
                  "(earlier runs) or by `uo.build` (the `build s` column; runs labelled "
                  "so); the generated kernels compile in the background. "
                  "`warm`: the median of 10 steps after every kernel landed.", "",
                  "| label | framework | row | load | build s | first step s | first / warm "
                  "| max of steps 2.. / warm | warm ms | kernels landed by the last "
                  "of the first steps | steps until all landed | s until all landed |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in cold:
            if "error" in r:
                lines.append(f"| {r['label']} | {r['framework']} | {r['row']} | error: "
                             f"{r['error']} | | | | | | | | |")
                continue
            lines.append(f"| {r['label']} | {r['framework']} | {r['row']} "
                         f"| {r['load_before']} / {r['load_after']} | {r['build_s']} "
                         f"| {r['first_step_s']} | {r['first_over_warm']} "
                         f"| {r['max_after_first_over_warm']} | {r['warm_ms']} "
                         f"| {r['kernels_landed'][-1]} of {r['kernels_at_end']} "
                         f"| {r['steps_until_all_landed']} "
                         f"| {r['seconds_until_all_landed']} |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--variant", action="append", default=[],
                        help="NAME:KEY=VALUE,... extra environment of additional runs")
    parser.add_argument("--rows", default="adamw,came", help="own rows: adamw, came")
    parser.add_argument("--label", default="run")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--measure", nargs=2, metavar=("FRAMEWORK", "THREADS"))
    parser.add_argument("--cold", action="store_true",
                        help="instead: the first --steps steps on a cold kernel cache")
    parser.add_argument("--first-steps", nargs=2, metavar=("FRAMEWORK", "ROW"))
    args = parser.parse_args()
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    if args.first_steps:
        print(json.dumps(first_steps(*args.first_steps, args.steps)))
        return
    if args.measure:
        print(json.dumps(measure(args.measure[0], int(args.measure[1]), args.steps,
                                 set(args.rows.split(",")))))
        return
    variants = [("", {})]
    for text in args.variant:
        name, _, pairs = text.partition(":")
        if not pairs or "=" not in pairs:
            parser.error(f"--variant: expected NAME:KEY=VALUE,..., got {text!r}")
        variants.append((name, dict(p.split("=", 1) for p in pairs.split(","))))
    path = args.out / "thread_stalls.json"
    old = json.loads(path.read_text()) if path.exists() else {}
    kept = [r for r in old.get("runs", []) if r["label"] != args.label]
    cold = [r for r in old.get("cold", []) if r["label"] != args.label]
    if args.cold:
        for name in args.frameworks.split(","):
            for row in args.rows.split(","):
                for _, extra in variants:
                    got = {"label": args.label, **run_cold(name, row, args.steps, extra)}
                    cold.append(got)
                    print(json.dumps(got), flush=True)
        args.out.mkdir(parents=True, exist_ok=True)
        write_text(path, json.dumps({**old, "cpu_count": os.cpu_count(), "cold": cold},
                                    indent=1) + "\n")
        write_text(args.out / "thread_stalls.md", markdown(kept, cold))
        return
    runs = []
    for name in args.frameworks.split(","):
        for threads in (int(t) for t in args.threads.split(",")):
            for _, extra in variants:
                got = {"label": args.label, **run_one(name, threads, args.steps, args.rows, extra)}
                runs.append(got)
                print(json.dumps({k: v for k, v in got.items()}), flush=True)
    all_runs = kept + runs
    args.out.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps({**old, "cpu_count": os.cpu_count(), "runs": all_runs},
                                indent=1) + "\n")
    write_text(args.out / "thread_stalls.md", markdown(all_runs, cold))


if __name__ == "__main__":
    main()
