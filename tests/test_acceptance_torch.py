"""Issue 4 acceptance, torch side: torch ``AdamW`` with no-decay param groups, ``OneCycleLR``
(``cycle_momentum=True``, stepped per optimizer step) and ``clip_grad_norm_``, run by
hand in torch for 100 steps, is followed by the same configuration written as presets
(``uo.preset`` + ``uo.schedules.preset`` + ``uo.Group`` + ``ClipByGlobalNorm(eps=1e-6)``)
built on Paddle and MindSpore (one worker process per framework) and in the reference:
every run within 10x the float32 noise floor of the float64 oracle at every step.
"""

import numpy as np
import pytest
from conftest import require
from helpers import (
    built_elsewhere,
    gradient_stream,
    initial_params,
    installed_frameworks,
    reference_trajectories,
    worst_ratio,
)

import unified_opt as uo

pytestmark = require("torch")

STEPS = 100
FACTOR = 10.0
# a small model: two linear layers around a layer norm
SHAPES = {"fc1.weight": (8, 6), "fc1.bias": (8,), "norm.weight": (8,), "norm.bias": (8,),
          "fc2.weight": (3, 8), "fc2.bias": (3,)}
NO_DECAY = ("fc1.bias", "norm.weight", "norm.bias", "fc2.bias")
MAX_LR, WEIGHT_DECAY, MAX_NORM = 0.01, 0.05, 1.0

SPEC = uo.preset("torch.optim.AdamW", lr=1e-3, weight_decay=WEIGHT_DECAY).replace(
    lr=uo.schedules.preset("torch.optim.lr_scheduler.OneCycleLR", max_lr=MAX_LR,
                           total_steps=STEPS),
    grad_clip=uo.ClipByGlobalNorm(max_norm=MAX_NORM, eps=1e-6))
GROUPS = [uo.Group(match=("*.bias", "norm.*"), weight_decay=0.0)]


def _torch_by_hand():
    """The usual torch loop; returns name -> (steps, *shape) parameter trajectory."""
    import torch

    params = {n: torch.nn.Parameter(torch.from_numpy(a.copy()))
              for n, a in initial_params(shapes=SHAPES).items()}
    decay = [p for n, p in params.items() if n not in NO_DECAY]
    no_decay = [p for n, p in params.items() if n in NO_DECAY]
    opt = torch.optim.AdamW([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1e-3, weight_decay=WEIGHT_DECAY)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=MAX_LR, total_steps=STEPS)
    trajectory = {n: [] for n in params}
    for grads in gradient_stream(shapes=SHAPES, steps=STEPS):
        for n, p in params.items():
            p.grad = torch.from_numpy(grads[n].copy())
        torch.nn.utils.clip_grad_norm_(list(params.values()), MAX_NORM)
        opt.step()
        opt.zero_grad()
        sched.step()
        for n, p in params.items():
            trajectory[n].append(p.detach().numpy().copy())
    return {n: np.stack(v) for n, v in trajectory.items()}


def _references():
    """(float64 oracle, [float32 floors]) trajectories of SPEC with GROUPS."""
    return reference_trajectories(SPEC, SHAPES, STEPS, GROUPS)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    others = [f for f in installed_frameworks() if f != "torch"]
    if not others:
        pytest.skip("needs paddle or mindspore besides torch")
    return built_elsewhere(SPEC, SHAPES, STEPS, others,
                           tmp_path_factory.mktemp("acceptance_torch"),
                           "adamw-onecycle-groups", GROUPS)


def test_the_hand_loop_is_the_spec_and_uo_build_on_torch_follows_it():
    from unified_opt.conformance.drivers.torch import TorchDriver

    oracle, floors = _references()
    native = _torch_by_hand()
    ratio = worst_ratio(native, oracle, floors)
    assert ratio <= FACTOR, f"torch by hand: {ratio:.2f} x fp32 floor"
    driver = TorchDriver(SPEC, initial_params(shapes=SHAPES), groups=GROUPS)
    assert driver.decision.native == "torch.optim.AdamW"
    trajectory = {n: [] for n in SHAPES}
    for grads in gradient_stream(shapes=SHAPES, steps=STEPS):
        driver.step(grads)
        for n, value in driver.params_numpy().items():
            trajectory[n].append(value)
    built = {n: np.stack(v) for n, v in trajectory.items()}
    assert worst_ratio(built, oracle, floors) <= FACTOR
    target = {n: v.astype(np.float64) for n, v in native.items()}
    assert worst_ratio(built, target, floors) <= FACTOR


def test_presets_follow_the_torch_loop_on_the_other_backends(runs):
    oracle, floors = _references()
    native = _torch_by_hand()
    assert worst_ratio(native, oracle, floors) <= FACTOR
    target = {n: v.astype(np.float64) for n, v in native.items()}
    ratios = {}
    for fw, built in runs.items():
        # against the oracle, and followed from torch's side: the torch trajectory as the
        # target, the float32 references' distance from it as the noise floor
        ratios[fw] = (worst_ratio(built, oracle, floors), worst_ratio(built, target, floors))
    assert all(max(r) <= FACTOR for r in ratios.values()), (
        "x fp32 floor (against the oracle, against torch by hand): " +
        ", ".join(f"{fw} {a:.2f}, {b:.2f}" for fw, (a, b) in ratios.items()))
