"""Every optimizer path on parameter sets shaped like what users train: the rows
``uo.build``'s ``prefer="speed"`` table is made of (``benchmarks/speed_table.py``).

    python benchmarks/realistic_sets.py [--backends torch,paddle,mindspore,mindspore-graph]
        [--algorithms adamw,lion,preset:mindspore.nn.AdamWeightDecay,...]
        [--sets gpt2,resnet18,large,small] [--threads 1,2] [--repeats 5] [--warmup 1]
        [--passes 3] [--update] [--out benchmarks/results]
    python benchmarks/realistic_sets.py --merge PART/realistic_sets.json ...  # parts
    python benchmarks/realistic_sets.py --render      # the .md again from the .json

The sets (:data:`SETS`, shapes in :func:`set_shapes`):

* ``gpt2``: GPT-2's layout scaled to 23.2 M elements: token embedding
  8192 x 512, position embedding 256 x 512, 6 blocks of (ln_1 weight and bias, c_attn
  512 x 1536 + bias, c_proj 512 x 512 + bias, ln_2, mlp c_fc 512 x 2048 + bias, mlp
  c_proj 2048 x 512 + bias), the final ln: 76 tensors, 23,240,704 elements (GPT-2 small,
  12 blocks at 768 wide with a 50257 vocabulary, is 148 tensors, 124 M elements: one
  step of its slow native rows takes seconds here);
* ``resnet18``: ResNet-18's parameters (conv 7x7 stem, four stages of two basic blocks
  of 3x3 convs with BatchNorm weight and bias, 1x1 downsample convs, the 512 -> 1000
  fc): 62 tensors, 11,689,512 elements, 95.6 % of them in 4-D conv weights;
* ``large``: one 4096 x 4096 tensor;
* ``small``: a 64-wide MLP, four 64 x 64 weights and their biases (16,640 elements).

Backends: torch, Paddle, MindSpore in PyNative mode and ``mindspore-graph``: MindSpore in
GRAPH_MODE (``opt(grads)`` compiled; the own path runs as custom operators over the
kernels there), which the table keeps apart (``unified_opt.speed.table_backend``).

Rows (:func:`entries`), on each backend: every spec of :data:`SPECS` and every preset
of the framework (``uo.preset``) whose build can take a native class (the class
``prefer="native"`` builds; one row per algorithm and class), native class against the
own path over copies of the same parameters; the own-only algorithms (no native class
computes them: the own path alone); on torch, the peer libraries' classes of the same
algorithm (:data:`PEERS`: pytorch-optimizer, torch-optimizer, came-pytorch) and
``torch.optim.AdamW(fused=True)``, the baseline every torch row is given as a multiple
of (``x_fused_adamw``). Not measured: ``adam_offload`` (a GPU's host offload) and
``dgc_momentum`` (several ranks). A spec whose update takes some shapes only
(``Spec.updates_shape``: Muon takes matrices) steps the set's tensors of those shapes, and its row
carries their model; :data:`NOT_MEASURED` names the sets it leaves out, and why.

Timing (``benchmarks/harness.py``): one process per backend, thread count and set (one
framework per process; a MindSpore process measuring every row of the GPT-2-like set
grew past 10 GB), all the optimizers of a row stepped in interleaved rounds with
fresh random gradients (three sets drawn once, used in turn) after ``--warmup``
untimed rounds and the own kernels' background compile; a path's figure is its fastest
step (the step without another process's time slice in it: the machine is shared), its
median kept too. The whole run is made ``--passes`` times, one after the other; each row is the pass
with the median ratio (native / own, else own / fused AdamW), every pass's ratio under
``passes``. Threads: 1, then 2 (``OMP_NUM_THREADS``, torch's, Paddle's and MindSpore's
thread settings). ``--update`` replaces only the rows measured now in an existing
``realistic_sets.json`` (to run parts). Writes ``OUT/realistic_sets.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from harness import (
    TORCH_PEERS,
    Harness,
    environment,
    fastest_and_median_ms,
    framework,
    interleaved,
    kernels_loaded,
    load_average,
    thread_env,
    versions,
)
from native_vs_own import SPECS

from unified_opt.files import write_text

BACKENDS = ("torch", "paddle", "mindspore", "mindspore-graph")
SETS = ("gpt2", "resnet18", "large", "small")
THREADS = (1, 2)
#: algorithms no native class computes on some backend: the own path alone there
OWN_ONLY = {"lion": "Lion(lr=1e-4)", "came": "CAME(lr=1e-4)", "adan": "Adan(lr=1e-3)",
            "ademamix": "AdEMAMix(lr=1e-3)", "schedule_free_sgd": "ScheduleFreeSGD(lr=0.1)",
            "schedule_free_adamw": "ScheduleFreeAdamW(lr=2.5e-3)"}
#: not measured: a GPU's host offload, several ranks
SKIPPED = ("adam_offload", "dgc_momentum")
#: (algorithm, set) -> why that set is not measured for it
NOT_MEASURED = {
    ("muon", "gpt2"): "torch.optim.Muon's bfloat16 matrix products: on a CPU without "
                      "bfloat16 instructions its iteration took 37 s for the 8192 x 512 "
                      "embedding alone",
    ("muon", "large"): "torch.optim.Muon's bfloat16 matrix products: its iteration on "
                       "4096 x 4096 (2 TFLOP) would take tens of minutes on such a CPU",
}
#: arguments a preset requires (its framework has no default for them)
PRESET_ARGUMENTS = {
    "paddle.optimizer.Adagrad": {"learning_rate": 0.01},
    "paddle.optimizer.RMSProp": {"learning_rate": 0.01},
    "paddle.incubate.optimizer.LarsMomentumOptimizer": {"learning_rate": 0.1,
                                                        "momentum": 0.9},
    "mindspore.experimental.optim.SGD": {"lr": 0.01},
    "mindspore.nn.Lamb": {"learning_rate": 1e-3},
    "mindspore.nn.Momentum": {"learning_rate": 0.01, "momentum": 0.9},
}
#: torch's baseline: every torch row is also given as a multiple of it
BASELINE = ("torch.optim.AdamW", {"lr": 1e-3, "weight_decay": 0.01, "fused": True})
#: torch peers per algorithm: (qualified class, kwargs)
PEERS = TORCH_PEERS
PEER_DISTRIBUTIONS = (("pytorch-optimizer", "pytorch_optimizer"),
                      ("torch-optimizer", "torch_optimizer"), ("came-pytorch", "came-pytorch"))


def gpt2_shapes(width: int = 512, blocks: int = 6, vocabulary: int = 8192,
                context: int = 256) -> list[tuple[int, ...]]:
    """GPT-2's parameter shapes (Conv1D weights stored input x output, as GPT-2 does)."""
    shapes: list[tuple[int, ...]] = [(vocabulary, width), (context, width)]
    for _ in range(blocks):
        shapes += [(width,), (width,), (width, 3 * width), (3 * width,), (width, width),
                   (width,), (width,), (width,), (width, 4 * width), (4 * width,),
                   (4 * width, width), (width,)]
    return shapes + [(width,), (width,)]


def resnet18_shapes() -> list[tuple[int, ...]]:
    """ResNet-18's parameter shapes: conv weights (out, in, kh, kw), BatchNorm weight
    and bias per conv, the fc weight and bias."""
    shapes: list[tuple[int, ...]] = [(64, 3, 7, 7), (64,), (64,)]
    inputs = 64
    for width in (64, 128, 256, 512):
        for block in range(2):
            first = inputs if block == 0 else width
            shapes += [(width, first, 3, 3), (width,), (width,),
                       (width, width, 3, 3), (width,), (width,)]
            if block == 0 and first != width:
                shapes += [(width, first, 1, 1), (width,), (width,)]   # downsample
        inputs = width
    return shapes + [(1000, 512), (1000,)]


def set_shapes(name: str) -> list[tuple[int, ...]]:
    """The parameter shapes of set ``name`` (of :data:`SETS`)."""
    if name == "gpt2":
        return gpt2_shapes()
    if name == "resnet18":
        return resnet18_shapes()
    if name == "large":
        return [(4096, 4096)]
    if name == "small":
        return [(64, 64), (64,)] * 4
    raise ValueError(f"set must be one of {SETS}, got {name!r}")


def measured_shapes(spec, set_name: str) -> list[tuple[int, ...]]:
    """The shapes a spec's row steps on a set: those of the set its update takes
    (``Spec.updates_shape``: Muon's matrices-only form, the set's 2-D tensors)."""
    return [shape for shape in set_shapes(set_name) if spec.updates_shape(shape)]


def spec_of(key: str):
    """The spec of a row key: a key of :data:`SPECS` or :data:`OWN_ONLY`, or
    ``preset:<qualified class>``."""
    import unified_opt as uo
    from unified_opt.expressions import parse_spec

    if key.startswith("preset:"):
        name = key.split(":", 1)[1]
        return uo.preset(name, **PRESET_ARGUMENTS.get(name, {}))
    return parse_spec({**SPECS, **OWN_ONLY}[key])


def expression_of(key: str) -> str:
    if key.startswith("preset:"):
        name = key.split(":", 1)[1]
        arguments = ", ".join(f"{k}={v!r}" for k, v in PRESET_ARGUMENTS.get(name, {}).items())
        return f"uo.preset({name!r}{', ' if arguments else ''}{arguments})"
    return {**SPECS, **OWN_ONLY}[key]


def entries(backend: str) -> list[dict]:
    """The rows of ``backend`` (decided without importing the framework): ``key``,
    ``algorithm`` and ``native`` (the class ``prefer="native"`` builds; None: own only)."""
    import unified_opt as uo
    from unified_opt.backend import Context, load

    adapter = load(framework(backend))
    out: list[dict] = []
    classes: set[tuple[str, str]] = set()
    own_only: set[str] = set()
    keys = list(SPECS) + list(OWN_ONLY) + [
        f"preset:{n}" for n in uo.presets() if n.split(".")[0] == framework(backend)]
    for key in keys:
        try:
            spec = spec_of(key)
        except (TypeError, ValueError):
            continue        # a preset that needs arguments not in PRESET_ARGUMENTS
        if spec.name in SKIPPED:
            continue
        decision = adapter.decide(spec, "auto", Context(), "native")
        if decision.path != "native":
            if key.startswith("preset:") or spec.name in own_only:
                continue    # own only: one row per algorithm
            own_only.add(spec.name)
        elif (spec.name, decision.native) in classes:
            continue        # one row per algorithm and class
        else:
            classes.add((spec.name, decision.native))
        out.append({"key": key, "algorithm": spec.name,
                    "native": decision.native if decision.path == "native" else None})
    return out


def _peer(qualified: str, kwargs: dict, params: list):
    module, name = qualified.rsplit(".", 1)
    made = getattr(importlib.import_module(module), name)(params, **kwargs)
    if callable(getattr(made, "train", None)):
        made.train()        # schedulefree's optimizers step in train mode only
    return made


def measure(backend: str, threads: int, keys: list[str], sets: list[str],
            repeats: int, warmup: int) -> None:
    """In this process: every row of ``keys`` on every set of ``sets``; prints one JSON
    row per line as it goes (a crash keeps the rows before it)."""
    import unified_opt as uo
    from unified_opt.speed import SetModel

    harness = Harness(backend, threads)
    wanted = [e for e in entries(backend) if e["key"] in keys]
    for set_name in sets:
        arrays_of: dict = {}
        for entry in wanted:
            if (entry["algorithm"], set_name) in NOT_MEASURED:
                continue
            shapes = measured_shapes(spec_of(entry["key"]), set_name)
            if tuple(shapes) not in arrays_of:
                rng = np.random.default_rng(len(shapes))
                arrays_of.clear()       # one set's arrays at a time
                arrays_of[tuple(shapes)] = (
                    [rng.standard_normal(s, dtype=np.float32) for s in shapes],
                    harness.gradient_sets(shapes, rng))
            arrays, grads = arrays_of[tuple(shapes)]
            row = {"backend": backend, "threads": threads, "set": set_name,
                   "key": entry["key"], "expression": expression_of(entry["key"]),
                   "algorithm": entry["algorithm"], "native": entry["native"],
                   "elements": int(sum(a.size for a in arrays)), "tensors": len(shapes)}
            if shapes != set_shapes(set_name):
                row["model"] = SetModel.of(shapes).to_dict()
                row["shapes"] = [list(shape) for shape in shapes]
            names: list[str] = []
            runs: list[tuple] = []
            try:
                spec = spec_of(entry["key"])
                if entry["native"]:
                    named = harness.params(arrays)
                    runs.append((uo.build(spec, named, path="native"), named))
                    names.append("native")
                named = harness.params(arrays)
                runs.append((uo.build(spec, named, path="own"), named))
                names.append("own")
                if harness.name == "torch":
                    for qualified, kwargs in [BASELINE] + PEERS.get(entry["algorithm"], []):
                        named = harness.params(arrays)
                        peer = _peer(qualified, kwargs, [p for _, p in named])
                        try:            # a peer that cannot step these shapes is recorded
                            harness.set_grads(named, grads[0])
                            harness.step(peer, grads[0])
                        except Exception as error:
                            row.setdefault("peers", []).append(
                                {"class": qualified,
                                 "error": f"{type(error).__name__}: {error}"})
                            continue
                        runs.append((peer, named))
                        names.append(qualified if kwargs.get("fused") is None
                                     else "baseline")
                times = interleaved(harness, runs, grads, repeats,
                                    own=(names.index("own"),), warmup=warmup)
            except Exception as error:  # recorded: a row the backend cannot build or step
                print(json.dumps({**row, "error": f"{type(error).__name__}: {error}"}),
                      flush=True)
                continue
            for name, seconds in zip(names, times):
                fastest, median = fastest_and_median_ms(seconds)
                if name in ("native", "own", "baseline"):
                    row[f"{name}_ms"], row[f"{name}_median_ms"] = fastest, median
                else:
                    row.setdefault("peers", []).append(
                        {"class": name, "ms": fastest, "median_ms": median})
            if "native_ms" in row:
                row["native_over_own"] = round(row["native_ms"] / row["own_ms"], 3)
            row["generated_kernels"] = kernels_loaded()
            print(json.dumps(row), flush=True)
            del runs


def pass_ratio(row: dict) -> float:
    """What picks a row's median pass: native / own, else own / the baseline, else own."""
    if "native_over_own" in row:
        return row["native_over_own"]
    if "baseline_ms" in row:
        return row["own_ms"] / row["baseline_ms"]
    return row["own_ms"]


def row_key(row: dict) -> tuple:
    return (row["backend"], row["threads"], row["set"], row["key"])


def merged(passes: list[list[dict]]) -> list[dict]:
    """One row per (backend, threads, set, key): the pass with the median ratio, every
    pass's ratio under ``passes`` (an error only where no pass measured it)."""
    groups: dict[tuple, list[dict]] = {}
    for rows in passes:
        for r in rows:
            groups.setdefault(row_key(r), []).append(r)
    out = []
    for found in groups.values():
        good = sorted((r for r in found if "error" not in r), key=pass_ratio)
        if not good:
            out.append(found[0])
            continue
        out.append({**good[(len(good) - 1) // 2],
                    "passes": [round(pass_ratio(r), 3) for r in good]})
    return out


def with_multiples(rows: list[dict]) -> list[dict]:
    """Torch rows with ``x_fused_adamw`` per path (each against the baseline stepped in
    the same rounds)."""
    for r in rows:
        base = r.get("baseline_ms")
        if not base:
            continue
        r["x_fused_adamw"] = {"own": round(r["own_ms"] / base, 2)}
        if "native_ms" in r:
            r["x_fused_adamw"]["native"] = round(r["native_ms"] / base, 2)
        for p in r.get("peers", []):
            if "ms" in p:
                r["x_fused_adamw"][p["class"]] = round(p["ms"] / base, 2)
    return rows


def set_models() -> dict:
    """Every set's :class:`unified_opt.speed.SetModel` (as a dict) and shapes."""
    from unified_opt.speed import SetModel

    return {name: {**SetModel.of(set_shapes(name)).to_dict(),
                   "shapes": [list(shape) for shape in set_shapes(name)]} for name in SETS}


def sorted_result(result: dict) -> dict:
    """``result`` with its rows in order (backend, threads, set, algorithm, key) and the
    thread counts of its rows in its environment."""
    order = {name: i for i, name in enumerate(SETS)}
    rows = sorted(result["rows"], key=lambda r: (
        r["backend"], r["threads"], order.get(r["set"], 9), r.get("algorithm", ""), r["key"]))
    return {**result, "rows": rows,
            "environment": {**result["environment"],
                            "threads": sorted({r["threads"] for r in rows})}}


def write(result: dict, out: Path) -> None:
    write_text(out / "realistic_sets.json", json.dumps(result, indent=1) + "\n")
    write_text(out / "realistic_sets.md", markdown(result))
    print(f"wrote {out / 'realistic_sets.json'} and realistic_sets.md: "
          f"{len(result['rows'])} rows")


def default_path(row: dict) -> str:
    """The path ``prefer="speed"`` takes for this row's own set (the rule of
    :mod:`unified_opt.speed`: the own path where it is at least its threshold faster)."""
    from unified_opt.speed import THRESHOLD

    if not row.get("native"):
        return "own"
    return "own" if row["native_over_own"] >= THRESHOLD else "native"


def markdown(result: dict) -> str:
    """The results as tables: one per backend and thread count, a row per spec and set."""
    env, sets = result["environment"], result["sets"]
    lines = [f"# Optimizer steps on realistic parameter sets ({env['cpu']}, "
             f"{env['cpu_count']} cores)", "",
             "Fastest step ms over interleaved rounds with fresh random gradients (median "
             "pass of the runs below); `native / own` > 1: the own path is that many times "
             "faster; *default*: the path `uo.build(spec, params)` takes for that set "
             "(`prefer=\"speed\"`); torch rows also as × `torch.optim.AdamW(fused=True)` "
             "stepped in the same rounds; *passes*: each pass's native / own (a row "
             "without a native class: its own ms). Made by `benchmarks/realistic_sets.py`; "
             "`benchmarks/speed_table.py` turns it into `unified_opt/speed_table.json`.", "",
             "Sets: " + "; ".join(f"{name} {info['tensors']} tensors, {info['elements']:,} "
                                   f"elements ({info['conv_share']:.1%} in conv weights, "
                                   f"{info['vector_share']:.1%} in 1-D tensors)"
                                   for name, info in sets.items()) + ".", "",
             "Runs: " + "; ".join(f"{r['backends']} x {r['threads']} thread(s), "
                                  f"{r['passes']} passes of {r['repeats']} rounds, loads "
                                  f"{', '.join(r['loads'])}" for r in result["runs"]) + ".",
             ""]
    groups: dict[tuple, list[dict]] = {}
    for r in result["rows"]:
        groups.setdefault((r["backend"], r["threads"]), []).append(r)
    for (backend, threads), rows in groups.items():
        torch = backend == "torch"
        lines += [f"## {backend}, {threads} thread{'s' * (threads != 1)}", "",
                  "| spec | set | native class | native ms | own ms | native / own | default "
                  + ("| × fused AdamW (own) | peers × fused AdamW " if torch else "")
                  + "| passes |",
                  "|---|---|---|---|---|---|---|" + ("---|---|" if torch else "") + "---|"]
        for r in rows:
            if "error" in r:
                lines.append(f"| {r.get('expression', r['key'])} | {r['set']} | error: "
                             f"{r['error']} |" + " |" * (8 if torch else 6))
                continue
            cells = [f"`{r['expression']}`", r["set"], f"`{r['native']}`" if r["native"]
                     else "(none)", f"{r['native_ms']:.3g}" if "native_ms" in r else "",
                     f"{r['own_ms']:.3g}", f"{r['native_over_own']:g}" if "native_ms" in r
                     else "", default_path(r)]
            if torch:
                multiples = r.get("x_fused_adamw", {})
                cells += [f"{multiples.get('own', '')}", ", ".join(
                    f"{p['class']} {multiples.get(p['class'], 'error: ' + p.get('error', ''))}"
                    for p in r.get("peers", []))]
            cells.append(", ".join(f"{x:g}" for x in r.get("passes", [])))
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def _run(backend: str, threads: int, keys: list[str], sets: list[str],
         repeats: int, warmup: int) -> list[dict]:
    out = subprocess.run([sys.executable, __file__, "--measure", backend, str(threads),
                          ",".join(keys), ",".join(sets), "--repeats", str(repeats),
                          "--warmup", str(warmup)],
                         capture_output=True, text=True,
                         env={**os.environ, **thread_env(threads)})
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        rows.append({"backend": backend, "threads": threads, "set": "?", "key": "?",
                     "error": f"exit {out.returncode}: {last}"})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default=",".join(BACKENDS))
    parser.add_argument("--algorithms", default="",
                        help="row keys (of SPECS, OWN_ONLY or preset:<class>); all if empty")
    parser.add_argument("--sets", default=",".join(SETS))
    parser.add_argument("--threads", default=",".join(map(str, THREADS)))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--update", action="store_true",
                        help="replace only the rows measured now in OUT/realistic_sets.json")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--measure", nargs=4, metavar=("BACKEND", "THREADS", "KEYS", "SETS"))
    parser.add_argument("--render", action="store_true",
                        help="rewrite OUT/realistic_sets.md (and the sets' models) from "
                             "OUT/realistic_sets.json, measuring nothing")
    parser.add_argument("--merge", nargs="+", type=Path, metavar="JSON",
                        help="put the rows of these results files (runs of parts made "
                             "with other --out folders) into OUT/realistic_sets.json, "
                             "replacing the rows they measured, measuring nothing")
    args = parser.parse_args()
    if args.merge:
        out_file = args.out / "realistic_sets.json"
        result = json.loads(out_file.read_text()) if out_file.exists() else \
            {**json.loads(args.merge[0].read_text()), "rows": [], "runs": []}
        for path in args.merge:
            part = json.loads(path.read_text())
            fresh = {row_key(r) for r in part["rows"]}
            result["rows"] = [r for r in result["rows"] if row_key(r) not in fresh] + \
                part["rows"]
            result["runs"] = result.get("runs", []) + part.get("runs", [])
        write(sorted_result(result), args.out)
        return
    if args.render:
        write({**json.loads((args.out / "realistic_sets.json").read_text()),
               "sets": set_models()}, args.out)
        return
    if args.measure:
        backend, threads, keys, sets = args.measure
        measure(backend, int(threads), keys.split(","), sets.split(","), args.repeats,
                args.warmup)
        return
    sets = [s for s in args.sets.split(",") if s]
    unknown = sorted(set(sets) - set(SETS))
    if unknown:
        parser.error(f"--sets: unknown {unknown}; known: {list(SETS)}")
    threads = [int(t) for t in args.threads.split(",") if t]
    chosen = [k for k in args.algorithms.split(",") if k]
    out_file = args.out / "realistic_sets.json"
    old = json.loads(out_file.read_text()) if args.update and out_file.exists() else None
    passes: list[list[dict]] = []
    loads: list[str] = []
    for n in range(args.passes):
        rows: list[dict] = []
        for count in threads:
            for backend in args.backends.split(","):
                if importlib.util.find_spec(framework(backend)) is None:
                    print(f"{backend}: not installed, skipped", file=sys.stderr)
                    continue
                keys = [e["key"] for e in entries(backend)
                        if not chosen or e["key"] in chosen or e["algorithm"] in chosen]
                if not keys:
                    continue
                loads.append(load_average())
                started = time.perf_counter()
                got = []
                # a process per set: a MindSpore process's memory grows with its builds
                for set_name in sets:
                    got += _run(backend, count, keys, [set_name], args.repeats, args.warmup)
                rows += got
                print(f"pass {n + 1}: {backend}, {count} thread(s): {len(got)} rows "
                      f"({time.perf_counter() - started:.0f} s, load {loads[-1]})", flush=True)
                for r in got:
                    if "error" in r:
                        print(f"  {r['set']} {r['key']}: {r['error']}", flush=True)
        passes.append(rows)
        # written after every pass: a run stopped later keeps the passes made
        run = {"passes": len(passes), "repeats": args.repeats, "warmup": args.warmup,
               "loads": loads, "threads": threads, "backends": args.backends, "sets": sets,
               "algorithms": chosen or "all"}
        result_rows = with_multiples(merged(passes))
        runs = [run]
        if old is not None:
            fresh = {row_key(r) for r in result_rows}
            result_rows = [r for r in old["rows"] if row_key(r) not in fresh] + result_rows
            runs = old.get("runs", []) + runs
        result = {"environment": environment(), "versions": versions(PEER_DISTRIBUTIONS),
                  "sets": set_models(), "runs": runs, "rows": result_rows}
        args.out.mkdir(parents=True, exist_ok=True)
        write(sorted_result(result), args.out)


if __name__ == "__main__":
    main()
