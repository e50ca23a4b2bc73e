"""``uo.lr_scheduler`` against torch's own schedulers.

Each case drives two torch optimizers of one type with three parameter groups of
different lrs: one by torch's scheduler, one by the uo scheduler of the same name and
arguments, over 1000 steps (``opt.step(); sched.step()``). The lr of every group is
compared at every step by the conformance rule for the lr (``K`` times ``ULPS`` float32
ulps of the largest lr so far, :mod:`unified_opt.conformance.compare`), the tolerance
``tests/test_schedules_native.py`` applies to the closed-form presets against torch's
recursive forms; in float64 the measured differences are ~1e-13 relative at most
(CosineAnnealingLR near its trough), far inside. Each comparison also shows it has
power: the same lrs one step late fail it wherever the lr moves. Momentum and betas,
which OneCycleLR and CyclicLR cycle, are compared too.

torch is the only framework imported here; the Paddle and MindSpore runs are in
``test_lr_scheduler_frameworks.py``.
"""

import json
import math
import warnings

import numpy as np
import pytest
from conftest import require

import unified_opt as uo
from unified_opt.conformance.compare import ULPS, K

pytestmark = require("torch")

STEPS = 1000
LRS = (0.1, 0.05, 0.3)
L = uo.lr_scheduler


def _torch():
    import torch
    return torch


def _optimizer(kind="sgd"):
    torch = _torch()
    params = [torch.nn.Parameter(torch.zeros(2)) for _ in LRS]
    groups = [{"params": [p], "lr": lr} for p, lr in zip(params, LRS)]
    if kind == "adam":
        return torch.optim.Adam(groups, lr=0.1)
    if kind == "plain":
        return torch.optim.SGD(groups, lr=0.1)
    return torch.optim.SGD(groups, lr=0.1, momentum=0.9)


def _within_rule(ours, theirs):
    """Per step, whether the lrs agree by the conformance rule (floor: ULPS float32 ulps
    of the largest |lr| so far)."""
    ours, theirs = np.asarray(ours, float), np.asarray(theirs, float)
    peak = np.maximum.accumulate(np.abs(theirs), axis=0)
    floor = np.maximum(ULPS * np.spacing(peak.astype(np.float32)).astype(float),
                       float(np.finfo(np.float32).tiny))
    return np.abs(ours - theirs) <= K * floor


def _run(make_torch, make_ours, kind="sgd", steps=STEPS):
    """(lrs, momenta) per step and group, for torch's scheduler and ours."""
    out = []
    for make in (make_torch, make_ours):
        opt = _optimizer(kind)
        sched = make(opt)
        lrs, momenta = [], []
        for _ in range(steps):
            lrs.append([g["lr"] for g in opt.param_groups])
            momenta.append([g["betas"][0] if "betas" in g else g.get("momentum", 0.0)
                            for g in opt.param_groups])
            opt.step()
            sched.step()
        out.append((lrs, momenta))
    return out


def _assert_same(theirs, ours):
    (t_lr, t_mom), (o_lr, o_mom) = theirs, ours
    good = _within_rule(o_lr, t_lr)
    assert good.all(), f"first step off: {np.argwhere(~good)[0]}"
    assert _within_rule(o_mom, t_mom).all()
    t_lr = np.asarray(t_lr)
    if (t_lr[1:] != t_lr[:-1]).any():      # the rule has power: one step late fails
        assert not _within_rule(np.asarray(o_lr)[:-1], t_lr[1:]).all()


def _pair(name, **kwargs):
    """torch's scheduler ``name`` and ours, with the same arguments."""
    import torch
    native = getattr(torch.optim.lr_scheduler, name)
    return (lambda opt: native(opt, **kwargs)), (lambda opt: getattr(L, name)(opt, **kwargs))


def wobble(t):
    return 0.9995 if t % 3 else 1.001


def warm_decay(t):
    return (t + 1) / 20 if t < 20 else 0.997 ** (t - 20)


CASES = {
    "lambda": ("LambdaLR", dict(lr_lambda=warm_decay), "sgd"),
    "lambda-per-group": ("LambdaLR", dict(lr_lambda=[warm_decay, lambda t: 0.999 ** t,
                                                     lambda t: 1.0 / (1 + t)]), "sgd"),
    "multiplicative": ("MultiplicativeLR", dict(lr_lambda=wobble), "sgd"),
    "step": ("StepLR", dict(step_size=37, gamma=0.8), "sgd"),
    "multistep": ("MultiStepLR", dict(milestones=[100, 30, 30, 700], gamma=0.5), "sgd"),
    "exponential": ("ExponentialLR", dict(gamma=0.995), "sgd"),
    "cosine": ("CosineAnnealingLR", dict(T_max=170, eta_min=0.001), "sgd"),
    "cosine-to-zero": ("CosineAnnealingLR", dict(T_max=230), "sgd"),
    "warm-restarts": ("CosineAnnealingWarmRestarts", dict(T_0=50, T_mult=2, eta_min=0.001),
                      "sgd"),
    "linear": ("LinearLR", dict(start_factor=0.1, end_factor=0.9, total_iters=400), "sgd"),
    "constant": ("ConstantLR", dict(factor=0.25, total_iters=300), "sgd"),
    "polynomial": ("PolynomialLR", dict(total_iters=800, power=2.0), "sgd"),
    "onecycle": ("OneCycleLR", dict(max_lr=[0.5, 0.2, 1.0], total_steps=STEPS), "sgd"),
    "onecycle-adam-3phase": ("OneCycleLR", dict(
        max_lr=0.01, epochs=10, steps_per_epoch=100, pct_start=0.25,
        anneal_strategy="linear", three_phase=True, div_factor=10.0,
        final_div_factor=100.0), "adam"),
    "cyclic": ("CyclicLR", dict(base_lr=0.01, max_lr=[0.1, 0.2, 0.05], step_size_up=70,
                                step_size_down=30, mode="triangular2"), "sgd"),
    "cyclic-adam-exp": ("CyclicLR", dict(base_lr=0.001, max_lr=0.01, step_size_up=40,
                                         mode="exp_range", gamma=0.999), "adam"),
    "cyclic-no-momentum": ("CyclicLR", dict(base_lr=0.01, max_lr=0.1, step_size_up=60,
                                            cycle_momentum=False), "plain"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_scheduler_gives_torchs_lrs_over_1000_steps(case):
    name, kwargs, kind = CASES[case]
    theirs, ours = _run(*_pair(name, **kwargs), kind=kind)
    _assert_same(theirs, ours)


def _sequential(ns, opt):
    warm = ns.LinearLR(opt, start_factor=0.05, total_iters=100)
    decay = ns.ExponentialLR(opt, gamma=0.999)
    cosine = ns.CosineAnnealingLR(opt, T_max=300, eta_min=0.002)
    return ns.SequentialLR(opt, [warm, decay, cosine], milestones=[100, 400])


def _chained(ns, opt):
    return ns.ChainedScheduler([ns.ConstantLR(opt, factor=0.5, total_iters=200),
                                ns.ExponentialLR(opt, gamma=0.999),
                                ns.MultiplicativeLR(opt, lr_lambda=wobble)])


class _Both:
    """Several schedulers on one optimizer, each stepped, as a script does."""

    def __init__(self, *schedulers):
        self.schedulers = schedulers

    def step(self):
        for s in self.schedulers:
            s.step()


def _two(ns, opt):
    return _Both(ns.StepLR(opt, step_size=90, gamma=0.7),
                 ns.LinearLR(opt, start_factor=0.2, total_iters=250),
                 ns.PolynomialLR(opt, total_iters=900, power=0.5))


@pytest.mark.parametrize("combine", [_sequential, _chained, _two],
                         ids=["sequential", "chained", "several-on-one-optimizer"])
def test_combined_schedulers_give_torchs_lrs(combine):
    import torch
    theirs, ours = _run(lambda opt: combine(torch.optim.lr_scheduler, opt),
                        lambda opt: combine(L, opt))
    _assert_same(theirs, ours)


def test_schedules_are_the_presets_per_group():
    opt = _optimizer()
    sched = L.StepLR(opt, step_size=5, gamma=0.5)
    assert sched.schedules == [uo.schedules.preset("torch.optim.lr_scheduler.StepLR",
                                                   base_lr=lr, step_size=5, gamma=0.5)
                               for lr in LRS]
    assert sched.base_lrs == list(LRS) and sched.last_epoch == 0
    opt = _optimizer()
    seq = _sequential(L, opt)
    assert isinstance(seq.schedules[0], uo.schedules.Sequential)
    for _ in range(500):
        seq.step()
    assert [s(500) for s in seq.schedules] == seq.get_last_lr() == [
        g["lr"] for g in opt.param_groups]


def test_a_plain_object_with_param_groups_is_driven():
    class Plain:
        def __init__(self):
            self.param_groups = [{"lr": 0.2, "momentum": 0.9}, {"lr": 0.02, "momentum": 0.0}]

    opt = Plain()
    sched = L.OneCycleLR(opt, max_lr=0.4, total_steps=20)
    for _ in range(10):
        sched.step()
    want = [s(10) for s in sched.schedules]
    assert [g["lr"] for g in opt.param_groups] == want == sched.get_last_lr()
    assert opt.param_groups[0]["momentum"] == sched.schedules[0].momentum(10)
    assert opt.param_groups[0]["initial_lr"] == 0.4 / 25.0


@pytest.mark.parametrize("case", ["step", "cosine", "onecycle", "cyclic", "lambda"])
def test_state_dict_round_trip_mid_run(case):
    name, kwargs, kind = CASES[case]
    _, make = _pair(name, **kwargs)
    straight = _optimizer(kind)
    sched = make(straight)
    resumed_lrs = []
    for t in range(400):
        if t == 150:
            saved = json.loads(json.dumps(sched.state_dict()))   # plain data only
            opt_state = straight.state_dict()
            again = _optimizer(kind)
            again_sched = make(again)
            again.load_state_dict(opt_state)
            again_sched.load_state_dict(saved)
        if t >= 150:
            resumed_lrs.append([g["lr"] for g in again.param_groups])
            again.step()
            again_sched.step()
        straight.step()
        sched.step()
    # the straight run, recorded from step 150 on, is the resumed one bit for bit
    straight2 = _optimizer(kind)
    sched2 = make(straight2)
    lrs = []
    for t in range(400):
        if t >= 150:
            lrs.append([g["lr"] for g in straight2.param_groups])
        straight2.step()
        sched2.step()
    assert resumed_lrs == lrs


def test_composite_state_dict_round_trip():
    opt = _optimizer()
    seq = _sequential(L, opt)
    for _ in range(250):
        opt.step()
        seq.step()
    saved = json.loads(json.dumps(seq.state_dict()))
    assert len(saved["_schedulers"]) == 3
    opt2 = _optimizer()
    seq2 = _sequential(L, opt2)
    opt2.load_state_dict(opt.state_dict())
    seq2.load_state_dict(saved)
    for _ in range(300):
        opt.step(), opt2.step()
        seq.step(), seq2.step()
        assert seq.get_last_lr() == seq2.get_last_lr()


def test_reduce_on_plateau_gives_torchs_lrs():
    import torch
    rng = np.random.default_rng(0)
    metrics = np.concatenate([np.linspace(5, 1, 200), 1 + 0.01 * rng.random(800)])
    kwargs = dict(mode="min", factor=0.5, patience=7, threshold=1e-3, cooldown=3,
                  min_lr=[1e-4, 0.0, 0.01], eps=1e-9)
    runs = []
    for make in (torch.optim.lr_scheduler.ReduceLROnPlateau, L.ReduceLROnPlateau):
        opt = _optimizer()
        sched = make(opt, **kwargs)
        lrs = []
        for t, m in enumerate(metrics):
            if t == 600:             # a hand-written lr: both reduce from it
                opt.param_groups[1]["lr"] = 0.07
            opt.step()
            sched.step(torch.tensor(m) if t % 2 else float(m))
            lrs.append([g["lr"] for g in opt.param_groups])
        runs.append((lrs, sched.num_bad_epochs, sched.cooldown_counter, sched.best))
    assert runs[0] == runs[1]
    assert len({tuple(x) for x in runs[0][0]}) > 5      # it did reduce, several times


# -- refusals ---------------------------------------------------------------------------

def test_an_optimizer_without_param_groups_is_refused():
    with pytest.raises(TypeError, match="param_groups"):
        L.StepLR(object(), step_size=3)
    with pytest.raises(TypeError, match="param_groups"):
        L.ReduceLROnPlateau(object())


@pytest.mark.parametrize("make, error, match", [
    (lambda o: L.LinearLR(o, start_factor=0.0), ValueError, "start_factor"),
    (lambda o: L.LinearLR(o, end_factor=1.5), ValueError, "end_factor"),
    (lambda o: L.ConstantLR(o, factor=2.0), ValueError, "factor"),
    (lambda o: L.StepLR(o, step_size=0), ValueError, "step_size"),
    (lambda o: L.StepLR(o, step_size=2.5), TypeError, "step_size"),
    (lambda o: L.CosineAnnealingWarmRestarts(o, T_0=0), ValueError, "T_0"),
    (lambda o: L.CosineAnnealingWarmRestarts(o, T_0=5, T_mult=0), ValueError, "T_mult"),
    (lambda o: L.LambdaLR(o, [lambda t: 1.0]), ValueError, "lr_lambdas"),
    (lambda o: L.MultiplicativeLR(o, 0.5), TypeError, "lr_lambda"),
    (lambda o: L.OneCycleLR(o, max_lr=0.1), ValueError, "total_steps"),
    (lambda o: L.OneCycleLR(o, max_lr=0.1, total_steps=10, pct_start=1.5), ValueError,
     "pct_start"),
    (lambda o: L.OneCycleLR(o, max_lr=0.1, total_steps=10, anneal_strategy="exp"),
     ValueError, "anneal"),
    (lambda o: L.OneCycleLR(o, max_lr=[0.1, 0.2], total_steps=10), ValueError, "max_lr"),
    (lambda o: L.CyclicLR(o, 0.01, 0.1, mode="bogus"), ValueError, "mode"),
    (lambda o: L.ReduceLROnPlateau(o, factor=1.0), ValueError, "factor"),
    (lambda o: L.ReduceLROnPlateau(o, mode="middle"), ValueError, "mode"),
    (lambda o: L.ReduceLROnPlateau(o, min_lr=[0.0]), ValueError, "min_lr"),
    (lambda o: L.StepLR(o, step_size=3, last_epoch=4), KeyError, "initial_lr"),
    (lambda o: L.SequentialLR(o, [L.StepLR(o, 3)], milestones=[2]), ValueError,
     "milestone"),
])
def test_bad_arguments_are_refused_before_any_change(make, error, match):
    opt = _optimizer()
    before = [dict(g) for g in opt.param_groups]
    with pytest.raises(error, match=match):
        make(opt)
    if "SequentialLR" not in repr(make.__code__.co_names):
        assert [dict(g) for g in opt.param_groups] == before


def test_cycling_momentum_needs_momentum_or_betas():
    class Plain:
        param_groups = [{"lr": 0.1}]

    with pytest.raises(ValueError, match="neither 'momentum' nor 'betas'"):
        L.CyclicLR(Plain(), 0.01, 0.1)
    L.CyclicLR(Plain(), 0.01, 0.1, cycle_momentum=False)   # fine without momentum


def test_a_hand_written_lr_between_steps_is_refused():
    opt = _optimizer()
    sched = L.ExponentialLR(opt, gamma=0.9)
    opt.step()
    sched.step()
    opt.param_groups[2]["lr"] = 0.5
    with pytest.raises(ValueError, match=r"param_groups\[2\]\['lr'\] is 0.5"):
        sched.step()


def test_schedulers_that_do_not_compose_are_refused_at_the_step():
    opt = _optimizer()
    cosine = L.CosineAnnealingLR(opt, T_max=10)
    step = L.StepLR(opt, step_size=3)
    for sched in (cosine, step):
        with pytest.raises(ValueError, match="several schedulers.*SequentialLR"):
            sched.step()


def test_members_are_stepped_by_their_sequence_only():
    opt = _optimizer()
    warm = L.LinearLR(opt, start_factor=0.5, total_iters=3)
    seq = L.SequentialLR(opt, [warm, L.ExponentialLR(opt, gamma=0.9)], milestones=[3])
    with pytest.raises(RuntimeError, match="SequentialLR"):
        warm.step()
    seq.step()


def test_a_sequence_refuses_what_its_preset_refuses():
    opt = _optimizer()
    one = L.OneCycleLR(opt, max_lr=0.1, total_steps=50)
    with pytest.raises(NotImplementedError, match="OneCycleLR"):
        L.SequentialLR(opt, [L.StepLR(opt, 3), one], milestones=[5])


def test_a_chain_refuses_a_member_that_sets_the_lr():
    opt = _optimizer()
    members = [L.ExponentialLR(opt, gamma=0.9), L.CosineAnnealingLR(opt, T_max=10)]
    with pytest.raises(NotImplementedError, match="CosineAnnealingLR"):
        L.ChainedScheduler(members)


def test_one_cycle_past_its_total_steps_raises_as_torch():
    opt = _optimizer()
    sched = L.OneCycleLR(opt, max_lr=0.1, total_steps=5)
    for _ in range(5):
        sched.step()
    with pytest.raises(ValueError, match="total_steps"):
        sched.step()


def test_warm_restarts_refuse_fractional_epochs():
    sched = L.CosineAnnealingWarmRestarts(_optimizer(), T_0=10)
    with pytest.raises(TypeError, match="epoch"):
        sched.step(1.5)
    sched.step(12)       # an int jumps there, as torch's closed form
    assert sched.get_last_lr()[0] == pytest.approx(
        0.1 * (1 + math.cos(math.pi * 2 / 10)) / 2, rel=1e-15)


def test_initial_lr_that_is_not_the_lr_is_refused():
    opt = _optimizer()
    opt.param_groups[0]["initial_lr"] = 0.7
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="initial_lr=0.7"):
            L.StepLR(opt, step_size=3)


def test_a_spec_with_a_scheduled_lr_refuses_a_second_scheduler():
    import torch
    model = torch.nn.Linear(3, 2)
    opt = uo.build(uo.SGD(lr=uo.schedules.Cosine(lr=0.1, T_max=10)), model)
    for make in (lambda o: L.StepLR(o, 3), lambda o: L.ReduceLROnPlateau(o)):
        with pytest.raises(ValueError, match="scheduled lr"):
            make(opt)


@pytest.mark.parametrize("path", ["native", "own"])
def test_a_uo_built_torch_optimizer_follows_the_schedulers_lr(path):
    """The parameters of a uo-built SGD driven by uo's OneCycleLR (lr and momentum) are
    torch's SGD driven by torch's, to float32 rounding; without the scheduler they are
    far off."""
    import torch
    torch.manual_seed(0)
    grads = [[torch.randn(4, 3), torch.randn(4)] for _ in range(30)]
    runs = []
    for kind in ("torch", "uo", "constant"):
        model = torch.nn.Linear(3, 4)
        with torch.no_grad():
            model.weight.copy_(torch.linspace(-1, 1, 12).reshape(4, 3))
            model.bias.zero_()
        if kind == "torch":
            opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
            sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.5, total_steps=30)
        else:
            opt = uo.build(uo.SGD(lr=0.1, momentum=0.9), model, path=path)
            sched = (L.OneCycleLR(opt, max_lr=0.5, total_steps=30) if kind == "uo"
                     else L.ConstantLR(opt, factor=1.0))
        for g in grads:
            model.weight.grad, model.bias.grad = g[0].clone(), g[1].clone()
            opt.step()
            sched.step()
        runs.append(torch.cat([model.weight.detach().ravel(), model.bias.detach()]))
    torch.testing.assert_close(runs[1], runs[0], rtol=1e-5, atol=1e-6)
    assert not torch.allclose(runs[2], runs[0], rtol=1e-3, atol=1e-4)
