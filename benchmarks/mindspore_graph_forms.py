"""The own MindSpore optimizer's two graph forms on the CPU, per algorithm: custom
operators over the kernel VM (``options={"graph": "custom"}``) and the update as
MindSpore operations (``{"graph": "ops"}``), against ``mindspore.nn.Adam``, all in
GRAPH_MODE with ``opt(grads)`` compiled.

    python benchmarks/mindspore_graph_forms.py [--algorithms adam,came,...]
                                               [--size 2048] [--repeats 15]
                                               [--out benchmarks/results]

One parameter of ``size x size`` float32; four random gradient tuples drawn once and
taken in turn (gradients of random signs, as training has). Each algorithm runs in a
process of its own; its three optimizers are timed in interleaved rounds (each round
steps each once: load from other processes falls on all alike), the median of
``--repeats`` rounds after three untimed ones. "first step s": the build and the first
step (the graph's compile). Writes ``OUT/mindspore_graph_forms.json`` and ``.md``, and
the table the own MindSpore optimizer's ``graph="auto"`` reads,
``backends/mindspore/graph_forms.json`` (:data:`TABLE`: each algorithm's custom and ops
step times, ``graph_ops.CPU_STEP_MS``).

    python benchmarks/mindspore_graph_forms.py --table

writes that table again from the committed results, measuring nothing (a test holds
the committed table equal to it).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from algorithm_step_time import ALGORITHMS  # this folder's: the algorithms' specs
from harness import Harness, interleaved_medians

from unified_opt.devices import cpu_info
from unified_opt.files import write_text

FORMS = ("custom", "ops")
RESULTS = Path(__file__).parent / "results" / "mindspore_graph_forms.json"
TABLE = Path(__file__).parent.parent / "backends" / "mindspore" / "graph_forms.json"


def measure(algorithm: str, size: int, repeats: int) -> dict:
    """In this process: nn.Adam and the two forms of ``algorithm``; ms per step."""
    import unified_opt as uo
    from unified_opt.expressions import parse_spec

    harness = Harness("mindspore-graph", threads=0)      # MindSpore's thread defaults
    ms = harness.fw
    rng = np.random.default_rng(1)
    gradients = [(ms.Tensor(rng.standard_normal((size, size), dtype=np.float32)),)
                 for _ in range(4)]
    runs, first = [], {}
    for what in ("nn.Adam",) + FORMS:
        named = harness.seeded_params([(size, size)])
        started = time.perf_counter()
        if what == "nn.Adam":
            opt = harness.hand_built("mindspore.nn.Adam", {"learning_rate": 1e-3}, named)
        else:
            opt = uo.build(parse_spec(ALGORITHMS[algorithm]), named, path="own",
                           options={"graph": what})
            if opt.graph_form != what:
                raise RuntimeError(f"{algorithm}: graph={what!r} took {opt.graph_form!r}")
        harness.step(opt, gradients[0])
        first[what] = round(time.perf_counter() - started, 2)
        runs.append(opt)

    class Cycling:          # the next gradient tuple at each call
        def __init__(self, opt):
            self.opt, self.calls = opt, 0

        def __call__(self, _):
            self.calls += 1
            return self.opt(gradients[self.calls % len(gradients)])

    medians = interleaved_medians(harness, [(Cycling(opt), None) for opt in runs], repeats)
    return {"algorithm": algorithm, "size": size,
            **{f"{what}_ms": round(m, 2) for what, m in zip(("nn.Adam",) + FORMS, medians)},
            **{f"{what}_first_s": first[what] for what in first}}


def markdown(rows: list[dict], meta: dict) -> str:
    lines = [f"{meta['machine']}, {meta['cpus']} CPUs, MindSpore {meta['mindspore']}; load "
             f"average {meta['load_before']} before, {meta['load_after']} after (other "
             "processes share the machine: the forms are interleaved, so their ratio holds "
             "better than the milliseconds)", "",
             "| algorithm | nn.Adam ms | custom operators ms | MindSpore operations ms | "
             "ops / custom | first step s (custom, ops) |", "|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['algorithm']} | {r['error']} | | | | |")
            continue
        lines.append(f"| {r['algorithm']} | {r['nn.Adam_ms']} | {r['custom_ms']} | "
                     f"{r['ops_ms']} | {r['ops_ms'] / r['custom_ms']:.2f} | "
                     f"{r['custom_first_s']}, {r['ops_first_s']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithms", default=",".join(ALGORITHMS))
    parser.add_argument("--size", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--table", action="store_true",
                        help=f"only write {TABLE.name} from the committed results")
    args = parser.parse_args()
    if args.table:
        write_text(TABLE, table_text(json.loads(RESULTS.read_text())))
        return
    if args.measure:
        print(json.dumps(measure(args.measure, args.size, args.repeats)))
        return
    rows = []
    load_before = round(os.getloadavg()[0], 1)
    for algorithm in args.algorithms.split(","):
        out = subprocess.run([sys.executable, __file__, "--measure", algorithm,
                              "--size", str(args.size), "--repeats", str(args.repeats)],
                             capture_output=True, text=True)
        row = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else \
            {"algorithm": algorithm,
             "error": (out.stderr.strip().splitlines() or ["?"])[-1][:200]}
        print(row, flush=True)
        rows.append(row)
    folder = Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    meta = {"machine": _cpu_name(), "cpus": os.cpu_count(),
            "mindspore": importlib.metadata.version("mindspore"),
            "load_before": load_before, "load_after": round(os.getloadavg()[0], 1)}
    write_text(folder / "mindspore_graph_forms.json",
        json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    write_text(folder / "mindspore_graph_forms.md", markdown(rows, meta))
    if folder.resolve() == RESULTS.parent.resolve():
        write_text(TABLE, table_text({"meta": meta, "rows": rows}))


def table_text(results: dict) -> str:
    """The package's table from a results file: algorithm -> ms per step of the custom
    and the ops form (the rows measured in both), and where they were measured."""
    meta = results["meta"]
    steps = {r["algorithm"]: {"custom": r["custom_ms"], "ops": r["ops_ms"]}
             for r in results["rows"] if "custom_ms" in r and "ops_ms" in r}
    sizes = sorted({r["size"] for r in results["rows"] if "size" in r})
    setting = (f"a {meta['cpus']}-core {meta['machine']}, MindSpore {meta['mindspore']}, "
               "one " + ", ".join(f"{n}x{n}" for n in sizes) + " float32 parameter")
    measured = (f"ms per GRAPH_MODE step on {setting} (a machine shared with other "
                "processes), opt(grads) compiled, the forms interleaved: "
                "benchmarks/mindspore_graph_forms.py")
    return json.dumps({"setting": setting, "measured": measured, "step_ms": steps},
                      indent=1) + "\n"


def _cpu_name() -> str:
    return cpu_info()[0] or platform.processor() or platform.machine()


if __name__ == "__main__":
    main()
