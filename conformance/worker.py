"""One backend's conformance runs, in a process of its own.

``python -m unified_opt.conformance.worker --backend NAME --cases cases.json --out DIR
[--trajectories DIR] [--shared DIR] [--keep-trajectories] [--device DEVICE]
[--claims DIR --shard K]``

Imports exactly one framework (through ``unified_opt.conformance.drivers.<NAME>``), runs
every case on every path it lists through that backend's :class:`Driver`, judges each
run against its case's oracle (:mod:`.verdict`) and writes per (case, path)
``<case>__<path>.json`` into ``--out``: the result as the reports hold it, with the
lowering decision or the error text. The trajectory (``<case>__<path>.npz``, compressed,
into ``--trajectories``, by default ``--out``) is kept for every run with
``--keep-trajectories``; without it, for runs that do not pass while their files stay
within :data:`FAILING_TRAJECTORY_BUDGET` (a broken backend fails every run: its
trajectories would fill a CI artifact). A path whose lowering repeats one already run
for the case (``own`` when ``auto`` took the own implementation, ``native`` when it took
the native class, which only the build knows: MindSpore's depends on the parameters) is
skipped, and so is ``native`` where the ``auto`` build found no native class computing
the case exactly. Where ``auto`` took the own implementation over an exact native class
(``uo.build``'s ``prefer="speed"``: the own path measured faster), ``native`` runs
that class explicitly, so every native row stays covered.

``--claims DIR --shard K``: the backend's workers (the first one and a helper the
runner starts beside it, :mod:`.shards`) each run only the cases they claim first in
DIR (:func:`claim`).

Distributed cases (``Case.workers > 1``) launch their ranks in a thread of their own
from the start, while the worker runs the other cases (a launch mostly waits for its
processes), and are judged after them. ``--shared``: the folder of the floors every
worker of a run reads (:class:`.verdict.References`).

Prints, flushed, for the runner: ``begin DONE/TOTAL CASE PATH`` before each run (so a
crash names the run it interrupted) and ``progress DONE/TOTAL CASE PATH STATUS
[detail]`` after it. ``worker.json`` (what ran, what was skipped, the unstable cases,
the trajectories dropped) is rewritten after every run, so it holds what a worker
that crashes or is killed finished.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import platform
import sys
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from .cases import Case
from .device import CPU, Placement, parse_device, place
from .distributed import RanksRun, judge, run_ranks
from .drivers.base import Driver
from .gradients import share_stream
from .report import json_safe
from .trajectory import Recorder, Trajectory
from .verdict import References, verdict

FRAMEWORK_MODULES = {"torch": "torch", "paddle": "paddle", "mindspore": "mindspore"}

#: bytes of failing runs' trajectories a worker keeps without ``--keep-trajectories``:
#: about ten of the suite's (a compressed trajectory of 50 steps is 0.5 to 3 MB); the
#: results of later failing runs name no trajectory
FAILING_TRAJECTORY_BUDGET = 25 * 2**20


def driver_class(backend: str) -> type[Driver]:
    """The single :class:`Driver` subclass of ``unified_opt.conformance.drivers.<backend>``."""
    module = importlib.import_module(f"unified_opt.conformance.drivers.{backend}")
    found = [obj for _, obj in inspect.getmembers(module, inspect.isclass)
             if issubclass(obj, Driver) and obj is not Driver
             and obj.__module__ == module.__name__]
    if len(found) != 1:
        raise RuntimeError(f"{module.__name__} must define exactly one Driver subclass, "
                           f"found {[c.__name__ for c in found]}")
    return found[0]


def framework_version(backend: str) -> str:
    module = importlib.import_module(FRAMEWORK_MODULES.get(backend, backend))
    return str(getattr(module, "__version__", "unknown"))


def start(driver_cls: type[Driver], case: Case, path: str, spec=None,
          device: Placement | None = None) -> Driver:
    """The driver of ``case`` on ``path`` (with ``spec`` in place of ``case.spec`` if
    given): ``uo.build``'s optimizer, or the case's native optimizer built by hand, with
    the parameters on ``device`` (None: the CPU)."""
    spec = case.spec if spec is None else spec
    return driver_cls(spec, case.initial_params(),
                      path="auto" if case.native is not None else path,
                      total_steps=case.steps, groups=case.groups or None, native=case.native,
                      device=device, storage=case.storage, backward=case.backward,
                      param_group_writes=case.param_group_writes)


def drive(driver: Driver, case: Case, recorder: Recorder | None = None) -> Trajectory:
    """``case.steps`` steps of the case's gradients through ``driver``, recorded."""
    recorder = Recorder() if recorder is None else recorder
    for t in range(case.steps):
        lr = driver.step(case.gradients(t))
        # the claimed spec decides which quantities exist, so they match the oracle's
        skipped = driver.last_skipped() if case.spec.skip_nonfinite else None
        # params_numpy and state_numpy copy: the recorder keeps those copies
        recorder.add(lr, driver.params_numpy(), driver.state_numpy(), skipped=skipped,
                     copy=False)
    return recorder.trajectory()


def run_case(driver_cls: type[Driver], case: Case, path: str, spec=None,
             device: Placement | None = None):
    """Run ``case`` (with ``spec`` in place of ``case.spec`` if given) through a driver,
    on ``device`` (a :class:`.device.Placement`; None: the CPU).

    Returns ``(trajectory, decision, error)``: on an exception, the trajectory holds
    the steps completed before it, and ``error`` is the traceback text.
    """
    recorder = Recorder()
    decision = None
    try:
        driver = start(driver_cls, case, path, spec, device)
        decision = driver.decision
        return drive(driver, case, recorder), decision, None
    except Exception:  # the report carries the text; the next case still runs
        return recorder.trajectory(), decision, traceback.format_exc()


def claim(claims: Path | None, case_id: str, shard: int) -> bool:
    """Whether this worker (``shard``) takes ``case_id``: the first worker of the backend
    to create ``claims/<case_id>`` does (``O_EXCL``: exactly one of them, however they
    interleave); the file holds its shard number. ``claims`` None: every case is taken."""
    if claims is None:
        return True
    try:
        fd = os.open(claims / case_id, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    try:
        os.write(fd, f"{shard}\n".encode())
    finally:
        os.close(fd)
    return True


def result_stem(case_id: str, path: str) -> str:
    return f"{case_id}__{path}"


def run_all(driver_cls: type[Driver], backend: str, cases: list[Case], out: Path,
            say=print, keep_trajectories: bool = False, trajectories: Path | None = None,
            failing_budget: int = FAILING_TRAJECTORY_BUDGET,
            shared: Path | None = None, device=CPU, claims: Path | None = None,
            shard: int = 0) -> dict:
    """Run and judge every case on its paths, writing the result files into ``out`` and
    the kept trajectories into ``trajectories`` (default ``out``; see the module for
    which are kept); return the worker summary (also written as ``worker.json``).

    A path is skipped when an earlier path of the same case already ran the lowering it
    asks for (``own`` after an ``auto`` that took the own implementation, ``native``
    after one that took the native class), and ``native`` when the ``auto`` build found
    no exact native class (:func:`native_skip`). Cases that do not run on ``backend``
    (``Case.backends``, a native optimizer of another framework) are left out.

    ``device`` (``"cpu"``, ``"cuda:0"``, a :class:`.device.Device`): where the
    parameters go; it is checked and made the framework's default first
    (:func:`.device.place`: an unavailable one raises before any case runs). Distributed
    cases run on the CPU only: the runner leaves them out on another device.

    ``claims``: the folder where the workers of one backend claim its cases
    (:func:`claim`; ``shard``: this worker's number, written into its claims): this
    worker runs only the cases it claims, the distributed ones first, then the others
    in order, so that a helper started beside it takes the cases it has not reached.
    None: every case.
    """
    cases = [c for c in cases if c.runs_on(backend)]
    device = parse_device(device)
    if not device.is_cpu and any(c.workers > 1 for c in cases):
        raise ValueError(f"distributed cases run on the CPU only, not on {device}: "
                         f"{[c.id for c in cases if c.workers > 1]}")
    placement = place(backend, device)
    out.mkdir(parents=True, exist_ok=True)
    keeper = TrajectoryKeeper(out if trajectories is None else trajectories,
                              keep_trajectories, failing_budget)
    version = framework_version(backend)
    total = sum(len(c.paths) for c in cases)
    summary = {"backend": backend, "framework_version": version,
               "python": sys.version.split()[0], "platform": platform.platform(),
               "runs": [], "skipped": [], "unstable": [], "trajectories_dropped": [],
               "device": placement.to_dict()}
    write_summary(out, summary)
    where = "" if device.is_cpu else f" on {placement.framework_device} ({placement.name})"
    say(f"start {len(cases)} cases, up to {total} runs, {backend} {version}{where}")
    scratch = out / "ranks"            # the distributed runs' launches (job, logs, ranks)
    # distributed cases launch their ranks in a thread of their own while this one runs
    # the others: a launch mostly waits for its processes. With claims, they are claimed
    # first: a helper that starts later finds them taken.
    distributed = [c for c in cases if c.workers > 1 and claim(claims, c.id, shard)]
    launches = ThreadPoolExecutor(max_workers=1) if distributed else None
    launched = {c.id: launches.submit(_launch_all, backend, c, scratch) for c in distributed}
    index = 0
    for case in [c for c in cases if c.workers == 1] + distributed:
        if case.workers == 1 and not claim(claims, case.id, shard):
            continue                         # another worker of the backend runs it
        references = References(shared)      # this case's oracle and floors, then dropped
        if shared is not None and case.workers == 1:
            # its gradients: drawn by the first worker of the run to reach it
            share_stream(shared, case.seed + case.rank, case.steps, case.params)
        lowered = set()                      # decision paths this case already ran
        auto = _NOT_RUN                      # the auto build's decision (None: no build)
        ranks_runs = launched[case.id].result() if case.workers > 1 else {}
        for path in case.paths:
            index += 1
            stem = result_stem(case.id, path)
            why = "same as auto" if path in lowered else native_skip(path, auto)
            if why:
                summary["skipped"].append(stem)
                write_summary(out, summary)
                say(f"progress {index}/{total} {case.id} {path} skipped ({why})")
                continue
            say(f"begin {index}/{total} {case.id} {path}")
            started = time.perf_counter()
            if case.workers > 1:
                run, seconds = ranks_runs[path]
                result = judge(case, backend, path, run, references)
                if path == "auto":
                    auto = run.decision
                lowering, error = result["lowering"], run.error
                trajectory = _worst_rank(run, result)
            else:
                trajectory, decision, error = run_case(driver_cls, case, path,
                                                       device=placement)
                result = verdict(case, backend, path, trajectory, decision, error, references)
                lowering = result["lowering"]
                seconds = 0.0
                if path == "auto":
                    auto = decision
            seconds = round(seconds + time.perf_counter() - started, 4)
            if lowering is not None:
                lowered.add(lowering["path"])
            kept = keeper.keep(stem, trajectory, result["status"])
            if kept is None and keeper.dropped(stem):
                summary["trajectories_dropped"].append(stem)
            result.update(seconds=seconds, steps_done=trajectory.steps, trajectory=kept)
            (out / f"{stem}.json").write_text(json.dumps(json_safe(result), indent=1,
                                                         allow_nan=False))
            summary["runs"].append(stem)
            write_summary(out, summary)
            detail = (error.strip().splitlines()[-1] if error else
                      lowering["native"] if lowering["path"] == "native" else "own")
            say(f"progress {index}/{total} {case.id} {path} {result['status']} {detail}")
        if not references.stable(case):
            summary["unstable"].append(case.id)
            write_summary(out, summary)
    if launches is not None:
        launches.shutdown()
    return summary


#: the auto build's decision before the case's auto path ran (or where it has none)
_NOT_RUN = object()


def native_skip(path: str, auto) -> str:
    """Why path ``path`` is not run after the case's ``auto`` build decided ``auto`` (a
    :class:`unified_opt.backend.Decision`, its dict as a distributed run reports it,
    None where that build failed, :data:`_NOT_RUN` where the case has no auto path);
    "" to run it. ``native`` runs where ``auto`` took the own implementation over an
    exact native class (``alternative``), and where the case has no auto path."""
    if path != "native" or auto is _NOT_RUN:
        return ""
    if auto is None:
        return "the auto build failed"
    taken = auto["path"] if isinstance(auto, dict) else auto.path
    alternative = auto.get("alternative") if isinstance(auto, dict) else auto.alternative
    if taken == "own" and not alternative:
        return "no native class computes it exactly"
    return ""


def _launch_all(backend: str, case: Case, scratch: Path) -> dict:
    """Launch ``case``'s ranks on each of its paths in turn: path -> (run, seconds); a
    path whose lowering an earlier one already ran is left out, and ``native`` where
    ``auto`` found no exact native class (as in :func:`run_all`)."""
    runs, lowered, auto = {}, set(), _NOT_RUN
    for path in case.paths:
        if path in lowered or native_skip(path, auto):
            continue
        started = time.perf_counter()
        run = run_ranks(backend, case, path, scratch / result_stem(case.id, path))
        runs[path] = (run, time.perf_counter() - started)
        if path == "auto":
            auto = run.decision
        if run.decision is not None:
            lowered.add(run.decision["path"])
    return runs


def _worst_rank(run: RanksRun, result: dict) -> Trajectory:
    """The trajectory a distributed result stands for: its worst rank's (rank 0's when
    the ranks did not all finish: then there is none)."""
    if not run.trajectories:
        return Trajectory(np.zeros(0), {}, {})
    worst = max(result["ranks"], key=lambda r: (r["status"] != "pass", r["worst_ratio"] or 0))
    return run.trajectories[worst["rank"]]


class TrajectoryKeeper:
    """Writes the trajectories a worker keeps into ``directory``: every run's with
    ``keep_all``, else those of runs that do not pass, while their files add up to at
    most ``budget`` bytes."""

    def __init__(self, directory: Path, keep_all: bool, budget: int):
        self.directory, self.keep_all, self.budget = directory, keep_all, budget
        directory.mkdir(parents=True, exist_ok=True)
        self.failing_bytes = 0
        self._dropped: set[str] = set()

    def keep(self, stem: str, trajectory: Trajectory, status: str) -> str | None:
        """The kept file's name (``<stem>.npz``), or None."""
        if not trajectory.steps or (status == "pass" and not self.keep_all):
            return None
        file = self.directory / f"{stem}.npz"
        trajectory.save(file)
        if self.keep_all:
            return file.name
        size = file.stat().st_size
        if self.failing_bytes + size > self.budget:
            file.unlink()
            self._dropped.add(stem)
            return None
        self.failing_bytes += size
        return file.name

    def dropped(self, stem: str) -> bool:
        """Whether the trajectory of ``stem`` was left out for the budget."""
        return stem in self._dropped


def write_summary(out: Path, summary: dict) -> None:
    """``out/worker.json``, replaced whole: a worker killed mid-write leaves the last one."""
    part = out / "worker.json.part"
    part.write_text(json.dumps(summary, indent=1))
    os.replace(part, out / "worker.json")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m unified_opt.conformance.worker")
    parser.add_argument("--backend", required=True)
    parser.add_argument("--cases", required=True, type=Path, help="JSON list of cases")
    parser.add_argument("--out", required=True, type=Path,
                        help="directory of the result files and worker.json")
    parser.add_argument("--trajectories", type=Path, default=None,
                        help="directory of the kept trajectories (default: --out)")
    parser.add_argument("--shared", type=Path, default=None,
                        help="folder of the floors the run's workers share (References)")
    parser.add_argument("--device", default="cpu",
                        help="where the parameters go: cpu, cuda[:N] (gpu[:N]), npu[:N]")
    parser.add_argument("--claims", type=Path, default=None,
                        help="folder where the backend's workers claim its cases "
                             "(default: run every case)")
    parser.add_argument("--shard", type=int, default=0,
                        help="this worker's number among the backend's (in its claims)")
    parser.add_argument("--keep-trajectories", action="store_true",
                        help="keep every run's trajectory (default: those of failing runs, "
                             "up to FAILING_TRAJECTORY_BUDGET bytes)")
    args = parser.parse_args(argv)
    cases = [Case.from_dict(d) for d in json.loads(args.cases.read_text())]
    args.out.mkdir(parents=True, exist_ok=True)
    run_all(driver_class(args.backend), args.backend, cases, args.out,
            say=lambda line: print(line, flush=True),
            keep_trajectories=args.keep_trajectories, trajectories=args.trajectories,
            shared=args.shared, device=args.device, claims=args.claims, shard=args.shard)
    return 0


if __name__ == "__main__":
    sys.exit(main())
