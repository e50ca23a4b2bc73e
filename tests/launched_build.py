"""One rank of ``test_distributed_refusal.py``, started by the framework's own launcher
(``torchrun``, ``python -m paddle.distributed.launch``, ``msrun``):
``launched_build.py FRAMEWORK``. It joins the process group, then builds a DGC momentum
optimizer (must be refused: no exchange over real collectives yet) and an AdamW one (must
build: data-parallel engines average the gradients before the step), and prints one
line per build."""

import sys

import unified_opt as uo


def rank_and_params(framework: str):
    if framework == "torch":
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        return dist.get_rank(), dist.get_world_size(), [torch.nn.Parameter(torch.zeros(3))]
    if framework == "paddle":
        import paddle
        import paddle.distributed as dist

        dist.init_parallel_env()
        return dist.get_rank(), dist.get_world_size(), [paddle.create_parameter([3],
                                                                                "float32")]
    import mindspore as ms
    from mindspore.communication import get_group_size, get_rank, init

    ms.set_device("CPU")
    init()
    return get_rank(), get_group_size(), [ms.Parameter(ms.Tensor([0.0] * 3, ms.float32),
                                                       name="w")]


def main(framework: str) -> None:
    rank, world, params = rank_and_params(framework)
    try:
        uo.build(uo.DGCMomentum(), params)
        print(f"rank {rank}/{world}: dgc built", flush=True)
    except ValueError as error:
        print(f"rank {rank}/{world}: dgc refused: {error}", flush=True)
    uo.build(uo.AdamW(), params)
    print(f"rank {rank}/{world}: adamw built", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
