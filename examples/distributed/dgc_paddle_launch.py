"""DGC momentum on Paddle ranks: each rank trains on its own shard; uo's optimizer sends
only the top 0.1 % of each accumulated gradient (after the warm-up ramp) and sums
everyone's.

    python -m paddle.distributed.launch --nproc_per_node=2 \
        examples/distributed/dgc_paddle_launch.py [STEPS]
"""

import sys

import paddle
import paddle.distributed as dist

import unified_opt as uo

SPEC = uo.DGCMomentum(lr=0.05, momentum=0.9, rampup_begin_step=10, rampup_step=40,
                      sparsity=(0.75, 0.9375, 0.984375, 0.996, 0.999), min_numel=1024)


def main(steps: int = 100) -> None:
    dist.init_parallel_env()
    rank = dist.get_rank()
    paddle.seed(0)                             # the same model on every rank
    model = paddle.nn.Sequential(paddle.nn.Linear(64, 256), paddle.nn.Tanh(),
                                 paddle.nn.Linear(256, 1))
    paddle.seed(1 + rank)                      # each rank its own data
    x = paddle.randn([512, 64])
    y = paddle.sin(x[:, :1] * 3)
    optimizer = uo.build(SPEC, model)          # no DataParallel: DGC exchanges itself
    for step in range(steps):
        loss = paddle.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.clear_grad()
        if rank == 0 and (step % 20 == 19 or step == steps - 1):
            stats = uo.exchange_stats(optimizer)
            print(f"step {step + 1}: loss {float(loss):.4f}, sent "
                  f"{stats['bytes_sent'] / stats['dense_bytes']:.4f} of the dense bytes")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100)   # [STEPS]
