"""One rank of a DGC run over torch.distributed (``test_dgc_torch_distributed.py``),
started by ``torchrun --nproc_per_node=N dgc_rank.py JOB.json OUT_DIR``.

JOB.json: the conformance ``case`` (spec, parameter shapes, steps, seed): rank ``r``
trains on the case's gradient stream with seed ``seed + r`` (adversarial scales and zero
tensors included). Writes ``OUT_DIR/rank<r>.npz``: every step's lr and parameters, and
``OUT_DIR/rank<r>.json``: ``uo.exchange_stats`` after every step.
"""

import dataclasses
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

import unified_opt as uo
from unified_opt.conformance.cases import Case
from unified_opt.conformance.trajectory import Recorder


def main(job_file: str, out: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    case = Case.from_dict(json.loads(Path(job_file).read_text())["case"])
    mine = dataclasses.replace(case, seed=case.seed + rank)
    params = {n: torch.nn.Parameter(torch.from_numpy(a))
              for n, a in case.initial_params().items()}
    optimizer = uo.build(case.spec, list(params.items()))
    scheduler = uo.lr_scheduler(optimizer)
    recorder, stats = Recorder(), []
    for t in range(case.steps):
        grads = mine.gradients(t)
        for name, p in params.items():
            p.grad = torch.from_numpy(grads[name])
        lr = optimizer.param_groups[0]["lr"]
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        recorder.add(lr, {n: p.detach().numpy().copy() for n, p in params.items()}, {})
        stats.append(uo.exchange_stats(optimizer))
    recorder.trajectory().save(Path(out) / f"rank{rank}.npz")
    (Path(out) / f"rank{rank}.json").write_text(json.dumps(stats))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
