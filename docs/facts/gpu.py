"""docs/devices.md's figures, from the committed GPU run
(``benchmarks/results/gpu_check_h100/``: ``python benchmarks/gpu_check.py --out DIR``
on one GPU machine): the conformance counts, the CUDA tests' summary and the step
times against ``torch.optim.AdamW(fused=True)``."""

from __future__ import annotations

import re

from .common import RESULTS, load, num

RUN = RESULTS / "gpu_check_h100"
OWN = ("adamw", "lion", "lars", "lamb", "came", "adafactor")
NAMES = {"adamw": "AdamW", "lion": "Lion", "lars": "LARS", "lamb": "Lamb", "came": "CAME",
         "adafactor": "Adafactor"}
#: the offload rows the page lists, in its order
OFFLOAD = ("offload/adam", "offload/adam-on-device", "offload/adam-table",
           "offload/adam-copy-engine", "offload/adam-values-kept")


def _steps() -> dict:
    return load(RUN / "gpu_step_time.json")


def _rows() -> dict[str, dict]:
    return {row["key"]: row for row in _steps()["rows"]}


def _tests() -> str:
    """The summary line pytest printed at the end of the CUDA tests
    (``176 passed, 11 skipped in 106.09s (0:01:46)``), as prose."""
    text = (RUN / "cuda_tests.txt").read_text(encoding="utf-8")
    found = re.findall(r"^(\d+ passed(?:, \d+ \w+)*) in ([\d.]+)s", text, re.M)
    if not found:
        raise ValueError(f"{RUN / 'cuda_tests.txt'}: no pytest summary line")
    counts, seconds = found[-1]
    return f"{counts}, in {num(float(seconds), 0)} s"


def run() -> str:
    steps, rows = _steps(), _rows()
    environment = load(RUN / "environment.json")
    counts = load(RUN / "conformance.json")["counts"]
    targets = steps["targets"]["speed_x_fused_adamw"]
    lines = [
        f"The committed run: one {environment['gpu']} (torch {environment['torch']}, Triton "
        f"{environment['triton']}, {environment['cpu_count']} host threads), "
        "`python benchmarks/gpu_check.py --out DIR`, kept in "
        "`benchmarks/results/gpu_check_h100/` and copied to "
        "`benchmarks/results/gpu_step_time.md` and `benchmarks/results/gpu_conformance.md`. "
        f"{steps['parameters']['name']} ({steps['parameters']['tensors']} float32 tensors, "
        f"{steps['parameters']['elements'] / 1e6:.1f}M elements), fresh random gradients "
        "each step, each ratio to `torch.optim.AdamW(fused=True)` in the same run "
        f"({num(steps['baseline_ms'], 3)} ms).", "",
        f"* Conformance, `unified-opt conformance --device cuda --backends torch`: "
        f"{counts['pass']} of {counts['total']} runs pass, {counts['fail']} fail, "
        f"{counts['error']} error; {counts['not_run']} not run (the distributed DGC cases, "
        "CPU only).",
        f"* CUDA tests: {_tests()}.",
        "* The own path against fused AdamW, and the fastest peer class of the same "
        "algorithm (pytorch-optimizer's) in the same run:", "",
        "  | algorithm | target | `compile=True` | `\"auto\"` | fastest peer |",
        "  |---|---|---|---|---|"]
    met = True
    for algorithm in OWN:
        own = {mode: rows[f"own/{algorithm}/{mode}"] for mode in ("true", "auto")}
        met = met and all(row.get("met") for row in own.values())
        peers = [row for key, row in rows.items() if key.startswith(f"peer/{algorithm}/")]
        peer = min(peers, key=lambda row: row["ratio"]) if peers else None
        peer_text = f"{num(peer['ratio'])} (`{peer['what']}`)" if peer else ""
        lines.append(f"  | {NAMES[algorithm]} | {num(targets[algorithm])} | "
                     f"{num(own['true']['ratio'])} | {num(own['auto']['ratio'])} | {peer_text} |")
    lines += ["", "  " + ("Every target met." if met else "Not every target met: "
                          "`benchmarks/results/gpu_step_time.md` says which.")]
    first = max(rows[f"own/{a}/{m}"]["first_step_s"] for a in OWN for m in ("true", "auto"))
    lines += [
        f"* Default builds: `uo.AdamW` takes `{rows['uo/adamw']['path']}` "
        f"({num(rows['uo/adamw']['ratio'])}x), `uo.Adafactor` the "
        f"{rows['uo/adafactor']['path']} path ({num(rows['uo/adafactor']['ratio'])}x; "
        f"`{rows['native/adafactor']['path']}`, which `prefer=\"native\"` builds, "
        f"{num(rows['native/adafactor']['ratio'], 1)}x). The own path's first step, compile "
        f"included, took at most {num(first, 1)} s with a cold Triton cache "
        f"(target {num(steps['targets']['first_step_s'], 0)} s); CAME's first step in a new "
        f"process, the kernels cached: {num(environment['came_first_step_s_warm_cache'], 1)} s.",
        f"* `uo.AdamOffload()`: {offload_ratio()} the host's fused Adam alone "
        f"({num(rows['offload/adam']['ms'], 1)} against "
        f"{num(rows['offload/host-adam']['ms'], 1)} ms; target "
        f"{num(steps['targets']['offload_x_host_adam'])}x): \"Host offload\" below."]
    return "\n".join(lines) + "\n"


def offload_ratio() -> str:
    return f"{num(_rows()['offload/adam']['over_host_adam'])}x"


def offload() -> str:
    rows = _rows()
    lines = ["| row | what | ms a step | × the host's fused Adam alone |", "|---|---|---|---|"]
    for key in OFFLOAD:
        row = rows[key]
        lines.append(f"| `{key}` | {_plain(row['what'])} | {num(row['ms'], 1)} | "
                     f"{num(row['over_host_adam'])} |")
    host = rows["offload/host-adam"]
    lines.append(f"| `offload/host-adam` | {_plain(host['what'])} | {num(host['ms'], 1)} | 1 |")
    copies = []
    for key, what in (("offload/copy-down", "gradients down"), ("offload/copy-up", "values up")):
        row = rows[key]
        copies.append(f"{what} {num(row['ms'], 1)} ms ({num(row['bytes'] / row['ms'] / 1e6, 0)} "
                      "GB/s)")
    return ("\n".join(lines) + f"\n\nThe copies alone, in the same run: {', '.join(copies)}.\n")


def pages() -> dict[str, str]:
    return {"gpu_run.md": run(), "gpu_offload.md": offload()}


def substitutions() -> dict[str, str]:
    return {"gpu_offload_ratio": offload_ratio()}


def _plain(text: str) -> str:
    """A results file's words as Markdown text: ``2**23`` would open bold."""
    return text.replace("*", r"\*")
