"""One rank of a DGC run over a framework's collectives (``test_dgc_distributed.py``),
started by the framework's launcher: ``torchrun --nproc_per_node=N dgc_rank.py torch
JOB.json OUT_DIR``, ``python -m paddle.distributed.launch ... dgc_rank.py paddle ...`` or
``msrun ... dgc_rank.py mindspore ...``.

JOB.json: the conformance ``case`` (spec, parameter shapes, steps, seed): rank ``r``
trains on the case's gradient stream with seed ``seed + r`` (adversarial scales and zero
tensors included) through the conformance driver (``uo.build`` in the process group);
``kill``: ``[rank, step]``, that rank exits abruptly before that step.
Writes ``OUT_DIR/rank<r>.npz``: every step's lr and parameters, and
``OUT_DIR/rank<r>.json``: ``uo.exchange_stats`` after every step.
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


def main(framework: str, job_file: str, out: str) -> None:
    rank = join(framework)
    case = Case.from_dict(json.loads(Path(job_file).read_text())["case"])
    mine = dataclasses.replace(case, seed=case.seed + rank)
    driver = driver_class(framework)(case.spec, case.initial_params(),
                                     total_steps=case.steps)
    job = json.loads(Path(job_file).read_text())
    recorder, stats = Recorder(), []
    for t in range(case.steps):
        if job.get("kill") == [rank, t]:        # a rank dying mid-run (a killed process)
            print(f"rank {rank}: exiting at step {t}", flush=True)
            os._exit(3)
        lr = driver.step(mine.gradients(t))
        recorder.add(lr, driver.params_numpy(), {})
        stats.append(uo.exchange_stats(driver.optimizer))
    recorder.trajectory().save(Path(out) / f"rank{rank}.npz", compress=False)
    (Path(out) / f"rank{rank}.json").write_text(json.dumps(stats))


if __name__ == "__main__":
    main(*sys.argv[1:])
