"""docs/backends.md's and docs/training.md's figures on ``prefer="speed"``: the
threshold and the table ``uo.build`` reads (``unified_opt/speed_table.json``, made by
``benchmarks/speed_table.py`` from the committed CPU and GPU benchmark results; read here
as data, so a row's fields are all this module relies on), the gradient check's cost
(``gradient_check_cost.json``) and MindSpore's two graph forms
(``mindspore_graph_forms.json``)."""

from __future__ import annotations

from .common import RESULTS, ROOT, load, num, span

TABLE = ROOT / "unified_opt" / "speed_table.json"
#: the table's backends in the order the page lists them, and how a reader names them
BACKENDS = (("torch", "cpu", "torch, CPU"), ("torch", "cuda", "torch, CUDA"),
            ("paddle", "cpu", "Paddle, CPU"), ("mindspore", "cpu", "MindSpore, CPU, PyNative"),
            ("mindspore-graph", "cpu", "MindSpore, CPU, GRAPH_MODE"))
#: the example of docs/backends.md: MindSpore's AdamW class against the own update
EXAMPLE = ("mindspore", "cpu", "adamw", "mindspore.experimental.optim.AdamW")


def _column(row: dict) -> str:
    """What a row measured, as a column of the page's table: its parameter set (or size
    class), and its thread count where the table has one."""
    where = str(row.get("set", row.get("size_class", "")))
    threads = row.get("threads")
    return f"{where}, {threads} threads" if threads is not None else where


def _elements(row: dict) -> int:
    return int(row["model"]["elements"] if "model" in row else row["elements"])


def decisions() -> str:
    """A table per backend and device: each exact native class, and the measured
    ``native ms / own ms`` per parameter set, in bold where the own update is taken."""
    data = load(TABLE)
    lines = []
    for backend, device, title in BACKENDS:
        rows = [r for r in data["rows"] if r["backend"] == backend and r["device"] == device]
        if not rows:
            continue
        columns = sorted({_column(r) for r in rows},
                         key=lambda c: min(_elements(r) for r in rows if _column(r) == c))
        natives = sorted({r["native"] for r in rows})
        lines += [f"**{title}** ({data['sources'][rows[0]['source']]['machine']}):", "",
                  "| native class | " + " | ".join(columns) + " |",
                  "|---|" + "---|" * len(columns)]
        for native in natives:
            cells = []
            for column in columns:
                found = [r for r in rows if r["native"] == native and _column(r) == column]
                if not found:
                    cells.append("")
                    continue
                ratio = found[0]["native_over_own"]
                cells.append(f"**{ratio:g}x**" if ratio >= data["threshold"] else f"{ratio:g}x")
            lines.append(f"| `{native}` | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def example() -> str:
    """:data:`EXAMPLE` on the largest parameters measured, in words."""
    data = load(TABLE)
    backend, device, algorithm, native = EXAMPLE
    rows = [r for r in data["rows"] if (r["backend"], r["device"], r["algorithm"],
                                        r["native"]) == EXAMPLE]
    row = max(rows, key=_elements)
    taken = ("the own implementation" if row["native_over_own"] >= data["threshold"]
             else f"`{native}`")
    return (f"For example, `uo.AdamW(...)` on MindSpore's CPU, PyNative, over the largest "
            f"parameters measured ({_elements(row):,} elements): `{native}` took "
            f"{row['native_ms']:.3g} ms a step and the own implementation "
            f"{row['own_ms']:.3g} ms ({row['native_over_own']:g}x), so `prefer=\"speed\"` "
            f"builds {taken}, and `uo.explain` names the class, the ratio and where it was "
            f"measured ({data['sources'][row['source']]['file']}).\n")


def pages() -> dict[str, str]:
    return {"speed_decisions.md": decisions(), "speed_example.md": example()}


def substitutions() -> dict[str, str]:
    cost = {row["framework"]: row["check_us_per_param"]
            for row in load(RESULTS / "gradient_check_cost.json")["rows"]}
    forms = load(RESULTS / "mindspore_graph_forms.json")["rows"]
    return {
        "speed_threshold": f"{load(TABLE)['threshold']:g}x",
        "gradient_check_torch": f"{num(cost['torch'], 1)} µs",
        "graph_ops_over_custom": span([r["ops_ms"] / r["custom_ms"] for r in forms], 0, "x"),
    }
