"""What a torch optimizer made by ``uo.build`` refuses rather than silently mishandle: a
parameter added again after the build (a group added after it is taken, the build's
pre-step covering it), a hyperparameter written
into an own-path group (the own path reads only lr), and a state_dict whose state or
groups do not fit the spec, each refused before anything changes."""

import copy

import pytest
from conftest import require

import unified_opt as uo

pytestmark = require("torch")
torch = pytest.importorskip("torch")


def _param(value=1.0, n=3):
    return torch.nn.Parameter(torch.full((n,), value))


def _stepped(spec, path, steps=2):
    w = _param()
    optimizer = uo.build(spec, [w], path=path)
    for t in range(steps):
        w.grad = torch.full((3,), 0.5 + t)
        optimizer.step()
    return w, optimizer


@pytest.mark.parametrize("spec", [uo.Lamb(lr=0.1), uo.AdamW(lr=0.1)], ids=["lamb", "adamw"])
def test_the_own_path_takes_a_group_added_after_stepping_and_refuses_one_held(spec):
    w, optimizer = _stepped(spec, "own", steps=1)
    before = copy.deepcopy(optimizer.state_dict())
    with pytest.raises(ValueError, match="already in the optimizer"):
        optimizer.add_param_group({"params": [w]})
    assert str(optimizer.state_dict()) == str(before)
    added = _param()
    optimizer.add_param_group({"params": [added], "lr": 0.0})
    assert len(optimizer.param_groups) == 2 and optimizer.param_groups[1]["lr"] == 0.0
    value = added.detach().clone()
    w.grad, added.grad = torch.ones(3), torch.ones(3)
    optimizer.step()
    assert torch.equal(added.detach(), value)          # lr 0: stepped, not moved


def test_a_native_build_with_a_pre_step_runs_it_over_a_group_added_later():
    # the non-finite skip spans the added group: its inf gradient skips the whole step
    spec = uo.SGD(lr=1.0, grad_clip=uo.ClipByGlobalNorm(max_norm=1e-3), skip_nonfinite=True)
    w = _param()
    optimizer = uo.build(spec, [w], path="native")
    assert isinstance(optimizer, torch.optim.SGD)
    added = _param(2.0)
    optimizer.add_param_group({"params": [added]})
    assert len(optimizer.param_groups) == 2
    w.grad, added.grad = torch.ones(3), torch.tensor([1.0, float("inf"), 1.0])
    optimizer.step()
    assert torch.equal(w.detach(), torch.ones(3))
    assert torch.equal(added.detach(), torch.full((3,), 2.0))
    added.grad = torch.ones(3)
    optimizer.step()      # clipped to a global norm of 1e-3 over both groups
    moved = torch.cat([1.0 - w.detach(), 2.0 - added.detach()])
    # (a norm per group would move each by 1e-3 / 3 ** 0.5; float32 holds 1 - moved to
    # about 1e-4 of moved)
    assert torch.allclose(moved, torch.full((6,), 1e-3 / 6 ** 0.5), rtol=1e-3, atol=0)


def test_a_native_build_refuses_a_parameter_it_holds_and_changes_nothing():
    # (what else a native class refuses: tests/test_add_param_group_native.py)
    w, optimizer = _stepped(uo.AdamW(lr=0.1), "native", steps=1)
    before = copy.deepcopy(optimizer.state_dict())
    with pytest.raises(ValueError, match="already in the optimizer"):
        optimizer.add_param_group({"params": [w]})
    assert str(optimizer.state_dict()) == str(before)


def test_the_own_path_refuses_a_hyperparameter_its_spec_lacks_and_reads_its_own():
    w, optimizer = _stepped(uo.AdamW(lr=0.1, weight_decay=0.0), "own")
    value, state = w.detach().clone(), copy.deepcopy(optimizer.state_dict())
    optimizer.param_groups[0]["momentum"] = 0.5
    w.grad = torch.zeros(3)
    with pytest.raises(ValueError, match=r"param_groups\[0\]\['momentum'\] = 0.5 would not "
                                         r"be read: AdamW has no 'momentum'"):
        optimizer.step()
    assert torch.equal(w.detach(), value)
    del optimizer.param_groups[0]["momentum"]
    assert str(optimizer.state_dict()) == str(state)
    optimizer.param_groups[0]["weight_decay"] = 0.5     # read at the next step
    optimizer.step()
    # bit for bit the spec whose weight decay is 0.5 from that step on
    scheduled, twin = _stepped(uo.AdamW(lr=0.1, weight_decay=uo.schedules.Piecewise(
        boundaries=[2], values=[0.0, 0.5])), "own")
    scheduled.grad = torch.zeros(3)
    twin.step()
    assert torch.equal(w.detach(), scheduled.detach()) and not torch.equal(w.detach(), value)


def _edited(edit):
    """A Lamb state_dict of two steps with ``edit`` applied."""
    _, optimizer = _stepped(uo.Lamb(lr=0.1), "own")
    saved = copy.deepcopy(torch.optim.Optimizer.state_dict(optimizer))   # torch's own form
    edit(saved)
    return saved


def _set_state(key, value):
    return lambda saved: saved["state"][0].__setitem__(key, value)


@pytest.mark.parametrize("edit, words", [
    (_set_state("step", torch.tensor(-3.0)), "'step' must be a whole count >= 0, got tensor(-3.)"),
    (_set_state("step", torch.tensor(float("nan"))), "'step' must be a whole count >= 0"),
    (_set_state("step", torch.tensor(2.7)), "'step' must be a whole count >= 0"),
    (lambda saved: saved["state"][0].pop("exp_avg_sq"),
     "lacks ['exp_avg_sq']; it keeps ['exp_avg', 'exp_avg_sq']"),
    (_set_state("bogus", torch.zeros(3)), "has ['bogus']; it keeps"),
    (_set_state("exp_avg", torch.zeros(1)), "'exp_avg' is [1], it keeps [3]"),
    (lambda saved: saved["param_groups"][0].__setitem__("steps_taken", "x"),
     "param_groups[0]['steps_taken'] must be an int >= 0, got 'x'"),
    (lambda saved: saved["param_groups"][0].__setitem__("momentum", 0.9),
     "param_groups[0] holds 'momentum', which Lamb does not have"),
], ids=["negative-step", "nan-step", "fractional-step", "missing-array", "extra-array",
        "wrong-shape", "steps-taken", "group-hyperparameter"])
def test_the_own_path_refuses_a_state_dict_that_does_not_fit_before_loading(edit, words):
    w, optimizer = _stepped(uo.Lamb(lr=0.1), "own", steps=1)
    before = copy.deepcopy(torch.optim.Optimizer.state_dict(optimizer))
    with pytest.raises(ValueError) as raised:
        optimizer.load_state_dict(_edited(edit))
    assert words in str(raised.value)
    assert str(torch.optim.Optimizer.state_dict(optimizer)) == str(before)


def test_the_own_path_loads_its_own_state_dict_and_a_whole_integer_step():
    _, optimizer = _stepped(uo.Lamb(lr=0.1), "own")
    saved = _edited(_set_state("step", 2))
    optimizer.load_state_dict(saved)
    assert float(optimizer.state[optimizer.param_groups[0]["params"][0]]["step"]) == 2


def test_a_native_build_refuses_a_state_dict_lacking_its_group_values():
    _, own = _stepped(uo.Adam(lr=0.1), "own")
    native = uo.build(uo.Adam(lr=0.1), [_param()], path="native")
    before = copy.deepcopy(torch.optim.Optimizer.state_dict(native))
    # torch's own form: the own path's groups hold the spec's values
    saved = torch.optim.Optimizer.state_dict(own)
    for key in ("betas", "eps"):
        del saved["param_groups"][0][key]
    with pytest.raises(ValueError, match=r"param_groups\[0\] lacks \['betas', 'eps'\], "
                                         r"which Adam reads from each group"):
        native.load_state_dict(saved)
    assert str(torch.optim.Optimizer.state_dict(native)) == str(before)
