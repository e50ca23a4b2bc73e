"""One worker process of a conformance run (see :mod:`.runner`): started in a session of
its own, its stdout relayed as progress lines, waited for (killed at the timeout), and
its entry for the report made from what it left (``worker.json``, its logs)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from .device import CPU, Device
from .run_control import _abort, _kill_group, _Workers
from .shards import Tally

STDERR_TAIL = 2000
WORK = "runs"               # the working files, under out
SHARED = "floors"           # under WORK: the floors every worker reads (verdict.References)
TRAJECTORIES = "trajectories"
LOGS = "logs"
PIPE_GRACE = 5.0            # seconds to wait for a worker's stdout to close once it ended
#: what :func:`_run_worker` tells :func:`.runner.run` beside the report's backend entry
INTERNAL = ("skipped", "unstable", "running", "ending", "stderr_tail", "label")


class _Relay:
    """Reads a worker's stdout: relays its ``start`` and ``progress`` lines, files the
    framework's own output in ``other``, and remembers the run begun and not finished
    (``running``: ``(case, path)`` or None), which a crash interrupts. With a ``tally``
    (the backend's workers, :mod:`.shards`) the progress lines count the backend's runs
    over all its workers, and a helper's (``shard`` > 0) start line says it joined."""

    def __init__(self, backend: str, progress: Callable[[str], None], other: Path,
                 tally: Tally | None = None, shard: int = 0):
        self.backend, self.progress, self.other = backend, progress, other
        self.tally, self.shard = tally, shard
        self.running: tuple[str, str] | None = None
        self.thread = threading.Thread(target=self._read, daemon=True)

    def start(self, pipe) -> None:
        self.pipe = pipe
        self.thread.start()

    def _read(self) -> None:
        with open(self.other, "w") as other:
            for line in self.pipe:
                kind, _, rest = line.rstrip("\n").partition(" ")
                if kind == "begin":
                    self.running = tuple(rest.split()[1:3])
                elif kind == "start" and self.shard:
                    self.running = None
                    self.progress(f"[{self.backend}] worker {self.shard + 1} started beside "
                                  "the first, on the cases it has not reached")
                elif kind == "progress" and self.tally is not None:
                    self.running = None
                    self.progress(f"[{self.backend}] {self.tally.numbered(rest)}")
                elif kind in ("start", "progress"):
                    self.running = None
                    self.progress(f"[{self.backend}] {rest}")
                else:
                    other.write(line)


def _ending(code: int, timed_out: bool, timeout: float | None,
            stopped_by: str | None = None) -> str | None:
    """How the worker ended, as ``the worker ...`` goes on; None for exit status 0.
    ``stopped_by``: why the run stopped it (it was killed for that)."""
    if stopped_by is not None and code != 0:
        return f"was stopped: {stopped_by}"
    if timed_out:
        return f"timed out after {timeout:g} s and was killed"
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"crashed with exit status {code}" if code else None


def _info(device: Device, **values) -> dict:
    """A backend's entry for the report (with the :data:`INTERNAL` keys): ``values``
    over the defaults of a worker that did not run."""
    return {"exit_code": None, "seconds": 0.0, "framework_version": None, "error": None,
            "logs": [], "trajectories_dropped": [], "skipped": [], "unstable": [],
            "running": None, "ending": None, "stderr_tail": "", "device": str(device),
            "framework_device": None, "device_name": None, "not_run": [], "label": None,
            **values}


def _not_started(device: Device, stopped_by: str) -> dict:
    """The entry of a backend whose worker the stopped run never started."""
    ending = f"was not started: {stopped_by}"
    return _info(device, ending=ending, error=f"the worker {ending}")


def _run_worker(backend: str, cases_file: Path, out: Path, progress: Callable[[str], None],
                timeout: float | None, keep_trajectories: bool = False,
                device: Device = CPU, workers: _Workers | None = None,
                tally: Tally | None = None, shard: int | None = None,
                threads: int | None = None) -> dict:
    """Run ``backend``'s worker to its end (``timeout``: then kill its process group;
    ``workers``: the run's, which may stop it); its entry for the report's ``backends``,
    with the :data:`INTERNAL` keys for :func:`.runner.run`. ``tally``: the backend's workers
    (:mod:`.shards`), whose cases this one claims; ``shard``: a helper's number (None:
    the backend's first worker, numbered by the tally); ``threads``: its
    ``OMP_NUM_THREADS`` (:func:`worker_threads`; None: the environment's)."""
    workers = _Workers() if workers is None else workers
    if tally is not None and shard is None:
        shard = tally.begin()
    shard = shard or 0
    label = backend if not shard else f"{backend}.{shard + 1}"   # its folder, its logs
    work = out / WORK / label
    if work.exists():                 # results of an earlier run must not be read as ours
        shutil.rmtree(work)
    work.mkdir(parents=True)
    command = [sys.executable, "-m", "unified_opt.conformance.worker", "--backend", backend,
               "--cases", str(cases_file), "--out", str(work),
               "--trajectories", str(out / TRAJECTORIES / backend),
               "--shared", str(out / WORK / SHARED)]
    if keep_trajectories:
        command.append("--keep-trajectories")
    if not device.is_cpu:
        command += ["--device", str(device)]
    if tally is not None:
        tally.claims.mkdir(parents=True, exist_ok=True)
        command += ["--claims", str(tally.claims), "--shard", str(shard)]
    started = time.perf_counter()
    relay = _Relay(backend, progress, work / "stdout.log", tally, shard)
    # faulthandler: a worker that crashes in C code, or that is aborted at the timeout,
    # writes every thread's Python stack to its stderr log (else empty after a kill)
    env = {**os.environ, "PYTHONFAULTHANDLER": "1"}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    with open(work / "stderr.log", "w") as stderr:
        process = workers.start(command, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                env=env)
    if process is None:
        if tally is not None:
            tally.end(None)
        return {**_not_started(device, workers.stopped_by), "label": label}
    relay.start(process.stdout)
    timed_out = False
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        _abort(process)
    finally:                          # a timeout, an interrupt, or what the worker left
        _kill_group(process)
        code = process.wait()
        workers.ended(process)
    relay.thread.join(PIPE_GRACE)     # a process that left the group may hold the pipe
    seconds = time.perf_counter() - started
    info = _info(device, exit_code=code, seconds=round(seconds, 2), running=relay.running,
                 label=label)
    summary = work / "worker.json"
    if summary.exists():
        written = json.loads(summary.read_text())
        for key in ("framework_version", "skipped", "unstable", "trajectories_dropped"):
            info[key] = written[key]
        placed = written.get("device") or {}
        info["framework_device"] = placed.get("framework_device")
        info["device_name"] = placed.get("name")
    ending = _ending(code, timed_out, timeout, workers.stopped_by)
    if ending is not None:
        where = (f"while running {relay.running[0]} ({relay.running[1]})" if relay.running
                 else "outside any run")
        with open(work / "stderr.log", "a") as log:     # the log says how it ended too
            log.write(f"\n[unified-opt conformance runner] the {backend} worker {ending} "
                      f"{where}\n")
        info["logs"] = _keep_logs(work, out, label)
        info["ending"] = ending
        tail = (work / "stderr.log").read_text(errors="replace")[-STDERR_TAIL:].strip()
        info["stderr_tail"] = f"stderr ends:\n{tail}\n" if tail else "stderr is empty\n"
        info["error"] = (f"the worker {ending} {where}; logs: {', '.join(info['logs'])}\n"
                         + info["stderr_tail"])
    line = (f"finished in {seconds:.1f} s "
            + (f"(exit status {code})" if ending is None else f"(the worker {ending})"))
    if tally is not None:
        line = tally.end(ending)      # the backend's line once its last worker ended
    if line is not None:
        progress(f"[{backend}] {line}")
    return info


def worker_threads(jobs: int, environ=os.environ) -> int | None:
    """The OpenMP threads each worker gets: the CPUs this process may use over
    ``jobs`` (at least 1); None where ``OMP_NUM_THREADS`` is set (the user's choice
    stands). The frameworks' CPU kernels take as many threads as there are cores by
    default: ``jobs`` workers of that many threads each on the same cores spin in
    OpenMP barriers (measured on the project's 2-core machine: a torch worker's CPU
    time 28 s with 2 threads, 16 s with 1; a MindSpore worker's 24 s and 17 s; the
    trajectories and verdicts the same bit for bit). Paddle sets 1 on import anyway.
    The distributed cases' ranks inherit it."""
    if "OMP_NUM_THREADS" in environ:
        return None
    return max(1, len(os.sched_getaffinity(0)) // max(1, jobs))


def _keep_logs(work: Path, out: Path, backend: str) -> list[str]:
    """Copy a failed worker's stderr and (non-empty) stdout into ``out/logs``; their
    paths relative to ``out``."""
    kept = []
    for stream in ("stderr", "stdout"):
        source = work / f"{stream}.log"
        if stream == "stderr" or (source.exists() and source.stat().st_size):
            target = out / LOGS / f"{backend}.{stream}.log"
            target.parent.mkdir(exist_ok=True)
            shutil.copyfile(source, target)
            kept.append(target.relative_to(out).as_posix())
    return kept
