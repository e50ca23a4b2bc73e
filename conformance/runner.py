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
(:func:`.worker_process.worker_threads`).

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

import concurrent.futures
import datetime
import json
import os
import shutil
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterable

from .cases import Case
from .device import CPU, Device, parse_device, probe_all  # noqa: F401  (runner.CPU)
from .report import build_report, write_reports, write_stub_reports
from .run_control import (  # noqa: F401  (names the runner's users read from it)
    LOCK,
    OutInUse,
    RunInterrupted,
    Signalled,
    _OutLock,
    _runs,
    _runs_lock,
    _signal_name,
    _stop_reason,
    _Workers,
)
from .shards import Helpers, Tally, claimed, claims_folder, merge
from .worker import result_stem
from .worker_process import (  # noqa: F401  (names the runner's users read from it)
    INTERNAL,
    LOGS,
    PIPE_GRACE,
    TRAJECTORIES,
    WORK,
    _info,
    _not_started,
    _run_worker,
    worker_threads,
)


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
