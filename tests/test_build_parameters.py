"""``uo.build`` refuses parameters that would run wrong without a word (issue 22): one
parameter given twice (stepped twice per step), an integer tensor (never updated), a
complex one (the specs' math is real), a Python float (no framework's parameter), each
named, before anything is built; and the oracle refuses arrays of other than real
numbers."""

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


@require("torch")
@pytest.mark.parametrize("path", ["native", "own"])
def test_complex_parameters_are_refused_on_every_path(path):
    """The specs' math is real (a norm, a square or a sign of a complex value is another
    formula): the own path computed 0.9+1.0j where torch's Adam gives 0.9+0.9j."""
    import torch

    z = torch.nn.Parameter(torch.tensor([1 + 1j, 2 - 1j]))
    with pytest.raises(TypeError, match=r"params\[0\] has dtype torch.complex64 \(shape "
                                        r"\(2,\)\): the specs define updates of real numbers"):
        uo.build(uo.Adam(lr=0.1), [z], path=path)


@pytest.mark.parametrize("value, dtype", [([1 + 1j], "complex128"), ([True], "bool"),
                                          ("x", "<U1")])
def test_the_reference_refuses_arrays_of_other_than_real_numbers(value, dtype):
    import numpy as np

    with pytest.raises(TypeError, match=rf"reference: params\['w'\] must be an array of "
                                        rf"real numbers, got dtype {dtype}"):
        uo.reference(uo.Adam(), {"w": value})
    oracle = uo.reference(uo.Adam(), {"w": np.ones(1)})
    with pytest.raises(TypeError, match=rf"reference.step: grads\['w'\] must be an array "
                                        rf"of real numbers, got dtype {dtype}"):
        oracle.step({"w": np.asarray(value).reshape(1) if dtype != "<U1" else "x"})


@require("paddle")
def test_paddle_integer_parameters_are_refused_by_name():
    import paddle

    layer = paddle.nn.Linear(2, 2)
    ints = paddle.create_parameter([2], dtype="int64",
                                   default_initializer=paddle.nn.initializer.Constant(1))
    with pytest.raises(TypeError, match=rf"parameter '{ints.name}' has dtype paddle.int64"):
        uo.build(uo.SGD(lr=0.1), [*layer.named_parameters(), (ints.name, ints)])
