"""Non-finite gradients: every ops binding keeps NaN where numpy does, so the own update
of every backend makes a parameter NaN where the oracle does (Lion: torch's and
MindSpore's sign(NaN) is 0, which froze the element while exp_avg stayed NaN); a native
class that departs declares it, and Paddle's Rprop, which reads uninitialised memory
there, refuses the step."""

import numpy as np
import pytest
from conftest import require

import unified_opt as uo
from unified_opt.ops import numpy_ops

X = np.array([np.nan, 1.0, -2.0, np.inf, -np.inf, 0.0], dtype=np.float32)
Y = np.array([0.5, np.nan, 3.0, 1.0, -1.0, np.nan], dtype=np.float32)


def _bindings():
    out = []
    for framework in ("torch", "paddle", "mindspore"):
        marks = require(framework)
        out.append(pytest.param(framework, marks=marks))
    return out


def _binding(framework):
    if framework == "torch":
        import torch

        from unified_opt.backends.torch.ops import torch_ops
        return torch_ops, torch.from_numpy, lambda t: t.numpy()
    if framework == "paddle":
        import paddle

        from unified_opt.backends.paddle.ops import paddle_ops
        return paddle_ops, paddle.to_tensor, lambda t: t.numpy()
    from mindspore import Tensor

    from unified_opt.backends.mindspore.ops import mindspore_ops
    return mindspore_ops, Tensor, lambda t: t.asnumpy()


@pytest.mark.parametrize("framework", _bindings())
def test_every_binding_keeps_nan_as_numpy_does(framework):
    ops, tensor, array = _binding(framework)
    x, y = tensor(X.copy()), tensor(Y.copy())
    with np.errstate(invalid="ignore"):
        expected = {"sign": numpy_ops.sign(X), "maximum": numpy_ops.maximum(X, Y),
                    "minimum": numpy_ops.minimum(X, Y), "clip": numpy_ops.clip(X, -1.0, 1.0)}
    got = {"sign": ops.sign(x), "maximum": ops.maximum(x, y), "minimum": ops.minimum(x, y),
           "clip": ops.clip(x, -1.0, 1.0)}
    for name, want in expected.items():
        np.testing.assert_array_equal(array(got[name]), want, err_msg=name)


def _lion_run(framework, path="auto"):
    """Lion (own path everywhere) with a NaN in w's gradient at step 2: param and
    exp_avg of that element."""
    from unified_opt.conformance.worker import driver_class

    arrays = {"w": np.linspace(-1.0, 1.0, 9, dtype=np.float32)}
    driver = driver_class(framework)(uo.Lion(lr=1e-3), arrays, path=path)
    grads = [{"w": np.full(9, 0.5, np.float32)} for _ in range(4)]
    grads[1]["w"][4] = np.nan
    for g in grads:
        driver.step(g)
    return driver.params_numpy()["w"], driver.state_numpy()["w"]["exp_avg"]


@pytest.mark.parametrize("framework", _bindings())
def test_lion_makes_the_parameter_nan_as_the_oracle(framework):
    param, exp_avg = _lion_run(framework)
    oracle = uo.reference(uo.Lion(lr=1e-3), {"w": np.linspace(-1.0, 1.0, 9)})
    grads = [{"w": np.full(9, 0.5)} for _ in range(4)]
    grads[1]["w"][4] = np.nan
    for g in grads:
        oracle.step(g)
    assert np.isnan(oracle.params["w"][4]) and np.isnan(param[4]) and np.isnan(exp_avg[4])
    np.testing.assert_array_equal(np.isnan(param), np.isnan(oracle.params["w"]))
    # four steps of p - lr * sign(c): one rounding each, lr held as float32 (4.7e-8
    # relative); FMA or vector width change nothing there: a few ulps on any CPU, and
    # rtol=1e-6 is 8
    np.testing.assert_allclose(np.delete(param, 4), np.delete(oracle.params["w"], 4),
                               rtol=1e-6)


def test_native_departures_are_declared_and_explained():
    decision = uo.explain(uo.Rprop(lr=0.01), "torch", prefer="native")
    assert decision.native == "torch.optim.Rprop"
    assert "with a non-finite gradient it departs: torch.sign(NaN) is 0" in decision.reason
    assert "uninitialised memory" in uo.explain(uo.Rprop(lr=0.01), "paddle",
                                                prefer="native").reason


@require("paddle")
def test_paddle_rprop_refuses_a_non_finite_step_before_it_runs():
    import paddle

    p = paddle.create_parameter([3], "float32")
    p.set_value(np.ones(3, "float32"))
    optimizer = uo.build(uo.Rprop(lr=0.01), [("w", p)], prefer="native")
    assert uo.explain(optimizer).native == "paddle.optimizer.Rprop"
    p.grad = paddle.to_tensor(np.array([1.0, np.nan, 2.0], "float32"))
    with pytest.raises(FloatingPointError, match="the gradient of .* holds inf or NaN"):
        optimizer.step()
    np.testing.assert_array_equal(p.numpy(), np.ones(3, "float32"))
    p.grad = paddle.to_tensor(np.array([1.0, 1.0, 2.0], "float32"))
    optimizer.step()
    # 1 - lr * sign(g): one rounded float32 operation on any CPU, within an ulp of 0.99
    np.testing.assert_allclose(p.numpy(), np.full(3, 0.99, "float32"), rtol=1e-6)
    own = uo.build(uo.Rprop(lr=0.01), [("w", p)], path="own")
    p.grad = paddle.to_tensor(np.array([1.0, np.nan, 2.0], "float32"))
    own.step()
    assert np.isnan(p.numpy()[1]) and np.isfinite(p.numpy()[[0, 2]]).all()
