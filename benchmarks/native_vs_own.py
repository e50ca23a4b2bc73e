"""The native class against the own implementation, per framework, algorithm and size
class, on sets of d x d weights (``uo.build``'s ``prefer="speed"`` table is made from
``benchmarks/realistic_sets.py``'s sets: ``benchmarks/speed_table.py``).

    python benchmarks/native_vs_own.py [--backends torch,paddle,mindspore,mindspore-graph]
                                       [--algorithms adam,lamb,...] [--repeats 41]
                                       [--passes 3] [--update] [--out benchmarks/results]

For every spec of :data:`SPECS` that ``uo.build`` lowers to a native class on a
backend ("mindspore-graph": MindSpore in GRAPH_MODE, ``opt(grads)`` compiled), one
process of its own (one framework per process) builds, for each size class of
:data:`unified_opt.speed.SIZE_CLASSES`, the same spec twice over copies of one parameter
set: ``path="native"`` (the native class ``uo.build`` takes, with its flags) and
``path="own"`` (the own update as a default build runs it: ``compile="auto"``, the
kernel VM, then the generated kernel once compiled in the background: the untimed
steps wait for that compile). The two are timed in interleaved rounds (each round steps
both once, in alternating order, so load from other processes falls on both alike)
with fresh random gradients every step (three gradient sets drawn once, used in turn),
``--repeats`` rounds after three untimed ones. Each path's figure is its fastest round
(``*_ms``: the step without interference from other processes, which on a shared
machine hits a multi-threaded kernel far harder than a single-threaded one; the medians
are recorded too), and ``native_over_own`` is ``native_ms / own_ms``: how many times
faster the own path is. The whole run is made ``--passes`` times, one after the other
(minutes apart); each row is the pass with the median ratio (every pass's ratio is kept
under ``passes``): a burst of load from other processes spoils one pass, not the row.

Every measurement runs on one thread (``OMP_NUM_THREADS=1``, ``torch.set_num_threads(1)``,
MindSpore's CPU thread pool at 1; Paddle sets one thread itself): on a machine shared
with other processes a multi-threaded step stalls at every barrier where one of its
threads was descheduled (measured here under a load of 7 on 2 cores: torch's Adadelta
over 4.2 M elements, median 632 ms against a fastest 72 ms), so only one-thread figures
repeat. Both paths are memory-bound loops that a second thread speeds up alike.

The parameter set of a class: four ``d x d`` weights and four ``d`` biases (a few
layers), ``d`` = 64, 256 and 1024 (:data:`unified_opt.speed.REPRESENTATIVE`). Per row:
the native class, both minima and medians in ms, ``native_over_own``, how many
generated kernels the process had loaded; the CPU and thread count it ran on. Writes
``OUT/native_vs_own.json`` and ``.md``; ``--update`` replaces only the rows of the
backends measured now in an existing JSON.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from harness import (
    Harness,
    environment,
    framework,
    interleaved,
    kernels_loaded,
    thread_env,
    versions,
    with_rows_of_others,
)

from unified_opt.files import write_text

#: the specs measured, as :func:`unified_opt.expressions.parse_spec` reads them (two SGD
#: forms: plain and with momentum, which Paddle lowers to different classes)
SPECS = {"sgd": "SGD(lr=0.01)", "momentum": "SGD(lr=0.01, momentum=0.9)",
         "adam": "Adam(lr=1e-3)", "adamw": "AdamW(lr=1e-3, weight_decay=0.01)",
         "nadam": "NAdam(lr=1e-3)", "radam": "RAdam(lr=1e-3)", "adamax": "Adamax(lr=1e-3)",
         "adagrad": "Adagrad(lr=0.01)", "adadelta": "Adadelta(lr=1.0)",
         "rmsprop": "RMSprop(lr=0.01)", "rprop": "Rprop(lr=0.01)",
         "adafactor": "Adafactor(lr=1e-3)", "lamb": "Lamb(lr=1e-3, weight_decay=0.01)",
         "lars": "LARS(lr=0.1, weight_decay=1e-4)"}
BACKENDS = ("torch", "paddle", "mindspore", "mindspore-graph")
#: the environment of a measurement: one thread (see the module)
ONE_THREAD = thread_env(1)


def shapes_of(d: int) -> list[tuple[int, ...]]:
    return [(d, d)] * 4 + [(d,)] * 4


def measure(backend: str, key: str, repeats: int) -> list[dict]:
    """In this process: every size class of spec ``key`` on ``backend``, both paths."""
    import unified_opt as uo
    from unified_opt.expressions import parse_spec
    from unified_opt.speed import REPRESENTATIVE, size_class

    harness = Harness(backend)
    spec = parse_spec(SPECS[key])
    rows = []
    for d in REPRESENTATIVE:
        shapes = shapes_of(d)
        rng = np.random.default_rng(d)
        arrays = [rng.standard_normal(s, dtype=np.float32) for s in shapes]
        elements = sum(a.size for a in arrays)
        row = {"backend": backend, "spec": key, "expression": SPECS[key],
               "algorithm": spec.name, "size_class": size_class(elements),
               "elements": elements, "tensors": len(shapes)}
        try:
            native_params = harness.params(arrays)
            own_params = harness.params(arrays)
            native = uo.build(spec, native_params, path="native")
            own = uo.build(spec, own_params, path="own")
        except Exception as error:  # recorded: a row the backend cannot build
            rows.append({**row, "error": f"{type(error).__name__}: {error}"})
            continue
        row["native"] = uo.explain(native).native
        grads = harness.gradient_sets(shapes, rng)
        runs = [(native, native_params), (own, own_params)]
        times = interleaved(harness, runs, grads, repeats, own=(1,))
        native_ms, own_ms = (min(t) * 1e3 for t in times)
        rows.append({**row, "native_ms": round(native_ms, 4), "own_ms": round(own_ms, 4),
                     "native_median_ms": round(statistics.median(times[0]) * 1e3, 4),
                     "own_median_ms": round(statistics.median(times[1]) * 1e3, 4),
                     "native_over_own": round(native_ms / own_ms, 3),
                     "generated_kernels": kernels_loaded()})
        del runs, native, own
    return rows


def native_specs(backend: str, keys) -> list[str]:
    """The spec keys a default build lowers to a native class on ``backend`` (decided
    without importing the framework)."""
    from unified_opt.backend import Context, load
    from unified_opt.expressions import parse_spec

    adapter = load(framework(backend))
    return [k for k in keys
            if adapter.decide(parse_spec(SPECS[k]), "auto", Context()).path == "native"]


def _run(backend: str, key: str, repeats: int) -> list[dict]:
    out = subprocess.run([sys.executable, __file__, "--measure", backend, key,
                          "--repeats", str(repeats)], capture_output=True, text=True,
                         env={**os.environ, **ONE_THREAD})
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        return [{"backend": backend, "spec": key, "expression": SPECS[key],
                 "error": last}]
    return json.loads(out.stdout.strip().splitlines()[-1])


def merged(passes: list[list[dict]]) -> list[dict]:
    """One row per (backend, spec, size class): the pass with the median ratio, with
    every pass's ratio under ``passes`` (an error only where no pass measured it)."""
    groups: dict[tuple, list[dict]] = {}
    for rows in passes:
        for r in rows:
            groups.setdefault((r["backend"], r["spec"], r.get("size_class")), []).append(r)
    out = []
    for found in groups.values():
        good = sorted((r for r in found if "error" not in r),
                      key=lambda r: r["native_over_own"])
        if not good:
            out.append(found[0])
            continue
        out.append({**good[(len(good) - 1) // 2],
                    "passes": [r["native_over_own"] for r in good]})
    return out


def markdown(result: dict) -> str:
    env = result["environment"]
    lines = [f"# Native class against the own implementation ({env['cpu']}, "
             f"{env['cpu_count']} cores, {env.get('threads', '?')} thread)", "",
             "Fastest step ms over interleaved rounds with fresh random gradients, one "
             "thread; the row is the median of the passes' ratios (all in the last "
             "column); "
             "`native / own` > 1: the own path is that many times faster. Parameters per "
             "size class: 4 d x d weights and 4 d biases. Made by "
             "`benchmarks/native_vs_own.py` (the speed table is made from "
             "`benchmarks/realistic_sets.py`'s sets).", "",
             "| backend | spec | native class | size class | elements | native ms | own ms "
             "| native / own | passes |", "|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        if "error" in r:
            lines.append(f"| {r['backend']} | {r['spec']} | error: {r['error']} "
                         "| | | | | | |")
            continue
        lines.append(f"| {r['backend']} | {r['spec']} | {r['native']} | {r['size_class']} "
                     f"| {r['elements']:,} | {r['native_ms']} | {r['own_ms']} "
                     f"| {r['native_over_own']} | {r.get('passes', '')} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--algorithms", default=",".join(SPECS),
                        help="spec keys of SPECS")
    parser.add_argument("--repeats", type=int, default=41)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--update", action="store_true",
                        help="replace only the rows of these backends in OUT/native_vs_own.json")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--measure", nargs=2, metavar=("BACKEND", "SPEC"))
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(*args.measure, args.repeats)))
        return
    keys = [k for k in args.algorithms.split(",") if k]
    unknown = sorted(set(keys) - set(SPECS))
    if unknown:
        parser.error(f"--algorithms: unknown {unknown}; known: {sorted(SPECS)}")
    passes = []
    for n in range(args.passes):
        rows = []
        for backend in args.backends.split(","):
            if importlib.util.find_spec(framework(backend)) is None:
                print(f"{backend}: not installed, skipped", file=sys.stderr)
                continue
            for key in native_specs(backend, keys):
                started = time.perf_counter()
                got = _run(backend, key, args.repeats)
                rows += got
                print(f"pass {n + 1}: {backend} {key}: " + ", ".join(
                    f"{r.get('size_class', '?')} {r.get('native_over_own', r.get('error'))}"
                    for r in got) + f" ({time.perf_counter() - started:.0f} s)", flush=True)
        passes.append(rows)
    rows = merged(passes)
    if args.update:
        rows = with_rows_of_others(
            json.loads((args.out / "native_vs_own.json").read_text())["rows"], rows,
            args.backends)
    result = {"environment": environment(), "versions": versions(),
              "repeats": args.repeats, "passes": args.passes, "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    write_text(args.out / "native_vs_own.json", json.dumps(result, indent=1) + "\n")
    write_text(args.out / "native_vs_own.md", markdown(result))


if __name__ == "__main__":
    main()
