"""``train()`` and ``eval()`` of the optimizers ``uo.build`` makes for the schedule-free
specs (:mod:`unified_opt.weight_swap`), on every backend: ``eval()`` puts each parameter
at the point the spec says to evaluate at, bit for bit what the spec computes from the
parameter and state the optimizer holds (the conformance suite judges those against the
oracle at every step, and the evaluation point computed from them); a step in eval mode
is refused before anything changes; ``train()`` moves back; both are idempotent; the
specs that do not swap are left alone by both. Backends run in this process (conftest
imports mindspore first), one per test."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import require

import unified_opt as uo
from unified_opt.ops import numpy_ops

SHAPES = {"w": (4, 5), "b": (3,)}
SPECS = [uo.ScheduleFreeSGD(lr=0.1, momentum=0.8, weight_decay=0.05, warmup_steps=3),
         uo.ScheduleFreeAdamW(lr=0.02, betas=(0.8, 0.99), weight_decay=0.1)]
BACKENDS = [pytest.param(b, marks=require(b), id=b) for b in ("torch", "paddle", "mindspore")]


class Loop:
    """A uo-built optimizer on one framework, driven the framework's usual way."""

    def __init__(self, backend: str, spec, path: str = "auto"):
        self.backend = backend
        rng = np.random.default_rng(3)
        initial = {n: rng.standard_normal(s).astype(np.float32) for n, s in SHAPES.items()}
        if backend == "torch":
            import torch
            self.params = {n: torch.nn.Parameter(torch.tensor(a)) for n, a in initial.items()}
        elif backend == "paddle":
            import paddle
            self.params = {}
            for n, a in initial.items():
                p = paddle.create_parameter(list(a.shape), "float32")
                p.set_value(a)
                self.params[n] = p
        else:
            import mindspore as ms
            ms.set_context(mode=ms.PYNATIVE_MODE)
            self.params = {n: ms.Parameter(ms.Tensor(a), name=n) for n, a in initial.items()}
        self.opt = uo.build(spec, list(self.params.items()), path=path)
        self.rng = np.random.default_rng(4)

    def step(self) -> None:
        grads = {n: self.rng.standard_normal(s).astype(np.float32) for n, s in SHAPES.items()}
        if self.backend == "torch":
            import torch
            for n, p in self.params.items():
                p.grad = torch.tensor(grads[n])
            self.opt.step()
        elif self.backend == "paddle":
            import paddle
            for n, p in self.params.items():
                p._set_grad_ivar(paddle.to_tensor(grads[n]))
            self.opt.step()
            self.opt.clear_grad()
        else:
            import mindspore as ms
            self.opt(tuple(ms.Tensor(grads[n]) for n in self.params))

    def values(self) -> dict[str, np.ndarray]:
        return {n: _numpy(p) for n, p in self.params.items()}

    def z(self) -> dict[str, np.ndarray]:
        return {n: _numpy(self.opt.spec_state(p)["z"]) for n, p in self.params.items()}


def _numpy(tensor) -> np.ndarray:
    if hasattr(tensor, "asnumpy"):
        return np.array(tensor.asnumpy())   # a copy: on the CPU asnumpy shares the memory
    if hasattr(tensor, "detach"):
        tensor = tensor.detach()
    return np.array(tensor.cpu().numpy() if hasattr(tensor, "cpu") else tensor.numpy())


@pytest.mark.parametrize("spec", SPECS, ids=[s.name for s in SPECS])
@pytest.mark.parametrize("backend", BACKENDS)
def test_eval_and_train_move_the_parameters_as_the_spec_says(backend, spec):
    loop = Loop(backend, spec)
    for _ in range(5):
        loop.step()
    y, z = loop.values(), loop.z()
    assert all(not np.array_equal(y[n], z[n]) for n in y)     # the two points differ
    loop.opt.eval()
    x = loop.values()
    for n in y:
        expected = spec.evaluation_point(y[n], {"z": z[n]}, numpy_ops)
        np.testing.assert_array_equal(x[n], expected, err_msg=n)
    loop.opt.eval()                                           # idempotent
    assert all(np.array_equal(loop.values()[n], x[n]) for n in x)
    with pytest.raises(RuntimeError, match="eval mode"):
        loop.step()
    assert all(np.array_equal(loop.values()[n], x[n]) for n in x)   # nothing moved
    np.testing.assert_array_equal(loop.z()["w"], z["w"])
    loop.opt.train()
    back = loop.values()
    for n in y:
        np.testing.assert_array_equal(
            back[n], spec.training_point(x[n], {"z": z[n]}, numpy_ops), err_msg=n)
        # the round trip is y up to float32 rounding of the two interpolations
        np.testing.assert_allclose(back[n], y[n], rtol=1e-5, atol=1e-6)
    loop.opt.train()
    assert all(np.array_equal(loop.values()[n], back[n]) for n in back)
    loop.step()                                               # train mode steps again
    assert not np.array_equal(loop.values()["w"], back["w"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_specs_that_do_not_swap_are_left_alone(backend):
    """The own optimizers have both calls for every spec; for these they change nothing
    (uo.build's native classes are the frameworks' own, without them)."""
    loop = Loop(backend, uo.AdamW(lr=0.01), path="own")
    loop.step()
    before = loop.values()
    loop.opt.eval()
    assert all(np.array_equal(loop.values()[n], before[n]) for n in before)
    loop.step()                                               # eval mode does not block
    assert not np.array_equal(loop.values()["w"], before["w"])
    loop.opt.train()


@require("torch")
def test_eval_before_any_step_moves_nothing():
    loop = Loop("torch", SPECS[1])
    before = loop.values()
    loop.opt.eval()
    assert all(np.array_equal(loop.values()[n], before[n]) for n in before)
    loop.opt.train()
    loop.step()


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_state_saves_in_train_mode_and_resumes(backend, tmp_path):
    """``uo.save_state`` in train mode and ``uo.resume`` continue the run bit for bit
    (the base point and the 0-d averages travel); in eval mode saving is refused,
    naming ``opt.train()``."""
    spec = SPECS[1]
    loop = Loop(backend, spec)
    loop.step()
    loop.opt.eval()
    with pytest.raises(RuntimeError, match=r"call opt.train\(\) before saving"):
        uo.save_state(loop.opt, tmp_path / "run.safetensors")
    loop.opt.train()
    uo.save_state(loop.opt, tmp_path / "run.safetensors")
    other = Loop(backend, spec)
    for n, p in other.params.items():
        _set(backend, p, loop.values()[n])
    other.opt = uo.resume(tmp_path / "run.safetensors", list(other.params.items()))
    other.rng = np.random.default_rng(7)
    loop.rng = np.random.default_rng(7)
    loop.step()
    other.step()
    for n in SHAPES:
        np.testing.assert_array_equal(other.values()[n], loop.values()[n], err_msg=n)


@require("torch")
def test_a_parameter_that_has_not_stepped_saves_its_base_point(tmp_path):
    """torch makes the state at the first step: a file written before it holds the base
    point at the parameter (the spec's initial state of its values), not zeros."""
    loop = Loop("torch", SPECS[0])
    uo.save_state(loop.opt, tmp_path / "fresh.safetensors")
    other = Loop("torch", SPECS[0])
    other.opt = uo.resume(tmp_path / "fresh.safetensors", list(other.params.items()))
    loop.rng, other.rng = np.random.default_rng(8), np.random.default_rng(8)
    loop.step()
    other.step()
    np.testing.assert_array_equal(other.values()["w"], loop.values()["w"])


def _set(backend: str, parameter, value: np.ndarray) -> None:
    if backend == "torch":
        import torch
        with torch.no_grad():
            parameter.copy_(torch.tensor(value))
    elif backend == "paddle":
        parameter.set_value(value)
    else:
        import mindspore as ms
        parameter.set_data(ms.Tensor(value))
