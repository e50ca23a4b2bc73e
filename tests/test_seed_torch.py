"""The seed algorithms on the torch backend: the own path follows the oracle for every
spec, torch.optim.Adafactor and the host-offloaded fused Adam are exact native rows, and
adam_offload keeps its state in host memory (a CUDA test shows device memory holds none;
it skips without a GPU)."""

import io

import numpy as np
import pytest
from conftest import require
from helpers import SHAPES, assert_follows_reference, gradient_stream, initial_params

import unified_opt as uo

pytestmark = require("torch")
torch = pytest.importorskip("torch")

NAMED = {"w": (8, 6), "bias": (6,), "ln.gamma": (6,), "w3d": (3, 4, 5), "empty": (0,)}

OWN_SPECS = [
    uo.Lamb(lr=0.01, weight_decay=0.05, no_decay_names=("*gamma*",)),
    uo.Lamb(lr=0.01, weight_decay=0.0, bias_correction="step", weight_norm_clamp=2.0,
            always_adapt=True, trust_eps=0.01),
    uo.LARS(lr=0.5, weight_decay=0.01, trust_coefficient=0.02, exclude_names=("*bias*",)),
    uo.LARS(lr=0.5, weight_decay=0.01, trust_coefficient=0.02, lr_placement="outside",
            momentum_init="grad", dampening=0.1, zero_norm_rule="raw_if_norm_zero", clip=True),
    uo.Adafactor(lr=0.3, weight_decay=0.1, eps=(0.05, 1e-3)),
    uo.Adafactor(lr=0.01, eps=(1e-30, 1e-3), eps_mode="add", beta1=0.9, decay_lr="scaled",
                 weight_decay=0.1, relative_step=False, beta2=0.9, decay_rate=None),
    uo.CAME(lr=0.01, weight_decay=0.1, betas=(0.9, 0.999, 0.99)),
    uo.CAME(lr=0.05, betas=(0.9, None, 0.99), decay_rate=0.8, scale_parameter=True,
            relative_step=True),
    uo.AdamOffload(lr=0.01, eps=1e-3, eps_placement="eps_hat", nesterov=True),
    uo.DGCMomentum(lr=0.05, rampup_begin_step=3, rampup_step=10, sparsity=(0.5, 0.9),
                   min_numel=10, dense_clip_norm=1.0, local_grad_clip_norm=2.0,
                   num_trainers=1, use_nesterov=True),
]


def _params(arrays, device="cpu"):
    return {n: torch.nn.Parameter(torch.from_numpy(a.copy()).to(device))
            for n, a in arrays.items()}


def _step(optimizer, params):
    def run(grads):
        lr = optimizer.param_groups[0]["lr"]
        for n, p in params.items():
            p.grad = torch.from_numpy(grads[n].copy()).to(p.device)
        optimizer.step()
        return lr
    return run


@pytest.mark.parametrize("spec", OWN_SPECS, ids=lambda s: s.name)
def test_own_path_follows_the_oracle(spec):
    arrays = initial_params(NAMED)
    params = _params(arrays)
    optimizer = uo.build(spec, params.items())
    assert uo.explain(optimizer).path == "own"
    read = lambda: {n: p.detach().numpy() for n, p in params.items()}   # noqa: E731
    state = lambda: {n: {k: t.numpy() for k, t in optimizer.spec_state(p).items()}  # noqa: E731
                     for n, p in params.items()}
    assert_follows_reference(_step(optimizer, params), read, spec, arrays,
                             list(gradient_stream(NAMED, steps=60)), read_state=state)


def _drive(optimizer, params, grads):
    for g in grads:
        for n, p in params.items():
            p.grad = torch.from_numpy(g[n].copy())
        optimizer.step()
    return {n: p.detach().numpy().copy() for n, p in params.items()}


DENSE = {n: s for n, s in SHAPES.items() if s != (0,)}


@pytest.mark.parametrize("spec, cls, kwargs", [
    (uo.preset("torch.optim.Adafactor", lr=0.3, weight_decay=0.2, beta2_decay=-0.5,
               eps=(1e-3, 1e-2), d=2.0, maximize=True),
     torch.optim.Adafactor, dict(lr=0.3, weight_decay=0.2, beta2_decay=-0.5, eps=(1e-3, 1e-2),
                                 d=2.0, maximize=True)),
    (uo.AdamOffload(lr=0.01, amsgrad=True, weight_decay=0.1),
     torch.optim.Adam, dict(lr=0.01, amsgrad=True, weight_decay=0.1, fused=True)),
])
def test_native_rows_are_bit_identical_to_hand_built(spec, cls, kwargs):
    arrays, grads = initial_params(DENSE), list(gradient_stream(DENSE, steps=60))
    ours, theirs = _params(arrays), _params(arrays)
    optimizer = uo.build(spec, ours.items())
    assert uo.explain(optimizer).path == "native"
    a = _drive(optimizer, ours, grads)
    b = _drive(cls(theirs.values(), **kwargs), theirs, grads)
    for n in arrays:
        np.testing.assert_array_equal(a[n], b[n])


def test_zero_size_parameters_send_adafactor_to_the_own_path():
    params = _params(initial_params(NAMED))
    optimizer = uo.build(uo.Adafactor(), params.items())
    decision = uo.explain(optimizer)
    assert decision.path == "own" and "['empty']" in str(decision)
    assert "ZeroDivisionError" in str(decision)
    with pytest.raises(ValueError, match="zero-size"):
        uo.build(uo.Adafactor(), params.items(), path="native")
    rejected = dict(uo.explain(uo.preset("mindspore.nn.AdaFactor"), "torch").rejected)
    assert any("eps_mode='clamp'" in c for c in rejected["torch.optim.Adafactor"])


def test_torch_has_no_native_lamb_lars_came_or_dgc():
    for spec in (uo.Lamb(), uo.LARS(), uo.CAME(), uo.DGCMomentum()):
        decision = uo.explain(spec, "torch")
        assert decision.path == "own" and "no native optimizer" in decision.reason


def _host_only(optimizer) -> bool:
    tensors = [t for state in optimizer.state.values() for t in state.values()
               if isinstance(t, torch.Tensor)]
    return bool(tensors) and all(t.device.type == "cpu" for t in tensors)


@pytest.mark.parametrize("spec", [uo.AdamOffload(lr=0.01),
                                  uo.AdamOffload(lr=0.01, eps_placement="eps_hat")],
                         ids=["native", "own"])
def test_adam_offload_state_lives_on_the_host_and_survives_a_state_dict(spec):
    arrays, grads = initial_params(DENSE), list(gradient_stream(DENSE, steps=10))
    params = _params(arrays)
    optimizer = uo.build(spec, params.items())
    _drive(optimizer, params, grads[:5])
    assert _host_only(optimizer)
    buffer = io.BytesIO()
    torch.save(optimizer.state_dict(), buffer)
    again = uo.build(spec, _params(arrays).items())
    buffer.seek(0)
    again.load_state_dict(torch.load(buffer, weights_only=True))
    assert _host_only(again)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("spec", [uo.AdamOffload(lr=0.01),
                                  uo.AdamOffload(lr=0.01, eps_placement="eps_hat")],
                         ids=["native", "own"])
def test_on_cuda_device_memory_holds_no_optimizer_state(spec):
    arrays, grads = initial_params(DENSE), list(gradient_stream(DENSE, steps=5))
    params = _params(arrays, "cuda")
    for p in params.values():
        p.grad = torch.zeros_like(p)
    optimizer = uo.build(spec, params.items())
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    for g in grads:
        for n, p in params.items():
            p.grad.copy_(torch.from_numpy(g[n]))
        optimizer.step()
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == before      # parameters and gradients only
    assert _host_only(optimizer)
    on_cpu = _params(arrays)
    want = _drive(uo.build(spec, on_cpu.items()), on_cpu, grads)
    for n, p in params.items():
        np.testing.assert_allclose(p.detach().cpu().numpy(), want[n], rtol=1e-6, atol=1e-7)
