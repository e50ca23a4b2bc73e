"""A param group added after ``uo.build`` on torch: taken by ``add_param_group`` into the
build's record (so the state file names it), refused where the native class cannot take
it; and ``uo.save_state`` refusing, as a backstop, an optimizer that holds a parameter
the build was not given (a group added by calling
``torch.optim.Optimizer.add_param_group`` past uo's method), naming it and writing no
file. (issue 41, point 4)"""

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


def test_a_group_of_another_dtype_is_refused_on_a_native_class_naming_the_own_path():
    # (a group the native class takes: tests/test_add_param_group_native.py)
    w, optimizer = _stepped(uo.AdamW(lr=0.1), "native", steps=1)
    assert type(optimizer) is torch.optim.AdamW   # the default build: torch's class
    before = _state_numbers(optimizer)
    half = torch.nn.Parameter(torch.ones(3, dtype=torch.float16))
    with pytest.raises(ValueError, match=r"no longer computes the spec exactly.*"
                                         r"path='own'"):
        optimizer.add_param_group({"params": [("half", half)], "lr": 0.01})
    assert len(optimizer.param_groups) == 1
    assert optimizer.param_groups[0]["params"] == [w]
    after = _state_numbers(optimizer)
    assert after.keys() == before.keys()
    for key in before:
        for name, value in before[key].items():
            assert torch.equal(after[key][name], value), name


def test_the_default_build_is_native_and_saves_a_group_added_later(tmp_path):
    # the case that silently dropped the group from the state file before
    spec = uo.AdamW(lr=0.1)
    optimizer = uo.build(spec, [("w", _param())])
    assert type(optimizer) is torch.optim.AdamW
    added = _param(2.0)
    optimizer.add_param_group({"params": [("added", added)]})
    added.grad = torch.ones(3)
    optimizer.step()
    uo.save_state(optimizer, tmp_path / "run.safetensors")
    again = _param(2.0)
    resumed = uo.resume(tmp_path / "run.safetensors", [("w", _param()), ("added", again)])
    for key, value in optimizer.state[added].items():
        assert torch.equal(resumed.state[again][key], value), key


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


def test_a_file_of_other_groups_is_refused_showing_both(tmp_path):
    """Group dicts are saved as rules of exact names: a file whose groups name other
    parameters is refused, the message showing the optimizer's groups as compared (it
    showed ``[]`` for an optimizer built from group dicts)."""
    spec = uo.AdamW(lr=0.01, weight_decay=0.1)
    a, b = _param(), _param()
    saved = uo.build(spec, [{"params": [("a.w", a)]}, {"params": [("a.b", b)],
                                                        "weight_decay": 0.0}])
    uo.save_state(saved, tmp_path / "a.safetensors")
    c, d = _param(), _param()
    other = uo.build(spec, [{"params": [("a.w", c)]}, {"params": [("a.v", d)],
                                                        "weight_decay": 0.0}])
    with pytest.raises(ValueError, match=r"the file's groups \[Group\(match=\('a.w',\).*"
                                         r"differ from the optimizer's \[Group\(match="
                                         r"\('a.w',\).*'a.v'"):
        uo.load_state(other, tmp_path / "a.safetensors")
