"""DGC momentum on MindSpore ranks (CPU): each rank trains on its own shard; uo's
optimizer sends only the top 0.1 % of each accumulated gradient (after the warm-up ramp)
and sums everyone's.

    GLOG_v=3 msrun --worker_num=2 --local_worker_num=2 --join=True --tail_worker_log=0 \
        examples/distributed/dgc_msrun.py [STEPS]

Rank 0 prints the progress. msrun writes each worker's output into ``worker_N.log`` and,
with ``--join=True``, copies the workers named by ``--tail_worker_log`` to the terminal
(0: rank 0 only; every worker when it is not given); ``GLOG_v=3`` keeps MindSpore's
own warnings (connection retries while the ranks meet) out of it. msrun starts the
workers with the ``python`` first on ``PATH``: run it from the environment holding
MindSpore and unified-opt (e.g. with ``.venv/bin`` first on ``PATH``).
"""

import sys

import mindspore as ms
import numpy as np
from mindspore import nn
from mindspore.communication import get_rank, init

import unified_opt as uo

SPEC = uo.DGCMomentum(lr=0.05, momentum=0.9, rampup_begin_step=10, rampup_step=40,
                      sparsity=(0.75, 0.9375, 0.984375, 0.996, 0.999), min_numel=1024)


def main(steps: int = 100) -> None:
    ms.set_device("CPU")
    init()
    rank = get_rank()
    ms.set_seed(0)                             # the same model on every rank
    model = nn.SequentialCell([nn.Dense(64, 256), nn.Tanh(), nn.Dense(256, 1)])
    data = np.random.default_rng(1 + rank)     # each rank its own data
    x = ms.Tensor(data.standard_normal((512, 64)).astype(np.float32))
    y = ms.ops.sin(x[:, :1] * 3)
    optimizer = uo.build(SPEC, model)

    def forward(inputs, targets):
        return nn.MSELoss()(model(inputs), targets)

    grad_fn = ms.value_and_grad(forward, None, optimizer.parameters)
    for step in range(steps):
        loss, grads = grad_fn(x, y)
        optimizer(grads)
        if rank == 0 and (step % 20 == 19 or step == steps - 1):
            stats = uo.exchange_stats(optimizer)
            print(f"step {step + 1}: loss {float(loss.asnumpy()):.4f}, sent "
                  f"{stats['bytes_sent'] / stats['dense_bytes']:.4f} of the dense bytes",
                  flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100)   # [STEPS]
