"""What a Paddle optimizer of the own path (``SpecOptimizer``) refuses rather than silently
mishandle, as the torch one does (test_torch_refusals.py): a parameter added after the
build, a regularizer, lr factor or need_clip set on a parameter after it, and a state
dict that does not fit, each refused before anything changes."""

import numpy as np
import pytest
from conftest import require

import unified_opt as uo
from unified_opt import schedules

pytestmark = require("paddle")
paddle = pytest.importorskip("paddle")


def _param(value=1.0, n=3):
    return paddle.create_parameter(
        [n], "float32", default_initializer=paddle.nn.initializer.Constant(value))


def _stepped(spec, steps=2):
    w = _param()
    optimizer = uo.build(spec, [w], backend="paddle", path="own")
    for t in range(steps):
        w.grad = paddle.full([3], 0.5 + t)
        optimizer.step()
    return w, optimizer


def _numpy(state):
    return {k: v if isinstance(v, dict) else v.numpy().copy() for k, v in state.items()}


def _assert_same(a, b):
    assert a.keys() == b.keys()
    for key in a:
        assert (a[key] == b[key]) if isinstance(a[key], dict) else \
            np.array_equal(a[key], b[key]), key


@pytest.mark.parametrize("spec", [uo.AdamW(lr=0.1, weight_decay=0.01), uo.Lamb(lr=0.1),
                                  uo.SGD(lr=0.1, momentum=0.9)], ids=["adamw", "lamb", "sgd"])
def test_a_parameter_added_past_add_param_group_is_refused(spec):
    w, optimizer = _stepped(spec, steps=1)
    value, extra = w.numpy().copy(), _param()
    with pytest.raises(ValueError, match="already in the optimizer"):
        optimizer._add_param_group({"params": [w]})
    optimizer._parameter_list.append(extra)   # Paddle's native classes would step it
    w.grad = extra.grad = paddle.ones([3])
    with pytest.raises(ValueError, match=r"parameter list \(_parameter_list / _param_groups\) "
                                         rf"changed after uo.build \(added {extra.name}\)"):
        optimizer.step()
    assert np.array_equal(w.numpy(), value)
    optimizer._parameter_list.pop()
    optimizer.step()
    assert not np.array_equal(w.numpy(), value)


@pytest.mark.parametrize("attribute, value, words", [
    ("regularizer", paddle.regularizer.L2Decay(0.5), "carries regularizer="),
    ("optimize_attr", {"learning_rate": 0.5}, r"carries optimize_attr\['learning_rate'\]=0.5"),
    ("need_clip", False, "carries need_clip=False"),
])
def test_a_parameter_attribute_set_after_the_build_is_refused(attribute, value, words):
    w, optimizer = _stepped(uo.SGD(lr=0.1, grad_clip=uo.ClipByValue(max=0.5)), steps=1)
    before, state = w.numpy().copy(), _numpy(paddle.optimizer.Optimizer.state_dict(optimizer))
    setattr(w, attribute, value)
    w.grad = paddle.ones([3])
    with pytest.raises(ValueError, match=words + ".*set after uo.build"):
        optimizer.step()
    assert np.array_equal(w.numpy(), before)
    _assert_same(_numpy(paddle.optimizer.Optimizer.state_dict(optimizer)), state)


def _suffix(saved, end):
    return next(k for k in saved if k.endswith(end))


def _set(end, value):
    return lambda saved: saved.__setitem__(_suffix(saved, end), value)


@pytest.mark.parametrize("edit, words", [
    (_set("_exp_avg_0", np.zeros(1, "float32")), "'exp_avg' of parameter"),
    (_set("_exp_avg_0", np.zeros((2, 3), "float32")), "is [2, 3], it keeps [3]"),
    (_set("_exp_avg_0", np.zeros(3, "float64")), "is float64, it keeps float32"),
    (lambda saved: saved.pop(_suffix(saved, "_exp_avg_sq_0")), "state_dict lacks ["),
    (lambda saved: saved.__setitem__("bogus_0", np.zeros(3, "float32")),
     "holds ['bogus_0'], which are no accumulators"),
    (_set("_step_0", np.array([-3], "int64")), "must be a whole count >= 0 held as int64, "
                                                "got int64 [-3]"),
    (_set("_step_0", np.array([np.nan], "float32")), "got float32 [nan]"),
    (_set("_step_0", np.array([2.7])), "got float64 [2.7]"),
    (_set("_steps_taken_0", np.array([-1], "int64")), "'steps_taken' of parameter"),
    (_set("_exp_avg_0", [0.0, 0.0, 0.0]), "must be an array, got list"),
    (lambda saved: saved.pop("LR_Scheduler"), "has no 'LR_Scheduler' entry"),
], ids=["shape-1", "shape-2x3", "dtype", "missing", "extra", "negative-step", "nan-step",
        "fractional-step", "negative-steps-taken", "not-an-array", "no-scheduler"])
def test_a_state_dict_that_does_not_fit_is_refused_before_loading(edit, words):
    """Paddle's own load sets the scheduler and each accumulator in turn, asserting as it
    goes: a later misfit left the earlier ones loaded, a negative count loaded."""
    spec = uo.Lamb(lr=schedules.Cosine(lr=0.1, T_max=10))
    _, optimizer = _stepped(spec)
    saved = _numpy(paddle.optimizer.Optimizer.state_dict(optimizer))
    saved[_suffix(saved, "_step_0")] = np.array([7], "int64")       # would load first
    saved[_suffix(saved, "_exp_avg_0")] = np.full(3, 42.0, "float32")
    saved["LR_Scheduler"] = {**saved["LR_Scheduler"], "last_epoch": 9}
    edit(saved)
    before = _numpy(paddle.optimizer.Optimizer.state_dict(optimizer))
    with pytest.raises((TypeError, ValueError)) as raised:
        optimizer.set_state_dict(saved)
    assert words in str(raised.value)
    _assert_same(_numpy(paddle.optimizer.Optimizer.state_dict(optimizer)), before)


def test_a_state_dict_of_another_model_or_with_a_schedule_is_refused():
    _, optimizer = _stepped(uo.AdamW(lr=0.1))
    other = uo.build(uo.AdamW(lr=0.1), [_param()], backend="paddle", path="own")
    with pytest.raises(ValueError, match="which are no accumulators of this optimizer"):
        optimizer.set_state_dict(paddle.optimizer.Optimizer.state_dict(other))
    _, scheduled = _stepped(uo.AdamW(lr=schedules.Cosine(lr=0.1, T_max=10)))
    renamed = {k.replace(scheduled._params[0].name, optimizer._params[0].name): v
               for k, v in paddle.optimizer.Optimizer.state_dict(scheduled).items()}
    with pytest.raises(ValueError, match="holds an 'LR_Scheduler' entry"):
        optimizer.set_state_dict(renamed)
    del renamed["LR_Scheduler"]
    optimizer.set_state_dict(renamed)           # the same arrays without the position
    assert optimizer.steps_taken() == 2
