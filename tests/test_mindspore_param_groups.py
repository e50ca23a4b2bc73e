"""MindSpore (issue 41, points 4 and 7): a group added after the build past
``add_param_group`` (MindSpore's own base-class method called directly) is refused by
``uo.save_state``, which would have no name for it; ``add_param_group`` itself
(``tests/test_add_param_group_mindspore.py``) takes it where the path can, and an
experimental class refuses it after a step; a plain ``mindspore.Tensor`` is refused at
build naming the fix.

MindSpore runs in this process (conftest imports it first).
"""

import numpy as np
import pytest
from conftest import require

import unified_opt as uo

pytestmark = require("mindspore")
ms = pytest.importorskip("mindspore")


def _param(name, value=1.0, n=3):
    return ms.Parameter(ms.Tensor(np.full((n,), value, np.float32)), name=name)


def _built(path_or_prefer):
    ms.set_context(mode=ms.PYNATIVE_MODE)
    w = _param("w")
    optimizer = uo.build(uo.AdamW(lr=0.1), [("w", w)], backend="mindspore",
                         **path_or_prefer)
    optimizer((ms.Tensor(np.full((3,), 0.5, np.float32)),))
    return w, optimizer


def test_the_experimental_class_refuses_a_group_added_after_a_step():
    from mindspore.experimental.optim import AdamW

    w, optimizer = _built({"prefer": "native"})
    assert isinstance(optimizer, AdamW)
    with pytest.raises(ValueError, match=r"add_param_group: mindspore\.experimental\.optim"
                                         r"\.AdamW counts steps in one state_step"):
        optimizer.add_param_group({"params": [_param("extra")]})
    assert [p.name for p in optimizer.parameters] == ["w"]
    assert len(optimizer.param_groups) == 1


def test_save_state_refuses_a_parameter_the_build_was_not_given(tmp_path):
    from mindspore.experimental.optim import Optimizer

    w, optimizer = _built({"prefer": "native"})
    extra = _param("extra", 2.0)
    Optimizer.add_param_group(optimizer, {"params": [extra]})   # past the refusal
    target = tmp_path / "run.safetensors"
    with pytest.raises(ValueError, match=r"save_state: the optimizer holds parameter extra "
                                         r"\(shape \[3\]\), which was not given to uo.build"):
        uo.save_state(optimizer, target)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("path_or_prefer", [{"prefer": "native"}, {"path": "own"}],
                         ids=["native", "own"])
def test_the_built_parameters_alone_are_saved(path_or_prefer, tmp_path):
    _, optimizer = _built(path_or_prefer)
    uo.save_state(optimizer, tmp_path / "run.safetensors")
    assert uo.porting.state.read_state(tmp_path / "run.safetensors").names == ["w"]


def test_a_plain_tensor_is_refused_at_build_naming_the_fix():
    plain = ms.Tensor(np.ones(3, np.float32))
    with pytest.raises(TypeError, match=r"must be mindspore.Parameter, got x Tensor "
                                        r"\(shape \[3\]\); make it a Parameter "
                                        r"\(mindspore.Parameter\(tensor"):
        uo.build(uo.AdamW(lr=0.1), [("x", plain)], backend="mindspore")
