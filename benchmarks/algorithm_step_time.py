"""Every algorithm's step against the framework's fastest native Adam, and against the
peer libraries a torch user would otherwise pick.

    python benchmarks/algorithm_step_time.py [--backends torch,paddle,mindspore]
                                             [--repeats 7] [--update]
                                             [--out benchmarks/results]

Rows per backend ("mindspore-graph": MindSpore in GRAPH_MODE, ``opt(grads)`` compiled).
torch: one 4096x4096 float32 parameter; baseline ``torch.optim.Adam(fused=True)``. Each
algorithm's uo step: the default build (the native class where one computes the spec,
else the own update with ``compile="auto"``: the kernel VM at once, its generated kernel
once compiled in the background), the own update eagerly (``path="own",
options={"compile": False}``), on its generated kernel (``{"compile": True}``: compiled
before the first step) and through Inductor (``{"compile": "inductor"}``), and the peers'
classes of that algorithm (pytorch-optimizer, came-pytorch, torch-optimizer). Compile
seconds show in "first step s". Paddle and MindSpore (PyNative): one 2048x2048 parameter; baseline
the fastest native Adam (``paddle.optimizer.Adam``; MindSpore ``nn.Adam``); each
algorithm's uo step (the own path where no native class computes it).

Every step sees fresh random gradients (``harness.Gradients``: four standard normal
draws taken in turn; random signs, as training gradients have).

Data independence (torch rows "own kernel: random / constant gradients"): each
algorithm's generated kernel (``compile=True``) timed on random-sign gradients and on
constant ones (all ones), in one process, the two optimizers' steps interleaved; the
ratio of their fastest steps must be at most :data:`INDEPENDENCE` (met/missed in the
results; ``--only independence`` measures these rows again into existing results). Speed that does
not depend on the data is also tested deterministically (tests/test_kernel_speed.py:
callgrind's mispredicted branches, the same on both).

Every measurement runs in a process of its own (one framework per process): the median
of ``--repeats`` timed steps after two untimed ones. Ratios are against the baseline
measured in the same run. "step peak MB": how far the resident memory rose above its
size before the timed steps while they ran (each step's temporaries). Writes
``OUT/algorithm_step_time.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from harness import TORCH_PEERS, Harness, with_rows_of_others  # this folder's
from peak_memory import reset_peak, status_mib  # this folder's

from unified_opt.files import write_text
from unified_opt.records import benchmarked

SIZES = {"torch": (4096, 4096), "paddle": (2048, 2048), "mindspore": (2048, 2048),
         "mindspore-graph": (2048, 2048)}
#: untimed steps of a uo build before timing, in seconds: the background compile of
#: compile="auto" lands in them (a long run's steady state)
SETTLE_SECONDS = 6.0
BASELINES = {"torch": ("torch.optim.Adam", {"lr": 1e-3, "fused": True}),
             "paddle": ("paddle.optimizer.Adam", {"learning_rate": 1e-3}),
             "mindspore": ("mindspore.nn.Adam", {"learning_rate": 1e-3}),
             "mindspore-graph": ("mindspore.nn.Adam", {"learning_rate": 1e-3})}
#: the own update's ``compile`` option per row kind (JSON; null: the default build)
MODES = {"torch": ["null", "false", "true", '"inductor"'], "paddle": ["null", "false", "true"],
         "mindspore": ["null", "false", "true"], "mindspore-graph": ["null", "true"]}


def _expression(spec) -> str:
    """``spec`` as :func:`unified_opt.expressions.parse_spec` reads it: its class and the
    fields that differ from the defaults."""
    default = type(spec)()
    changed = [f"{f.name}={getattr(spec, f.name)!r}" for f in dataclasses.fields(spec)
               if getattr(spec, f.name) != getattr(default, f.name)]
    return f"{type(spec).__name__}({', '.join(changed)})"


#: uo specs, as :func:`unified_opt.expressions.parse_spec` reads them: every algorithm
#: whose record names a benchmark spec (:mod:`unified_opt.records`)
ALGORITHMS = {name: _expression(spec) for name, spec in benchmarked().items()}
#: the own kernel on random-sign gradients over its time on constant ones, at most
INDEPENDENCE = 1.3
#: rounds of the data-independence measurement, at least
INDEPENDENCE_ROUNDS = 31
#: Lion's own kernel over fused Adam (torch, random gradients), at most (issue 21)
LION_OVER_ADAM = 1.2
#: torch peers per algorithm: (qualified class, kwargs)
PEERS = {
    "adam": [("torch.optim.Adam", {"lr": 1e-3})],
    "adamw": [("torch.optim.AdamW", {"lr": 1e-3, "weight_decay": 0.01, "fused": True})],
    **TORCH_PEERS,
}


def measure(backend: str, what: str, repeats: int) -> dict:
    """In this process: ``what`` is ``native|<qualified>|<json kwargs>``,
    ``uo|<spec expression>|<compile option as JSON>`` or ``independence|<spec
    expression>|true`` (:func:`independence`); returns the timings."""
    kind, target, extra = what.split("|")
    harness = Harness(backend, threads=0)      # the framework's own thread defaults
    if kind == "independence":
        return independence(harness, SIZES[backend], target, repeats)
    named = harness.seeded_params([SIZES[backend]])
    grads = harness.grads(named)          # a new random set each step
    started = time.perf_counter()
    if kind == "uo":
        import unified_opt as uo
        from unified_opt.expressions import parse_spec

        mode = json.loads(extra)        # None: the default build; else the own path's
        own = {} if mode is None else {"path": "own", "options": {"compile": mode}}
        opt = uo.build(parse_spec(target), named, **own)
    else:
        opt = harness.hand_built(target, json.loads(extra), named)

    def step():
        harness.step(opt, grads)

    step()
    first = time.perf_counter() - started
    settle = time.perf_counter()
    step()
    while kind == "uo" and time.perf_counter() - settle < SETTLE_SECONDS:
        step()              # "auto": its kernels compile in the background meanwhile
    resident = status_mib("VmRSS")
    reset_peak()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return {"ms": round(statistics.median(times) * 1000, 2), "first_step_s": round(first, 2),
            "step_peak_mb": round(status_mib("VmHWM") - resident, 1)}


def independence(harness, shape, expression: str, repeats: int) -> dict:
    """The own kernel of ``expression`` (``compile=True``) on random-sign and on constant
    gradients: two optimizers, their steps interleaved (load on the machine falls on both
    alike) for at least :data:`INDEPENDENCE_ROUNDS` rounds; the ratio of the fastest
    steps (what the code costs: a step that other processes slowed is slower on either
    data), medians beside them."""
    import unified_opt as uo
    from unified_opt.expressions import parse_spec

    runs = {}
    for gradient in ("random", "constant"):
        named = harness.seeded_params([shape])
        opt = uo.build(parse_spec(expression), named, path="own", options={"compile": True})
        runs[gradient] = (opt, harness.grads(named, gradient))
    times = {gradient: [] for gradient in runs}
    for round_ in range(max(repeats, INDEPENDENCE_ROUNDS) + 2):
        for gradient, (opt, grads) in runs.items():
            t0 = time.perf_counter()
            harness.step(opt, grads)
            if round_ >= 2:
                times[gradient].append(time.perf_counter() - t0)
    fastest = {g: min(t) * 1000 for g, t in times.items()}
    median = {g: statistics.median(t) * 1000 for g, t in times.items()}
    ratio = fastest["random"] / fastest["constant"]
    return {"random_ms": round(fastest["random"], 2),
            "constant_ms": round(fastest["constant"], 2),
            "random_median_ms": round(median["random"], 2),
            "constant_median_ms": round(median["constant"], 2),
            "independence": round(ratio, 2),
            "met": "met" if ratio <= INDEPENDENCE else "missed"}


def _run(backend: str, what: str, repeats: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--measure", backend, what,
                          "--repeats", str(repeats)], capture_output=True, text=True)
    if out.returncode != 0:
        return {"error": (out.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


def rows_of(backend: str, repeats: int) -> list[dict]:
    base_name, base_kwargs = BASELINES[backend]
    base = _run(backend, f"native|{base_name}|{json.dumps(base_kwargs)}", repeats)
    rows = [{"backend": backend, "algorithm": "adam", "what": f"{base_name} (baseline)",
             **base}]
    for algorithm, expression in ALGORITHMS.items():
        for mode in MODES[backend]:
            label = {"null": "uo (default build)", "false": "uo own, eager",
                     "true": "uo own, generated kernel",
                     '"inductor"': "uo own, Inductor"}[mode]
            rows.append({"backend": backend, "algorithm": algorithm, "what": label,
                         **_run(backend, f"uo|{expression}|{mode}", repeats)})
        for qualified, kwargs in PEERS.get(algorithm, []) if backend == "torch" else []:
            if importlib.util.find_spec(qualified.split(".")[0]) is None:
                continue
            rows.append({"backend": backend, "algorithm": algorithm, "what": qualified,
                         **_run(backend, f"native|{qualified}|{json.dumps(kwargs)}",
                                repeats)})
    if backend == "torch":
        for algorithm, expression in ALGORITHMS.items():
            rows.append({"backend": backend, "algorithm": algorithm,
                         "what": "own kernel: random / constant gradients",
                         **_run(backend, f"independence|{expression}|true", repeats)})
    for row in rows:
        if "ms" in row and "ms" in base:
            row["ratio"] = round(row["ms"] / base["ms"], 2)
    return rows


def summary(rows: list[dict]) -> list[str]:
    """The issue's targets, met or missed, from ``rows``."""
    lines = []
    independence = [r for r in rows if "independence" in r]
    if independence:
        worst = max(independence, key=lambda r: r["independence"])
        lines.append(f"- data independence (own kernel, random-sign over constant "
                     f"gradients, at most {INDEPENDENCE}): "
                     f"{'met' if all(r['met'] == 'met' for r in independence) else 'missed'}"
                     f"; the largest {worst['independence']} ({worst['algorithm']})")
    lion = [r for r in rows if r["backend"] == "torch" and r["algorithm"] == "lion"
            and r["what"] == "uo own, generated kernel" and "ratio" in r]
    if lion:
        ratio = lion[0]["ratio"]
        met = "met" if ratio <= LION_OVER_ADAM else "missed"
        lines.append(f"- Lion's own kernel over fused Adam (torch, random gradients, at most "
                     f"{LION_OVER_ADAM}): {ratio}, {met}")
    return lines


def markdown(rows: list[dict]) -> str:
    lines = ["| backend | algorithm | step | ms | × fastest native Adam | first step s "
             "(incl. compile) | step peak MB |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        if "independence" in r:
            continue
        lines.append(f"| {r['backend']} | {r['algorithm']} | {r['what']} | "
                     f"{r.get('ms', r.get('error'))} | {r.get('ratio', '')} | "
                     f"{r.get('first_step_s', '')} | {r.get('step_peak_mb', '')} |")
    independence = [r for r in rows if "independence" in r or (
        "error" in r and r["what"].startswith("own kernel:"))]
    if independence:
        lines += ["", f"Data independence (torch {SIZES['torch'][0]}², own kernel, "
                  f"`compile=True`): random-sign over constant gradients, at most "
                  f"{INDEPENDENCE}", "",
                  "| algorithm | random ms (fastest; median) | constant ms (fastest; median) "
                  "| random / constant (fastest) | |", "|---|---|---|---|---|"]
        for r in independence:
            lines.append(f"| {r['algorithm']} | {r.get('random_ms', r.get('error'))}; "
                         f"{r.get('random_median_ms', '')} | {r.get('constant_ms', '')}; "
                         f"{r.get('constant_median_ms', '')} | {r.get('independence', '')} | "
                         f"{r.get('met', '')} |")
    found = summary(rows)
    if found:
        lines += ["", "Targets:", ""] + found
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backends", default="torch,paddle,mindspore,mindspore-graph")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    parser.add_argument("--measure", nargs=2, metavar=("BACKEND", "WHAT"))
    parser.add_argument("--update", action="store_true",
                        help="replace only the rows of these backends in "
                             "OUT/algorithm_step_time.json")
    parser.add_argument("--only", choices=["independence"],
                        help="measure only the data-independence rows again, into the "
                             "results in OUT")
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(*args.measure, args.repeats)))
        return
    if args.only:
        path = args.out / "algorithm_step_time.json"
        rows = [r for r in json.loads(path.read_text())
                if not r["what"].startswith("own kernel:")]
        rows += [{"backend": "torch", "algorithm": algorithm,
                  "what": "own kernel: random / constant gradients",
                  **_run("torch", f"independence|{expression}|true", args.repeats)}
                 for algorithm, expression in ALGORITHMS.items()]
        write_text(path, json.dumps(rows, indent=1) + "\n")
        write_text(args.out / "algorithm_step_time.md", markdown(rows))
        print(markdown(rows))
        return
    rows = []
    for backend in args.backends.split(","):
        if importlib.util.find_spec(backend.split("-")[0]) is None:
            continue
        rows += rows_of(backend, args.repeats)
        print(markdown(rows), flush=True)
    if args.update:
        rows = with_rows_of_others(
            json.loads((args.out / "algorithm_step_time.json").read_text()), rows,
            args.backends)
    args.out.mkdir(parents=True, exist_ok=True)
    write_text(args.out / "algorithm_step_time.json", json.dumps(rows, indent=1) + "\n")
    write_text(args.out / "algorithm_step_time.md", markdown(rows))
    print("\n".join(summary(rows)))


if __name__ == "__main__":
    main()
