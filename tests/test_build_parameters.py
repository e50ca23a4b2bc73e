"""``uo.build`` refuses parameters that would run wrong without a word (issue 22): one
parameter given twice (stepped twice per step), an integer tensor (never updated), a
Python float (no framework's parameter), each named, before anything is built."""

import pytest
from conftest import require

import unified_opt as uo


@require("torch")
def test_torch_parameters_given_twice_integer_or_python_floats_are_refused():
    import torch

    p = torch.nn.Parameter(torch.ones(3))
    with pytest.raises(ValueError, match=r"params\[1\] is the same parameter as params\[0\]"):
        uo.build(uo.SGD(lr=0.1), [p, p])
    with pytest.raises(ValueError, match="parameter 'b' is the same parameter as parameter 'a'"):
        uo.build(uo.SGD(lr=0.1), [("a", p), ("b", p)])
    ints = torch.nn.Parameter(torch.ones(2, dtype=torch.int64), requires_grad=False)
    with pytest.raises(TypeError, match=r"params\[1\] has dtype torch.int64 \(shape \(2,\)\)"):
        uo.build(uo.Adam(lr=0.1), [p, ints])
    with pytest.raises(TypeError, match=r"params\[0\] is 1.0 of type float, not a torch"):
        uo.build(uo.SGD(lr=0.1), [1.0, 2.0])
    assert p.grad is None and torch.equal(p, torch.ones(3))


@require("paddle")
def test_paddle_integer_parameters_are_refused_by_name():
    import paddle

    layer = paddle.nn.Linear(2, 2)
    ints = paddle.create_parameter([2], dtype="int64",
                                   default_initializer=paddle.nn.initializer.Constant(1))
    with pytest.raises(TypeError, match=rf"parameter '{ints.name}' has dtype paddle.int64"):
        uo.build(uo.SGD(lr=0.1), [*layer.named_parameters(), (ints.name, ints)])
