"""The docs site's pictures, drawn with matplotlib from the results committed in the
repository (never by hand):

* ``cpu_step_time.png``: every algorithm's optimizer step on the CPU as a multiple of the
  framework's fastest native Adam, uo against the peer libraries
  (``benchmarks/results/algorithm_step_time.json``);
* ``gpu_step_time.png``: the same on a CUDA GPU against fused ``torch.optim.AdamW``
  (``benchmarks/results/gpu_step_time.json``, when a GPU run is committed; else
  ``gpu_step_time.md`` says that none is);
* ``dgc_traffic.png``: the bytes a DGC rank sends per step along Paddle's sparsity ramp
  (``benchmarks/results/dgc_traffic.json``);
* ``conformance_error_floor.png``: one conformance case's error / float32 noise floor
  per step on every backend and path, against the tolerance K
  (``conformance_adamw.json``: the record of a small conformance run, ``--measure``).

The porting loss curves (``docs/porting_curves.png``) are drawn the same way by
``examples/port/walkthrough.py``.

    python docs/plots.py              # draw every picture from the committed results
    python docs/plots.py --check      # exit 1 when a picture is not current
    python docs/plots.py --measure    # rerun the conformance record (about 20 s), draw

Each PNG carries the sha256 of its inputs and of this script in its metadata
(``Description``), so ``--check`` (and tests/test_docs_site.py) can tell a stale picture
without redrawing it bit for bit (matplotlib's rendering differs between versions).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from unified_opt.records import benchmarked

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
OUT = ROOT / "docs" / "plots"
CPU_RESULTS = RESULTS / "algorithm_step_time.json"
GPU_RESULTS = RESULTS / "gpu_step_time.json"
DGC_RESULTS = RESULTS / "dgc_traffic.json"
CONFORMANCE_RECORD = OUT / "conformance_adamw.json"
GPU_PAGE = OUT / "gpu_step_time.md"
#: the conformance case of the error/floor picture, and what --measure runs
CONFORMANCE_CASE = "adamw_default"
#: the algorithms of the step-time pictures, in this order: the benchmark table's
#: (:func:`unified_opt.records.benchmarked`)
ALGORITHMS = tuple(benchmarked())
DPI = 90


def digest(inputs: list[Path]) -> str:
    """sha256 over this script and ``inputs`` (names and bytes)."""
    h = hashlib.sha256(Path(__file__).read_bytes())
    for path in inputs:
        name = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name
        h.update(name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path, inputs: list[Path]) -> None:
    fig.savefig(path, dpi=DPI, metadata={"Description": f"sha256 {digest(inputs)}"})
    _pyplot().close(fig)


def _bars(axis, groups: list[str], series: dict[str, dict[str, float]], colors: dict) -> None:
    """Grouped bars: one group per algorithm, one bar per label that has a value there."""
    width = 0.8 / max(1, max(sum(g in v for v in series.values()) for g in groups))
    for x, group in enumerate(groups):
        present = [(label, values[group]) for label, values in series.items()
                   if group in values]
        start = x - width * (len(present) - 1) / 2
        for i, (label, value) in enumerate(present):
            axis.bar(start + i * width, value, width * 0.95, color=colors[label],
                     label=label)
    axis.set_xticks(range(len(groups)), groups)
    handles, labels = axis.get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    axis.legend(unique.values(), unique.keys(), fontsize=7, loc="upper left")


def _peer_label(what: str) -> str:
    return "torch.optim" if what.startswith("torch.optim") else what.split(".")[0]


# -- CPU step time ------------------------------------------------------------------------

def cpu_step_time(out: Path) -> None:
    rows = json.loads(CPU_RESULTS.read_text())
    plt = _pyplot()
    fig, (torch_axis, all_axis) = plt.subplots(1, 2, figsize=(13, 4.6),
                                               gridspec_kw={"width_ratios": [3, 2]})
    # torch: uo against the peers, x fused torch.optim.Adam
    series: dict[str, dict[str, float]] = {}
    for r in rows:
        # the data-independence rows (random / constant gradients) have no ratio
        if r["backend"] != "torch" or "baseline" in r["what"] or "ratio" not in r:
            continue
        if r["what"] == "uo (default build)":
            label = "uo.build (default)"
        elif r["what"] == "uo own, generated kernel":
            label = "uo own path, generated kernel"
        elif r["what"].startswith("uo "):
            continue
        else:
            label = _peer_label(r["what"])
        series.setdefault(label, {})[r["algorithm"]] = r["ratio"]
    palette = plt.get_cmap("tab10").colors
    colors = {label: palette[i % 10] for i, label in enumerate(series)}
    algorithms = [a for a in ALGORITHMS if any(a in v for v in series.values())]
    _bars(torch_axis, algorithms, series, colors)
    torch_axis.set_yscale("log")
    torch_axis.axhline(1.0, color="grey", linewidth=0.8)
    torch_axis.set_ylabel("step time, x fused torch.optim.Adam (log)")
    torch_axis.set_title("torch, one 4096x4096 parameter: uo and the peer libraries",
                         fontsize=10)
    # every backend: the default build, x that framework's fastest native Adam
    backends: dict[str, dict[str, float]] = {}
    for r in rows:
        if r["what"] == "uo (default build)":
            backends.setdefault(r["backend"], {})[r["algorithm"]] = r["ratio"]
    colors = {b: palette[i % 10] for i, b in enumerate(backends)}
    algorithms = [a for a in ALGORITHMS if any(a in v for v in backends.values())]
    _bars(all_axis, algorithms, backends, colors)
    all_axis.set_yscale("log")
    all_axis.axhline(1.0, color="grey", linewidth=0.8)
    all_axis.set_ylabel("uo.build's step, x the framework's native Adam (log)")
    all_axis.set_title("every backend: the default build", fontsize=10)
    for axis in (torch_axis, all_axis):
        axis.tick_params(axis="x", labelsize=8)
    fig.tight_layout()
    _save(fig, out / "cpu_step_time.png", [CPU_RESULTS])


# -- GPU step time ------------------------------------------------------------------------

GPU_ABSENT = """\
No GPU run is committed yet: `benchmarks/results/gpu_step_time.json` is written by
`python benchmarks/gpu_step_time.py` on a CUDA machine (`docs/devices.md`), and
`python docs/plots.py` then draws it here.
"""


def gpu_page(report: dict[str, Any] | None) -> str:
    """The plots page's GPU section (docs/plots/gpu_step_time.md, included by
    docs/plots.md: paths relative to docs/)."""
    if report is None:
        return GPU_ABSENT
    env, parameters = report["environment"], report["parameters"]
    return (f"Measured on {env['device_name']} (torch {env['torch']}, triton "
            f"{env['triton']}, CUDA {env['cuda']}) over {parameters['name']}'s parameters "
            f"({parameters['tensors']} float32 tensors, {parameters['elements']:,} "
            "elements): the median `optimizer.step()` as a multiple of "
            "`torch.optim.AdamW(fused=True)` in the same run; the black tick is the "
            "speed target for the algorithm (`benchmarks/results/"
            "gpu_step_time.md` has every row).\n\n"
            "```{image} plots/gpu_step_time.png\n:alt: optimizer step time on a GPU, per "
            "algorithm, uo against the peer libraries\n```\n")


def gpu_step_time(out: Path) -> None:
    png = out / "gpu_step_time.png"
    if not GPU_RESULTS.exists():
        png.unlink(missing_ok=True)
        (out / GPU_PAGE.name).write_text(gpu_page(None))
        return
    report = json.loads(GPU_RESULTS.read_text())
    (out / GPU_PAGE.name).write_text(gpu_page(report))
    baseline = report.get("baseline_ms")
    targets = report.get("targets", {}).get("speed_x_fused_adamw", {})
    series: dict[str, dict[str, float]] = {}
    own: dict[str, tuple[float, str]] = {}
    for r in report["rows"]:
        if "ms" not in r or not baseline:
            continue
        ratio, key = r["ms"] / baseline, r["key"]
        if key.startswith("uo/"):
            series.setdefault("uo.build (default)", {})[r["algorithm"]] = ratio
        elif key.startswith("own/"):        # the fastest own-path engine of the algorithm
            if r["algorithm"] not in own or ratio < own[r["algorithm"]][0]:
                own[r["algorithm"]] = (ratio, key.split("/")[-1])
        elif key.startswith("peer/"):
            series.setdefault(_peer_label(r["what"]), {})[r["algorithm"]] = ratio
    if own:   # after the default build, before the peers (the CPU picture's colours)
        default = {k: v for k, v in series.items() if k == "uo.build (default)"}
        series = {**default, "uo own path (fastest engine)": {a: v for a, (v, _) in
                                                              own.items()},
                  **{k: v for k, v in series.items() if k not in default}}
    plt = _pyplot()
    fig, axis = plt.subplots(figsize=(11, 4.4))
    palette = plt.get_cmap("tab10").colors
    colors = {label: palette[i % 10] for i, label in enumerate(series)}
    algorithms = [a for a in ALGORITHMS if any(a in v for v in series.values())]
    if algorithms:
        _bars(axis, algorithms, series, colors)
    for x, algorithm in enumerate(algorithms):
        if algorithm in targets:
            axis.plot([x - 0.45, x + 0.45], [targets[algorithm]] * 2, color="black",
                      linewidth=1.5)
    axis.set_yscale("log")
    axis.axhline(1.0, color="grey", linewidth=0.8)
    axis.set_ylabel("step time, x fused torch.optim.AdamW (log)")
    axis.set_title(f"{report['environment']['device_name']}, {report['parameters']['name']}",
                   fontsize=10)
    fig.tight_layout()
    _save(fig, png, [GPU_RESULTS])


# -- DGC traffic --------------------------------------------------------------------------

def dgc_traffic(out: Path) -> None:
    data = json.loads(DGC_RESULTS.read_text())
    plt = _pyplot()
    fig, axis = plt.subplots(figsize=(9, 4))
    steps = data["ramp"]["steps"]
    x = list(range(1, len(steps) + 1))
    fraction = [s["sent"] / s["dense"] for s in steps]
    axis.step(x, fraction, where="mid", label="bytes sent / dense all-reduce bytes")
    axis.step(x, [1.0 - s["sparsity"] for s in steps], where="mid", linestyle="--",
              color="grey", label="1 - sparsity (the values kept)")
    default = data["default"]["steps"]
    axis.axhline(default[-1]["sent"] / default[-1]["dense"], color="tab:green",
                 linewidth=0.8, label=f"default sparsity {default[-1]['sparsity']}")
    for stage in sorted({s["sparsity"] for s in steps}):
        first = next(i for i, s in enumerate(steps) if s["sparsity"] == stage)
        axis.annotate(f"{stage:g}", (first + 1, fraction[first]), fontsize=7,
                      xytext=(2, 4), textcoords="offset points")
    axis.set_yscale("log")
    axis.set_xlabel("step")
    axis.set_ylabel("per step, per rank (log)")
    axis.set_title("DGC momentum along Paddle's sparsity ramp: torch, 2 ranks, one "
                   "4096x1024 parameter", fontsize=10)
    axis.legend(fontsize=8)
    fig.tight_layout()
    _save(fig, out / "dgc_traffic.png", [DGC_RESULTS])


# -- conformance --------------------------------------------------------------------------

def measure_conformance(record: Path) -> None:
    """Run the case on every installed backend (the conformance command) and keep, per
    backend and path, its worst error/floor over the quantities at every step."""
    import numpy as np

    from unified_opt.conformance.series import decode

    with tempfile.TemporaryDirectory() as temporary:
        command = [sys.executable, "-m", "unified_opt.cli", "conformance", "--cases",
                   CONFORMANCE_CASE, "--out", temporary]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"conformance run failed:\n{done.stdout}{done.stderr}")
        report = json.loads((Path(temporary) / "report.json").read_text())
    runs = []
    for r in report["results"]:
        if r["case"] != CONFORMANCE_CASE or not r.get("series"):
            continue
        worst = np.max(np.stack(list(decode(r["series"]).values())), axis=0)
        lowering = r["lowering"]
        runs.append({"backend": r["backend"], "path": r["path"], "status": r["status"],
                     "built": lowering.get("native") or "own implementation",
                     "worst_error_over_floor": [float(f"{v:.4g}") for v in worst]})
    record.parent.mkdir(parents=True, exist_ok=True)
    record.write_text(record_text({
        "case": CONFORMANCE_CASE, "tolerance_k": report["tolerance"]["k"],
        "command": f"unified-opt conformance --cases {CONFORMANCE_CASE}",
        "unified_opt_version": report["unified_opt_version"], "cpu": report["cpu"],
        "frameworks": {b: v.get("framework_version") for b, v in report["backends"].items()},
        "runs": runs}))


def record_text(data: dict[str, Any]) -> str:
    """The record as JSON, one line per run."""
    text = json.dumps({**data, "runs": "RUNS"}, indent=1)
    runs = ",\n  ".join(json.dumps(run) for run in data["runs"])
    return text.replace('"RUNS"', f"[\n  {runs}\n ]") + "\n"


def conformance_error_floor(out: Path) -> None:
    record = json.loads(CONFORMANCE_RECORD.read_text())
    plt = _pyplot()
    fig, axis = plt.subplots(figsize=(9, 4.2))
    for run in record["runs"]:
        values = run["worst_error_over_floor"]
        label = f"{run['backend']}, {run['built']}"
        axis.plot(range(1, len(values) + 1), values, marker=".", markersize=3,
                  linewidth=1, label=label, linestyle="-" if run["path"] == "auto" else ":")
    axis.axhline(record["tolerance_k"], color="red", linewidth=1)
    axis.annotate(f"K = {record['tolerance_k']:g}: a step above it fails",
                  (1, record["tolerance_k"]), xytext=(0, 4), textcoords="offset points",
                  fontsize=8, color="red")
    axis.set_yscale("log")
    axis.set_ylim(0.05, record["tolerance_k"] * 4)
    axis.set_xlabel("step")
    axis.set_ylabel("error / float32 noise floor (worst quantity)")
    axis.set_title(f"conformance case {record['case']}: each backend against the float64 "
                   "oracle", fontsize=10)
    axis.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    _save(fig, out / "conformance_error_floor.png", [CONFORMANCE_RECORD])


# -- all of them --------------------------------------------------------------------------

#: picture -> (drawing function, its inputs); the GPU picture only with its results
PLOTS: dict[str, tuple[Callable[[Path], None], Callable[[], list[Path]]]] = {
    "cpu_step_time.png": (cpu_step_time, lambda: [CPU_RESULTS]),
    "gpu_step_time.png": (gpu_step_time, lambda: [GPU_RESULTS] if GPU_RESULTS.exists()
                          else []),
    "dgc_traffic.png": (dgc_traffic, lambda: [DGC_RESULTS]),
    "conformance_error_floor.png": (conformance_error_floor, lambda: [CONFORMANCE_RECORD]),
}


def draw(out: Path = OUT) -> list[Path]:
    """Draw every picture into ``out``; the files written."""
    out.mkdir(parents=True, exist_ok=True)
    for function, _ in PLOTS.values():
        function(out)
    return sorted(out.glob("*.png")) + [out / GPU_PAGE.name]


def png_description(path: Path) -> str | None:
    """The ``Description`` text chunk of a PNG (what :func:`_save` writes)."""
    import struct
    import zlib

    raw, at = path.read_bytes(), 8
    while at < len(raw):
        (size,), kind = struct.unpack(">I", raw[at:at + 4]), raw[at + 4:at + 8]
        body = raw[at + 8:at + 8 + size]
        if kind in (b"tEXt", b"zTXt", b"iTXt"):
            key, _, value = body.partition(b"\0")
            if key == b"Description":
                if kind == b"zTXt":
                    value = zlib.decompress(value[1:])
                elif kind == b"iTXt":
                    value = value[2:].split(b"\0", 2)[-1]
                return value.decode("latin-1")
        at += 12 + size
    return None


def stale(out: Path = OUT) -> list[str]:
    """What is not current in ``out``: each picture whose inputs or script changed since
    it was drawn, a GPU picture without its results, a GPU section that disagrees."""
    problems = []
    for name, (_, inputs) in PLOTS.items():
        path, sources = out / name, inputs()
        if not sources:
            if path.exists():
                problems.append(f"{name}: drawn, but its results are gone")
            continue
        if not path.exists():
            problems.append(f"{name}: not drawn")
        elif png_description(path) != f"sha256 {digest(sources)}":
            problems.append(f"{name}: drawn from other results or another docs/plots.py")
    report = json.loads(GPU_RESULTS.read_text()) if GPU_RESULTS.exists() else None
    page = out / GPU_PAGE.name
    if not page.exists() or page.read_text() != gpu_page(report):
        problems.append(f"{GPU_PAGE.name}: not the GPU section of the committed results")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a picture is not current (draws nothing)")
    parser.add_argument("--measure", action="store_true",
                        help=f"rerun the conformance record ({CONFORMANCE_CASE}) first")
    args = parser.parse_args(argv)
    if args.check:
        problems = stale()
        for problem in problems:
            print(f"stale: docs/plots/{problem}")
        if problems:
            print("run: python docs/plots.py")
        return 1 if problems else 0
    if args.measure:
        measure_conformance(CONFORMANCE_RECORD)
    for path in draw():
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
