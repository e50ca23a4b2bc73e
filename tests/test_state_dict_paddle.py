"""``opt.state_dict()`` / ``set_state_dict()`` / ``load_state_dict()`` in the portable form on
the Paddle optimizers ``uo.build`` returns (own path and native classes): a run resumed from
the dict (through ``paddle.save`` / ``paddle.load``) is bit-identical to the uninterrupted
run; refusals leave the optimizer unchanged; Paddle's own form still goes to Paddle's load."""

import numpy as np
import pytest
from conftest import require
from support import assert_bit_identical, held_state

import unified_opt as uo
from unified_opt.porting.state import FORMAT

pytestmark = require("paddle")
paddle = pytest.importorskip("paddle")

K, M = 3, 3       # steps before the state_dict and after the load
SPEC = uo.AdamW(lr=0.01, weight_decay=0.1)
#: (spec, path): a native class and the own path (no Paddle path keeps bfloat16 state: the
#: own path refuses bfloat16 parameters and state_dtype, the native classes refuse them)
RUNS = {"native": (SPEC, "native"), "own": (SPEC, "own")}


def _layer(source=None, inputs=4):
    layer = paddle.nn.Linear(inputs, 3)
    values = np.random.default_rng(0).standard_normal((inputs, 3)).astype(np.float32)
    layer.weight.set_value(values if source is None else source.weight.numpy())
    layer.bias.set_value(np.zeros(3, np.float32) if source is None else source.bias.numpy())
    return layer


def _step(optimizer, layer, t):
    x = paddle.to_tensor(np.random.default_rng(100 + t).standard_normal((5, 4)).astype("float32"))
    (layer(x) ** 2).sum().backward()
    optimizer.step()
    optimizer.clear_grad()


def _snapshot(optimizer, layer, spec) -> dict:
    named = list(layer.named_parameters())
    state = held_state(optimizer, named, spec)
    return {**{f"param/{n}": p.numpy().copy() for n, p in named},
            **{f"state/{n}/{k}": np.array(t.numpy()) for n, arrays in state.items()
               for k, t in arrays.items()}}


@pytest.mark.parametrize("run", sorted(RUNS))
def test_a_run_resumed_from_state_dict_is_bit_identical(run, tmp_path):
    spec, path = RUNS[run]
    layer = _layer()
    optimizer = uo.build(spec, layer, path=path)
    assert uo.explain(optimizer).path == path
    for t in range(K):
        _step(optimizer, layer, t)
    saved = optimizer.state_dict()
    assert saved["format"] == FORMAT and saved["metadata"]["framework"] == "paddle"
    assert {t.dtype for k, t in saved["tensors"].items() if k.startswith("state/")} == {
        paddle.float32}
    paddle.save(saved, str(tmp_path / "opt.pdopt"))
    loaded = paddle.load(str(tmp_path / "opt.pdopt"))
    resumed_layer = _layer(layer)
    resumed = uo.build(spec, resumed_layer, path=path)
    resumed.set_state_dict(loaded)
    for t in range(K, K + M):
        _step(optimizer, layer, t)
        _step(resumed, resumed_layer, t)
    assert_bit_identical(_snapshot(optimizer, layer, spec), _snapshot(resumed, resumed_layer, spec),
                         strict=True)


def _stepped_with_own_form(path):
    """(layer, optimizer stepped K times, a copy of Paddle's own form of its state)."""
    layer = _layer()
    optimizer = uo.build(SPEC, layer, path=path)
    for t in range(K):
        _step(optimizer, layer, t)
    own = {k: v if isinstance(v, dict) else v.clone()
           for k, v in paddle.optimizer.Optimizer.state_dict(optimizer).items()}
    return layer, optimizer, own


@pytest.mark.parametrize("path", ["own", "native"])
def test_paddle_own_form_still_goes_to_paddle_load(path):
    layer, optimizer, own = _stepped_with_own_form(path)
    # Paddle keys accumulators by parameter name: the same parameters, a new optimizer
    copied = _snapshot(optimizer, layer, SPEC)
    again = uo.build(SPEC, layer, path=path)
    again.load_state_dict(own)
    assert_bit_identical(_snapshot(again, layer, SPEC), copied, strict=True)


@pytest.mark.parametrize("path", ["own", "native"])
def test_a_refused_state_dict_changes_nothing(path):
    def from_optimizer(spec=SPEC, inputs=4, names=None):
        layer = _layer(inputs=inputs)
        source = uo.build(spec, names(layer) if names else layer, path="own")
        _step(source, layer, 0) if inputs == 4 else None
        return source.state_dict()

    tampered = from_optimizer()
    tampered["tensors"]["state/weight/exp_avg"][0, 0] += 1.0
    edits = [
        (from_optimizer(SPEC.replace(lr=0.02)), "another spec.*lr=0.02"),
        (from_optimizer(names=lambda layer: [("weight", layer.weight)]),
         r"parameter names differ: not in the state dict \['bias'\]"),
        (from_optimizer(inputs=5), r"state 'exp_avg' of 'weight' has shape \(5, 3\)"),
        (tampered, "does not match its sha256"),
        ({"format": FORMAT}, r"has keys \['format'\].*neither"),
    ]
    layer = _layer()
    optimizer = uo.build(SPEC, layer, path=path)
    for t in range(K):
        _step(optimizer, layer, t)
    before = _snapshot(optimizer, layer, SPEC)
    for edited, words in edits:
        for load in (optimizer.set_state_dict, optimizer.load_state_dict):
            with pytest.raises(ValueError, match=words):
                load(edited)
            assert_bit_identical(_snapshot(optimizer, layer, SPEC), before, strict=True)
    with pytest.raises(TypeError, match="state_dict must be a dict"):
        optimizer.set_state_dict(None)


@pytest.mark.parametrize("path", ["own", "native"])
def test_paddle_own_form_missing_or_foreign_accumulators_is_refused_before_writing(path):
    """Paddle's loader asserts on an unknown key and writes the accumulators it reaches
    before a missing one: a native class's dict is checked against its accumulators
    first (a ValueError naming them; the own path's load checks its entries itself), and
    nothing changes."""
    layer, optimizer, own = _stepped_with_own_form(path)
    for value in own.values():     # changed, so that a partial write would show
        if not isinstance(value, dict) and value.dtype == paddle.float32:
            value.set_value(value + 1.0)
    # the second moment's accumulator: moment2 (Paddle's AdamW), exp_avg_sq (the own path)
    dropped = sorted(k for k in own if k.endswith(("moment2_0", "exp_avg_sq_0")))[-1]
    before = _snapshot(optimizer, layer, SPEC)
    partial = {k: v for k, v in own.items() if k != dropped}
    refusals = {"native": ((partial, rf"missing \['{dropped}'\]"),
                           ({"foo": 1}, r"not the optimizer's \['foo'\]")),
                "own": ((partial, rf"lacks \['{dropped}'\]"),
                        ({"foo": 1}, r"holds \['foo'\], which are no accumulators"))}
    for edited, words in refusals[path]:
        with pytest.raises(ValueError, match=words):
            optimizer.load_state_dict(edited)
        assert_bit_identical(_snapshot(optimizer, layer, SPEC), before, strict=True)
