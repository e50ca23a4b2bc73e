"""Run the conformance suite: one worker process per backend, comparison in this process.

The parent never imports a framework: it writes the cases as JSON, starts
``python -m unified_opt.conformance.worker`` per backend (at most ``jobs`` at a
time), relays their progress lines, then compares each trajectory with the float64
oracle, explains failures, and returns the report (see :mod:`.report`).
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
from .compare import K, ULPS, compare
from .explainer import explain_failure
from .report import build_report, write_reports
from .trajectory import Trajectory, floor_trajectories, reference_trajectory
from .worker import result_stem

STDERR_TAIL = 2000


class References:
    """Reference trajectories computed once per (case, spec, dtype): the oracle and the
    float32 floor of each case, and the explainer's variants (shared by the backends)."""

    def __init__(self) -> None:
        self._cache: dict = {}

    def get(self, case: Case, dtype: str) -> Trajectory:
        return self.of(case.spec, case, dtype)

    def floors(self, spec, case: Case) -> list[Trajectory]:
        """The float32 references whose error against the oracle is the noise floor."""
        return floor_trajectories(spec, case, self.of)

    def of(self, spec, case: Case, dtype: str) -> Trajectory:
        key = (case.id, case.seed, case.steps, spec, dtype)
        if key not in self._cache:
            self._cache[key] = reference_trajectory(spec, case, dtype)
        return self._cache[key]


def _run_worker(backend: str, cases_file: Path, out: Path, progress: Callable[[str], None],
                timeout: float | None) -> dict:
    if out.exists():                 # results of an earlier run must not be read as ours
        shutil.rmtree(out)
    out.mkdir(parents=True)
    command = [sys.executable, "-m", "unified_opt.conformance.worker", "--backend", backend,
               "--cases", str(cases_file), "--out", str(out)]
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
            "error": None, "skipped": []}
    summary = out / "worker.json"
    if summary.exists():
        written = json.loads(summary.read_text())
        info["framework_version"] = written["framework_version"]
        info["skipped"] = written["skipped"]
    if code != 0:
        info["error"] = (f"worker exited with status {code}"
                         + (" (timed out)" if timeout is not None and seconds >= timeout
                            else "") + f"; stderr ends:\n{tail}")
    progress(f"[{backend}] finished in {seconds:.1f} s (exit status {code})")
    return info


def _result(case: Case, backend: str, path: str, run_dir: Path, worker: dict,
            references: References) -> dict:
    stem = result_stem(case.id, path)
    base = {"case": case.id, "algorithm": case.spec.name, "backend": backend, "path": path,
            "status": None, "lowering": None, "comparison": None, "explanation": None,
            "error": None, "seconds": None}
    info_file = run_dir / f"{stem}.json"
    if not info_file.exists():
        return {**base, "status": "error",
                "error": worker["error"] or "the worker did not report this run"}
    info = json.loads(info_file.read_text())
    base.update(lowering=info["decision"], seconds=info["seconds"])
    if info["error"]:
        return {**base, "status": "error", "error": info["error"]}
    trajectory = Trajectory.load(run_dir / info["trajectory"])
    try:
        oracle = references.get(case, "float64")
        floors = references.floors(case.spec, case)
    except (TypeError, ValueError) as error:   # e.g. --steps past a OneCycle's total_steps
        return {**base, "status": "error", "error": f"the reference cannot run this case: "
                                                    f"{type(error).__name__}: {error}"}
    comparison = compare(trajectory, oracle, floors)
    base["comparison"] = comparison.to_dict()
    if comparison.passed:
        return {**base, "status": "pass"}
    explanation = explain_failure(trajectory, case, reference=references.of)
    return {**base, "status": "fail", "explanation": explanation}


def _stable(case: Case, references: References) -> bool:
    """Does the float32 reference pass against the oracle (else the case is unstable)?
    A case the reference cannot run counts as stable: its results say why."""
    try:
        float32 = references.get(case, "float32")
        return compare(float32, references.get(case, "float64"), float32).passed
    except (TypeError, ValueError):
        return True


def run(cases: Iterable[Case], backends: Iterable[str], out: Path | str, *, jobs: int = 2,
        progress: Callable[[str], None] = print, timeout: float | None = None) -> dict:
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
        futures = {b: pool.submit(_run_worker, b, cases_file, run_dirs[b], say, timeout)
                   for b in backends}
        workers = {b: f.result() for b, f in futures.items()}

    say(f"comparing against the float64 oracle (K={K:g}, {ULPS:g} ulps)")
    references = References()
    results = []
    for backend in backends:
        skipped = set(workers[backend].pop("skipped"))
        for case in cases:
            for path in case.paths:
                if result_stem(case.id, path) not in skipped:
                    results.append(_result(case, backend, path, run_dirs[backend],
                                           workers[backend], references))
    unstable = [c.id for c in cases if not _stable(c, references)]
    report = build_report(cases, backends, workers, results, unstable_cases=unstable)
    write_reports(report, out)
    return report
