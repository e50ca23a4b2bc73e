"""Paddle (issue 41, points 4, 7, 8b): a plain ``paddle.Tensor`` refused at
``uo.build``, naming the fix; ``_add_param_group`` after the build on a native class;
``uo.save_state``
refusing an optimizer that holds a parameter the build was not given; and the own
path's state made without a copy and updated in place.

Paddle runs in this process (conftest imports mindspore first when it is installed).
"""

import numpy as np
import pytest
from conftest import require

import unified_opt as uo

pytestmark = require("paddle")
paddle = pytest.importorskip("paddle")


def _param(value=1.0, n=3):
    return paddle.create_parameter(
        [n], "float32", default_initializer=paddle.nn.initializer.Constant(value))


def _stepped(spec, path, steps=1):
    w = _param()
    optimizer = uo.build(spec, [("w", w)], backend="paddle", path=path)
    for t in range(steps):
        w.grad = paddle.full([3], 0.5 + t)
        optimizer.step()
    return w, optimizer


@pytest.mark.parametrize("path", ["native", "own"])
def test_a_plain_tensor_is_refused_at_build_naming_the_fix(path):
    plain = paddle.randn([3])
    plain.stop_gradient = False
    with pytest.raises(TypeError, match=r"build: params holds x \(shape \[3\]\), a plain "
                                        r"paddle.Tensor, not a Parameter.*"
                                        r"paddle.create_parameter"):
        uo.build(uo.AdamW(lr=0.1), [("x", plain)], backend="paddle", path=path)
    # the same values as a Parameter build and step
    w = _param()
    optimizer = uo.build(uo.AdamW(lr=0.1), [("x", w)], backend="paddle", path=path)
    w.grad = paddle.ones([3])
    optimizer.step()
    assert not np.array_equal(w.numpy(), np.ones(3, np.float32))


def test_a_layers_parameters_are_taken():
    layer = paddle.nn.Linear(2, 2)
    optimizer = uo.build(uo.AdamW(lr=0.1), layer)
    assert [p.name for p in optimizer._parameter_list] == \
        [layer.weight.name, layer.bias.name]


def test_a_native_class_takes_a_group_added_after_the_build_by_either_name():
    # (against Paddle's own _add_param_group, and what it refuses:
    # tests/test_add_param_group_native.py)
    w, optimizer = _stepped(uo.AdamW(lr=0.1), "native")
    assert isinstance(optimizer, paddle.optimizer.AdamW)
    listed = list(optimizer._parameter_list)
    with pytest.raises(ValueError, match="already in the optimizer"):
        optimizer._add_param_group({"params": [w], "learning_rate": 0.5})
    assert list(optimizer._parameter_list) == listed
    for method in (optimizer._add_param_group, optimizer.add_param_group):
        method({"params": [_param()], "learning_rate": 0.5})
    assert [g["lr"] for g in optimizer.param_groups] == [0.1, 0.05, 0.05]


@pytest.mark.parametrize("path", ["native", "own"])
def test_save_state_refuses_a_parameter_the_build_was_not_given(path, tmp_path):
    w, optimizer = _stepped(uo.AdamW(lr=0.1), path)
    extra = _param(2.0)
    optimizer._parameter_list.append(extra)     # past _add_param_group's refusal
    if path == "native":                        # Paddle's class steps it
        w.grad = extra.grad = paddle.ones([3])
        optimizer.step()
        assert not np.array_equal(extra.numpy(), np.full(3, 2.0, np.float32))
    target = tmp_path / "run.safetensors"
    with pytest.raises(ValueError, match=rf"save_state: the optimizer holds parameter "
                                         rf"{extra.name} \(shape \[3\]\), which was not "
                                         rf"given to uo\.build"):
        uo.save_state(optimizer, target)
    assert list(tmp_path.iterdir()) == []
    optimizer._parameter_list.pop()
    uo.save_state(optimizer, target)          # the built parameters alone: saved
    assert target.is_file()


def test_the_own_path_state_is_made_without_a_copy_and_updated_in_place():
    spec = uo.AdamW(lr=0.1, weight_decay=0.01)
    w = _param(n=1000)
    optimizer = uo.build(spec, [("w", w)], backend="paddle", path="own")
    state = optimizer.spec_state(w)
    assert sorted(state) == ["exp_avg", "exp_avg_sq"]
    # each accumulator its own memory, none the parameter's
    tensors = [w, *state.values()]
    for i, a in enumerate(tensors):
        for b in tensors[i + 1:]:
            assert not a._is_shared_buffer_with(b)
    addresses = [t.data_ptr() for t in tensors]
    reference = uo.reference(spec, {"w": np.ones(1000)}, dtype="float64")
    rng = np.random.default_rng(0)
    for _ in range(3):
        g = rng.standard_normal(1000).astype(np.float32)
        w.grad = paddle.to_tensor(g)
        optimizer.step()
        reference.step({"w": g.astype(np.float64)})
    assert [t.data_ptr() for t in [w, *optimizer.spec_state(w).values()]] == addresses
    np.testing.assert_allclose(w.numpy(), reference.params["w"], rtol=1e-5, atol=1e-6)
    for key, value in optimizer.spec_state(w).items():
        np.testing.assert_allclose(value.numpy(), reference.state["w"][key], rtol=1e-4,
                                   atol=1e-7)
    # the accumulators travel in state_dict under Paddle's names, as before
    saved = paddle.optimizer.Optimizer.state_dict(optimizer)
    assert any(k.endswith("exp_avg_0") for k in saved)


def test_an_initial_tensor_already_taken_is_copied_not_shared():
    w, optimizer = _stepped(uo.SGD(lr=0.1), "own", steps=0)
    other = _param(3.0)
    one = paddle.full([3], 7.0)
    # the parameter itself, and one tensor handed back twice
    optimizer._adopt_state(other, {"a": other.detach(), "b": one, "c": one})
    made = {key: optimizer._get_accumulator(key, other) for key in "abc"}
    tensors = [other, *made.values()]
    for i, a in enumerate(tensors):
        for b in tensors[i + 1:]:
            assert not a._is_shared_buffer_with(b)
    assert np.array_equal(made["a"].numpy(), np.full(3, 3.0, np.float32))
    assert np.array_equal(made["b"].numpy(), np.full(3, 7.0, np.float32))
    assert np.array_equal(made["c"].numpy(), np.full(3, 7.0, np.float32))
