"""DGC momentum on torch ranks: each rank trains on its own shard; uo's optimizer sends
only the top 0.1 % of each accumulated gradient (after Paddle's warm-up ramp) and sums
everyone's.

    torchrun --nproc_per_node=2 examples/distributed/dgc_torchrun.py [STEPS]
"""

import sys

import torch
import torch.distributed as dist

import unified_opt as uo

SPEC = uo.DGCMomentum(lr=0.05, momentum=0.9, rampup_begin_step=10, rampup_step=40,
                      sparsity=(0.75, 0.9375, 0.984375, 0.996, 0.999), min_numel=1024)


def main(steps: int = 100) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)                       # the same model on every rank
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Tanh(),
                                torch.nn.Linear(256, 1))
    torch.manual_seed(1 + rank)                # each rank its own data
    x = torch.randn(512, 64)
    y = torch.sin(x[:, :1] * 3)
    optimizer = uo.build(SPEC, model)          # no DDP: DGC exchanges the gradients itself
    for step in range(steps):
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if rank == 0 and (step % 20 == 19 or step == steps - 1):
            stats = uo.exchange_stats(optimizer)
            print(f"step {step + 1}: loss {loss.item():.4f}, sent "
                  f"{stats['bytes_sent'] / stats['dense_bytes']:.4f} of the dense bytes")
    dist.barrier()                             # every rank's last exchange is done
    dist.destroy_process_group()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100)   # [STEPS]
