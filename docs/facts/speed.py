"""docs/backends.md's and docs/training.md's figures on ``prefer="speed"``: the
threshold and the table ``uo.build`` reads (``unified_opt/speed_table.json``, made by
``benchmarks/speed_table.py`` from ``benchmarks/results/native_vs_own.json`` and the GPU
run), the gradient check's cost (``gradient_check_cost.json``) and MindSpore's two graph
forms (``mindspore_graph_forms.json``)."""

from __future__ import annotations

import textwrap

from .common import RESULTS, load, num, span

#: the table's backends in the order the page lists them, and how a reader names them
BACKENDS = (("torch", "cpu", "torch, CPU"), ("torch", "cuda", "torch, CUDA"),
            ("paddle", "cpu", "Paddle, CPU"), ("mindspore", "cpu", "MindSpore, CPU, PyNative"),
            ("mindspore-graph", "cpu", "MindSpore, CPU, GRAPH_MODE"))
#: the explain example of docs/backends.md: MindSpore's AdamW on a large model
EXAMPLE = ("mindspore", "cpu", "adamw", "mindspore.experimental.optim.AdamW", 4198400)


def decisions() -> str:
    """A table per backend and device: each exact native class, and the measured
    ``native ms / own ms`` per size class, in bold where the own update is taken."""
    from unified_opt.speed import SIZE_CLASSES, THRESHOLD, table

    data = table()
    classes = [name for name, _ in SIZE_CLASSES]
    lines = []
    for backend, device, title in BACKENDS:
        rows = [r for r in data["rows"] if r["backend"] == backend and r["device"] == device]
        if not rows:
            continue
        natives = sorted({r["native"] for r in rows})
        lines += [f"**{title}** ({data['sources'][rows[0]['source']]['machine']}):", "",
                  "| native class | " + " | ".join(classes) + " |",
                  "|---|" + "---|" * len(classes)]
        for native in natives:
            cells = []
            for size in classes:
                found = [r for r in rows if r["native"] == native and r["size_class"] == size]
                if not found:
                    cells.append("")
                    continue
                ratio = f"{found[0]['native_over_own']:g}x"
                cells.append(f"**{ratio}**" if found[0]["native_over_own"] >= THRESHOLD
                             else ratio)
            lines.append(f"| `{native}` | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def explain_example() -> str:
    """What ``uo.explain`` prints for :data:`EXAMPLE`, from the same table row."""
    from unified_opt.speed import lookup

    backend, device, algorithm, native, elements = EXAMPLE
    measured = lookup(backend, device, algorithm, native, elements)
    why = (f"why: prefer='speed': the own implementation is {measured.ratio:g}x faster "
           f"than {native}, which also computes this spec exactly ({measured}); "
           f"prefer='native' builds {native}; ...")
    lines = [">>> print(uo.explain(uo.build(uo.AdamW(lr=1e-3, weight_decay=0.01), ms_net)))",
             f"{backend}: {algorithm} -> own implementation "
             "(unified_opt.backends.mindspore.optimizer.SpecOptimizer ...)"]
    lines += textwrap.wrap(why, 88, initial_indent="  ", subsequent_indent="    ")
    lines.append(f"  alternative: {native} ({measured.ratio:g}x: native "
                 f"{measured.native_ms:.3g} ms, own {measured.own_ms:.3g} ms per step)")
    return "```text\n" + "\n".join(lines) + "\n```\n"


def pages() -> dict[str, str]:
    return {"speed_decisions.md": decisions(), "explain_example.md": explain_example()}


def substitutions() -> dict[str, str]:
    from unified_opt.speed import THRESHOLD

    cost = {row["framework"]: row["check_us_per_param"]
            for row in load(RESULTS / "gradient_check_cost.json")["rows"]}
    forms = load(RESULTS / "mindspore_graph_forms.json")["rows"]
    return {
        "speed_threshold": f"{THRESHOLD:g}x",
        "gradient_check_torch": f"{num(cost['torch'], 1)} µs",
        "graph_ops_over_custom": span([r["ops_ms"] / r["custom_ms"] for r in forms], 0, "x"),
    }
