"""DTensor parameters (FSDP2 ``fully_shard``, tensor parallel): a native torch class runs
on shards as torch intends, but uo's own implementation would compute norms, trust
ratios and factored moments on each rank's shard, and its gradient pre-step would clip
each shard by its own norm: ``uo.build`` refuses both, naming the parameters, rather than
compute other numbers. (A one-rank gloo group on CPU: a DTensor of one shard.)"""

import socket

import pytest

import unified_opt as uo

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")


@pytest.fixture
def sharded():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0,
                            world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        yield [("w", torch.nn.Parameter(distribute_tensor(torch.ones(8, 4), mesh,
                                                          [Shard(0)]))),
               ("b", torch.nn.Parameter(torch.zeros(4)))]
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("spec", [uo.Lamb(), uo.preset("mindformers.core.Came",
                                                        learning_rate=1e-3)])
def test_the_own_implementation_refuses_sharded_parameters(sharded, spec):
    with pytest.raises(ValueError, match=r"parameters \['w'\] are DTensors .* the own "
                                         "implementation .* on each rank's shard"):
        uo.build(spec, sharded)


def test_a_native_class_runs_on_them(sharded):
    optimizer = uo.build(uo.AdamW(lr=0.1), sharded)
    assert uo.explain(optimizer).native == "torch.optim.AdamW"
    for _, p in sharded:
        p.grad = torch.ones_like(p)
    optimizer.step()
    w = sharded[0][1].full_tensor()
    # AdamW's first step: w - lr * (wd * w) - lr * sign(g) (m / sqrt(v) = 1)
    torch.testing.assert_close(w, torch.full((8, 4), 1 - 0.1 * 0.01 - 0.1))


def test_the_gradient_pre_step_refuses_them(sharded):
    spec = uo.AdamW(grad_clip=uo.ClipByGlobalNorm(max_norm=1.0))
    with pytest.raises(ValueError, match="gradient pre-step .* each rank's shard"):
        uo.build(spec, sharded)
