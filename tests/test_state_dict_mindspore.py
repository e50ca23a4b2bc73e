"""``opt.state_dict()`` / ``opt.load_state_dict()`` in the portable form on the MindSpore
optimizers ``uo.build`` returns (own path, an ``nn`` class, an ``experimental.optim``
class): a run resumed from the dict is bit-identical to the uninterrupted run; refusals
leave the optimizer unchanged; MindSpore's own form still goes to ``Cell.load_state_dict``,
and a training cell's ``state_dict`` still walks the optimizer in MindSpore's form."""

import numpy as np
import pytest
from conftest import require
from support import assert_bit_identical, held_state

import unified_opt as uo
from unified_opt.porting.state import FORMAT

pytestmark = require("mindspore")
ms = pytest.importorskip("mindspore")

K, M = 3, 3       # steps before the state_dict and after the load
SPEC = uo.AdamW(lr=0.01, weight_decay=0.1)
#: (spec, path, the class uo.build picks)
RUNS = {
    "experimental.AdamW": (SPEC, "native", "AdamW"),
    "nn.AdamWeightDecay": (uo.preset("mindspore.nn.AdamWeightDecay", learning_rate=0.01,
                                     weight_decay=0.1), "native", "AdamWeightDecay"),
    "own": (SPEC, "own", "SpecOptimizer"),
}


def _dense(source=None, inputs=4):
    dense = ms.nn.Dense(inputs, 3)
    weight = np.random.default_rng(0).standard_normal((3, inputs)).astype(np.float32)
    dense.weight.set_data(ms.Tensor(weight if source is None else source.weight.asnumpy()))
    dense.bias.set_data(ms.Tensor(np.zeros(3, np.float32) if source is None
                                  else source.bias.asnumpy()))
    return dense


def _step(optimizer, t):
    rng = np.random.default_rng(100 + t)
    optimizer(tuple(ms.Tensor(rng.standard_normal(p.shape).astype(np.float32))
                    for p in optimizer.parameters))


def _snapshot(optimizer, dense, spec) -> dict:
    named = list(dense.parameters_and_names())
    state = held_state(optimizer, named, spec)
    return {**{f"param/{n}": p.asnumpy().copy() for n, p in named},
            **{f"state/{n}/{k}": t.asnumpy().copy() for n, arrays in state.items()
               for k, t in arrays.items()}}


@pytest.mark.parametrize("run", sorted(RUNS))
def test_a_run_resumed_from_state_dict_is_bit_identical(run):
    spec, path, cls = RUNS[run]
    dense = _dense()
    optimizer = uo.build(spec, dense, path=path)
    assert type(optimizer).__name__ == cls
    for t in range(K):
        _step(optimizer, t)
    saved = optimizer.state_dict()
    assert saved["format"] == FORMAT and saved["metadata"]["framework"] == "mindspore"
    assert all(isinstance(t, ms.Tensor) for t in saved["tensors"].values())
    resumed_dense = _dense(dense)
    resumed = uo.build(spec, resumed_dense, path=path)
    resumed.load_state_dict(saved)
    for t in range(K, K + M):
        _step(optimizer, t)
        _step(resumed, t)
    assert_bit_identical(_snapshot(optimizer, dense, spec), _snapshot(resumed, resumed_dense, spec),
                         strict=True)


def test_mindspore_own_form_and_a_training_cell_keep_the_cell_form():
    dense = _dense()
    optimizer = uo.build(SPEC, dense, path="own")
    _step(optimizer, 0)
    own = {k: ms.Tensor(v.asnumpy()) for k, v in ms.nn.Cell.state_dict(optimizer).items()}
    _step(optimizer, 1)
    result = optimizer.load_state_dict(own)      # Cell.load_state_dict: its result
    assert not result.missing_keys and not result.unexpected_keys
    after = ms.nn.Cell.state_dict(optimizer)
    assert all(np.array_equal(after[k].asnumpy(), own[k].asnumpy()) for k in own)
    assert not np.array_equal(own["exp_avg.weight"].asnumpy(), 0)
    # a parent Cell walks its children with Cell.state_dict's arguments
    cell = ms.nn.TrainOneStepCell(ms.nn.WithLossCell(dense, ms.nn.MSELoss()), optimizer)
    keys = set(cell.state_dict())
    assert "optimizer.exp_avg.weight" in keys and not keys & {"format", "tensors"}


@pytest.mark.parametrize("run", ["own", "experimental.AdamW"])
def test_a_refused_state_dict_changes_nothing(run):
    spec, path, _ = RUNS[run]

    def from_optimizer(spec=spec, inputs=4, names=None):
        dense = _dense(inputs=inputs)
        source = uo.build(spec, names(dense) if names else dense, path=path)
        _step(source, 0)
        return source.state_dict()

    tampered = from_optimizer()
    tampered["tensors"]["state/weight/exp_avg"] = ms.Tensor(
        tampered["tensors"]["state/weight/exp_avg"].asnumpy() + 1.0)
    edits = [
        (from_optimizer(spec.replace(lr=0.02)), "another spec.*lr=0.02"),
        (from_optimizer(names=lambda dense: [("weight", dense.weight)]),
         r"parameter names differ: not in the state dict \['bias'\]"),
        (from_optimizer(inputs=5), r"state 'exp_avg' of 'weight' has shape \(3, 5\)"),
        (tampered, "does not match its sha256"),
        ({"format": FORMAT, "tensors": {}}, r"has keys \['format', 'tensors'\].*neither"),
    ]
    dense = _dense()
    optimizer = uo.build(spec, dense, path=path)
    for t in range(K):
        _step(optimizer, t)
    before = _snapshot(optimizer, dense, spec)
    for edited, words in edits:
        with pytest.raises(ValueError, match=words):
            optimizer.load_state_dict(edited)
        assert_bit_identical(_snapshot(optimizer, dense, spec), before, strict=True)
    with pytest.raises(ValueError, match="strict applies to MindSpore's own form"):
        optimizer.load_state_dict(from_optimizer(), strict=False)
    with pytest.raises(TypeError, match="state_dict must be a dict"):
        optimizer.load_state_dict("run.safetensors")
    assert_bit_identical(_snapshot(optimizer, dense, spec), before, strict=True)
