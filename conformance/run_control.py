"""Control of a conformance run's worker processes and output folder (see
:mod:`.runner`): the exceptions a run raises or is stopped by, killing a worker's process
group, the registry of running workers that an exiting interpreter stops, and the
exclusive lock a run holds on its output folder."""

from __future__ import annotations

import atexit
import fcntl
import os
import signal
import subprocess
import threading
from pathlib import Path

#: the lock file a run holds in ``out`` (see :mod:`.runner`)
LOCK = ".unified-opt-conformance.lock"


class OutInUse(ValueError):
    """Another conformance run holds the output folder (raised before anything in it
    changes)."""


class Signalled(KeyboardInterrupt):
    """Raised by a signal handler into the thread running :func:`.runner.run` to stop it, as
    Ctrl-C's KeyboardInterrupt does; ``signal_name`` names the signal (``"SIGTERM"``)."""

    def __init__(self, signal_name: str):
        super().__init__(signal_name)
        self.signal_name = signal_name


class RunInterrupted(KeyboardInterrupt):
    """:func:`.runner.run` was interrupted (``signal_name``: ``"SIGINT"`` for a plain
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
    """An exclusive, non-blocking ``flock`` on ``out/LOCK`` (see :mod:`.runner`).

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


def _stop_reason(error: BaseException) -> str:
    """Why the run stops its workers, as ``the worker was stopped: ...`` goes on."""
    signal_name = _signal_name(error)
    if signal_name is not None:
        return f"the run was interrupted by {signal_name}"
    return f"the run stopped on an error ({type(error).__name__})"
