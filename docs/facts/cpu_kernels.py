"""docs/kernels.md's figures: the own CPU kernels against the frameworks' optimizers
(``benchmarks/results/algorithm_step_time.json``), the options without a system
compiler (``no_compiler.json``) and a conv weight against a matrix (``conv_shapes.json``)."""

from __future__ import annotations

from unified_opt.records import benchmarked

from .common import RESULTS, load, num, span

#: the benchmark table's algorithms (the records that name a benchmark spec, in the
#: registry's order) and the name of each one's spec class
NAMES = {name: type(spec).__name__ for name, spec in benchmarked().items()}
ALGORITHMS = tuple(NAMES)
KERNEL = "uo own, generated kernel"
OTHERS = ("paddle", "mindspore", "mindspore-graph")
#: the table's columns after the algorithm: (backend, header)
COLUMNS = (("torch", "torch own kernel"), ("torch-peer", "fastest torch peer"),
           ("paddle", "Paddle own kernel"), ("mindspore", "MindSpore PyNative own kernel"),
           ("mindspore-graph", "MindSpore GRAPH_MODE own kernel"))
#: the no-compiler options, as the page's table names them
OPTIONS = (("zig", "**ziglang's clang** (chosen)"),
           ("vm-x86-64-v3", "the VM prebuilt for x86-64-v3, in a wheel"),
           ("vm-x86-64-v2", "the VM prebuilt for x86-64-v2 (no dispatch)"),
           ("numba", "numba from the same `KernelPlan` (prototype)"))


def _steps() -> list[dict]:
    return [row for row in load(RESULTS / "algorithm_step_time.json") if "ms" in row]


def _independence() -> list[dict]:
    return [row for row in load(RESULTS / "algorithm_step_time.json") if "independence" in row]


def _peer(rows: list[dict], algorithm: str) -> str:
    peers = [r for r in rows if r["backend"] == "torch" and r["algorithm"] == algorithm
             and not r["what"].startswith("uo")]
    best = min(peers, key=lambda r: r["ratio"])
    return f"{num(best['ratio'])} (`{best['what'].removesuffix(' (baseline)')}`)"


def step_table() -> str:
    rows = _steps()
    lines = ["| algorithm | " + " | ".join(header for _, header in COLUMNS) + " |",
             "|---|" + "---|" * len(COLUMNS)]
    for algorithm in ALGORITHMS:
        cells = []
        for backend, _ in COLUMNS:
            if backend == "torch-peer":
                cells.append(_peer(rows, algorithm))
                continue
            found = [r for r in rows if r["backend"] == backend
                     and r["algorithm"] == algorithm and r["what"] == KERNEL]
            cells.append(num(found[0]["ratio"]) if found else "")
        lines.append(f"| {NAMES[algorithm]} | " + " | ".join(cells) + " |")
    baselines = {r["backend"]: r for r in rows if r["what"].endswith("(baseline)")}
    said = ", ".join(f"{backend} `{row['what'].removesuffix(' (baseline)')}` {num(row['ms'])} ms"
                     for backend, row in baselines.items())
    return "\n".join(lines) + f"\n\nBaselines in that run: {said}.\n"


def no_compiler_table() -> str:
    measured = load(RESULTS / "no_compiler.json")
    rows = measured["rows"]
    lines = ["| option | step time × system compiler's kernels | same bits | algorithms |",
             "|---|---|---|---|"]
    for key, title in OPTIONS:
        over = [r["over_system"][key] for r in rows if key in r["over_system"]]
        bits = all(r["same_bits"][key] for r in rows if key in r["same_bits"])
        names = [NAMES[r["algorithm"]] for r in rows if key in r["over_system"]]
        covers = "all" if len(names) == len(rows) else ", ".join(names)
        lines.append(f"| {title} | {span(over)} | {'yes' if bits else 'no'} | {covers} |")
    return "\n".join(lines) + "\n"


def pages() -> dict[str, str]:
    return {"kernel_steps.md": step_table(), "no_compiler.md": no_compiler_table()}


def substitutions() -> dict[str, str]:
    rows = _steps()

    def ratios(what: str, backends=("torch", "paddle", "mindspore")) -> list[float]:
        return [r["ratio"] for r in rows if r["what"] == what and r["backend"] in backends]

    def firsts(backends) -> list[float]:
        return [r["first_step_s"] for r in rows if r["what"] == KERNEL
                and r["backend"] in backends]

    eager_peak = [r["step_peak_mb"] for r in rows if r["what"] == "uo own, eager"
                  and r["backend"] in ("torch", "paddle")]
    independence = ", ".join(f"{num(r['independence'])} ({NAMES[r['algorithm']]})"
                             for r in _independence())
    lion = [r for r in rows if r["backend"] == "torch" and r["algorithm"] == "lion"
            and r["what"] == KERNEL][0]
    no_compiler = load(RESULTS / "no_compiler.json")
    installed = no_compiler["installed_mb"]
    numba = [r["compile_s"]["numba"] for r in no_compiler["rows"] if "numba" in r["compile_s"]]
    vm = {key: [r["over_system"][key] for r in no_compiler["rows"]]
          for key in ("vm-x86-64-v3", "vm-x86-64-v2")}
    conv = load(RESULTS / "conv_shapes.json")["rows"]
    one_d = [r for r in conv if r.get("target")]
    factored = [r for r in conv if r.get("conv_over_adamw")]
    return {
        "kernel_eager": span(ratios("uo own, eager", ("torch", "paddle", "mindspore")), 0, "×"),
        "kernel_inductor": span(ratios("uo own, Inductor"), 1, "×"),
        "kernel_first_torch": span(firsts(("torch",)), 1, " s"),
        "kernel_first_others": f"{num(max(firsts(OTHERS)), 1)} s",
        "kernel_eager_peak": span(eager_peak, 0, " MB"),
        "kernel_independence": independence,
        "kernel_lion_random": f"{num(lion['ratio'])}×",
        "no_compiler_load": num(sum(no_compiler["load"]) / len(no_compiler["load"]), 0),
        "zig_installed": f"{no_compiler['installed_mb']['ziglang']} MB",
        "numba_installed": f"{installed['numba'] + installed['llvmlite']} MB (llvmlite "
                           f"{installed['llvmlite']} MB)",
        "zig_cold_build": f"{num(no_compiler['cold_zig_s'], 0)} s",
        "numba_compile": span(numba, 1, " s"),
        "vm_v3_over_kernels": span(vm["vm-x86-64-v3"], 1, "×"),
        "vm_v2_over_kernels": span(vm["vm-x86-64-v2"], 0, "×"),
        "conv_one_d_target": f"{num(one_d[0]['target'])}x",
        "conv_one_d_worst": f"{num(max(r['conv_over_matrix'] for r in one_d))}x",
        "conv_factored_over_matrix": span([r["conv_over_matrix"] for r in factored], 0, "x"),
        "conv_factored_over_adamw": span([r["conv_over_adamw"] for r in factored], 0, "x"),
    }
