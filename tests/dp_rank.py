"""One rank of data-parallel training with uo optimizers (``test_data_parallel.py``),
started by ``torchrun`` (torch ``DistributedDataParallel``, gloo) or
``python -m paddle.distributed.launch`` (``paddle.DataParallel``):
``dp_rank.py FRAMEWORK JOB.json OUT_DIR``.

JOB.json: ``runs``, pairs of an engine (``"ddp"``: DistributedDataParallel or
DataParallel; ``"zero"``: torch's ZeroRedundancyOptimizer over DDP, its local optimizer
``uo.optimizer_factory(spec)``; ``"fsdp"``: FSDP2 ``fully_shard``, DTensor parameters
sharded by rows, gradients reduce-scattered) and a conformance case (spec, parameter
shapes, steps, seed, planted non-finite steps). A module holding the case's parameters
computes ``sum(p * g)`` over them, so the gradient of rank ``r`` is its own stream
(seed ``seed + r``) and the engine averages them across ranks during ``backward``; the
uo optimizer steps on the average. Writes
``OUT_DIR/<case id>.<engine>.rank<r>.npz``: every step's lr and parameters.
"""

import dataclasses
import json
import sys
from pathlib import Path

import unified_opt as uo
from unified_opt.conformance.cases import Case
from unified_opt.conformance.rank_process import join
from unified_opt.conformance.trajectory import Recorder


def run_torch(case: Case, rank: int, out: Path, engine: str) -> None:
    import torch
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel

    class Linear(torch.nn.Module):
        def __init__(self, arrays):
            super().__init__()
            self.weights = torch.nn.ParameterDict(
                {n: torch.nn.Parameter(torch.from_numpy(a)) for n, a in arrays.items()})

        def forward(self, grads):
            return sum((self.weights[n] * grads[n]).sum() for n in self.weights)

    if engine == "fsdp":     # FSDP2: DTensor parameters, gradients reduce-scattered
        model = Linear(case.initial_params())
        fully_shard(model)
        optimizer = uo.build(case.spec, model)
        scheduler = uo.native_scheduler(optimizer)
        inner = model
    elif engine == "zero":   # each rank steps its share of the parameters, then broadcasts
        model = DistributedDataParallel(Linear(case.initial_params()))
        inner = model.module
        optimizer = ZeroRedundancyOptimizer(model.parameters(),
                                            optimizer_class=uo.optimizer_factory(case.spec))
        scheduler = None
    else:
        model = DistributedDataParallel(Linear(case.initial_params()))
        inner = model.module
        optimizer = uo.build(case.spec, model)
        scheduler = uo.native_scheduler(optimizer)
    mine, recorder = dataclasses.replace(case, seed=case.seed + rank), Recorder()
    for t in range(case.steps):
        grads = {n: torch.from_numpy(g) for n, g in mine.gradients(t).items()}
        lr = optimizer.param_groups[0]["lr"]
        optimizer.zero_grad()
        model(grads).backward()              # DDP all-reduces the gradients, averaged
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        recorder.add(lr, {n: (p.full_tensor() if engine == "fsdp" else p).detach().numpy()
                          .copy() for n, p in inner.weights.items()}, {})
    recorder.trajectory().save(out / f"{case.id}.{engine}.rank{rank}.npz", compress=False)


def run_paddle(case: Case, rank: int, out: Path, engine: str) -> None:
    import paddle

    class Linear(paddle.nn.Layer):
        def __init__(self, arrays):
            super().__init__()
            self.names = list(arrays)
            for n, a in arrays.items():
                p = self.create_parameter(list(a.shape), dtype=str(a.dtype))
                p.set_value(a)
                self.add_parameter(n, p)

        def forward(self, grads):
            return sum((getattr(self, n) * grads[n]).sum() for n in self.names)

    inner = Linear(case.initial_params())
    model = paddle.DataParallel(inner)
    optimizer = uo.build(case.spec, model)
    scheduler = uo.native_scheduler(optimizer)
    mine, recorder = dataclasses.replace(case, seed=case.seed + rank), Recorder()
    for t in range(case.steps):
        grads = {n: paddle.to_tensor(g) for n, g in mine.gradients(t).items()}
        lr = optimizer.get_lr()
        model(grads).backward()              # DataParallel all-reduces, averaged
        optimizer.step()
        optimizer.clear_grad()
        if scheduler is not None:
            scheduler.step()
        recorder.add(lr, {n: getattr(inner, n).numpy().copy() for n in inner.names}, {})
    recorder.trajectory().save(out / f"{case.id}.{engine}.rank{rank}.npz", compress=False)


def main(framework: str, job_file: str, out: str) -> None:
    rank = join(framework)
    run = run_torch if framework == "torch" else run_paddle
    for engine, case in json.loads(Path(job_file).read_text())["runs"]:
        run(Case.from_dict(case), rank, Path(out), engine)


if __name__ == "__main__":
    main(*sys.argv[1:])
