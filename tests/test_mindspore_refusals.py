"""What the MindSpore own optimizer (``uo.build(..., path="own")``) refuses rather than
silently mishandle when its state is loaded: through ``Cell.load_state_dict`` (its
pre-hook checks the whole dict before anything is copied) a state array of another
shape, part of the spec's state missing and a ``global_step`` that is not a whole count
>= 0; its own ``state_dict`` loads back under MindSpore's strict key check. Through
``mindspore.load_param_into_net`` (no hook: MindSpore copies a negative ``global_step``)
the next step refuses before anything changes.

MindSpore runs in this process (conftest imports it first).
"""

import numpy as np
import pytest
from conftest import require

import unified_opt as uo

pytestmark = require("mindspore")
ms = pytest.importorskip("mindspore")


def _stepped(spec, steps):
    ms.set_context(mode=ms.PYNATIVE_MODE)
    params = [ms.Parameter(ms.Tensor(np.full((2, 3), 0.5, np.float32)), name="w"),
              ms.Parameter(ms.Tensor(np.full((2,), -0.5, np.float32)), name="b")]
    optimizer = uo.build(spec, params, backend="mindspore", path="own")
    for t in range(steps):
        optimizer(tuple(ms.Tensor(np.full(p.shape, 0.5 + t, np.float32)) for p in params))
    return params, optimizer


def _values(optimizer) -> dict:
    return {p.name: p.asnumpy().copy() for _, p in optimizer.parameters_and_names()}


def _saved(spec=uo.Lamb(lr=0.1), steps=2) -> dict:
    _, optimizer = _stepped(spec, steps)
    return {key: ms.Tensor(value.asnumpy())     # MindSpore's own form
            for key, value in ms.nn.Cell.state_dict(optimizer).items()}


def test_the_own_state_dict_loads_back_under_the_strict_key_check():
    saved = _saved()
    _, optimizer = _stepped(uo.Lamb(lr=0.1), 1)
    result = optimizer.load_state_dict(saved)
    assert not result.missing_keys and not result.unexpected_keys
    assert all(np.array_equal(value, saved[key].asnumpy())
               for key, value in _values(optimizer).items())


@pytest.mark.parametrize("edit, words", [
    (lambda d: d.__setitem__("exp_avg.w", ms.Tensor(np.zeros(1, np.float32))),
     "'exp_avg.w' has shape (1,) in the state_dict, this optimizer keeps (2, 3)"),
    (lambda d: d.pop("exp_avg_sq.b"), "the state_dict lacks ['exp_avg_sq.b']"),
    (lambda d: d.pop("global_step"), "the state_dict lacks ['global_step']"),
    (lambda d: d.__setitem__("global_step", ms.Tensor(np.array([-3], np.int32))),
     "'global_step' must be a whole count >= 0 (the steps taken), got [-3.0]"),
    (lambda d: d.__setitem__("global_step", ms.Tensor(np.array([np.nan], np.float32))),
     "'global_step' must be a whole count >= 0"),
    (lambda d: d.__setitem__("global_step", ms.Tensor(np.array([2.7], np.float32))),
     "'global_step' must be a whole count >= 0"),
], ids=["wrong-shape", "missing-array", "missing-step", "negative-step", "nan-step",
        "fractional-step"])
def test_load_state_dict_refuses_a_state_that_does_not_fit_before_loading(edit, words):
    saved = _saved()
    edit(saved)
    _, optimizer = _stepped(uo.Lamb(lr=0.1), 1)
    before = _values(optimizer)
    with pytest.raises(ValueError) as raised:
        optimizer.load_state_dict(saved, strict=False)
    assert words in str(raised.value) and "nothing was loaded" in str(raised.value)
    after = _values(optimizer)
    assert all(np.array_equal(before[key], after[key]) for key in before)


def test_load_state_dict_refuses_another_specs_state():
    came = _saved(uo.CAME(lr=0.1), steps=1)     # factored: exp_avg_sq_row.w, not exp_avg_sq.w
    _, optimizer = _stepped(uo.AdamW(lr=0.1), 1)
    with pytest.raises(ValueError, match=r"lacks \['exp_avg_sq.w'\]"):
        optimizer.load_state_dict(came, strict=False)


@pytest.mark.parametrize("spec", [uo.Lamb(lr=0.1), uo.SGD(lr=0.1, momentum=0.9)],
                         ids=["lamb", "sgd"])
def test_a_negative_global_step_loaded_by_load_param_into_net_is_refused_by_the_step(spec):
    params, optimizer = _stepped(spec, 2)
    step = ms.Parameter(ms.Tensor(np.array([-3], np.int32)), name="global_step")
    ms.load_param_into_net(optimizer, {"global_step": step})   # MindSpore copies it
    before = _values(optimizer)
    with pytest.raises(ValueError, match="global_step is -3; it counts the steps taken"):
        optimizer(tuple(ms.Tensor(np.ones(p.shape, np.float32)) for p in params))
    after = _values(optimizer)
    assert all(np.array_equal(before[key], after[key]) for key in before)
