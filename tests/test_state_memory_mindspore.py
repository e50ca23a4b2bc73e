"""State files on MindSpore hold no second copy of the state (issue 41):
``save_state``'s snapshot is a read-only view of each state Parameter's ``asnumpy()``
(shared memory on the CPU), so the file holds the values at the save and later steps
cannot change it through the views; ``load_state`` hands the arrays it read to the
Parameters (``Tensor.from_numpy``), never an array the caller holds and never one array
to two Parameters. Own path and the native class (``experimental.optim.AdamW``)."""

import numpy as np
import pytest
from conftest import require
from support import held_state

import unified_opt as uo
from unified_opt.backend import record_of
from unified_opt.porting.state import read_state

pytestmark = require("mindspore")

SPEC = uo.AdamW(lr=0.01, weight_decay=0.1)
SHAPES = {"w": (4, 3), "b": (3,)}
PATHS = ("own", "native")


def _gradient(name: str, t: int) -> np.ndarray:
    seed = 100 * t + sorted(SHAPES).index(name)
    return np.random.default_rng(seed).standard_normal(SHAPES[name]).astype(np.float32)


def _optimizer(path: str, tag: str):
    from mindspore import Parameter, Tensor

    named = [(name, Parameter(Tensor(np.linspace(-1, 1, int(np.prod(shape)),
                                                 dtype=np.float32).reshape(shape)),
                              name=f"{tag}_{name}"))
             for name, shape in SHAPES.items()]
    optimizer = uo.build(SPEC, named, path=path)
    assert record_of(optimizer).decision.path == path
    return optimizer, named


def _step(optimizer, named, t: int) -> None:
    from mindspore import Tensor

    optimizer(tuple(Tensor(_gradient(n, t)) for n, _ in named))


def _held(optimizer, named) -> dict:
    return held_state(optimizer, named, SPEC)


def _values(optimizer, named) -> dict:
    return {n: {k: t.asnumpy().copy() for k, t in held.items()}
            for n, held in _held(optimizer, named).items()}


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


@pytest.mark.parametrize("path", PATHS)
def test_the_snapshot_is_a_read_only_view_of_the_state(path):
    from unified_opt.backends.mindspore import state

    optimizer, named = _optimizer(path, f"view_{path}")
    for t in range(2):
        _step(optimizer, named, t)
    snapshot = state.snapshot_built(record_of(optimizer), optimizer)
    for name, held in _held(optimizer, named).items():
        assert sorted(snapshot.arrays[name]) == ["exp_avg", "exp_avg_sq"]
        for key, parameter in held.items():
            array = snapshot.arrays[name][key]
            np.testing.assert_array_equal(array, parameter.asnumpy())
            assert _address(array) == _address(parameter.asnumpy())
            with pytest.raises(ValueError, match="read-only"):
                array[...] = 0


@pytest.mark.parametrize("path", PATHS)
def test_steps_after_a_save_leave_the_file_as_saved(tmp_path, path):
    optimizer, named = _optimizer(path, f"save_{path}")
    for t in range(2):
        _step(optimizer, named, t)
    at_save = _values(optimizer, named)
    uo.save_state(optimizer, tmp_path / "run.safetensors")
    for t in range(2, 4):
        _step(optimizer, named, t)
    later = _values(optimizer, named)
    saved = read_state(tmp_path / "run.safetensors")
    for name in SHAPES:
        for key, value in at_save[name].items():
            assert not np.array_equal(later[name][key], value)
            np.testing.assert_array_equal(saved.arrays[name][key], value)


@pytest.mark.parametrize("path", PATHS)
def test_a_step_after_a_load_writes_into_no_array_the_caller_holds(tmp_path, path):
    first, named = _optimizer(path, f"load_a_{path}")
    for t in range(2):
        _step(first, named, t)
    uo.save_state(first, tmp_path / "run.safetensors")
    second, named_second = _optimizer(path, f"load_b_{path}")
    kept = []
    uo.load_state(second, tmp_path / "run.safetensors",
                  transform=lambda name: lambda a: kept.append(a) or a)
    assert len(kept) == 2 * len(SHAPES)
    before = [a.copy() for a in kept]
    loaded = _values(second, named_second)
    for name, values in _values(first, named).items():
        for key, value in values.items():
            np.testing.assert_array_equal(loaded[name][key], value)
    addresses = [_address(t.asnumpy()) for held in _held(second, named_second).values()
                 for t in held.values()]
    assert len(set(addresses)) == len(addresses)
    assert not set(addresses) & {_address(a) for a in kept}
    _step(second, named_second, 2)
    stepped = _values(second, named_second)
    assert not np.array_equal(stepped["w"]["exp_avg"], loaded["w"]["exp_avg"])
    for array, copy in zip(kept, before):
        np.testing.assert_array_equal(array, copy)
    # the resumed run continues as the uninterrupted one
    _step(first, named, 2)
    for name, values in _values(first, named).items():
        for key, value in values.items():
            np.testing.assert_array_equal(stepped[name][key], value)


def test_loading_hands_an_array_to_one_parameter_only():
    from mindspore import Parameter, Tensor

    from unified_opt.backends.mindspore.state import _tensor

    handed = set()
    array = np.arange(6, dtype=np.float32)
    first = Parameter(Tensor(np.zeros(6, np.float32)), name="handed_first")
    second = Parameter(Tensor(np.zeros(6, np.float32)), name="handed_second")
    first.set_data(_tensor(array, handed))
    second.set_data(_tensor(array, handed))
    array[0] = 100.0
    assert first.asnumpy()[0] == 100.0          # shares the array's memory
    assert second.asnumpy()[0] == 0.0           # a copy: the memory was handed already
    read_only = np.arange(3, dtype=np.float32)
    read_only.flags.writeable = False
    strided = np.arange(6, dtype=np.float32)[::2]
    for other in (read_only, strided):
        tensor = _tensor(other, set())
        np.testing.assert_array_equal(tensor.asnumpy(), other)
        assert _address(tensor.asnumpy()) != _address(other)
