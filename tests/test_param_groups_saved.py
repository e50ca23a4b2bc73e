"""A param group added after ``uo.build`` on torch: refused at ``add_param_group`` on
every path ``uo.build`` returns (the state file keys state by the names the build was
given, so a parameter added later would be left out of it), and ``uo.save_state``
refusing, as a backstop, an optimizer that holds a parameter the build was not given
(a group added by calling ``torch.optim.Optimizer.add_param_group`` past the refusal),
naming it and writing no file. (issue 41, point 4)"""

import pytest
from conftest import require

import unified_opt as uo

pytestmark = require("torch")
torch = pytest.importorskip("torch")


def _param(value=1.0, n=3):
    return torch.nn.Parameter(torch.full((n,), value))


def _stepped(spec, path, steps=2):
    w = _param()
    optimizer = uo.build(spec, [("w", w)], path=path)
    for t in range(steps):
        w.grad = torch.full((3,), 0.5 + t)
        optimizer.step()
    return w, optimizer


def _state_numbers(optimizer):
    return {id(p): {k: v.clone() for k, v in s.items()} for p, s in optimizer.state.items()}


def test_add_param_group_is_refused_on_a_native_class_naming_the_own_path():
    # (the own path takes a group added later: tests/test_param_groups.py)
    w, optimizer = _stepped(uo.AdamW(lr=0.1), "native", steps=1)
    assert type(optimizer) is torch.optim.AdamW   # the default build: torch's class
    before = _state_numbers(optimizer)
    with pytest.raises(ValueError, match=r"add_param_group is refused.*state file.*"
                                         r"path='own'"):
        optimizer.add_param_group({"params": [_param()], "lr": 0.01})
    assert len(optimizer.param_groups) == 1
    assert optimizer.param_groups[0]["params"] == [w]
    after = _state_numbers(optimizer)
    assert after.keys() == before.keys()
    for key in before:
        for name, value in before[key].items():
            assert torch.equal(after[key][name], value), name


def test_the_default_build_is_native_and_refuses_without_a_pre_step():
    # the case that silently dropped the group from the state file before
    spec = uo.AdamW(lr=0.1)
    optimizer = uo.build(spec, [("w", _param())])
    assert type(optimizer) is torch.optim.AdamW
    with pytest.raises(ValueError, match="the own path takes groups added later") as error:
        optimizer.add_param_group({"params": [_param()]})
    assert "escape them" not in str(error.value)     # no pre-step to escape here


@pytest.mark.parametrize("path", ["native", "own"])
def test_save_state_refuses_a_parameter_the_build_was_not_given(path, tmp_path):
    w, optimizer = _stepped(uo.AdamW(lr=0.1), path, steps=1)
    extra = _param(2.0, n=5)
    # past the refusal: the class's own method, as code holding torch's API might call it
    torch.optim.Optimizer.add_param_group(optimizer, {"params": [extra]})
    w.grad, extra.grad = torch.ones(3), torch.ones(5)
    if path == "own":     # the own step refuses a group it was not given
        with pytest.raises(ValueError, match=r"param_groups\[1\] was not made by uo\.build"):
            optimizer.step()
    else:
        optimizer.step()
    target = tmp_path / "run.safetensors"
    with pytest.raises(ValueError, match=r"save_state: the optimizer holds param_groups\[1\]"
                                         r"\['params'\]\[0\] \(shape \[5\]\), which was not "
                                         r"given to uo\.build"):
        uo.save_state(optimizer, target)
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []     # no temporary file left behind either


@pytest.mark.parametrize("path", ["native", "own"])
def test_every_built_parameter_is_saved_and_loaded(path, tmp_path):
    # the backstop passes an optimizer holding exactly its built parameters
    w, optimizer = _stepped(uo.AdamW(lr=0.1), path, steps=3)
    uo.save_state(optimizer, tmp_path / "run.safetensors")
    w2 = _param()
    resumed = uo.build(uo.AdamW(lr=0.1), [("w", w2)], path=path)
    uo.load_state(resumed, tmp_path / "run.safetensors")
    with torch.no_grad():
        w2.copy_(w)
    w.grad = w2.grad = torch.full((3,), 0.25)
    optimizer.step()
    resumed.step()
    assert torch.equal(w2.detach(), w.detach())
