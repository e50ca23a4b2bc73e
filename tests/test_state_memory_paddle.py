"""State files on Paddle hold no second copy of the state (issue 41): ``save_state``'s
snapshot is a read-only view of each CPU accumulator (DLPack), so the file holds the
values at the save and later steps cannot change it through the views; ``load_state``
copies the arrays read into the accumulators, so a step after a load writes into no
array the caller holds. Own path and the native class (``paddle.optimizer.AdamW``)."""

import numpy as np
import pytest
from conftest import require
from support import held_state

import unified_opt as uo
from unified_opt.backend import record_of
from unified_opt.porting.state import read_state

pytestmark = require("paddle")

SPEC = uo.AdamW(lr=0.01, weight_decay=0.1)
SHAPES = {"w": (4, 3), "b": (3,)}
PATHS = ("own", "native")


@pytest.fixture(scope="module")
def paddle():
    import paddle

    return paddle


def _gradient(name: str, t: int) -> np.ndarray:
    seed = 100 * t + sorted(SHAPES).index(name)
    return np.random.default_rng(seed).standard_normal(SHAPES[name]).astype(np.float32)


def _optimizer(paddle, path: str):
    named = []
    for name, shape in SHAPES.items():
        start = np.linspace(-1, 1, int(np.prod(shape)), dtype=np.float32).reshape(shape)
        named.append((name, paddle.create_parameter(
            list(shape), "float32", default_initializer=paddle.nn.initializer.Assign(start))))
    optimizer = uo.build(SPEC, named, path=path)
    assert record_of(optimizer).decision.path == path
    return optimizer, named


def _step(paddle, optimizer, named, t: int) -> None:
    paddle.add_n([(p * paddle.to_tensor(_gradient(n, t))).sum() for n, p in named]).backward()
    optimizer.step()
    optimizer.clear_grad(set_to_zero=False)


def _held(optimizer, named) -> dict:
    return held_state(optimizer, named, SPEC)


def _values(optimizer, named) -> dict:
    return {n: {k: t.numpy() for k, t in held.items()}
            for n, held in _held(optimizer, named).items()}


@pytest.mark.parametrize("path", PATHS)
def test_the_snapshot_is_a_read_only_view_of_the_state(paddle, path):
    from unified_opt.backends.paddle import state

    optimizer, named = _optimizer(paddle, path)
    for t in range(2):
        _step(paddle, optimizer, named, t)
    snapshot = state.snapshot_built(record_of(optimizer), optimizer)
    for name, held in _held(optimizer, named).items():
        assert sorted(snapshot.arrays[name]) == ["exp_avg", "exp_avg_sq"]
        for key, tensor in held.items():
            array = snapshot.arrays[name][key]
            np.testing.assert_array_equal(array, tensor.numpy())
            assert array.__array_interface__["data"][0] == tensor.data_ptr()
            with pytest.raises(ValueError, match="read-only"):
                array[...] = 0


@pytest.mark.parametrize("path", PATHS)
def test_steps_after_a_save_leave_the_file_as_saved(tmp_path, paddle, path):
    optimizer, named = _optimizer(paddle, path)
    for t in range(2):
        _step(paddle, optimizer, named, t)
    at_save = _values(optimizer, named)
    uo.save_state(optimizer, tmp_path / "run.safetensors")
    for t in range(2, 4):
        _step(paddle, optimizer, named, t)
    later = _values(optimizer, named)
    saved = read_state(tmp_path / "run.safetensors")
    for name in SHAPES:
        for key, value in at_save[name].items():
            assert not np.array_equal(later[name][key], value)
            np.testing.assert_array_equal(saved.arrays[name][key], value)


@pytest.mark.parametrize("path", PATHS)
def test_a_step_after_a_load_writes_into_no_array_the_caller_holds(tmp_path, paddle, path):
    first, named = _optimizer(paddle, path)
    for t in range(2):
        _step(paddle, first, named, t)
    uo.save_state(first, tmp_path / "run.safetensors")
    second, named_second = _optimizer(paddle, path)
    kept = []
    uo.load_state(second, tmp_path / "run.safetensors",
                  transform=lambda name: lambda a: kept.append(a) or a)
    assert len(kept) == 2 * len(SHAPES)
    before = [a.copy() for a in kept]
    loaded = _values(second, named_second)
    for name, values in _values(first, named).items():
        for key, value in values.items():
            np.testing.assert_array_equal(loaded[name][key], value)
    _step(paddle, second, named_second, 2)
    stepped = _values(second, named_second)
    assert not np.array_equal(stepped["w"]["exp_avg"], loaded["w"]["exp_avg"])
    for array, copy in zip(kept, before):
        np.testing.assert_array_equal(array, copy)
