"""Issue 4 acceptance, Paddle side: ``paddle.optimizer.Lamb`` with an
``exclude_from_weight_decay_fn`` (biases and norm parameters) and
``LinearWarmup(CosineAnnealingDecay)`` stepped per optimizer step, run by hand in Paddle
for 100 steps, is followed by the same configuration written as presets
(``uo.preset`` + ``uo.schedules.preset`` + ``uo.Group(exclude_from=("weight_decay",))``)
built on torch and MindSpore (one worker process per framework), on Paddle itself, and
in the reference: every run within 10x the float32 noise floor of the float64 oracle at
every step, and of the Paddle trajectory.

Paddle runs in this process (conftest imports mindspore first when it is installed).
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

pytestmark = require("paddle")

STEPS = 100
FACTOR = 10.0
# a small model: two linear layers around a layer norm
SHAPES = {"fc1.weight": (8, 6), "fc1.bias": (8,), "norm.weight": (8,), "norm.bias": (8,),
          "fc2.weight": (3, 8), "fc2.bias": (3,)}
NO_DECAY = ("fc1.bias", "norm.weight", "norm.bias", "fc2.bias")
PEAK, WARMUP, T_MAX, DECAY = 0.01, 10, 80, 0.05

COSINE = dict(learning_rate=PEAK, T_max=T_MAX, eta_min=1e-4)
WARM = dict(warmup_steps=WARMUP, start_lr=0.0, end_lr=PEAK)
SPEC = uo.preset(
    "paddle.optimizer.Lamb", lamb_weight_decay=DECAY,
    learning_rate=uo.schedules.preset(
        "paddle.optimizer.lr.LinearWarmup", **WARM,
        learning_rate=uo.schedules.preset("paddle.optimizer.lr.CosineAnnealingDecay",
                                          **COSINE)))
GROUPS = [uo.Group(match=("*.bias", "norm.*"), exclude_from=("weight_decay",))]


def _paddle_params():
    import paddle

    return {n: paddle.create_parameter(list(a.shape), "float32",
                                       default_initializer=paddle.nn.initializer.Assign(a))
            for n, a in initial_params(shapes=SHAPES).items()}


def _run(params, opt, sched):
    import paddle

    trajectory = {n: [] for n in params}
    for grads in gradient_stream(shapes=SHAPES, steps=STEPS):
        for n, p in params.items():
            p.grad = paddle.to_tensor(grads[n])
        opt.step()
        opt.clear_grad(set_to_zero=False)
        sched.step()
        for n, p in params.items():
            trajectory[n].append(p.numpy().copy())
    return {n: np.stack(v) for n, v in trajectory.items()}


def _paddle_by_hand():
    """The usual Paddle loop; returns name -> (steps, *shape) parameter trajectory."""
    import paddle

    params = _paddle_params()
    excluded = {params[n].name for n in NO_DECAY}
    sched = paddle.optimizer.lr.LinearWarmup(
        learning_rate=paddle.optimizer.lr.CosineAnnealingDecay(**COSINE), **WARM)
    opt = paddle.optimizer.Lamb(learning_rate=sched, lamb_weight_decay=DECAY,
                                parameters=list(params.values()),
                                exclude_from_weight_decay_fn=lambda p: p.name in excluded)
    return _run(params, opt, sched)


def _paddle_built():
    params = _paddle_params()
    opt = uo.build(SPEC, params.items(), groups=GROUPS)
    assert uo.explain(opt).native == "paddle.optimizer.Lamb"
    return _run(params, opt, uo.lr_scheduler(opt))


def _references():
    """(float64 oracle, [float32 floors]) trajectories of SPEC with GROUPS."""
    return reference_trajectories(SPEC, SHAPES, STEPS, GROUPS)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    others = [f for f in installed_frameworks() if f != "paddle"]
    if not others:
        pytest.skip("needs torch or mindspore besides paddle")
    return built_elsewhere(SPEC, SHAPES, STEPS, others,
                           tmp_path_factory.mktemp("acceptance_paddle"),
                           "lamb-warmup-cosine-exclude", GROUPS)


def test_the_hand_loop_is_the_spec():
    oracle, floors = _references()
    native = _paddle_by_hand()
    ratio = worst_ratio(native, oracle, floors)
    assert ratio <= FACTOR, f"paddle by hand: {ratio:.2f} x fp32 floor"
    # the exclusion matters: without it the spec is far from Paddle's loop
    decayed = uo.reference(SPEC, initial_params(shapes=SHAPES))
    for grads in gradient_stream(shapes=SHAPES, steps=STEPS):
        decayed.step(grads)
    assert not np.allclose(decayed.params["norm.weight"], native["norm.weight"][-1],
                           rtol=1e-4, atol=0)


def test_built_on_paddle_follows_the_paddle_loop():
    oracle, floors = _references()
    built = _paddle_built()
    assert worst_ratio(built, oracle, floors) <= FACTOR
    target = {n: v.astype(np.float64) for n, v in _paddle_by_hand().items()}
    assert worst_ratio(built, target, floors) <= FACTOR


def test_presets_follow_the_paddle_loop_on_the_other_backends(runs):
    oracle, floors = _references()
    target = {n: v.astype(np.float64) for n, v in _paddle_by_hand().items()}
    for fw, built in runs.items():
        ratio = worst_ratio(built, oracle, floors)
        assert ratio <= FACTOR, f"{fw}: {ratio:.2f} x fp32 floor"
        # and followed from Paddle's side: the Paddle trajectory as the target
        ratio = worst_ratio(built, target, floors)
        assert ratio <= FACTOR, f"{fw} against paddle by hand: {ratio:.2f} x fp32 floor"
