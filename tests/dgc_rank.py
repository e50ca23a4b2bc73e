"""One rank of DGC runs over a framework's collectives (``test_dgc_distributed.py``),
started by the framework's launcher: ``torchrun --nproc_per_node=N dgc_rank.py torch
JOB.json``, ``python -m paddle.distributed.launch ... dgc_rank.py paddle ...`` or
``msrun ... dgc_rank.py mindspore ...``.

JOB.json: ``runs``, a list of ``[case, out_dir]``, run one after the other in the one
process group (a launch, its processes and the group cost more than a run): in each
rank ``r`` trains on the conformance ``case``'s gradient stream with seed ``seed + r``
(adversarial scales and zero tensors included) through the conformance driver
(``uo.build`` in the process group); ``kill``: ``[rank, step]``, that rank exits
abruptly before that step of the first run.
Writes, per run, ``out_dir/rank<r>.npz``: every step's lr and parameters, and
``out_dir/rank<r>.json``: ``uo.exchange_stats`` after every step.
"""

import dataclasses
import json
import os
import sys
from pathlib import Path

import unified_opt as uo
from unified_opt.conformance.cases import Case
from unified_opt.conformance.rank_process import join
from unified_opt.conformance.trajectory import Recorder
from unified_opt.conformance.worker import driver_class


def run(framework: str, rank: int, case: Case, out: Path, kill) -> None:
    mine = dataclasses.replace(case, seed=case.seed + rank)
    driver = driver_class(framework)(case.spec, case.initial_params(),
                                     total_steps=case.steps)
    recorder, stats = Recorder(), []
    for t in range(case.steps):
        if kill == [rank, t]:                   # a rank dying mid-run (a killed process)
            print(f"rank {rank}: exiting at step {t}", flush=True)
            os._exit(3)
        lr = driver.step(mine.gradients(t))
        recorder.add(lr, driver.params_numpy(), {})
        stats.append(uo.exchange_stats(driver.optimizer))
    recorder.trajectory().save(out / f"rank{rank}.npz", compress=False)
    (out / f"rank{rank}.json").write_text(json.dumps(stats))


def main(framework: str, job_file: str) -> None:
    rank = join(framework)
    job = json.loads(Path(job_file).read_text())
    for number, (case, out) in enumerate(job["runs"]):
        run(framework, rank, Case.from_dict(case), Path(out),
            job.get("kill") if number == 0 else None)


if __name__ == "__main__":
    main(*sys.argv[1:])
