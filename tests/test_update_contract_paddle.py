"""The ``update`` contract on Paddle's own path (the torch form:
``test_update_contract.py``): every engine (eager operations, the kernel VM) keeps what
an update returns in accumulators it owns, so no accumulator shares memory with a
gradient or a parameter, whichever sample of whichever algorithm; and SGD with momentum
(whose first momentum step is the gradient itself) gives the same bits whether
``clear_grad`` drops the gradients or zeroes them in place for the next backward. Paddle
runs in this process (conftest imports mindspore first when it is installed)."""

import numpy as np
import pytest
from algorithms import ALGORITHMS
from conftest import require

import unified_opt as uo

pytestmark = require("paddle")
paddle = pytest.importorskip("paddle")

OPTIONS = {"eager": {"compile": False}, "kernels": {"compile": "auto"}}
SAMPLES = [(name, i, spec) for name, algorithm in ALGORITHMS.items()
           for i, spec in enumerate(algorithm.samples)]
#: the layers' parameters under names the samples' name rules know
NAMES = ("w0", "l0.bias", "ln.gamma", "ln.beta", "w2", "l2.bias")


class _Model(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.first, self.norm = paddle.nn.Linear(6, 5), paddle.nn.LayerNorm(5)
        self.last = paddle.nn.Linear(5, 3)

    def forward(self, x):
        return self.last(self.norm(self.first(x)))


def _model() -> _Model:
    paddle.seed(0)
    return _Model()


def _build(spec, model, engine: str):
    params = [model.first.weight, model.first.bias, model.norm.weight, model.norm.bias,
              model.last.weight, model.last.bias]
    # a spec of some shapes only (Muon's matrices-only form) gets the model's of those
    return uo.build(spec, [(n, p) for n, p in zip(NAMES, params)
                           if spec.updates_shape(tuple(p.shape))],
                    path="own", options=OPTIONS[engine])


def _train(optimizer, model, steps: int, set_to_zero: bool) -> None:
    x = paddle.to_tensor(np.random.default_rng(1).standard_normal((7, 6)).astype("float32"))
    for _ in range(steps):
        model(x).square().mean().backward()
        optimizer.step()
        optimizer.clear_grad(set_to_zero=set_to_zero)


def _address(tensor) -> int:
    # a CPU tensor's memory through DLPack (a view, no copy)
    return np.from_dlpack(tensor.detach()).ctypes.data


@pytest.mark.parametrize("engine", list(OPTIONS))
@pytest.mark.parametrize("name,index,spec", SAMPLES,
                         ids=[f"{name}-{i}" for name, i, _ in SAMPLES])
def test_no_accumulator_shares_memory_with_a_gradient_or_a_parameter(name, index, spec,
                                                                     engine):
    model = _model()
    optimizer = _build(spec, model, engine)
    for _ in range(3):
        _train(optimizer, model, 1, set_to_zero=True)
        inputs = {}
        for p in model.parameters():
            inputs[_address(p)] = "a parameter"
            if p.grad is not None:
                inputs[_address(p.grad)] = "a gradient"
        for p in optimizer._params:
            for key, array in optimizer.spec_state(p).items():
                if array.size:
                    assert _address(array) not in inputs, \
                        f"{name} sample {index}: state {key!r} shares memory with " \
                        f"{inputs[_address(array)]}"


@pytest.mark.parametrize("engine", list(OPTIONS))
def test_sgd_momentum_is_the_same_in_both_clear_grad_modes(engine):
    runs = []
    for set_to_zero in (False, True):
        model = _model()
        _train(_build(uo.SGD(lr=0.01, momentum=0.9), model, engine), model, 20, set_to_zero)
        runs.append([p.numpy().copy() for p in model.parameters()])
    for name, dropped, zeroed in zip(NAMES, *runs):
        assert dropped.tobytes() == zeroed.tobytes(), (name, np.abs(dropped - zeroed).max())
