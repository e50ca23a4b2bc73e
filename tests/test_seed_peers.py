"""The seed specs against the torch peer libraries from PyPI, each with the knob setting
that matches its flags, in float64 over 60 steps of the adversarial gradient stream
(zeros, 1e-30, 500, mixed magnitudes), and the torch backend following came-pytorch.

Peers (installed with ``pip install --no-deps came-pytorch torch-optimizer
pytorch-ranger pytorch-optimizer``; each test skips when its package is missing).
The mapping, peer flags -> spec:

* ``came_pytorch.CAME(lr, eps, clip_threshold, betas, weight_decay)`` ->
  ``uo.CAME`` with the same arguments (the spec's defaults are the authors').
* ``pytorch_optimizer.CAME(lr, betas, weight_decay, clip_threshold, eps1, eps2)`` ->
  ``uo.CAME(eps=(eps1, eps2), ...)`` (its default ``weight_decouple=True``).
* ``torch_optimizer.Lamb(lr, betas, eps, weight_decay, clamp_value, debias)`` ->
  ``uo.Lamb(bias_correction="step" if debias else "none", weight_norm_clamp=clamp_value,
  always_adapt=True)``.
* ``torch_optimizer.LARS(lr, momentum, dampening, weight_decay, nesterov,
  trust_coefficient, eps)`` -> ``uo.LARS(lr_placement="outside", momentum_init="grad",
  zero_norm_rule="raw_if_norm_zero")``.
* ``pytorch_optimizer.LARS(lr, weight_decay, momentum, dampening, trust_coefficient,
  nesterov)`` -> ``uo.LARS(eps=0, lr_placement="outside", momentum_init="zeros",
  always_adapt=True, zero_norm_rule="one_if_denominator_zero", exclude_1d=True)``.
* ``torch_optimizer.Adafactor(lr, eps2, clip_threshold, decay_rate, beta1, weight_decay,
  scale_parameter, relative_step, warmup_init)`` -> ``uo.Adafactor(eps=eps2,
  eps_mode="add", decay_rate=-decay_rate, decay_lr="scaled", lr=1e-2 when relative_step)``
  (it fails on 3-D parameters, so none here).
* ``torch.optim.Adafactor`` -> ``uo.preset("torch.optim.Adafactor", ...)``.
"""

import numpy as np
import pytest
from conftest import require
from helpers import SHAPES, gradient_stream, initial_params

import unified_opt as uo

pytestmark = require("torch")
torch = pytest.importorskip("torch")

STEPS = 60


def peer_trajectory(make, shapes=SHAPES, dtype=torch.float64):
    params = {n: torch.nn.Parameter(torch.from_numpy(a.astype(np.float64)).to(dtype))
              for n, a in initial_params(shapes).items()}
    optimizer = make(list(params.values()))
    for g in gradient_stream(shapes, steps=STEPS):
        for n, p in params.items():
            p.grad = torch.from_numpy(g[n].astype(np.float64)).to(dtype)
        optimizer.step()
    return {n: p.detach().double().numpy() for n, p in params.items()}


def oracle(spec, shapes=SHAPES):
    ref = uo.reference(spec, initial_params(shapes))
    for g in gradient_stream(shapes, steps=STEPS):
        ref.step(g)
    return ref.params


def assert_same(peer, spec, shapes=SHAPES, rtol=1e-10):
    want = oracle(spec, shapes)
    for name in want:
        np.testing.assert_allclose(peer[name], want[name], rtol=rtol, atol=1e-12,
                                   err_msg=f"parameter {name}")


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_came_pytorch_is_the_came_spec(weight_decay):
    came = pytest.importorskip("came_pytorch")
    kw = dict(lr=0.01, betas=(0.9, 0.999, 0.99), eps=(1e-30, 1e-16), clip_threshold=1.0,
              weight_decay=weight_decay)
    assert_same(peer_trajectory(lambda p: came.CAME(p, **kw)), uo.get("came", **kw))


def test_pytorch_optimizer_came_is_the_came_spec():
    po = pytest.importorskip("pytorch_optimizer")
    peer = peer_trajectory(lambda p: po.CAME(p, lr=0.01, weight_decay=0.1, eps1=1e-30,
                                             eps2=1e-16, foreach=False))
    assert_same(peer, uo.CAME(lr=0.01, weight_decay=0.1))


@pytest.mark.parametrize("debias", [False, True])
def test_torch_optimizer_lamb_is_a_knob_setting(debias):
    to = pytest.importorskip("torch_optimizer")
    peer = peer_trajectory(lambda p: to.Lamb(p, lr=0.01, weight_decay=0.05, clamp_value=3.0,
                                             debias=debias))
    assert_same(peer, uo.Lamb(lr=0.01, weight_decay=0.05, weight_norm_clamp=3.0,
                              always_adapt=True,
                              bias_correction="step" if debias else "none"))


def test_torch_optimizer_lars_is_a_knob_setting():
    to = pytest.importorskip("torch_optimizer")
    kw = dict(lr=0.5, momentum=0.9, dampening=0.1, weight_decay=0.01, trust_coefficient=0.02)
    peer = peer_trajectory(lambda p: to.LARS(p, eps=1e-8, **kw))
    assert_same(peer, uo.LARS(eps=1e-8, lr_placement="outside", momentum_init="grad",
                              zero_norm_rule="raw_if_norm_zero", **kw))


def test_pytorch_optimizer_lars_is_a_knob_setting():
    po = pytest.importorskip("pytorch_optimizer")
    kw = dict(lr=0.5, momentum=0.9, weight_decay=0.01, trust_coefficient=0.02)
    peer = peer_trajectory(lambda p: po.LARS(p, foreach=False, **kw))
    assert_same(peer, uo.LARS(eps=0.0, lr_placement="outside", momentum_init="zeros",
                              always_adapt=True, zero_norm_rule="one_if_denominator_zero",
                              exclude_1d=True, **kw))


@pytest.mark.parametrize("relative_step, beta1", [(True, None), (False, 0.9)])
def test_torch_optimizer_adafactor_is_the_hugging_face_form(relative_step, beta1):
    to = pytest.importorskip("torch_optimizer")
    shapes = {n: s for n, s in SHAPES.items() if len(s) < 3}
    lr = None if relative_step else 0.01
    peer = peer_trajectory(lambda p: to.Adafactor(p, lr=lr, beta1=beta1, weight_decay=0.1,
                                                  relative_step=relative_step), shapes)
    spec = uo.Adafactor(lr=0.01, beta1=beta1, weight_decay=0.1, relative_step=relative_step,
                        eps=(1e-30, 1e-3), eps_mode="add", decay_lr="scaled")
    assert_same(peer, spec, shapes)


@pytest.mark.parametrize("kw", [{}, {"lr": 0.3, "weight_decay": 0.2, "beta2_decay": -0.5}])
def test_torch_adafactor_is_its_preset(kw):
    shapes = {n: s for n, s in SHAPES.items() if s != (0,)}   # torch divides by numel
    peer = peer_trajectory(lambda p: torch.optim.Adafactor(p, **kw), shapes)
    assert_same(peer, uo.preset("torch.optim.Adafactor", **kw), shapes)


def test_the_torch_backend_follows_came_pytorch_in_float32():
    came = pytest.importorskip("came_pytorch")
    kw = dict(lr=0.01, betas=(0.9, 0.999, 0.99), eps=(1e-30, 1e-16), weight_decay=0.1)
    shapes = {n: s for n, s in SHAPES.items() if s != (0,)}
    theirs = peer_trajectory(lambda p: came.CAME(p, **kw), shapes, dtype=torch.float32)
    params = {n: torch.nn.Parameter(torch.from_numpy(a)) for n, a in initial_params(shapes).items()}
    optimizer = uo.build(uo.get("came", **kw), params.items())
    floor = uo.reference(uo.get("came", **kw), initial_params(shapes), dtype="float32")
    for g in gradient_stream(shapes, steps=STEPS):
        for n, p in params.items():
            p.grad = torch.from_numpy(g[n])
        optimizer.step()
        floor.step(g)
    want = oracle(uo.get("came", **kw), shapes)
    for n, p in params.items():
        ours = p.detach().double().numpy()
        noise = max(np.abs(floor.params[n] - want[n]).max(), np.abs(theirs[n] - want[n]).max(),
                    1e-7 * np.abs(want[n]).max())
        assert np.abs(ours - theirs[n]).max() <= 8 * noise, n
