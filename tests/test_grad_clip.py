"""``uo.clip_grad_norm_`` and ``uo.clip_grad_value_``: torch's own functions' numbers
bit for bit on torch parameters; on Paddle (its own process) the float64 numbers of
torch's formula, written out here in numpy, and float32 within float32 rounding;
MindSpore parameters refused, naming the two alternatives.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import require
from grad_clip_worker import gradients

import unified_opt as uo

WORKER = Path(__file__).parent / "grad_clip_worker.py"


def torch_formula(grads, max_norm):
    """torch's clip_grad_norm_ in float64: the norm of the per-gradient norms, then every
    gradient times min(max_norm / (total + 1e-6), 1)."""
    total = np.linalg.norm([np.linalg.norm(g) for g in grads])
    coefficient = min(max_norm / (total + 1e-6), 1.0)
    return total, [g * coefficient for g in grads]


def _torch_params(grads, dtype):
    import torch
    params = []
    for g in grads:
        p = torch.nn.Parameter(torch.zeros(g.shape, dtype=dtype))
        p.grad = torch.tensor(g, dtype=dtype)
        params.append(p)
    return params


@require("torch")
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("scale", [1e-3, 1.0, 50.0])
def test_torch_gradients_are_clipped_as_torch_does_bit_for_bit(dtype, scale):
    import torch
    dtype = getattr(torch, dtype)
    grads = gradients(scale)
    ours, theirs = _torch_params(grads, dtype), _torch_params(grads, dtype)
    ours[1].grad = theirs[1].grad = None           # skipped, as torch skips it
    held = ours[0].grad
    total = uo.clip_grad_norm_((p for p in ours), 1.0)     # a generator, as model.parameters()
    expected = torch.nn.utils.clip_grad_norm_(theirs, 1.0)
    assert total.dtype == expected.dtype and total.item() == expected.item()
    for a, b in zip(ours, theirs):
        assert (a.grad is None) == (b.grad is None)
        if a.grad is not None:
            assert torch.equal(a.grad, b.grad)
    assert held is ours[0].grad                       # in place
    if scale == 50.0:                                 # it did clip
        assert not torch.equal(held, torch.tensor(grads[0], dtype=dtype))
    uo.clip_grad_value_(ours, 0.01)
    torch.nn.utils.clip_grad_value_(theirs, 0.01)
    assert all(torch.equal(a.grad, b.grad) for a, b in zip(ours, theirs) if a.grad is not None)


@require("torch")
def test_a_single_tensor_and_the_float64_formula():
    import torch
    g = gradients(20.0)[0]
    p = _torch_params([g], torch.float64)[0]
    total = uo.clip_grad_norm_(p, 2.0)
    want_total, want = torch_formula([g], 2.0)
    assert total.item() == pytest.approx(want_total, rel=1e-15)
    np.testing.assert_allclose(p.grad.numpy(), want[0], rtol=1e-15)


@require("torch")
def test_non_finite_norms_as_torch():
    import torch
    grads = gradients(1.0)
    ours, theirs = _torch_params(grads, torch.float32), _torch_params(grads, torch.float32)
    for params in (ours, theirs):
        params[0].grad[1, 2] = float("inf")
    with pytest.raises(RuntimeError, match="non-finite"):
        uo.clip_grad_norm_(ours, 1.0, error_if_nonfinite=True)
    with pytest.raises(RuntimeError, match="non-finite"):
        torch.nn.utils.clip_grad_norm_(theirs, 1.0, error_if_nonfinite=True)
    total = uo.clip_grad_norm_(ours, 1.0)
    expected = torch.nn.utils.clip_grad_norm_(theirs, 1.0)
    assert math.isinf(total.item()) and math.isinf(expected.item())
    for a, b in zip(ours, theirs):
        if a.grad is not None:
            assert torch.equal(a.grad.isnan(), b.grad.isnan())
            assert torch.equal(a.grad.nan_to_num(), b.grad.nan_to_num())


@require("torch")
@pytest.mark.parametrize("call, error, match", [
    (lambda ps: uo.clip_grad_norm_(ps, 0.0), ValueError, "max_norm"),
    (lambda ps: uo.clip_grad_norm_(ps, "1"), TypeError, "max_norm"),
    (lambda ps: uo.clip_grad_norm_(ps, 1.0, norm_type=1.0), NotImplementedError, "norm_type"),
    (lambda ps: uo.clip_grad_norm_(ps, 1.0, norm_type="inf"), NotImplementedError,
     "norm_type"),
    (lambda ps: uo.clip_grad_norm_(ps, 1.0, foreach=True), ValueError, "foreach"),
    (lambda ps: uo.clip_grad_norm_(ps, 1.0, error_if_nonfinite=1), TypeError,
     "error_if_nonfinite"),
    (lambda ps: uo.clip_grad_norm_([], 1.0), ValueError, "no torch"),
    (lambda ps: uo.clip_grad_norm_(ps + [np.zeros(2)], 1.0), TypeError, "one framework"),
    (lambda ps: uo.clip_grad_value_(ps, -1.0), ValueError, "clip_value"),
    (lambda ps: uo.clip_grad_value_(ps, 1.0, foreach="yes"), TypeError, "foreach"),
])
def test_bad_arguments_are_refused_before_any_change(call, error, match):
    import torch
    grads = gradients(50.0)
    params = _torch_params(grads, torch.float64)
    with pytest.raises(error, match=match):
        call(params)
    assert all(np.array_equal(p.grad.numpy(), g) for p, g in zip(params, grads))


@require("paddle")
def test_paddle_gradients_follow_torchs_formula():
    done = subprocess.run([sys.executable, str(WORKER), "paddle"], cwd=WORKER.parent,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs = json.loads(done.stdout.strip().splitlines()[-1])
    for key, run in runs.items():
        dtype, scale = key.split("-", 1)
        total, clipped = torch_formula(gradients(float(scale)), 1.0)
        assert run["dtype"] == f"paddle.{dtype}" and run["in_place"] and run["extra"]
        rtol = 1e-14 if dtype == "float64" else 4e-7
        assert run["total"] == pytest.approx(total, rel=rtol)
        for got, want in zip(run["grads"], clipped):
            np.testing.assert_allclose(got, want.ravel(), rtol=rtol, atol=0)
        for got, want in zip(run["value"], clipped):
            np.testing.assert_allclose(got, np.clip(want.ravel(), -0.004, 0.004), rtol=rtol,
                                       atol=0)
        if float(scale) > 1:     # clipped: the unclipped gradients are far off
            assert not np.allclose(run["grads"][0], gradients(float(scale))[0].ravel())


@require("mindspore")
def test_mindspore_parameters_are_refused_naming_the_alternatives():
    done = subprocess.run([sys.executable, str(WORKER), "mindspore"], cwd=WORKER.parent,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    messages = json.loads(done.stdout.strip().splitlines()[-1])
    assert "carry no gradients" in messages["norm"]
    assert "grad_clip=uo.ClipByGlobalNorm(max_norm=1.0, eps=1e-6)" in messages["norm"]
    assert "mindspore.ops.clip_by_global_norm" in messages["norm"]
    assert "eps is 0" in messages["norm"]
    assert "grad_clip=uo.ClipByValue(max=0.5)" in messages["value"]
