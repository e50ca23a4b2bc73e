"""A data-parallel spec (DGC) where the launcher says there are several ranks (torchrun's
``WORLD_SIZE``, ``paddle.distributed.launch``'s ``PADDLE_TRAINERS_NUM``, ``msrun``'s
``MS_WORKER_NUM``) but the script has not joined the process group yet: ``uo.build``
refuses it, naming the call to make, rather than letting each rank step alone on its own
gradients. (In the group it exchanges: test_dgc_distributed.py.)"""

import pytest
from conftest import require

import unified_opt as uo


@require("torch")
def test_num_trainers_other_than_the_world_size_is_refused_at_the_build():
    """DGC scales its local clip norm by num_trainers ** -0.5: a count that is not the
    ranks it exchanges with is refused when the optimizer is built, not at its first
    step after the state was made."""
    import torch

    params = [torch.nn.Parameter(torch.ones(3))]
    with pytest.raises(ValueError, match=r"build: DGCMomentum\(num_trainers=4\) but this "
                                         r"optimizer exchanges over 1 rank\(s\)"):
        uo.build(uo.DGCMomentum(num_trainers=4, local_grad_clip_norm=1.0, min_numel=0),
                 params)
    optimizer = uo.build(uo.DGCMomentum(num_trainers=1, local_grad_clip_norm=1.0), params)
    assert not optimizer.state


@require("torch")
def test_a_launcher_environment_without_a_group_is_more_than_one_rank(monkeypatch):
    import torch

    params = [torch.nn.Parameter(torch.zeros(3))]
    uo.build(uo.DGCMomentum(), params)                      # world size 1
    monkeypatch.setenv("WORLD_SIZE", "4")                    # torchrun, before the group
    with pytest.raises(ValueError, match=r"DGCMomentum on 4 ranks \(WORLD_SIZE\) with no "
                                         "process group: call torch.distributed."
                                         "init_process_group before uo.build"):
        uo.build(uo.DGCMomentum(), params)
    with pytest.raises(ValueError, match="options process_group=.* is for data-parallel"):
        uo.build(uo.AdamW(), params, options={"process_group": None})
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(ValueError, match="WORLD_SIZE='two' is not a number of ranks"):
        uo.build(uo.DGCMomentum(), params)


@require("paddle")
def test_a_paddle_launch_environment_without_the_parallel_env(monkeypatch):
    import paddle

    params = [paddle.create_parameter([3], "float32")]
    # Paddle caches the environment at its first get_world_size(): read before the launcher
    # variable is set, it would say 1 (what a suite of tests does; not what uo reads)
    assert paddle.distributed.get_world_size() == 1
    monkeypatch.setenv("PADDLE_TRAINERS_NUM", "2")
    with pytest.raises(ValueError, match=r"DGCMomentum on 2 ranks \(PADDLE_TRAINERS_NUM\) "
                                         "before the parallel env"):
        uo.build(uo.DGCMomentum(), params)


@require("mindspore")
def test_an_msrun_environment_before_communication_init(monkeypatch):
    import mindspore as ms

    params = [ms.Parameter(ms.Tensor([0.0] * 3, ms.float32), name="w")]
    monkeypatch.setenv("MS_WORKER_NUM", "2")
    with pytest.raises(ValueError, match=r"DGCMomentum on 2 ranks \(MS_WORKER_NUM\) before "
                                         r"communication.init\(\)"):
        uo.build(uo.DGCMomentum(), params)
