"""Run the conformance suite: one worker process per backend, the report in this process.

The parent never imports a framework: it writes the cases as JSON, starts
``python -m unified_opt.conformance.worker`` per backend (at most ``jobs`` at a
time), relays their progress lines, gathers the verdicts the workers wrote (each worker
judges its runs against the float64 oracle as they finish, :mod:`.verdict`), and
returns the report (see :mod:`.report`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable

from .cases import Case
from .report import build_report, write_reports
from .worker import result_stem

STDERR_TAIL = 2000


def _run_worker(backend: str, cases_file: Path, out: Path, progress: Callable[[str], None],
                timeout: float | None, keep_trajectories: bool = False) -> dict:
    if out.exists():                 # results of an earlier run must not be read as ours
        shutil.rmtree(out)
    out.mkdir(parents=True)
    command = [sys.executable, "-m", "unified_opt.conformance.worker", "--backend", backend,
               "--cases", str(cases_file), "--out", str(out)]
    if keep_trajectories:
        command.append("--keep-trajectories")
    started = time.perf_counter()
    stderr_path = out / "stderr.log"
    with open(stderr_path, "w") as stderr, open(out / "stdout.log", "w") as other:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True)
        timer = None
        if timeout is not None:
            timer = threading.Timer(timeout, process.kill)
            timer.start()
        for line in process.stdout:
            if line.startswith("progress ") or line.startswith("start "):
                progress(f"[{backend}] {line.rstrip().partition(' ')[2]}")
            else:                    # what the framework prints
                other.write(line)
        code = process.wait()
        if timer is not None:
            timer.cancel()
    seconds = time.perf_counter() - started
    tail = stderr_path.read_text(errors="replace")[-STDERR_TAIL:]
    info = {"exit_code": code, "seconds": round(seconds, 2), "framework_version": None,
            "error": None, "skipped": [], "unstable": []}
    summary = out / "worker.json"
    if summary.exists():
        written = json.loads(summary.read_text())
        info["framework_version"] = written["framework_version"]
        info["skipped"] = written["skipped"]
        info["unstable"] = written["unstable"]
    if code != 0:
        info["error"] = (f"worker exited with status {code}"
                         + (" (timed out)" if timeout is not None and seconds >= timeout
                            else "") + f"; stderr ends:\n{tail}")
    progress(f"[{backend}] finished in {seconds:.1f} s (exit status {code})")
    return info


def _result(case: Case, backend: str, path: str, run_dir: Path, worker: dict) -> dict:
    """The verdict the worker wrote for (case, path), or an error saying it wrote none."""
    info_file = run_dir / f"{result_stem(case.id, path)}.json"
    if info_file.exists():
        return json.loads(info_file.read_text())
    return {"case": case.id, "algorithm": case.spec.name, "backend": backend, "path": path,
            "status": "error", "lowering": None, "comparison": None, "explanation": None,
            "known": None, "seconds": None,
            "error": worker["error"] or "the worker did not report this run"}


def run(cases: Iterable[Case], backends: Iterable[str], out: Path | str, *, jobs: int = 2,
        progress: Callable[[str], None] = print, timeout: float | None = None,
        keep_trajectories: bool = False) -> dict:
    """Run ``cases`` on ``backends``; write the reports into ``out``; return the report."""
    cases, backends, out = list(cases), list(backends), Path(out)
    if not cases or not backends:
        raise ValueError(f"conformance run: need cases and backends, got {len(cases)} "
                         f"case(s) and backends {backends}")
    out.mkdir(parents=True, exist_ok=True)
    cases_file = out / "cases.json"
    cases_file.write_text(json.dumps([c.to_dict() for c in cases], indent=1))
    lock = threading.Lock()

    def say(line: str) -> None:
        with lock:
            progress(line)

    run_dirs = {b: out / "runs" / b for b in backends}
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {b: pool.submit(_run_worker, b, cases_file, run_dirs[b], say, timeout,
                                  keep_trajectories)
                   for b in backends}
        workers = {b: f.result() for b, f in futures.items()}

    results, unstable = [], set()
    for backend in backends:
        skipped = set(workers[backend].pop("skipped"))
        unstable |= set(workers[backend].pop("unstable"))
        for case in cases:
            if not case.runs_on(backend):
                continue
            for path in case.paths:
                if result_stem(case.id, path) not in skipped:
                    results.append(_result(case, backend, path, run_dirs[backend],
                                           workers[backend]))
    unstable = [c.id for c in cases if c.id in unstable]
    report = build_report(cases, backends, workers, results, unstable_cases=unstable)
    write_reports(report, out)
    return report
