"""How long the full conformance run takes (the README's first command: every case on
torch, Paddle and MindSpore, ``--jobs 2``), and where the time goes.

    python benchmarks/conformance_time.py --label after [--runs 1] [--source DIR]
                                          [--out benchmarks/results/conformance_time.json]

Each run is ``python -m unified_opt.cli conformance --out TMP`` in a fresh process (the
command line's own default jobs and backends), timed by wall clock from its start to
its exit, with its CPU seconds (user + system of every process it started and reaped:
the workers and launchers, and the ranks a launcher reaped: a launch is ended once
its ranks have written their trajectories, and the ranks it then leaves are not reaped
here), which other work on the machine inflates far less, and ``machine_cpu_s``, every
process's CPU on the machine while the run lasted (``/proc/stat``: the ranks included,
other work too).
The machine is shared: the load average (1, 5, 15 min) is read from
``/proc/loadavg`` before and after each run, and with ``--runs N`` the fastest run is
the figure (the others are listed). From the run's ``report.json`` the entry records
the number of results, each backend's worker seconds (shards of one backend summed,
each shard's listed), and the seconds of the runs by kind: distributed cases (their
launches of the ranks), preset cases, the rest; and the slowest cases.

``--source DIR``: run another copy of the project (``git archive`` of an older commit
unpacked in DIR, with ``DIR/unified_opt/conformance`` and ``DIR/unified_opt/backends``
linked to its ``conformance`` and ``backends``) by putting DIR first on PYTHONPATH;
the workers and the ranks inherit it. That is how the ``before`` entry is measured.

The entry under ``--label`` in the results file is replaced; the others stay. Written
atomically (:mod:`unified_opt.files`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from unified_opt.files import write_text

RESULTS = Path(__file__).parent / "results" / "conformance_time.json"
TARGET_S = 180.0


def load() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def kind(result: dict, distributed: set[str]) -> str:
    """The kind of run a result is, for the breakdown."""
    if result["case"] in distributed:
        return "distributed"
    if result["case"].startswith("preset_"):
        return "preset"
    return "other"


def breakdown(report: dict) -> dict:
    """Where the workers' time went, from a report."""
    distributed = {r["case"] for r in report["results"] if r.get("workers", 1) > 1}
    by_kind: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    per_case: dict[tuple[str, str], float] = defaultdict(float)
    for r in report["results"]:
        seconds = r["seconds"] or 0.0
        by_kind[r["backend"]][kind(r, distributed)] += seconds
        per_case[(r["backend"], r["case"])] += seconds
    backends = {}
    for name, entry in report["backends"].items():
        runs = sum(by_kind[name].values())
        # a distributed case's seconds are its launches', which run in a thread of the
        # worker beside its other runs: they are not part of the worker's own time
        own_runs = runs - by_kind[name].get("distributed", 0.0)
        backends[name] = {
            "worker_s": entry["seconds"],
            "shards_s": [s["seconds"] for s in entry.get("shards", [])],
            "runs_s": round(runs, 1),
            # the workers' time outside their runs (but the distributed ones): Python and
            # framework imports, reading the cases, writing results (once per worker)
            "outside_runs_s": round(entry["seconds"] - own_runs, 1),
            "by_kind_s": {k: round(v, 1) for k, v in sorted(by_kind[name].items())},
        }
    slowest = sorted(per_case.items(), key=lambda item: -item[1])[:15]
    return {"backends": backends,
            "slowest_cases": [{"backend": b, "case": c, "seconds": round(s, 1)}
                              for (b, c), s in slowest]}


def _machine_busy() -> float:
    """CPU seconds every process on the machine has run since boot (``/proc/stat``: all
    but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_once(source: Path | None, keep: Path | None = None) -> dict:
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            [str(source)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    with tempfile.TemporaryDirectory(prefix="uo-conformance-time-") as folder:
        out = Path(folder) / "out"
        before = load()
        cpu, busy = _children_cpu(), _machine_busy()
        started = time.perf_counter()
        # cwd: ``-m`` puts the working folder first on sys.path, before PYTHONPATH
        done = subprocess.run([sys.executable, "-m", "unified_opt.cli", "conformance",
                               "--out", str(out)], env=env, capture_output=True, text=True,
                              cwd=folder)
        wall = time.perf_counter() - started
        cpu, busy = _children_cpu() - cpu, _machine_busy() - busy
        after = load()
        report = json.loads((out / "report.json").read_text())
        if keep is not None:
            keep.parent.mkdir(parents=True, exist_ok=True)
            write_text(keep, (out / "report.json").read_text())
    summary = report["summary"]
    return {"wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
            "machine_cpu_s": round(busy, 1), "exit_status": done.returncode,
            "load_before": before, "load_after": after,
            "results": len(report["results"]),
            "statuses": {k: summary.get(k) for k in ("pass", "fail", "error")},
            "last_line": done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "",
            **breakdown(report)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", required=True, help="the entry's name: before, after")
    parser.add_argument("--runs", type=int, default=1, help="runs; the fastest is kept")
    parser.add_argument("--source", type=Path, default=None,
                        help="another copy of the project to run (see the module)")
    parser.add_argument("--note", default="", help="what the entry measures, in words")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--append", action="store_true",
                        help="add the runs to the label's entry (its runs stay: the fastest "
                             "of all is its figure) instead of replacing it")
    parser.add_argument("--reports", type=Path, default=None,
                        help="folder to keep each run's report.json in "
                             "(<label>.<run>.report.json), e.g. to compare two runs' results")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs must be >= 1, got {args.runs}")
    runs = []
    for _ in range(args.runs):
        keep = (None if args.reports is None
                else args.reports / f"{args.label}.{len(runs) + 1}.report.json")
        runs.append(run_once(args.source, keep))
        print(f"{args.label}: {runs[-1]['wall_s']} s wall, {runs[-1]['results']} results, "
              f"load {runs[-1]['load_before']} -> {runs[-1]['load_after']}", flush=True)
    data = json.loads(args.out.read_text()) if args.out.exists() else {}
    earlier = data.get("entries", {}).get(args.label) if args.append else None
    if earlier is not None:
        runs = [earlier["best"], *earlier.get("other_runs", []), *runs]
    best = min(runs, key=lambda r: r["wall_s"])
    data.update({"command": "unified-opt conformance --out DIR (default: --jobs 2, every "
                            "installed backend)",
                 "target_wall_s": TARGET_S, "machine": platform.machine(),
                 "cpus": os.cpu_count(), "python": platform.python_version()})
    data.setdefault("entries", {})[args.label] = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "source": str(args.source) if args.source else "this checkout",
        "note": args.note, "best": best,
        "other_runs": [r for r in runs if r is not best]}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text(args.out, json.dumps(data, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
