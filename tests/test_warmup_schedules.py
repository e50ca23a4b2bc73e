"""The warm-up schedules (``uo.schedules.WarmupLinear``, ``WarmupCosine``,
``WarmupConstant``, ``WarmupCosineToMin``), their ``transformers.*`` presets and the
``uo.lr_scheduler.get_*_schedule_with_warmup`` helpers.

The expected numbers are the published formulas written out here in float64 (Hugging
Face ``transformers``' ``optimization.py`` lr lambdas, nanoGPT's ``get_lr``), in their
operation order, at every step of a run longer than the schedule; and torch's
``LambdaLR`` driven by the same lambda, which the ``transformers`` helpers return, gives
the same lrs bit for bit.
"""

import json
import math

import pytest
from conftest import require

import unified_opt as uo
from unified_opt import schedules as S

STEPS = 1200


# -- the published formulas (the lr factor transformers' LambdaLR multiplies) -----------

def hf_linear(step, warmup, total):
    if step < warmup:
        return float(step) / float(max(1, warmup))
    return max(0.0, float(total - step) / float(max(1, total - warmup)))


def hf_cosine(step, warmup, total, cycles=0.5):
    if step < warmup:
        return float(step) / float(max(1, warmup))
    progress = float(step - warmup) / float(max(1, total - warmup))
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * float(cycles) * 2.0 * progress)))


def hf_constant(step, warmup):
    if step < warmup:
        return float(step) / float(max(1.0, warmup))
    return 1.0


def nanogpt(it, lr, min_lr, warmup, decay, offset=1):
    if it < warmup:
        return lr * (it + offset) / (warmup + offset)
    if it > decay:
        return min_lr
    ratio = (it - warmup) / (decay - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


CASES = [
    ("linear", S.WarmupLinear(lr=3e-4, warmup_steps=100, total_steps=1000),
     lambda t: hf_linear(t, 100, 1000)),
    ("linear-no-warmup", S.WarmupLinear(lr=0.1, warmup_steps=0, total_steps=700),
     lambda t: hf_linear(t, 0, 700)),
    ("cosine", S.WarmupCosine(lr=6e-4, warmup_steps=50, total_steps=1000),
     lambda t: hf_cosine(t, 50, 1000)),
    ("cosine-cycles", S.WarmupCosine(lr=0.01, warmup_steps=30, total_steps=900,
                                     num_cycles=1.75), lambda t: hf_cosine(t, 30, 900, 1.75)),
    ("constant", S.WarmupConstant(lr=0.02, warmup_steps=250), lambda t: hf_constant(t, 250)),
]


@pytest.mark.parametrize("name, schedule, factor", CASES, ids=[c[0] for c in CASES])
def test_transformers_schedules_are_the_published_formulas(name, schedule, factor):
    got = [schedule(t) for t in range(STEPS)]
    assert got == [schedule.lr * factor(t) for t in range(STEPS)]
    assert got[0] == (schedule.lr if schedule.warmup_steps == 0 else 0.0)
    assert len(set(got)) > 100                 # the formula moves: the test can fail


@pytest.mark.parametrize("warmup_offset", [1, 0])
def test_nanogpt_warmup_cosine_is_the_scripts_get_lr(warmup_offset):
    s = S.WarmupCosineToMin(lr=6e-4, min_lr=6e-5, warmup_steps=200, decay_steps=900,
                            warmup_offset=warmup_offset)
    want = [nanogpt(t, 6e-4, 6e-5, 200, 900, warmup_offset) for t in range(STEPS)]
    assert [s(t) for t in range(STEPS)] == want
    assert s(0) == (6e-4 / 201 if warmup_offset else 0.0) and s(STEPS - 1) == 6e-5


@require("torch")
@pytest.mark.parametrize("name, schedule, factor", CASES, ids=[c[0] for c in CASES])
def test_torch_lambdalr_with_the_same_lambda_gives_the_same_lrs(name, schedule, factor):
    import torch
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=schedule.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
    lrs = []
    for _ in range(STEPS):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == [schedule(t) for t in range(STEPS)]


PRESETS = [
    ("transformers.get_linear_schedule_with_warmup",
     dict(base_lr=3e-4, num_warmup_steps=100, num_training_steps=1000), CASES[0][1]),
    ("transformers.get_cosine_schedule_with_warmup",
     dict(base_lr=0.01, num_warmup_steps=30, num_training_steps=900, num_cycles=1.75),
     CASES[3][1]),
    ("transformers.get_constant_schedule_with_warmup",
     dict(base_lr=0.02, num_warmup_steps=250), CASES[4][1]),
]


@pytest.mark.parametrize("qualified, kwargs, schedule", PRESETS, ids=[p[0] for p in PRESETS])
def test_presets_read_the_helpers_arguments(qualified, kwargs, schedule):
    assert qualified in uo.schedules.presets()
    got = uo.schedules.preset(qualified, **kwargs)
    assert got == schedule
    again = uo.schedules.schedule_from_dict(json.loads(json.dumps(got.to_dict())))
    assert again == got
    with pytest.raises(NotImplementedError, match="last_epoch"):
        uo.schedules.preset(qualified, **kwargs, last_epoch=5)


@require("torch")
@pytest.mark.parametrize("helper, args, factor", [
    ("get_linear_schedule_with_warmup", (100, 1000), lambda t: hf_linear(t, 100, 1000)),
    ("get_cosine_schedule_with_warmup", (50, 1000, 0.5), lambda t: hf_cosine(t, 50, 1000)),
    ("get_constant_schedule_with_warmup", (250,), lambda t: hf_constant(t, 250)),
])
def test_the_helpers_drive_an_optimizer_as_transformers_lambdalr(helper, args, factor):
    import torch
    lrs = (0.1, 3e-4)
    runs = []
    for make in (lambda o: getattr(uo.lr_scheduler, helper)(o, *args),
                 lambda o: torch.optim.lr_scheduler.LambdaLR(o, factor)):
        params = [torch.nn.Parameter(torch.zeros(1)) for _ in lrs]
        opt = torch.optim.AdamW([{"params": [p], "lr": lr} for p, lr in zip(params, lrs)])
        sched = make(opt)
        run = []
        for _ in range(STEPS):
            run.append([g["lr"] for g in opt.param_groups])
            opt.step()
            sched.step()
        runs.append(run)
    assert runs[0] == runs[1]


@pytest.mark.parametrize("make, error, match", [
    (lambda: S.WarmupLinear(lr=0.1, warmup_steps=-1, total_steps=10), ValueError,
     "warmup_steps"),
    (lambda: S.WarmupLinear(lr=0.1, warmup_steps=2.0, total_steps=10), TypeError,
     "warmup_steps"),
    (lambda: S.WarmupCosine(lr=0.1, warmup_steps=2, total_steps=10, num_cycles=-1.0),
     ValueError, "num_cycles"),
    (lambda: S.WarmupConstant(lr=-0.1, warmup_steps=2), ValueError, "lr"),
    (lambda: S.WarmupCosineToMin(lr=0.1, min_lr=0.0, warmup_steps=10, decay_steps=10),
     ValueError, "decay_steps"),
    (lambda: S.WarmupCosineToMin(lr=0.1, min_lr=0.0, warmup_steps=1, decay_steps=10,
                                 warmup_offset=2), ValueError, "warmup_offset"),
    (lambda: uo.schedules.preset("transformers.get_linear_schedule_with_warmup",
                                 base_lr=0.1, num_warmup_steps="5", num_training_steps=10),
     TypeError, "warmup_steps"),
])
def test_bad_arguments_name_the_argument(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_warmup_cosine_to_min_round_trips_through_json():
    s = S.WarmupCosineToMin(lr=1e-3, min_lr=1e-4, warmup_steps=10, decay_steps=100,
                            warmup_offset=0)
    assert uo.schedules.schedule_from_dict(json.loads(json.dumps(s.to_dict()))) == s
