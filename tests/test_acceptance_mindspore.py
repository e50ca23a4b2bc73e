"""Issue 4 acceptance, MindSpore side: ``mindspore.nn.Momentum`` with an
``nn.cosine_decay_lr`` per-step list and parameter groups with ``order_params`` (a
different weight decay per group, one group with its own lr list, one inheriting the
optimizer's values), run by hand in MindSpore over 100 steps, is followed by its presets
(``uo.preset`` + ``uo.schedules.preset`` + ``mindspore_groups``) in the reference and on
torch and paddle, within 10x the float32 floor; ``uo.build`` on MindSpore is
bit-identical to the hand-built optimizer. torch and paddle run in worker processes
(one framework per process).
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import (
    built_elsewhere,
    gradient_stream,
    initial_params,
    installed_frameworks,
    reference_trajectories,
    worst_ratio,
)

import unified_opt as uo

STEPS = 100
FACTOR = 10.0
SHAPES = {"w": (8, 6), "bias": (6,), "ln.gamma": (6,), "ln.beta": (6,), "w3d": (3, 4, 5)}
LR = dict(min_lr=0.0, max_lr=0.1, total_step=STEPS, step_per_epoch=10, decay_epoch=10)
LR_W = dict(LR, max_lr=0.05)          # the weights' own list: half the optimizer's
MOMENTUM = dict(momentum=0.9, weight_decay=5e-3)
# MindSpore's group dicts with the parameters by name (lists filled in by group_dicts)
GROUPS = [{"params": ["w", "w3d"], "weight_decay": 1e-2, "lr": "LR_W"},
          {"params": ["bias", "ln.gamma"], "weight_decay": 0.0},
          {"params": ["ln.beta"]},      # inherits lr and weight_decay: ln.beta IS decayed
          {"order_params": list(SHAPES)}]


def group_dicts(lr_w, params=None):
    """GROUPS with the weights' lr list ``lr_w``; ``params``: name -> Parameter."""
    pick = (lambda names: [params[n] for n in names]) if params else list
    out = []
    for g in GROUPS:
        g = {k: (lr_w if v == "LR_W" else pick(v) if k in ("params", "order_params") else v)
             for k, v in g.items()}
        out.append(g)
    return out


def ported(lr_w):
    """The same optimizer as presets: the spec and the uo.Group list."""
    schedule = uo.schedules.preset("mindspore.nn.cosine_decay_lr", **LR)
    spec = uo.preset("mindspore.nn.Momentum", learning_rate=schedule, **MOMENTUM)
    return spec, uo.mindspore_groups(group_dicts(lr_w), spec)


def trajectory(step, read, steps=STEPS):
    out = {n: [] for n in SHAPES}
    for grads in gradient_stream(shapes=SHAPES, steps=steps):
        step(grads)
        for n, value in read().items():
            out[n].append(np.array(value, copy=True))
    return {n: np.stack(v) for n, v in out.items()}


# -- the test ---------------------------------------------------------------------------

@pytest.mark.skipif("mindspore" not in installed_frameworks(), reason="needs mindspore")
def test_mindspore_momentum_cosine_list_and_groups_followed_everywhere(tmp_path):
    import mindspore as ms
    from mindspore import nn

    lr, lr_w = nn.cosine_decay_lr(**LR), nn.cosine_decay_lr(**LR_W)
    spec, groups = ported(lr_w)
    others = [f for f in installed_frameworks() if f != "mindspore"]
    elsewhere = built_elsewhere(spec, SHAPES, STEPS, others, tmp_path, "momentum", groups)

    # by hand in MindSpore: the migration guide's form
    arrays = initial_params(shapes=SHAPES)
    params = {n: ms.Parameter(ms.Tensor(a.copy()), name=n) for n, a in arrays.items()}
    opt = nn.Momentum(group_dicts(lr_w, params), learning_rate=lr, **MOMENTUM)
    # uo.build on MindSpore, same spec and groups
    built_params = {n: ms.Parameter(ms.Tensor(a.copy()), name=n) for n, a in arrays.items()}
    built = uo.build(spec, list(built_params.items()), groups=groups,
                     options={"total_steps": STEPS})
    assert uo.explain(built).native == "mindspore.nn.Momentum"

    def both(grads):
        opt(tuple(ms.Tensor(grads[n]) for n in params))
        built(tuple(ms.Tensor(grads[n]) for n in built_params))
        for n in params:
            assert np.array_equal(params[n].asnumpy(), built_params[n].asnumpy()), n

    native = trajectory(both, lambda: {n: p.asnumpy() for n, p in params.items()})
    oracle, floors = reference_trajectories(spec, SHAPES, STEPS, groups)
    ratio = worst_ratio(native, oracle, floors)
    assert ratio <= FACTOR, f"nn.Momentum by hand: {ratio:.1f} x fp32 floor"
    # the groups matter: without them (the flat-list name rule, one lr) it is far off
    flat_oracle, flat_floors = reference_trajectories(spec, SHAPES, STEPS)
    assert worst_ratio(native, flat_oracle, flat_floors) > 100 * FACTOR

    failures = []
    for fw, got in elsewhere.items():
        ratio = worst_ratio(got, oracle, floors)
        if ratio > FACTOR:
            failures.append(f"{fw}: {ratio:.1f} x fp32 floor")
    assert not failures, "; ".join(failures)

