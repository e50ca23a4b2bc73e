"""``opt.state_dict()`` / ``opt.load_state_dict()`` in the portable form on the torch
optimizers ``uo.build`` returns (own path and native classes): a run resumed from the
dict (through ``torch.save`` / ``torch.load(weights_only=True)``) is bit-identical to the
uninterrupted run; refusals leave the optimizer unchanged; torch's own form still goes
to torch's own load."""

import copy
import io

import numpy as np
import pytest
from conftest import require
from support import assert_bit_identical, held_state

import unified_opt as uo
from unified_opt.porting.state import FORMAT

pytestmark = require("torch")
torch = pytest.importorskip("torch")

K, M = 3, 3       # steps before the state_dict and after the load
SPEC = uo.AdamW(lr=0.01, weight_decay=0.1)
ASGD = uo.ASGD(lr=0.05, lambd=0.5, t0=1.0, weight_decay=0.1)
#: (spec, parameter dtype, path): a native class, the own path, the own path's bfloat16 state
RUNS = {"native": (SPEC, "float32", "native"), "own": (SPEC, "float32", "own"),
        "own-bfloat16": (SPEC.replace(state_dtype="bfloat16"), "float32", "own"),
        # the average ax and the 0-d eta and mu, averaging from the third step
        "asgd-native": (ASGD, "float32", "native"), "asgd-own": (ASGD, "float32", "own")}


def _named(dtype="float32", shapes=(("weight", (3, 4)), ("bias", (3,)))):
    generator = torch.Generator().manual_seed(0)
    return [(n, torch.nn.Parameter(torch.randn(s, generator=generator).to(getattr(torch, dtype))))
            for n, s in shapes]


def _step(optimizer, named, t):
    generator = torch.Generator().manual_seed(100 + t)
    for _, p in named:
        p.grad = torch.randn(p.shape, generator=generator).to(p.dtype)
    optimizer.step()


def _copy(named):
    return [(n, torch.nn.Parameter(p.detach().clone())) for n, p in named]


def _snapshot(optimizer, named, spec) -> dict:
    """The parameters and the state, as numpy (bfloat16 read as float32: exact)."""
    state = held_state(optimizer, named, spec)
    return {**{f"param/{n}": p.detach().float().numpy().copy() for n, p in named},
            **{f"state/{n}/{k}": t.detach().float().numpy().copy()
               for n, arrays in state.items() for k, t in arrays.items()}}


@pytest.mark.parametrize("run", sorted(RUNS))
def test_a_run_resumed_from_state_dict_is_bit_identical(run):
    spec, dtype, path = RUNS[run]
    named = _named(dtype)
    optimizer = uo.build(spec, named, path=path)
    assert uo.explain(optimizer).path == ("own" if path == "own" else "native")
    for t in range(K):
        _step(optimizer, named, t)
    saved = optimizer.state_dict()
    assert saved["format"] == FORMAT and set(saved) == {"format", "metadata", "tensors"}
    assert saved["metadata"]["sha256"] and saved["metadata"]["framework"] == "torch"
    dtypes = {str(t.dtype) for k, t in saved["tensors"].items() if k.startswith("state/")}
    assert dtypes == {"torch.bfloat16" if run.endswith("bfloat16") else "torch.float32"}
    buffer = io.BytesIO()
    torch.save(saved, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=True)
    resumed_named = _copy(named)
    resumed = uo.build(spec, resumed_named, path=path)
    resumed.load_state_dict(loaded)
    for t in range(K, K + M):
        _step(optimizer, named, t)
        _step(resumed, resumed_named, t)
    assert_bit_identical(_snapshot(optimizer, named, spec), _snapshot(resumed, resumed_named, spec),
                         strict=True)


def test_state_dict_holds_copies_not_the_live_state():
    named = _named()
    optimizer = uo.build(SPEC, named, path="own")
    _step(optimizer, named, 0)
    saved = optimizer.state_dict()
    before = saved["tensors"]["state/weight/exp_avg"].clone()
    _step(optimizer, named, 1)
    torch.testing.assert_close(saved["tensors"]["state/weight/exp_avg"], before,
                               rtol=0, atol=0)
    assert not torch.equal(optimizer.state[named[0][1]]["exp_avg"], before)


@pytest.mark.parametrize("path", ["own", "native"])
def test_torch_own_form_still_goes_to_torch_load(path):
    named = _named()
    optimizer = uo.build(SPEC, named, path=path)
    for t in range(K):
        _step(optimizer, named, t)
    # torch's own form shares the live tensors (and torch's load keeps them): a copy
    own = copy.deepcopy(torch.optim.Optimizer.state_dict(optimizer))
    assert set(own) == {"state", "param_groups"}
    resumed_named = _copy(named)
    resumed = uo.build(SPEC, resumed_named, path=path)
    resumed.load_state_dict(own)
    _step(optimizer, named, K)
    _step(resumed, resumed_named, K)
    assert_bit_identical(_snapshot(optimizer, named, SPEC), _snapshot(resumed, resumed_named, SPEC),
                         strict=True)


def _edits():
    """(what, a state dict that must be refused, the words of the refusal)."""
    def from_optimizer(spec=SPEC, shapes=(("weight", (3, 4)), ("bias", (3,)))):
        named = _named(shapes=shapes)
        source = uo.build(spec, named, path="own")
        _step(source, named, 0)
        return source.state_dict()

    tampered = from_optimizer()
    tampered["tensors"]["state/weight/exp_avg"][0, 0] += 1.0
    return [
        ("another spec", from_optimizer(SPEC.replace(lr=0.02)), "another spec.*lr=0.02"),
        ("missing name", from_optimizer(shapes=(("weight", (3, 4)),)),
         r"parameter names differ: not in the state dict \['bias'\]"),
        ("wrong shape", from_optimizer(shapes=(("weight", (3, 5)), ("bias", (3,)))),
         r"state 'exp_avg' of 'weight' has shape \(3, 5\) in the state dict"),
        ("tampered", tampered, "does not match its sha256"),
        ("neither form", {"state": {}}, r"has keys \['state'\].*neither"),
        ("another format", {**from_optimizer(), "format": "x"}, "format"),
    ]


@pytest.mark.parametrize("path", ["own", "native"])
def test_a_refused_state_dict_changes_nothing(path):
    named = _named()
    optimizer = uo.build(SPEC, named, path=path)
    for t in range(K):
        _step(optimizer, named, t)
    before = _snapshot(optimizer, named, SPEC)
    for what, edited, words in _edits():
        with pytest.raises(ValueError, match=words):
            optimizer.load_state_dict(edited)
        assert_bit_identical(_snapshot(optimizer, named, SPEC), before, strict=True)
    with pytest.raises(TypeError, match="state_dict must be a dict"):
        optimizer.load_state_dict([("state", {})])
    with pytest.raises(ValueError, match="transform and model apply to the portable form"):
        optimizer.load_state_dict(torch.optim.Optimizer.state_dict(optimizer),
                                  transform={"weight": np.transpose})
    assert_bit_identical(_snapshot(optimizer, named, SPEC), before, strict=True)


def test_numpy_arrays_load_as_tensors_do():
    """The portable form from anywhere: numpy arrays in place of the tensors."""
    named = _named()
    optimizer = uo.build(SPEC, named, path="native")
    for t in range(K):
        _step(optimizer, named, t)
    saved = optimizer.state_dict()
    as_numpy = {**saved, "tensors": {k: t.numpy() for k, t in saved["tensors"].items()}}
    resumed_named = _copy(named)
    resumed = uo.build(SPEC, resumed_named, path="own")   # another path: the same state
    resumed.load_state_dict(as_numpy)
    _step(optimizer, named, K)
    _step(resumed, resumed_named, K)
    mine, theirs = _snapshot(optimizer, named, SPEC), _snapshot(resumed, resumed_named, SPEC)
    for key in mine:       # the native class and the own update: float32 rounding apart
        np.testing.assert_allclose(mine[key], theirs[key], rtol=1e-6, atol=1e-7, err_msg=key)


def test_an_lr_a_scheduler_wrote_is_carried_and_a_written_scheduled_lr_refused():
    """The dict holds what a state file holds: each group's live lr and its scheduler's
    initial_lr (group_values); an lr written over a uo.schedules lr (the spec sets every
    step's lr) is refused naming state_dict, as uo.save_state refuses it."""
    import json

    named = _named()
    optimizer = uo.build(SPEC, named, path="own")
    scheduler = uo.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    _step(optimizer, named, 0)
    scheduler.step()
    saved = optimizer.state_dict()
    assert json.loads(saved["metadata"]["group_values"]) == {
        "weight": {"lr": 0.005, "initial_lr": 0.01}, "bias": {"lr": 0.005, "initial_lr": 0.01}}
    scheduled = uo.build(SPEC.replace(lr=uo.schedules.Step(lr=0.01, step_size=1, gamma=0.5)),
                         _named(), path="own")
    scheduled.param_groups[0]["lr"] = 0.5
    with pytest.raises(ValueError, match=r"^SpecOptimizer.state_dict: param_groups\[0\] .* "
                                         r"holds lr=0.5, but the spec's schedule .*"
                                         r"uo.schedules lr"):
        scheduled.state_dict()
