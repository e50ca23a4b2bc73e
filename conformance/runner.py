"""Run the conformance suite: one worker process per backend, the report in this process.

The parent never imports a framework: it writes the cases as JSON, starts
``python -m unified_opt.conformance.worker`` per backend (at most ``jobs`` at a
time, each in a session of its own, with this process's environment), relays their
progress lines, gathers the verdicts the workers wrote (each worker judges its runs
against the float64 oracle as they finish, :mod:`.verdict`), and writes the reports
(see :mod:`.report`). A job slot that falls free while a backend's worker still has at
least :data:`.shards.HELPER_MIN_CASES` cases ahead starts a helper worker for it: the
two claim the backend's cases one by one, so that the slots end together
(:mod:`.shards`); the backend's entry in the report then sums their seconds and lists
each (``shards``). Each worker gets the CPUs over ``jobs`` as its OpenMP threads
(:func:`worker_threads`).

What stays in ``out`` (CI uploads it): ``report.json``, ``report.md``, ``report.html``,
``junit.xml``; ``trajectories/<backend>/<case>__<path>.npz`` (compressed: every run's
with ``keep_trajectories``, else failing runs' up to
:data:`.worker.FAILING_TRAJECTORY_BUDGET` per backend); ``logs/<backend>.stderr.log``
and ``.stdout.log`` of a worker that did not exit 0. The working files (``runs/``:
the cases and the workers' per-run JSON) are removed once the reports are written.

``device`` puts every backend's parameters on ``cpu`` (the default), ``cuda[:N]`` or
``npu[:N]`` (:mod:`.device`); each backend's entry in the report names the device
(``device``, ``framework_device``, ``device_name``) and the cases it did not run there
with the reason (``not_run``).

A worker that crashes, is killed or runs past ``timeout`` (then its whole process
group is killed) loses only the runs it had not finished: those are errors naming how
it ended (the one it was running also gets its stderr's end); its finished results and
the other backends' stand.

One run at a time per ``out``: a run holds an exclusive ``flock`` on
``out/.unified-opt-conformance.lock`` (:data:`LOCK`, holding its process id; removed
when the run ends) and a second run into the same folder is refused at once with
:class:`OutInUse`, before it changes anything there. The run then replaces the four
reports by stubs that say it has not finished (``report.json``'s ``"status":
"incomplete"``, no results; ``junit.xml`` one erroring testcase), so that a run killed
at any moment leaves no earlier run's passing reports behind; the real reports replace
the stubs atomically (:mod:`unified_opt.files`) at the end.

A :class:`KeyboardInterrupt` in the thread that runs :func:`run` (Ctrl-C, or
:class:`Signalled`, which the command line's SIGTERM handler raises) stops the run:
the workers' process groups are killed and reaped, every thread of the run ends, the
reports are written marked ``"status": "interrupted"`` (with ``interrupted_by``, the
finished results, and the unfinished runs as errors saying so), and :func:`run` raises
:class:`RunInterrupted`. After that no worker runs and nothing writes into ``out``.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import datetime
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable

from .cases import Case
from .device import CPU, Device, parse_device, probe_all
from .report import build_report, write_reports, write_stub_reports
from .shards import Helpers, Tally, claimed, claims_folder, merge
from .worker import result_stem

STDERR_TAIL = 2000
WORK = "runs"               # the working files, under out
SHARED = "floors"           # under WORK: the floors every worker reads (verdict.References)
TRAJECTORIES = "trajectories"
LOGS = "logs"
PIPE_GRACE = 5.0            # seconds to wait for a worker's stdout to close once it ended
#: what :func:`_run_worker` tells :func:`run` beside the report's backend entry
INTERNAL = ("skipped", "unstable", "running", "ending", "stderr_tail", "label")
#: the lock file a run holds in ``out`` (see the module)
LOCK = ".unified-opt-conformance.lock"


class OutInUse(ValueError):
    """Another conformance run holds the output folder (raised before anything in it
    changes)."""


class Signalled(KeyboardInterrupt):
    """Raised by a signal handler into the thread running :func:`run` to stop it, as
    Ctrl-C's KeyboardInterrupt does; ``signal_name`` names the signal (``"SIGTERM"``)."""

    def __init__(self, signal_name: str):
        super().__init__(signal_name)
        self.signal_name = signal_name


class RunInterrupted(KeyboardInterrupt):
    """:func:`run` was interrupted (``signal_name``: ``"SIGINT"`` for a plain
    KeyboardInterrupt, else :class:`Signalled`'s). Raised once its workers are killed
    and reaped and ``out`` holds the reports marked interrupted (``report``: what
    ``report.json`` holds; complete when the signal came after the complete reports were
    written). A KeyboardInterrupt, so that code which stops on Ctrl-C stops on it
    too."""

    def __init__(self, signal_name: str, report: dict, out: Path):
        super().__init__(f"conformance run interrupted by {signal_name}")
        self.signal_name, self.report, self.out = signal_name, report, out


def _signal_name(error: BaseException) -> str | None:
    """The signal that ``error`` stands for (None: an error, not an interrupt)."""
    if isinstance(error, Signalled):
        return error.signal_name
    return "SIGINT" if isinstance(error, KeyboardInterrupt) else None


def _kill_group(process: subprocess.Popen) -> None:
    """SIGKILL the worker's process group: the worker and whatever it started."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):    # the group has ended
        pass


#: seconds a timed-out worker gets to write its stacks (SIGABRT, faulthandler)
ABORT_GRACE = 5.0


def _abort(process: subprocess.Popen) -> None:
    """SIGABRT the worker (its faulthandler writes where every thread is) and give it
    :data:`ABORT_GRACE` seconds; the group is killed after this either way."""
    try:
        os.kill(process.pid, signal.SIGABRT)
        process.wait(timeout=ABORT_GRACE)
    except (ProcessLookupError, PermissionError, subprocess.TimeoutExpired):
        pass


class _Workers:
    """One run's worker processes. Once stopped (``stopped_by``: why) every running
    worker's group is killed and no new worker starts: a thread of the pool may be about
    to start one when the run is interrupted."""

    def __init__(self):
        self.lock = threading.Lock()
        self.processes: set[subprocess.Popen] = set()
        self.stopped_by: str | None = None

    def start(self, command: list[str], **popen) -> subprocess.Popen | None:
        """The started worker (in a session of its own), or None once stopped."""
        with self.lock:
            if self.stopped_by is not None:
                return None
            process = subprocess.Popen(command, start_new_session=True, **popen)
            self.processes.add(process)
            return process

    def ended(self, process: subprocess.Popen) -> None:
        with self.lock:
            self.processes.discard(process)

    def stop(self, reason: str) -> None:
        with self.lock:
            if self.stopped_by is None:
                self.stopped_by = reason
            for process in self.processes:
                _kill_group(process)


_runs: set[_Workers] = set()
_runs_lock = threading.Lock()


def _stop_running() -> None:
    """Kill every running worker of every run. A worker has a session of its own, out of
    reach of the terminal's Ctrl-C, so an interrupted run (or an interpreter that exits
    with a run in a background thread, as pytest's can) stops them itself."""
    with _runs_lock:
        runs = list(_runs)
    for workers in runs:
        workers.stop("the Python process running the conformance run exited")


atexit.register(_stop_running)


class _OutLock:
    """An exclusive, non-blocking ``flock`` on ``out/LOCK`` (see the module).

    The file is removed (while still locked) when the run ends; a run that opened it
    just before and locks it just after would then hold a removed file, so after
    locking, the file at the path must be the one locked, else it opens the path anew.
    The descriptor is not inherited by the workers (Python opens files
    non-inheritable, and ``Popen`` closes the others), so a stray worker cannot keep
    the folder locked."""

    def __init__(self, out: Path):
        self.path = out / LOCK
        self.fd: int | None = None

    def __enter__(self) -> "_OutLock":
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 64).decode(errors="replace").strip()
                os.close(fd)
                raise OutInUse(
                    f"output folder {str(self.path.parent)!r} is in use by another "
                    f"conformance run (process {holder or '?'}, holding {LOCK}); wait for it "
                    "to end or give another folder") from None
            except BaseException:
                os.close(fd)
                raise
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self.fd = fd
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
        finally:
            os.close(self.fd)


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
    with the :data:`INTERNAL` keys for :func:`run`. ``tally``: the backend's workers
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


def _help(helpers: Helpers, cases_file: Path, out: Path, progress: Callable[[str], None],
          timeout: float | None, keep_trajectories: bool, device: Device,
          workers: _Workers, threads: int | None = None) -> tuple[str, dict] | None:
    """A helper task (:mod:`.shards`): a second worker for the backend that needs one
    most, run to its end, as ``(backend, entry)``; None when no backend needs one."""
    chosen = helpers.choose()
    if chosen is None:
        return None
    backend, shard = chosen
    return backend, _run_worker(backend, cases_file, out, progress, timeout,
                                keep_trajectories, device, workers, helpers.tallies[backend],
                                shard, threads)


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


def _result(case: Case, backend: str, path: str, run_dir: Path | None, worker: dict,
            error: str | None = None) -> dict:
    """The verdict the worker wrote for (case, path), or an error saying why there is
    none (``error``; by default the worker's error). ``run_dir`` None: the worker never
    ran (what the folder holds is an earlier run's)."""
    info_file = None if run_dir is None else run_dir / f"{result_stem(case.id, path)}.json"
    if info_file is not None and info_file.exists():
        try:
            return json.loads(info_file.read_text())
        except json.JSONDecodeError:      # a worker killed while it wrote the file
            error = (f"{error or worker['error'] or ''}\nthe worker's verdict file "
                     f"{info_file.name} is cut short: it ended while writing it").strip()
    return {"case": case.id, "algorithm": case.spec.name, "backend": backend, "path": path,
            "status": "error", "lowering": None, "comparison": None, "explanation": None,
            "known": None, "seconds": None,
            "error": error or worker["error"] or "the worker did not report this run"}


def _missing(case: Case, path: str, worker: dict) -> str | None:
    """The error of a run of a worker that ended early: the run it was running gets its
    stderr's end (the cause last, as in a traceback), the others 'not run'."""
    ending, running = worker["ending"], worker["running"]
    if ending is None:
        return None
    if running is not None and (case.id, path) == tuple(running):
        return f"{worker['stderr_tail']}the worker {ending} during this run"
    during = f" during {running[0]} ({running[1]})" if running else ""
    return f"not run: the worker {ending}{during}"


def _clear(out: Path) -> None:
    """Remove what an earlier run left in ``out``: its working files, trajectories and
    logs (only the files a run writes there)."""
    if (out / WORK).exists():
        shutil.rmtree(out / WORK)
    for pattern in (f"{TRAJECTORIES}/*/*.npz", f"{LOGS}/*.stderr.log", f"{LOGS}/*.stdout.log"):
        for file in out.glob(pattern):
            file.unlink()
    _prune(out)


def _prune(out: Path) -> None:
    """Remove the empty trajectory and log folders (a backend whose runs all passed)."""
    for folder in [*out.glob(f"{TRAJECTORIES}/*"), out / TRAJECTORIES, out / LOGS]:
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


#: the backends whose workers take longest start first (measured on the default suite,
#: 2 jobs on 2 cores: MindSpore's 228 s, Paddle's 149 s, torch's 104 s), so that with
#: fewer jobs than backends the short ones fill in beside it and a helper (:mod:`.shards`)
#: evens out the end; the report keeps the order asked for
START_ORDER = ("mindspore", "paddle", "torch")


def not_run(case: Case, device: Device) -> str | None:
    """Why ``case`` is not run on ``device`` (None: it is). A distributed case's ranks
    join a gloo group and keep their parameters on the CPU; on an accelerator they would
    need a device each (NCCL takes one GPU per rank) and are not run: the report lists
    them with this reason."""
    if case.workers > 1 and not device.is_cpu:
        return (f"not run on {device}: a distributed case ({case.workers} ranks) runs on "
                "the CPU only (its ranks would need a device each)")
    return None


def _start_rank(backend: str) -> int:
    return START_ORDER.index(backend) if backend in START_ORDER else len(START_ORDER)


def run(cases: Iterable[Case], backends: Iterable[str], out: Path | str, *, jobs: int = 2,
        progress: Callable[[str], None] = print, timeout: float | None = None,
        keep_trajectories: bool = False, device="cpu") -> dict:
    """Run ``cases`` on ``backends``; write the reports into ``out``; return the report.

    ``timeout``: seconds each backend's worker may run (None: no limit). ``device``
    (``"cpu"``, ``"cuda"``, ``"gpu:1"``, ``"npu"``: :mod:`.device`): where every backend
    puts the parameters; off the CPU each backend is asked first, and a device one of
    them cannot use raises :class:`.device.DeviceUnavailable` before anything runs or
    ``out`` is touched. Distributed cases are not run off the CPU (:func:`not_run`).

    :class:`OutInUse` when another run holds ``out`` (nothing in it changed);
    :class:`RunInterrupted` when a KeyboardInterrupt (or :class:`Signalled`) stopped the
    run; on any other error the workers are killed and ``out`` keeps the stubs that say
    the run is incomplete (see the module)."""
    cases, backends, out = list(cases), list(backends), Path(out)
    if not cases or not backends:
        raise ValueError(f"conformance run: need cases and backends, got {len(cases)} "
                         f"case(s) and backends {backends}")
    if timeout is not None and not 0 < timeout < float("inf"):
        raise ValueError(f"conformance run: timeout must be a number of seconds > 0, "
                         f"got {timeout!r}")
    device = parse_device(device)
    if not device.is_cpu:
        probe_all(backends, device)
    out.mkdir(parents=True, exist_ok=True)
    workers = _Workers()
    with _OutLock(out):
        with _runs_lock:
            _runs.add(workers)
        try:
            return _run_locked(cases, backends, out, workers, jobs=jobs, progress=progress,
                               timeout=timeout, keep_trajectories=keep_trajectories,
                               device=device)
        finally:
            with _runs_lock:
                _runs.discard(workers)


def _run_locked(cases: list[Case], backends: list[str], out: Path, workers: _Workers, *,
                jobs: int, progress: Callable[[str], None], timeout: float | None,
                keep_trajectories: bool, device: Device) -> dict:
    """:func:`run` once it holds ``out``."""
    left_out = {c.id: reason for c in cases if (reason := not_run(c, device)) is not None}
    ran = [c for c in cases if c.id not in left_out]
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    futures: dict[str, concurrent.futures.Future] = {}     # each backend's first worker
    helping: list[concurrent.futures.Future] = []          # the helper tasks (.shards)
    written = None                    # the complete report, once in out
    lock = threading.Lock()

    def say(line: str) -> None:
        with lock:
            if workers.stopped_by is None:      # a stopped worker's last lines say nothing
                progress(line)

    try:
        write_stub_reports(out, started=started, pid=os.getpid())
        _clear(out)
        (out / WORK).mkdir()
        cases_file = out / WORK / "cases.json"
        cases_file.write_text(json.dumps([c.to_dict() for c in ran], indent=1))
        tallies = {b: Tally(b, [c.id for c in ran if c.runs_on(b)],
                            sum(len(c.paths) for c in ran if c.runs_on(b)),
                            claims_folder(out / WORK, b), say) for b in backends}
        threads = worker_threads(jobs)
        with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
            try:
                for b in sorted(backends, key=_start_rank):
                    futures[b] = pool.submit(_run_worker, b, cases_file, out, say, timeout,
                                             keep_trajectories, device, workers, tallies[b],
                                             None, threads)
                helpers = Helpers(tallies)
                if jobs > 1:          # behind the first workers: they run as slots free
                    helping += [pool.submit(_help, helpers, cases_file, out, say, timeout,
                                            keep_trajectories, device, workers, threads)
                                for _ in backends]
                infos = {b: [futures[b].result()] for b in backends}
                for future in helping:
                    if (helped := future.result()) is not None:
                        infos[helped[0]].append(helped[1])
            except BaseException as error:   # the workers do not get Ctrl-C (own sessions)
                for future in [*futures.values(), *helping]:
                    future.cancel()
                workers.stop(_stop_reason(error))
                raise
        report = _report(cases, backends, left_out, infos, out)
        write_reports(report, out)
        written = report
        shutil.rmtree(out / WORK)
        _prune(out)
        return report
    except BaseException as error:
        signal_name = _signal_name(error)
        workers.stop(_stop_reason(error))
        # every thread of the run has ended before the reports are written: none writes
        # into out after them
        concurrent.futures.wait([*futures.values(), *helping])
        if signal_name is None:
            raise                     # the stubs stay: the run did not finish
        report = written              # a signal after the complete reports leaves them
        if report is None:
            infos = {b: [_finished(futures.get(b), device, workers.stopped_by)]
                     for b in backends}
            for future in helping:
                if not future.cancelled() and future.exception() is None and future.result():
                    infos[future.result()[0]].append(future.result()[1])
            report = _report(cases, backends, left_out, infos, out,
                             interrupted_by=signal_name)
            write_reports(report, out)
        shutil.rmtree(out / WORK, ignore_errors=True)
        _prune(out)
        raise RunInterrupted(signal_name, report, out) from None


def _stop_reason(error: BaseException) -> str:
    """Why the run stops its workers, as ``the worker was stopped: ...`` goes on."""
    signal_name = _signal_name(error)
    if signal_name is not None:
        return f"the run was interrupted by {signal_name}"
    return f"the run stopped on an error ({type(error).__name__})"


def _finished(future: concurrent.futures.Future | None, device: Device,
              stopped_by: str) -> dict:
    """A backend's entry once the run stopped: its worker's, or one saying it never ran
    (not started, or its thread raised)."""
    if future is not None and not future.cancelled() and future.exception() is None:
        return future.result()
    return _not_started(device, stopped_by)


def _report(cases: list[Case], backends: list[str], left_out: dict[str, str],
            infos: dict[str, list[dict]], out: Path, interrupted_by: str | None = None) -> dict:
    """The report of the workers' entries ``infos`` (per backend, its first worker's
    and its helper's, if one ran; left as they are: an interrupt while the report is
    made makes it again) and the verdicts they wrote; a run a worker did not report is
    an error saying how the worker that claimed it ended (the first worker, where none
    did). A backend's entry merges its workers' (:func:`.shards.merge`)."""
    results, unstable = [], set()
    entries = {}
    for backend in backends:
        shards = infos[backend]
        owners = claimed(claims_folder(out / WORK, backend))
        run_dirs = [None if s["exit_code"] is None
                    else out / WORK / (s.get("label") or backend) for s in shards]
        skipped = {stem for s in shards for stem in s["skipped"]}
        unstable |= {case_id for s in shards for case_id in s["unstable"]}
        not_run = []
        for case in cases:
            refused = case.refused_on(backend)     # a loop the backend cannot express
            if refused is None and not case.runs_on(backend):
                continue
            reason = left_out.get(case.id) or refused
            if reason is not None:
                not_run += [{"case": case.id, "path": path, "reason": reason}
                            for path in case.paths]
                continue
            owner = owners.get(case.id)
            owner = owner if owner is not None and owner < len(shards) else 0
            worker, run_dir = shards[owner], run_dirs[owner]
            for path in case.paths:
                if result_stem(case.id, path) not in skipped:
                    result = _result(case, backend, path, run_dir, worker,
                                     _missing(case, path, worker))
                    if result.get("trajectory"):      # relative to out
                        result["trajectory"] = f"{TRAJECTORIES}/{backend}/{result['trajectory']}"
                    results.append(result)
        entry = merge([{k: v for k, v in s.items() if k not in INTERNAL} for s in shards])
        entries[backend] = {**entry, "not_run": [*entry["not_run"], *not_run]}
    infos = entries
    unstable = [c.id for c in cases if c.id in unstable]
    return build_report(cases, backends, infos, results, unstable_cases=unstable,
                        interrupted_by=interrupted_by)
