"""Every gradient checked against its parameter before a MindSpore step changes anything
(the torch forms: ``test_gradient_checks.py``).

The own path (PyNative on the kernel VM and eagerly; ``opt(grads)`` in GRAPH_MODE) and
the native classes ``uo.build`` returns (their calls) refuse a gradient of another shape
or dtype, or one that is not a Tensor, naming the parameter, with every parameter and
state as it was. MindSpore runs in this process (conftest imports it first)."""

import re

import numpy as np
import pytest
from conftest import require

import unified_opt as uo

pytestmark = require("mindspore")
ms = pytest.importorskip("mindspore")
from mindspore import Tensor, nn  # noqa: E402

#: (spec, build options, the class uo.build picks: "own" or the native class's name)
BUILDS = {
    "own_vm": (uo.AdamW(lr=0.1, weight_decay=0.01), {"path": "own"}),
    "own_eager": (uo.AdamW(lr=0.1, weight_decay=0.01),
                  {"path": "own", "options": {"compile": False}}),
    "native_adam": (uo.preset("mindspore.nn.Adam", learning_rate=0.1), {"prefer": "native"}),
}


@pytest.fixture(params=["pynative", "graph"])
def mode(request):
    before = ms.get_context("mode")
    ms.set_context(mode=ms.PYNATIVE_MODE if request.param == "pynative" else ms.GRAPH_MODE)
    yield request.param
    ms.set_context(mode=before)


def _built(name):
    spec, build = BUILDS[name]
    net = nn.Dense(4, 3)
    opt = uo.build(spec, net, **build)
    assert (type(opt).__name__ == "SpecOptimizer") == name.startswith("own")
    opt(_gradients(opt))
    return opt, net


def _gradients(opt, value=0.25):
    return tuple(Tensor(np.full(p.shape, value, np.float32)) for p in opt.parameters)


def _snapshot(opt) -> dict:
    """Every Parameter of the optimizer (its parameters, state, step counter) by name."""
    return {p.name: p.asnumpy().copy() for p in opt.get_parameters()}


WRONG = {
    "one_element": (0, lambda p: np.ones([1], np.float32), ValueError, "shape [1] "),
    "five_on_three": (1, lambda p: np.ones([5], np.float32), ValueError, "shape [5] "),
    "float64": (0, lambda p: np.ones(p.shape, np.float64), TypeError, "dtype Float64 "),
}


@pytest.mark.parametrize("wrong", WRONG)
@pytest.mark.parametrize("name", BUILDS)
def test_a_gradient_unlike_its_parameter_is_refused_before_anything_changes(name, wrong,
                                                                            mode):
    index, array, error, shown = WRONG[wrong]
    opt, net = _built(name)
    before = _snapshot(opt)
    grads = list(_gradients(opt))
    param = opt.parameters[index]
    grads[index] = Tensor(array(param))
    with pytest.raises(error, match=rf"the gradient of {re.escape(param.name)} does not fit "
                                    rf"its parameter: {re.escape(shown)}"):
        opt(tuple(grads))
    after = _snapshot(opt)
    assert before.keys() == after.keys()
    for key, value in before.items():
        assert after[key].tobytes() == value.tobytes(), key
    opt(_gradients(opt))          # fitting gradients still step
    assert not np.array_equal(net.weight.asnumpy(), before[net.weight.name])


def test_a_native_class_is_still_read_as_itself():
    from unified_opt.backends.mindspore.state import _qualified

    opt, _ = _built("native_adam")
    assert isinstance(opt, nn.Adam) and type(opt).__name__ == "Adam"
    assert type(opt).uo_native_class is nn.Adam
    # convert_checkpoint reads it as nn.Adam (and still refuses a user's subclass)
    assert _qualified(opt) == "mindspore.nn.Adam"
    subclass = type("MyAdam", (nn.Adam,), {})
    with pytest.raises(ValueError, match="MyAdam is not a MindSpore optimizer class"):
        _qualified(subclass(nn.Dense(4, 3).trainable_params(), learning_rate=0.1))
