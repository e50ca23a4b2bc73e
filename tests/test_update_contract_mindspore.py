"""The ``update`` contract on MindSpore's own path (the torch form:
``test_update_contract.py``): every engine (eager operations, the kernel VM) keeps what
an update returns in state Parameters it owns, so no state shares memory with a
gradient passed to ``opt(grads)`` or with a parameter, whichever sample of whichever
algorithm; and SGD with momentum (whose first momentum step is the gradient itself)
is unchanged when the caller writes new values into the gradient tensors it passed
(MindSpore keeps no gradient on a parameter: a training loop may reuse its buffers).
MindSpore runs in this process (conftest imports it first)."""

import numpy as np
import pytest
from algorithms import ALGORITHMS
from conftest import require

import unified_opt as uo

pytestmark = require("mindspore")
ms = pytest.importorskip("mindspore")
from mindspore import Parameter, Tensor  # noqa: E402

OPTIONS = {"eager": {"compile": False}, "kernels": {"compile": "auto"}}
SAMPLES = [(name, i, spec) for name, algorithm in ALGORITHMS.items()
           for i, spec in enumerate(algorithm.samples)]
#: parameter name -> shape, under names the samples' name rules know
SHAPES = {"w0": (5, 6), "l0.bias": (5,), "ln.gamma": (5,), "ln.beta": (5,), "w2": (3, 5),
          "l2.bias": (3,)}


def _params() -> list:
    rng = np.random.default_rng(0)
    return [Parameter(Tensor(rng.standard_normal(shape).astype(np.float32)), name=name)
            for name, shape in SHAPES.items()]


def _grads(step: int) -> list[np.ndarray]:
    rng = np.random.default_rng(100 + step)
    return [rng.standard_normal(shape).astype(np.float32) for shape in SHAPES.values()]


def _address(tensor) -> int:
    # on the CPU asnumpy() is a view of the tensor's memory (no copy)
    return tensor.asnumpy().ctypes.data


@pytest.mark.parametrize("engine", list(OPTIONS))
@pytest.mark.parametrize("name,index,spec", SAMPLES,
                         ids=[f"{name}-{i}" for name, i, _ in SAMPLES])
def test_no_state_shares_memory_with_a_gradient_or_a_parameter(name, index, spec, engine):
    # a spec of some shapes only (Muon's matrices-only form) gets the parameters of those
    kept = [spec.updates_shape(tuple(shape)) for shape in SHAPES.values()]
    params = [p for p, k in zip(_params(), kept) if k]
    optimizer = uo.build(spec, [(p.name, p) for p in params], path="own",
                         options=OPTIONS[engine])
    for step in range(3):
        arrays = [a for a, k in zip(_grads(step), kept) if k]
        grads = tuple(Tensor.from_numpy(a) for a in arrays)   # sharing the arrays' memory
        optimizer(grads)
        inputs = {a.ctypes.data: "a gradient" for a in arrays}
        inputs.update({_address(p): "a parameter" for p in params})
        for slots in optimizer._slots:
            for key, array in slots.items():
                if array.size:
                    assert _address(array) not in inputs, \
                        f"{name} sample {index}: state {key!r} shares memory with " \
                        f"{inputs[_address(array)]}"


@pytest.mark.parametrize("engine", list(OPTIONS))
def test_sgd_momentum_does_not_follow_a_reused_gradient_buffer(engine):
    runs = []
    for reuse in (False, True):
        params = _params()
        optimizer = uo.build(uo.SGD(lr=0.01, momentum=0.9), [(p.name, p) for p in params],
                             path="own", options=OPTIONS[engine])
        buffers = [np.zeros(shape, np.float32) for shape in SHAPES.values()]
        for step in range(20):
            if reuse:        # the same gradient tensors, new values written into them
                for buffer, g in zip(buffers, _grads(step)):
                    buffer[...] = g
                optimizer(tuple(Tensor.from_numpy(b) for b in buffers))
            else:
                optimizer(tuple(Tensor.from_numpy(g) for g in _grads(step)))
        runs.append([p.asnumpy().copy() for p in params])
    for name, fresh, reused in zip(SHAPES, *runs):
        assert fresh.tobytes() == reused.tobytes(), (name, np.abs(fresh - reused).max())
