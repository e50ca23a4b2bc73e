"""Distributed conformance cases: one run is ``case.workers`` processes in the
framework's process group, started by the framework's own launcher.

A case with ``workers=N`` (a data-parallel spec: ``dgc_momentum``) is run by the
backend's worker through :func:`run_ranks`: ``torchrun`` (gloo), ``python -m
paddle.distributed.launch`` or ``msrun`` (``mindspore.parallel.cluster.run``) starts N
copies of :mod:`.rank_process`; each joins the group, builds the optimizer with
``uo.build`` (which finds the group and exchanges the compressed gradients over the
framework's collectives), steps on its own gradient stream (rank ``r``: seed ``seed +
r``, the adversarial scales and zero tensors included) and records its lr, parameters
and its own spec state at every step.

:func:`judge` gives the run one result: every rank's trajectory against the float64
oracle of that rank (:func:`unified_opt.reference` over N simulated workers: the
parameters and lr every rank shares, the state of that rank), within the noise floor,
and the ranks' parameters and lr equal bit for bit. The result is the worst rank's
verdict, with ``ranks`` (each rank's status and worst ratio) beside it.

Gloo (torch, Paddle) and MindSpore's CPU cluster are what run here; NCCL and HCCL take
the same code path.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .cases import Case
from .trajectory import Trajectory
from .verdict import References, verdict

#: seconds one launch may take before its process group is killed (its result an error)
LAUNCH_TIMEOUT = 600.0
RANK_SCRIPT = Path(__file__).with_name("rank_process.py")
#: what a launcher or a rank reads from the environment: an enclosing job's values must
#: not leak into the ranks started here
LAUNCH_VARIABLES = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                    "MASTER_PORT", "TORCHELASTIC_RUN_ID", "PADDLE_TRAINERS_NUM",
                    "PADDLE_TRAINER_ID", "PADDLE_TRAINER_ENDPOINTS",
                    "PADDLE_CURRENT_ENDPOINT", "MS_WORKER_NUM", "MS_ROLE",
                    "MS_SCHED_HOST", "MS_SCHED_PORT", "MS_NODE_ID")
LOG_TAIL = 3000
#: seconds between two looks at a launch's rank files
RANK_POLL_S = 0.05


@dataclass
class RanksRun:
    """What the ranks of one launch left: a trajectory per rank (in rank order), the
    lowering decision rank 0 built (as the reports hold it), or the error text."""

    trajectories: list[Trajectory] = field(default_factory=list)
    decision: dict | None = None
    error: str | None = None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launcher(backend: str, ranks: int, logs: Path) -> list[str]:
    """The command that starts ``ranks`` processes of ``backend``'s process group (the
    rank script and its arguments follow)."""
    python = sys.executable
    if backend == "torch":
        return [python, "-m", "torch.distributed.run", f"--nproc_per_node={ranks}",
                f"--master_port={free_port()}"]
    if backend == "paddle":
        return [python, "-m", "paddle.distributed.launch", f"--nproc_per_node={ranks}",
                f"--log_dir={logs}"]
    if backend == "mindspore":
        return [python, "-m", "mindspore.parallel.cluster.run", f"--worker_num={ranks}",
                f"--local_worker_num={ranks}", f"--master_port={free_port()}",
                f"--log_dir={logs}", "--join=True"]
    raise ValueError(f"distributed conformance: no launcher for backend {backend!r}")


def launch_environment() -> dict[str, str]:
    """This process's environment without an enclosing job's launch variables, with
    this interpreter first on PATH (msrun starts ``python`` from PATH)."""
    env = {k: val for k, val in os.environ.items() if k not in LAUNCH_VARIABLES}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def run_ranks(backend: str, case: Case, path: str, directory: Path,
              timeout: float = LAUNCH_TIMEOUT) -> RanksRun:
    """Launch ``case.workers`` ranks of ``case`` on ``path`` in ``directory`` (created);
    wait for them (``timeout``: then kill the launch) and read what they wrote."""
    directory.mkdir(parents=True)
    job = directory / "job.json"
    job.write_text(json.dumps({"case": case.to_dict(), "path": path, "backend": backend}))
    files = [directory / f"rank{r}.npz" for r in range(case.workers)]
    command = launcher(backend, case.workers, directory / "logs") + [
        str(RANK_SCRIPT), str(job), str(directory)]
    with open(directory / "launcher.log", "w") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                   env=launch_environment(), start_new_session=True)
        try:
            ending = _wait_for_ranks(process, files, timeout)
        finally:
            _kill_group(process)
            process.wait()
    decision_file = directory / "decision.json"
    run = RanksRun(decision=json.loads(decision_file.read_text())
                   if decision_file.exists() else None)
    if ending is not None or not all(f.exists() for f in files):
        run.error = (f"the {backend} launch of {case.workers} ranks "
                     f"{ending or 'left no trajectory of some rank'}; its output ends:\n"
                     + _output_tail(directory))
        return run
    run.trajectories = [Trajectory.load(f) for f in files]
    return run


def _wait_for_ranks(process: subprocess.Popen, files: list[Path],
                    timeout: float) -> str | None:
    """Wait until the launcher exits or every rank has written its trajectory (each
    file is written atomically, and rank 0's decision before it); None when the ranks'
    files are all there, else how the launch ended. The launcher's teardown is not
    waited for: MindSpore's scheduler polls its nodes every 5 s before it exits, which
    cost about 8 s of each 20 s launch."""
    deadline = time.monotonic() + timeout
    while True:
        if all(f.exists() for f in files):
            return None
        code = process.poll()
        if code is not None:
            return f"exited with status {code}" if code else None
        if time.monotonic() > deadline:
            return f"ran past {timeout:g} s and was killed"
        time.sleep(RANK_POLL_S)


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, 9)
    except (ProcessLookupError, PermissionError):
        pass


def _output_tail(directory: Path) -> str:
    text = "".join(p.read_text(errors="replace")
                   for p in [directory / "launcher.log", *sorted(directory.glob("logs/*"))]
                   if p.is_file())
    return text[-LOG_TAIL:].strip()


def disagreement(trajectories: list[Trajectory]) -> str | None:
    """Where a rank's parameters or lr first differ from rank 0's in any bit; None when
    every rank holds rank 0's numbers at every step."""
    first = trajectories[0]
    for rank, other in enumerate(trajectories[1:], start=1):
        pairs = [("lr", first.lrs, other.lrs)] + [
            (f"param:{n}", first.params[n], other.params.get(n)) for n in first.params]
        for quantity, a, b in pairs:
            if b is None or a.shape != b.shape:
                return f"rank {rank} has no {quantity} of rank 0's shape"
            same = (a.view(np.uint8) == b.view(np.uint8)).reshape(a.shape[0], -1).all(axis=1)
            if not same.all():
                step = int(np.argmin(same)) + 1
                return (f"rank {rank}'s {quantity} differs from rank 0's in its bits "
                        f"from step {step}")
    return None


def judge(case: Case, backend: str, path: str, run: RanksRun,
          references: References) -> dict:
    """The one result of a distributed run (see the module)."""
    if run.error is not None:
        result = verdict(case, backend, path, None, None, run.error, references)
        return {**result, "lowering": run.decision, "workers": case.workers}
    verdicts = [verdict(case.at_rank(r), backend, path, trajectory, None, None, references)
                for r, trajectory in enumerate(run.trajectories)]
    ranks = [{"rank": r, "status": v["status"],
              "worst_ratio": (v["comparison"] or {}).get("worst_ratio")}
             for r, v in enumerate(verdicts)]
    failing = [v for v in verdicts if v["status"] != "pass"]
    result = failing[0] if failing else max(
        verdicts, key=lambda v: v["comparison"]["worst_ratio"])
    result = {**result, "lowering": run.decision, "workers": case.workers, "ranks": ranks}
    apart = disagreement(run.trajectories)
    if apart is not None and result["status"] == "pass":
        result["status"] = "fail"
        result["comparison"] = {**result["comparison"], "passed": False, "failure": "ranks",
                                "detail": apart}
    elif apart is not None:
        result["comparison"] = {**result["comparison"],
                                "detail": f"{result['comparison']['detail']}; {apart}"}
    return result
