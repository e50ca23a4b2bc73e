"""One rank of a distributed conformance run, started by the framework's launcher
(:mod:`.distributed`): ``LAUNCHER ... rank_process.py JOB.json OUT_DIR``.

JOB.json holds the case, the path and the backend. The rank joins the process group,
runs the case on its own gradient stream through the backend's conformance driver
(``uo.build`` in the group) and writes ``OUT_DIR/rank<r>.npz`` (lr, parameters and its
spec state at every step); rank 0 also writes ``OUT_DIR/decision.json``. An exception
ends the process with its traceback and a non-zero status, which fails the launch.
"""

import sys
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path, and its modules
# (html.py, ...) would shadow the standard library's: the package is imported by name.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    del sys.path[0]

import json  # noqa: E402


def join(framework: str) -> int:
    """Join the process group the launcher set up; this process's rank. torch uses gloo
    (CPU); Paddle's ``init_parallel_env`` and MindSpore's ``init`` pick the CPU
    backend of their build."""
    if framework == "torch":
        import torch.distributed as dist

        dist.init_process_group("gloo")
        return dist.get_rank()
    if framework == "paddle":
        import paddle.distributed as dist

        dist.init_parallel_env()
        return dist.get_rank()
    if framework == "mindspore":
        import mindspore as ms
        from mindspore.communication import get_rank, init

        ms.set_device("CPU")
        init()
        return get_rank()
    raise ValueError(f"rank_process: unknown framework {framework!r}")


def main(job_file: str, out: str) -> None:
    job = json.loads(Path(job_file).read_text())
    # joined first: msrun starts its scheduler as this script too, and the scheduler's
    # init() ends its process without returning, so it never needs the package
    rank = join(job["backend"])
    from unified_opt.conformance.cases import Case
    from unified_opt.conformance.verdict import decision_dict
    from unified_opt.conformance.worker import drive, driver_class, start

    case = Case.from_dict(job["case"]).at_rank(rank)
    driver = start(driver_class(job["backend"]), case, job["path"])
    if rank == 0:
        Path(out, "decision.json").write_text(json.dumps(decision_dict(driver.decision)))
    drive(driver, case).save(Path(out) / f"rank{rank}.npz", compress=False)


if __name__ == "__main__":
    main(*sys.argv[1:])
