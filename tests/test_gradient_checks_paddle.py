"""Every gradient checked against its parameter before a Paddle step changes anything
(the torch forms: ``test_gradient_checks.py``).

The own path (the kernel VM and eagerly) and the native classes ``uo.build`` returns
refuse a gradient of another shape (Paddle's own classes broadcast a 1-element one),
dtype (the own path turned a float32 parameter and its state into float64) or a
SelectedRows one (``Embedding(sparse=True)``), naming the parameter, with every parameter
and state as it was. Paddle runs in this process (conftest imports mindspore first when
it is installed)."""

import re

import numpy as np
import pytest
from conftest import require

import unified_opt as uo

pytestmark = require("paddle")
paddle = pytest.importorskip("paddle")

SPECS = {"adamw": uo.AdamW(lr=0.1, weight_decay=0.01), "sgd": uo.SGD(lr=0.1, momentum=0.9)}
BUILDS = {"own": {"path": "own"}, "own_eager": {"path": "own", "options": {"compile": False}},
          "default": {}}


def _built(spec, build):
    paddle.seed(0)
    layer = paddle.nn.Linear(4, 3)
    opt = uo.build(spec, layer, **build)
    _backward(layer)
    opt.step()
    return opt, layer


def _backward(layer) -> None:
    layer.clear_gradients()
    layer(paddle.ones([2, 4])).sum().backward()


def _snapshot(opt, layer) -> dict:
    out = {p.name: (str(p.dtype), p.numpy().copy()) for p in layer.parameters()}
    for key, value in paddle.optimizer.Optimizer.state_dict(opt).items():
        if isinstance(value, paddle.Tensor):
            out[key] = (str(value.dtype), value.numpy().copy())
    return out


def _assert_unchanged(before: dict, after: dict) -> None:
    assert before.keys() == after.keys()
    for key, (dtype, value) in before.items():
        assert after[key][0] == dtype, key
        assert after[key][1].dtype == value.dtype and after[key][1].tobytes() == \
            value.tobytes(), key


def _force_grad(p, array) -> None:
    """``array`` as ``p``'s gradient, whatever its shape or dtype."""
    p._grad_ivar().get_tensor().set(array, paddle.CPUPlace())


WRONG = {
    "one_element": ("weight", lambda: np.ones([1], np.float32), ValueError, "shape [1] "),
    "five_on_three": ("bias", lambda: np.ones([5], np.float32), ValueError, "shape [5] "),
    "float64": ("weight", lambda: np.ones([4, 3], np.float64), TypeError, "dtype float64 "),
}


@pytest.mark.parametrize("build", BUILDS)
@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("wrong", WRONG)
def test_a_gradient_unlike_its_parameter_is_refused_before_anything_changes(wrong, spec,
                                                                            build):
    name, array, error, shown = WRONG[wrong]
    opt, layer = _built(SPECS[spec], BUILDS[build])
    before = _snapshot(opt, layer)
    _backward(layer)
    _force_grad(getattr(layer, name), array())
    with pytest.raises(error, match=rf"the gradient of {name}( \([\w.]+\))? does not fit its "
                                    rf"parameter: {re.escape(shown)}"):
        opt.step()
    _assert_unchanged(before, _snapshot(opt, layer))
    # the next fitting step runs, the parameters keep their dtype
    _backward(layer)
    opt.step()
    assert not np.array_equal(layer.weight.numpy(), before[layer.weight.name][1])
    assert all(p.dtype == paddle.float32 for p in layer.parameters())


def test_the_own_path_keeps_a_float32_parameter_and_its_state_float32():
    opt, layer = _built(uo.Adam(lr=0.1), {"path": "own"})
    _backward(layer)
    _force_grad(layer.weight, np.ones([4, 3], np.float64))
    with pytest.raises(TypeError, match=r"the gradient of weight does not fit its parameter: "
                                        r"dtype float64 \(the parameter's: float32\)"):
        opt.step()
    assert layer.weight.dtype == paddle.float32
    assert all(value.dtype == paddle.float32
               for key, value in paddle.optimizer.Optimizer.state_dict(opt).items()
               if isinstance(value, paddle.Tensor) and "moment" in key)
    # the next forward still runs (a float64 weight made it fail)
    assert layer(paddle.ones([2, 4])).dtype == paddle.float32


@pytest.mark.parametrize("build", ["own", "default"])
def test_a_selected_rows_gradient_is_refused_by_name(build):
    embedding = paddle.nn.Embedding(10, 4, sparse=True)
    opt = uo.build(uo.SGD(lr=0.1), embedding, **BUILDS[build])
    start = embedding.weight.numpy().copy()
    embedding(paddle.to_tensor([[1, 2]])).sum().backward()
    assert embedding.weight._grad_ivar().is_selected_rows()
    with pytest.raises(RuntimeError, match=r"the gradient of weight\b.* form selected_rows "
                                           r".*Embedding\(sparse=True\)"):
        opt.step()
    assert embedding.weight.numpy().tobytes() == start.tobytes()
