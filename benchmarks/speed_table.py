"""``unified_opt/speed_table.json``, the table ``uo.build(..., prefer="speed")`` reads,
made from the committed benchmark results.

    python benchmarks/speed_table.py [--results benchmarks/results]
                                     [--out unified_opt/speed_table.json] [--check]

Sources (each a file in ``--results``):

* ``realistic_sets.json`` (``benchmarks/realistic_sets.py``, the CPU): per backend,
  thread count, spec and parameter set (GPT-2-like, ResNet-18, one 4096 x 4096 tensor, a
  small MLP), the native class ``prefer="native"`` builds against the own implementation
  over the same parameters. Where two specs measured the same native class, the row with
  the smaller ratio stands for the class;
* ``gpu_step_time.json`` (``benchmarks/gpu_step_time.py``, CUDA, GPT-2 small): for each
  algorithm, a row that built a native class (a ``uo/`` or ``native/`` row whose
  ``path`` is one of torch's native classes for it) against ``own/<algorithm>/auto``
  (the own path as a default build runs it). Its set's model: the results' element and
  tensor counts, no conv weights, and a 1-D share of 0 (GPT-2 small's is 0.1 %; the
  results do not record its shapes).

A row of the table: backend, device kind, threads (CPU), algorithm, native class, the
measured set, its model (:class:`unified_opt.speed.SetModel`: elements, tensors, conv
and 1-D shares), its size class (of :data:`unified_opt.speed.SIZE_CLASSES`), both step
times, ``native_over_own`` and its source. The table is checked in; a test checks that
the committed table is what this script makes from the committed results (``--check``
does the same here: exit 1 when they differ). Regenerate it whenever a backend or an
engine changes: rerun the benchmarks, then this script.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from unified_opt import speed
from unified_opt.backend import load
from unified_opt.files import write_text

ROOT = Path(__file__).resolve().parent.parent
CPU_RESULTS = "realistic_sets.json"
GPU_RESULTS = "gpu_step_time.json"


def cpu_rows(data: dict, file: str) -> list[dict]:
    """The table's rows from ``realistic_sets.json`` (rows with a native class)."""
    best: dict[tuple, dict] = {}
    for r in data["rows"]:
        if "error" in r or not r.get("native"):
            continue
        # a row over some of the set's tensors (Muon: its matrices) carries their model
        model = r.get("model") or {k: data["sets"][r["set"]][k]
                                   for k in ("elements", "tensors", "conv_share",
                                             "vector_share")}
        row = {"backend": r["backend"], "device": "cpu", "threads": r["threads"],
               "algorithm": r["algorithm"], "native": r["native"], "set": r["set"],
               "model": model, "size_class": speed.size_class(model["elements"]),
               "native_ms": r["native_ms"], "own_ms": r["own_ms"],
               "native_over_own": round(r["native_ms"] / r["own_ms"], 2), "source": "cpu",
               "measured": f"{file}: {r['expression']}"}
        key = (row["backend"], row["threads"], row["algorithm"], row["native"], row["set"])
        if key not in best or row["native_over_own"] < best[key]["native_over_own"]:
            best[key] = row
    return list(best.values())


def gpu_rows(data: dict, file: str) -> list[dict]:
    """The table's rows from ``gpu_step_time.json``."""
    classes = {}
    for cls, lowering in load("torch").rows():
        classes.setdefault(lowering.algorithm, set()).add(cls.name)
    by_key = {r["key"]: r for r in data["rows"] if "ms" in r}
    elements = data["parameters"]["elements"]
    out = []
    for key, r in by_key.items():
        if not key.startswith(("uo/", "native/")):
            continue
        algorithm = r.get("algorithm")
        if key.startswith("uo/") and f"native/{algorithm}" in by_key:
            continue        # the class built explicitly (prefer="native") stands for it
        own = by_key.get(f"own/{algorithm}/auto")
        if own is None or r.get("path") not in classes.get(algorithm, ()):
            continue
        model = speed.SetModel(elements, data["parameters"]["tensors"], 0.0, 0.0)
        out.append({"backend": "torch", "device": data["environment"]["device"],
                    "threads": None, "algorithm": algorithm, "native": r["path"],
                    "set": data["parameters"]["name"], "model": model.to_dict(),
                    "size_class": speed.size_class(elements),
                    "native_ms": r["ms"], "own_ms": own["ms"],
                    "native_over_own": round(r["ms"] / own["ms"], 2), "source": "cuda",
                    "measured": f"{file}: {key} against own/{algorithm}/auto"})
    return out


def make(results: Path) -> dict:
    """The table from the results in ``results``."""
    sources, rows = {}, []
    cpu_file = results / CPU_RESULTS
    if cpu_file.exists():
        data = json.loads(cpu_file.read_text())
        env = data["environment"]
        name = f"benchmarks/results/{CPU_RESULTS}"
        sources["cpu"] = {"file": name, "machine": f"{env['cpu']} ({env['cpu_count']} cores)",
                          "versions": data.get("versions", {})}
        rows += cpu_rows(data, name)
    gpu_file = results / GPU_RESULTS
    if gpu_file.exists():
        data = json.loads(gpu_file.read_text())
        env = data["environment"]
        if env.get("device") == "cuda":
            name = f"benchmarks/results/{GPU_RESULTS}"
            sources["cuda"] = {"file": name, "machine": f"{env['device_name']} "
                               f"({data['parameters']['name']})",
                               "versions": {k: env[k] for k in ("torch", "triton", "cuda")
                                            if env.get(k)}}
            rows += gpu_rows(data, name)
    rows.sort(key=lambda r: (r["backend"], r["device"], r["algorithm"], r["native"],
                             r["threads"] or 0, -r["model"]["elements"], r["set"]))
    return {"about": "uo.build(prefer='speed') reads this table (unified_opt/speed.py); "
                     "made by benchmarks/speed_table.py from the committed benchmark "
                     "results, never by hand",
            "threshold": speed.THRESHOLD, "sources": sources, "rows": rows}


def render(table: dict) -> str:
    return json.dumps(table, indent=1) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--out", type=Path, default=ROOT / "unified_opt" / "speed_table.json")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when --out differs from what the results make")
    args = parser.parse_args(argv)
    text = render(make(args.results))
    if args.check:
        same = args.out.exists() and args.out.read_text() == text
        print(f"{args.out}: {'up to date' if same else 'differs from the results'}")
        return 0 if same else 1
    write_text(args.out, text)
    table = json.loads(text)
    own = [r for r in table["rows"] if r["native_over_own"] >= table["threshold"]]
    print(f"{args.out}: {len(table['rows'])} rows, {len(own)} where the own implementation "
          f"is at least {table['threshold']}x faster:")
    for r in own:
        on = f"{r['threads']} thread(s), " if r["threads"] else ""
        print(f"  {r['backend']} {r['device']} {r['algorithm']} {r['native']} "
              f"{on}{r['set']}: {r['native_over_own']}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
