"""One rank of a 2-rank DGC run that saves its state (``test_state_files.py``), run by
``torchrun --nproc_per_node=2 dgc_state_rank.py OUT_DIR``: each rank takes 3 steps on
its own gradients and writes ``OUT_DIR/rank<r>.safetensors``; then each rank loads its
own file (accepted) and the other rank's (refused), and writes what happened to
``OUT_DIR/rank<r>.json``."""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

import unified_opt as uo

SPEC = uo.DGCMomentum(lr=1e-2, min_numel=1, sparsity=(0.5,), rampup_begin_step=0)


def main(out: str) -> None:
    dist.init_process_group("gloo")
    rank, out = dist.get_rank(), Path(out)
    torch.manual_seed(0)
    model = torch.nn.Linear(6, 5)
    optimizer = uo.build(SPEC, model)
    for t in range(3):
        generator = torch.Generator().manual_seed(10 * t + rank)
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=generator)
        optimizer.step()
    uo.save_state(optimizer, out / f"rank{rank}.safetensors")
    dist.barrier()
    result = {}
    for source in (0, 1):
        target = uo.build(SPEC, torch.nn.Linear(6, 5))
        try:
            uo.load_state(target, out / f"rank{source}.safetensors")
            state = target.state[target.param_groups[0]["params"][0]]
            mine = optimizer.state[model.weight]
            result[str(source)] = {"loaded": all(torch.equal(state[k], mine[k])
                                                 for k in ("u", "v"))}
        except ValueError as error:
            result[str(source)] = {"refused": str(error)}
    (out / f"rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
