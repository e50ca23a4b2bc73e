"""docs/speed.md's picture and table, drawn from the committed realistic-sets results
(``benchmarks/results/realistic_sets.json``, made by ``benchmarks/realistic_sets.py``)
and the table ``uo.build`` reads (``unified_opt/speed_table.json``), never by hand:

* ``plots/realistic_sets.png``: per framework (one thread; MindSpore in PyNative and in
  GRAPH_MODE, ``mindspore-graph``), each native class's step
  over the own path's on every measured set (above the threshold line the default build
  takes the own path); on torch, the own-only algorithms and the peer libraries as
  multiples of ``torch.optim.AdamW(fused=True)`` on the GPT-2-like and ResNet-18 sets;
* ``plots/realistic_sets.md``: the sets and their models, and per backend and thread
  count the path the default build takes on each set.

    python docs/speed_plot.py            # draw both
    python docs/speed_plot.py --check    # exit 1 when either is not current

The PNG carries the sha256 of its inputs and of this script in its metadata
(``Description``), so ``--check`` (and tests/test_speed_sets.py) can tell a stale picture
without redrawing it bit for bit (matplotlib's rendering differs between versions).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "realistic_sets.json"
TABLE = ROOT / "unified_opt" / "speed_table.json"
OUT = ROOT / "docs" / "plots"
PICTURE, PAGE = "realistic_sets.png", "realistic_sets.md"
BACKENDS = ("torch", "paddle", "mindspore", "mindspore-graph")
DPI = 90


def digest() -> str:
    """sha256 over this script and the results (names and bytes)."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    for path in (RESULTS, TABLE):
        h.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def _rows(data: dict, backend: str, threads: int = 1) -> list[dict]:
    return [r for r in data["rows"] if r["backend"] == backend and r["threads"] == threads
            and "error" not in r]


def _label(row: dict) -> str:
    return row["native"].replace("mindspore.experimental.optim.", "ms.exp.") \
        .replace("mindspore.nn.", "ms.nn.").replace("paddle.optimizer.", "paddle.") \
        .replace("paddle.incubate.optimizer.", "paddle.") if row.get("native") else ""


def draw(out: Path = OUT) -> Path:
    """The picture, written into ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = json.loads(RESULTS.read_text())
    threshold = json.loads(TABLE.read_text())["threshold"]
    sets = list(data["sets"])
    fig, axes = plt.subplots(len(BACKENDS) + 1, 1, figsize=(12, 4.25 * (len(BACKENDS) + 1)))
    palette = plt.get_cmap("tab10").colors
    for axis, backend in zip(axes, BACKENDS):
        rows = [r for r in _rows(data, backend) if r.get("native")]
        classes = sorted({_label(r) for r in rows})
        width = 0.8 / len(sets)
        for i, name in enumerate(sets):
            values = {_label(r): r["native_ms"] / r["own_ms"] for r in rows if r["set"] == name}
            xs = [x + (i - (len(sets) - 1) / 2) * width for x, c in enumerate(classes)
                  if c in values]
            axis.bar(xs, [values[c] for c in classes if c in values], width * 0.95,
                     color=palette[i], label=name)
        axis.set_yscale("log")
        axis.axhline(threshold, color="grey", linewidth=0.8)
        axis.set_xticks(range(len(classes)), classes, rotation=30, ha="right", fontsize=7)
        axis.set_ylabel("native step / own step (log)")
        axis.set_title(f"{backend}, 1 thread: each native class against the own path "
                       f"(above the line at {threshold:g} the default takes the own path)",
                       fontsize=10)
        axis.legend(fontsize=7, loc="upper right")
    axis = axes[-1]
    torch_rows = [r for r in _rows(data, "torch") if not r.get("native")
                  and "x_fused_adamw" in r]
    groups = sorted({r["algorithm"] for r in torch_rows})
    series: dict[str, dict[str, float]] = {}
    for r in torch_rows:
        if r["set"] not in ("gpt2", "resnet18"):
            continue
        for what, value in r["x_fused_adamw"].items():
            who = "uo own path" if what == "own" else what.split(".")[0]
            series.setdefault(f"{who}, {r['set']}", {})[r["algorithm"]] = value
    width = 0.8 / max(1, len(series))
    for i, (label, values) in enumerate(sorted(series.items())):
        xs = [x + (i - (len(series) - 1) / 2) * width for x, g in enumerate(groups)
              if g in values]
        axis.bar(xs, [values[g] for g in groups if g in values], width * 0.95,
                 color=palette[i % 10], label=label)
    axis.set_yscale("log")
    axis.axhline(1.0, color="grey", linewidth=0.8)
    axis.set_xticks(range(len(groups)), groups)
    axis.set_ylabel("step, x fused torch.optim.AdamW (log)")
    axis.set_title("torch, 1 thread: algorithms without a native class, uo and the peer "
                   "libraries", fontsize=10)
    axis.legend(fontsize=7, loc="upper center", ncol=4, bbox_to_anchor=(0.5, -0.08))
    fig.tight_layout()
    path = out / PICTURE
    fig.savefig(path, dpi=DPI, metadata={"Description": f"sha256 {digest()}"})
    plt.close(fig)
    return path


def page() -> str:
    """The sets and, per backend and thread count, the default's path on each set."""
    data = json.loads(RESULTS.read_text())
    threshold = json.loads(TABLE.read_text())["threshold"]
    sets = list(data["sets"])
    lines = ["| set | tensors | elements | in conv weights | in 1-D tensors |",
             "|---|---|---|---|---|"]
    for name, info in data["sets"].items():
        lines.append(f"| {name} | {info['tensors']} | {info['elements']:,} "
                     f"| {info['conv_share']:.1%} | {info['vector_share']:.1%} |")
    lines.append("")
    counts = sorted({r["threads"] for r in data["rows"] if "threads" in r})
    for backend in BACKENDS:
        for n in counts:
            rows = [r for r in _rows(data, backend, n) if r.get("native")]
            if not rows:
                continue
            lines += [f"**{backend}, {n} thread{'s' * (n != 1)}**: native step / own step "
                      f"per set, in bold where the default takes the own path "
                      f"(at least {threshold:g}):", "",
                      "| native class | spec | " + " | ".join(sets) + " |",
                      "|---|---|" + "---|" * len(sets)]
            for key in dict.fromkeys(r["key"] for r in rows):
                found = {r["set"]: r for r in rows if r["key"] == key}
                first = next(iter(found.values()))
                cells = []
                for name in sets:
                    if name not in found:
                        cells.append("")
                        continue
                    ratio = round(found[name]["native_ms"] / found[name]["own_ms"], 2)
                    cells.append(f"**{ratio:g}**" if ratio >= threshold else f"{ratio:g}")
                lines.append(f"| `{first['native']}` | `{first['expression']}` | "
                             + " | ".join(cells) + " |")
            lines.append("")
    return "\n".join(lines)


def _description(path: Path) -> str | None:
    from PIL import Image

    with Image.open(path) as image:
        return image.info.get("Description")


def stale(out: Path = OUT) -> list[str]:
    """What in ``out`` is not what the committed results make."""
    problems = []
    picture = out / PICTURE
    if not picture.exists() or _description(picture) != f"sha256 {digest()}":
        problems.append(f"{PICTURE}: not drawn from the committed results by this script")
    table = out / PAGE
    if not table.exists() or table.read_text() != page():
        problems.append(f"{PAGE}: not the committed results' table")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when the picture or the table is not current")
    args = parser.parse_args(argv)
    if args.check:
        problems = stale()
        for problem in problems:
            print(f"stale: docs/plots/{problem}")
        return 1 if problems else 0
    OUT.mkdir(parents=True, exist_ok=True)
    from unified_opt.files import write_text

    print(f"wrote {draw().relative_to(ROOT)}")
    write_text(OUT / PAGE, page())
    print(f"wrote docs/plots/{PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
