"""Issue 4 acceptance: a training configuration written in one framework, by hand, with
its own optimizer, scheduler, parameter groups and clipping, run for 100 steps, is
followed by the same configuration written as presets (``uo.preset`` +
``uo.schedules.preset`` + ``uo.Group`` / ``uo.mindspore_groups``) built by ``uo.build`` on
every backend: each run follows the float64 oracle of the presets and the run by hand
(the hand run as the target, the float32 references' distance from it as the floor).

* torch: ``AdamW`` with a no-decay parameter group, ``OneCycleLR`` (``cycle_momentum``)
  stepped per optimizer step, ``clip_grad_norm_``;
* Paddle: ``Lamb`` with ``exclude_from_weight_decay_fn``, ``LinearWarmup`` around
  ``CosineAnnealingDecay``;
* MindSpore: ``nn.Momentum`` with ``nn.cosine_decay_lr`` and group dicts with
  ``order_params`` (a weight decay per group, one group with its own lr list, one
  inheriting the optimizer's values); ``uo.build`` there is bit-identical to it.

Every run goes through the conformance worker of its framework (the run by hand: a case
with ``Case.native``); the session runs them once (conftest.py).
"""

import dataclasses

import pytest
from conftest import require
from support import DENSE_PARAMS, assert_bit_identical, installed_frameworks, judge

import unified_opt as uo
from unified_opt.conformance.cases import Case, Native
from unified_opt.conformance.compare import K, compare
from unified_opt.conformance.trajectory import floor_trajectories

STEPS = 100
PARAMS = DENSE_PARAMS            # a network being ported: no 0-size tensor
NO_DECAY = ["bias", "ln.gamma", "ln.beta"]
DECAYED = [n for n in PARAMS if n not in NO_DECAY]


def every(names):
    return {"$params": list(names)}


# -- torch: AdamW, no-decay group, OneCycleLR, clip_grad_norm_ ----------------------------
TORCH_MAX_LR, TORCH_DECAY, MAX_NORM = 0.01, 0.05, 1.0
TORCH_SPEC = uo.preset("torch.optim.AdamW", lr=1e-3, weight_decay=TORCH_DECAY).replace(
    lr=uo.schedules.preset("torch.optim.lr_scheduler.OneCycleLR", max_lr=TORCH_MAX_LR,
                           total_steps=STEPS),
    grad_clip=uo.ClipByGlobalNorm(max_norm=MAX_NORM, eps=1e-6))
TORCH_GROUPS = (uo.Group(match=("bias", "ln.*"), weight_decay=0.0),)
TORCH_BY_HAND = Native(
    "torch.optim.AdamW", {"lr": 1e-3, "weight_decay": TORCH_DECAY},
    params=[{"params": every(DECAYED)}, {"params": every(NO_DECAY), "weight_decay": 0.0}],
    scheduler="torch.optim.lr_scheduler.OneCycleLR",
    scheduler_kwargs={"max_lr": TORCH_MAX_LR, "total_steps": STEPS},
    before_step=[("torch.nn.utils.clip_grad_norm_", {"max_norm": MAX_NORM})])

# -- Paddle: Lamb, exclude_from_weight_decay_fn, LinearWarmup(CosineAnnealingDecay) -------
PEAK, WARMUP, T_MAX, LAMB_DECAY = 0.01, 10, 80, 0.05
COSINE = dict(learning_rate=PEAK, T_max=T_MAX, eta_min=1e-4)
WARM = dict(warmup_steps=WARMUP, start_lr=0.0, end_lr=PEAK)
PADDLE_SPEC = uo.preset(
    "paddle.optimizer.Lamb", lamb_weight_decay=LAMB_DECAY,
    learning_rate=uo.schedules.preset(
        "paddle.optimizer.lr.LinearWarmup", **WARM,
        learning_rate=uo.schedules.preset("paddle.optimizer.lr.CosineAnnealingDecay",
                                          **COSINE)))
PADDLE_GROUPS = (uo.Group(match=("bias", "ln.*"), exclude_from=("weight_decay",)),)
PADDLE_BY_HAND = Native(
    "paddle.optimizer.Lamb",
    {"lamb_weight_decay": LAMB_DECAY, "exclude_from_weight_decay_fn": {"$match": NO_DECAY}},
    scheduler="paddle.optimizer.lr.LinearWarmup",
    scheduler_kwargs={**WARM, "learning_rate": {
        "$call": ["paddle.optimizer.lr.CosineAnnealingDecay", COSINE]}})

# -- MindSpore: nn.Momentum, cosine_decay_lr, group dicts with order_params ---------------
LR = dict(min_lr=0.0, max_lr=0.1, total_step=STEPS, step_per_epoch=10, decay_epoch=10)
LR_W = dict(LR, max_lr=0.05)          # the weights' own list: half the optimizer's
MOMENTUM = dict(momentum=0.9, weight_decay=5e-3)
MS_SCHEDULE = uo.schedules.preset("mindspore.nn.cosine_decay_lr", **LR)
MS_SPEC = uo.preset("mindspore.nn.Momentum", learning_rate=MS_SCHEDULE, **MOMENTUM)


def ms_group_dicts(params, lr_w):
    """MindSpore's group dicts: ``params(names)`` the parameters, ``lr_w`` the weights'
    lr list."""
    return [{"params": params(["w", "w3d"]), "weight_decay": 1e-2, "lr": lr_w},
            {"params": params(["bias", "ln.gamma"]), "weight_decay": 0.0},
            {"params": params(["ln.beta", "scale"])},    # inherits: ln.beta IS decayed
            {"order_params": params(list(PARAMS))}]


MS_GROUPS = tuple(uo.mindspore_groups(ms_group_dicts(
    list, [uo.schedules.preset("mindspore.nn.cosine_decay_lr", **LR_W)(t)
           for t in range(STEPS)]), MS_SPEC))
MS_BY_HAND = Native(
    "mindspore.nn.Momentum",
    {"learning_rate": {"$call": ["mindspore.nn.cosine_decay_lr", LR]}, **MOMENTUM},
    params=ms_group_dicts(every, {"$call": ["mindspore.nn.cosine_decay_lr", LR_W]}),
    lr_param="bias")       # a parameter whose group runs the optimizer's lr

RUNS = {"torch": (TORCH_SPEC, TORCH_GROUPS, TORCH_BY_HAND),
        "paddle": (PADDLE_SPEC, PADDLE_GROUPS, PADDLE_BY_HAND),
        "mindspore": (MS_SPEC, MS_GROUPS, MS_BY_HAND)}


def _cases(framework):
    """The run by hand and the presets built everywhere (the same parameters and
    gradients: the same seed)."""
    spec, groups, native = RUNS[framework]
    by_hand = Case(id=f"acceptance_{framework}_by_hand", spec=spec, params=PARAMS,
                   steps=STEPS, groups=groups, native=native)
    built = dataclasses.replace(by_hand, id=f"acceptance_{framework}_built", native=None,
                                paths=("auto",), backends=(), seed=by_hand.seed)
    return by_hand, built


#: run by the session's conformance runner (conftest.py): one worker per framework
WORKER_CASES = [c for fw in RUNS if fw in installed_frameworks() for c in _cases(fw)]


@pytest.mark.parametrize("framework", [pytest.param(f, marks=require(f)) for f in RUNS])
def test_presets_follow_the_run_by_hand_everywhere(worker_runs, framework):
    by_hand, built = _cases(framework)
    worker_runs.assert_passes(by_hand.id, framework, "hand")
    target = worker_runs.trajectory(by_hand.id, framework, "hand")
    floors = floor_trajectories(by_hand.spec, by_hand)
    for fw in installed_frameworks():
        worker_runs.assert_passes(built.id, fw, "auto")
        ours = worker_runs.trajectory(built.id, fw, "auto")
        followed = compare(ours, target, floors)
        assert followed.passed, f"{fw} against {framework} by hand: {followed.detail}"


@require("paddle")
def test_the_paddle_exclusion_matters(worker_runs):
    """Without the groups' exclusion the spec is far from Paddle's loop."""
    by_hand, _ = _cases("paddle")
    run = worker_runs.trajectory(by_hand.id, "paddle", "hand")
    assert judge(run, dataclasses.replace(by_hand, groups=()), state=False).worst_ratio \
        > 100 * K


@require("mindspore")
def test_the_mindspore_groups_matter_and_uo_build_is_the_class_by_hand(worker_runs):
    """Without the groups (the flat-list name rule, one lr) the spec is far from the run
    by hand; uo.build of the presets (prefer="native": the default may take the own path
    where it measured faster) is nn.Momentum, bit for bit."""
    from unified_opt.conformance.drivers.mindspore import MindSporeDriver

    by_hand, built = _cases("mindspore")
    run = worker_runs.trajectory(by_hand.id, "mindspore", "hand")
    assert judge(run, dataclasses.replace(by_hand, groups=()), state=False).worst_ratio \
        > 100 * K
    ours = MindSporeDriver(MS_SPEC, built.initial_params(), groups=MS_GROUPS,
                           total_steps=STEPS, prefer="native")
    assert ours.decision.native == "mindspore.nn.Momentum"
    theirs = MindSporeDriver(MS_SPEC, by_hand.initial_params(), native=MS_BY_HAND)
    for t in range(STEPS):
        ours.step(built.gradients(t))
        theirs.step(by_hand.gradients(t))
        assert_bit_identical(ours.params_numpy(), theirs.params_numpy(), f"step {t}")
