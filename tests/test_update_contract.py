"""The ``update`` contract on torch's own path: a spec's ``update`` returns new arrays
(or one of its inputs: SGD's first momentum step returns the gradient itself), and an
engine copies what it keeps into state it owns. No state tensor may share memory with a
gradient or a parameter: ``zero_grad(set_to_none=False)`` and ``backward()`` write
``p.grad`` in place, so a state tensor bound to it would change under the optimizer
(SGD with momentum on the eager engine ended 0.048 from ``torch.optim.SGD`` after 20
steps before).

Driven the way users drive an optimizer: a real ``backward()`` each step, with both
``zero_grad`` modes."""

from __future__ import annotations

import pytest
import torch
from algorithms import ALGORITHMS

import unified_opt as uo

#: the own path's engines on the CPU: eager operations, the kernel VM
OPTIONS = {"eager": {"compile": False}, "kernels": {"compile": "auto"}}
SAMPLES = [(name, i, spec) for name, algorithm in ALGORITHMS.items()
           for i, spec in enumerate(algorithm.samples)]


#: the model's parameters under names the samples' name rules know (MindSpore-style
#: LayerNorm names, biases ending in "bias")
NAMES = {"0.weight": "w0", "0.bias": "l0.bias", "1.weight": "ln.gamma", "1.bias": "ln.beta",
         "2.weight": "w2", "2.bias": "l2.bias"}


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.LayerNorm(5),
                               torch.nn.Linear(5, 3))


def _build(spec, model, engine: str):
    # a spec of some shapes only (Muon's matrices-only form) gets the model's of those
    return uo.build(spec, [(NAMES[n], p) for n, p in model.named_parameters()
                           if spec.updates_shape(tuple(p.shape))], path="own",
                    options=OPTIONS[engine])


def _train(optimizer, model, steps: int, set_to_none: bool) -> None:
    x = torch.randn(7, 6, generator=torch.Generator().manual_seed(1))
    for _ in range(steps):
        optimizer.zero_grad(set_to_none=set_to_none)
        model(x).square().mean().backward()
        optimizer.step()


def _storages(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


@pytest.mark.parametrize("engine", list(OPTIONS))
@pytest.mark.parametrize("name,index,spec", SAMPLES,
                         ids=[f"{name}-{i}" for name, i, _ in SAMPLES])
def test_no_state_tensor_shares_memory_with_a_gradient_or_a_parameter(name, index, spec,
                                                                      engine):
    model = _model()
    optimizer = _build(spec, model, engine)
    for _ in range(3):
        _train(optimizer, model, 1, set_to_none=False)
        inputs = {}
        for p in model.parameters():
            inputs[_storages(p)] = "a parameter"
            if p.grad is not None:
                inputs[_storages(p.grad)] = "a gradient"
        for p in model.parameters():
            for key, array in optimizer.state.get(p, {}).items():
                if torch.is_tensor(array) and array.numel():
                    assert _storages(array) not in inputs, \
                        f"{name} sample {index}: state {key!r} shares memory with " \
                        f"{inputs[_storages(array)]}"


@pytest.mark.parametrize("engine", list(OPTIONS))
def test_sgd_momentum_is_the_same_in_both_zero_grad_modes(engine):
    """Bit for bit: SGD's momentum buffer starts as the gradient (torch's first-step
    rule) and must not follow ``p.grad`` after that, whether ``zero_grad`` drops the
    gradients or zeroes them in place."""
    runs = []
    for set_to_none in (True, False):
        model = _model()
        _train(_build(uo.SGD(lr=0.01, momentum=0.9), model, engine), model, 20, set_to_none)
        runs.append([p.detach().clone() for p in model.parameters()])
    for name, dropped, zeroed in zip(NAMES.values(), *runs):
        assert torch.equal(dropped, zeroed), (name, (dropped - zeroed).abs().max().item())
