"""``uo.from_native``: a live native optimizer (and scheduler) read back as the spec its
preset gives, its parameter groups as ``uo.Group`` rules that rebuild it, its schedule
as the schedule preset's with its position, and clear refusals.

The round trip runs over every descriptor with a preset (a descriptor added later is
covered), building the native class by hand with its example arguments and with
non-default values."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from conftest import require
from support import Replay, judge

import unified_opt as uo
from unified_opt.backend import load
from unified_opt.conformance.trajectory import Recorder
from unified_opt.native import import_native
from unified_opt.porting.live import read_native, schedule_position

#: non-default native values tried where a class takes the argument with a default of
#: the same kind (a Paddle weight_decay defaults to None and takes a float)
VARIANTS = {"weight_decay": 0.05, "eps": 1e-7, "epsilon": 1e-7, "beta1": 0.8,
            "betas": (0.8, 0.99), "rho": 0.8, "alpha": 0.9, "momentum_decay": 0.005,
            "amsgrad": True, "centered": True, "initial_accumulator_value": 0.1,
            "etas": (0.4, 1.3), "lars_coeff": 0.002, "momentum": 0.8}


def _same_kind(default, value) -> bool:
    """Whether ``value`` can stand for an argument defaulting to ``default`` (numbers
    count as one kind: torch writes weight_decay=0)."""
    def number(x):
        return isinstance(x, (int, float)) and not isinstance(x, bool)
    return (number(default) and number(value)) or type(default) is type(value)


def _descriptors(backend):
    out = []
    for cls in load(backend).classes:
        if cls.from_native is None:
            continue
        out.append(pytest.param(cls, id=cls.name))
    return out


def _variant(cls):
    """The example arguments with two non-default values the class takes."""
    signature = inspect.signature(cls.from_native).parameters
    kwargs = dict(cls.example_arguments())
    changed = 0
    for key, value in VARIANTS.items():
        if key not in signature or key in kwargs or changed == 2:
            continue
        default = signature[key].default
        if key == "weight_decay" and default is None or _same_kind(default, value):
            kwargs[key] = value
            changed += 1
    return kwargs


def _native_class(cls):
    try:
        return import_native(cls.name)
    except (ImportError, AttributeError) as exc:
        pytest.skip(f"{cls.name} does not import here ({exc}): nothing live to read")


def _check_round_trip(cls, build):
    klass = _native_class(cls)
    for kwargs in (dict(cls.example_arguments()), _variant(cls)):
        expected = uo.preset(cls.name, **kwargs)
        reading = read_native(build(klass, kwargs))
        assert reading.spec == expected, (cls.name, kwargs)
        assert reading.native_class == cls.name
        assert reading.groups == [] and reading.position is None


@require("torch")
@pytest.mark.parametrize("cls", _descriptors("torch"))
def test_torch_round_trip(cls):
    import torch

    def build(klass, kwargs):
        return klass([torch.nn.Parameter(torch.zeros(2, 3))], **kwargs)

    _check_round_trip(cls, build)


@require("paddle")
@pytest.mark.parametrize("cls", _descriptors("paddle"))
def test_paddle_round_trip(cls):
    import paddle

    def build(klass, kwargs):
        return klass(**kwargs, **{cls.parameters_keyword: paddle.nn.Linear(3, 2).parameters()})

    if cls.name == "paddle.distributed.fleet.meta_optimizers.DGCMomentumOptimizer":
        # fleet's static-graph-only class: nothing live to read in dygraph
        with pytest.raises(Exception, match="In dygraph, don't support DGCMomentumOptimizer"):
            build(_native_class(cls), dict(cls.example_arguments()))
        return
    _check_round_trip(cls, build)


@require("mindspore")
@pytest.mark.parametrize("cls", _descriptors("mindspore"))
def test_mindspore_round_trip(cls):
    from mindspore import nn

    def build(klass, kwargs):
        params = nn.Dense(3, 2).trainable_params()
        if cls.wraps_optimizer:   # nn.LARS wraps the optimizer its example's spec reads
            assert kwargs["optimizer"] == uo.preset("mindspore.nn.Momentum",
                                                    learning_rate=0.01, momentum=0.9)
            rest = {k: v for k, v in kwargs.items() if k != "optimizer"}
            return klass(nn.Momentum(params, 0.01, 0.9), **rest)
        return klass(params, **kwargs)

    _check_round_trip(cls, build)


# -- the real module path ------------------------------------------------------------------

@require("torch")
def test_a_class_is_found_by_its_real_module_path():
    import torch

    assert torch.optim.AdamW.__module__ == "torch.optim.adamw"
    assert uo.preset("torch.optim.adamw.AdamW", lr=0.1, weight_decay=0.2) == \
        uo.preset("torch.optim.AdamW", lr=0.1, weight_decay=0.2)
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    assert uo.from_native(opt)[0] == uo.preset("torch.optim.AdamW", lr=0.1)
    with pytest.raises(TypeError, match="uo.from_native"):
        uo.preset(opt)
    assert uo.preset("torch.optim.asgd.ASGD", lr=0.05, t0=5.0) == \
        uo.ASGD(lr=0.05, t0=5.0)
    with pytest.raises(NotImplementedError, match="torch.optim.LBFGS.*line search"):
        uo.preset("torch.optim.lbfgs.LBFGS")
    with pytest.raises(ValueError, match="no preset for 'torch.optim.lr_scheduler.StepLR'"):
        uo.preset("torch.optim.lr_scheduler.StepLR")


# -- parameter groups: the rules rebuild the optimizer -------------------------------------------

GRADS = [np.random.default_rng(seed).standard_normal((2, 3)).astype(np.float32)
         for seed in range(6)]
#: a Linear(3, 2)'s gradients (the bias takes the first column)
STEPS = tuple({"weight": g, "bias": g[:, 0].copy()} for g in GRADS)


@require("torch")
def test_torch_groups_rebuild_the_optimizer():
    import torch

    def net():
        torch.manual_seed(0)
        return torch.nn.Linear(3, 2)

    native_net, built_net, plain_net = net(), net(), net()
    native = torch.optim.AdamW([{"params": [native_net.weight]},
                                {"params": [native_net.bias], "weight_decay": 0.0,
                                 "lr": 0.02}], lr=0.1, weight_decay=0.5, betas=(0.8, 0.99))
    with pytest.raises(ValueError, match="names="):
        uo.from_native(native)
    spec, groups = uo.from_native(native, names=native_net)
    assert spec == uo.preset("torch.optim.AdamW", lr=0.1, weight_decay=0.5, betas=(0.8, 0.99))
    assert groups == [uo.Group(match=("bias",), lr=0.02, weight_decay=0.0)]
    # foreach=False: the for-loop torch's AdamW runs on CPU tensors by default (uo.build
    # picks the fused kernel otherwise), so that the two can be compared bit for bit
    built = uo.build(spec, built_net, groups=groups, options={"foreach": False})
    plain = uo.build(spec, plain_net)
    replay = Replay(spec, {n: p.detach().numpy().copy() for n, p in net().named_parameters()},
                    STEPS, tuple(groups))
    recorders = {net: Recorder() for net in (native_net, built_net, plain_net)}
    for grads in STEPS:
        for n, opt in ((native_net, native), (built_net, built), (plain_net, plain)):
            n.weight.grad = torch.tensor(grads["weight"])
            n.bias.grad = torch.tensor(grads["bias"])
            opt.step()
            recorders[n].add(0.0, {k: p.detach().numpy() for k, p in n.named_parameters()},
                             {})
    # the native optimizer follows the oracle of the spec and its rules (the conformance
    # rule, lr read from the parameters)
    comparison = judge(recorders[native_net].trajectory(), replay, state=False, lr=False)
    assert comparison.passed, comparison.detail
    # the rebuilt optimizer is the same class with the same groups: the same loop on the
    # same numbers
    for name in ("weight", "bias"):
        np.testing.assert_array_equal(getattr(built_net, name).detach().numpy(),
                                      getattr(native_net, name).detach().numpy())
    # the rules matter: without them the bias decays and runs the spec's lr
    assert not judge(recorders[plain_net].trajectory(), replay, state=False, lr=False).passed


@require("torch")
def test_torch_per_group_value_without_a_rule_is_refused():
    import torch

    net = torch.nn.Linear(3, 2)
    opt = torch.optim.Adam([{"params": [net.weight]}, {"params": [net.bias],
                                                       "betas": (0.5, 0.9)}])
    with pytest.raises(ValueError, match=r"param_groups\[1\] sets betas=\(0.5, 0.9\)"):
        uo.from_native(opt, names=net)


@require("paddle")
def test_paddle_groups_rebuild_the_optimizer():
    import paddle

    def net():
        paddle.seed(0)
        return paddle.nn.Linear(3, 2)

    native_net, built_net = net(), net()
    native = paddle.optimizer.Adam(
        parameters=[{"params": [native_net.weight]},
                    {"params": [native_net.bias], "weight_decay": 0.0,
                     "learning_rate": 0.5}],
        learning_rate=0.1, weight_decay=0.05, beta1=0.8)
    spec, groups = uo.from_native(native)
    assert spec == uo.preset("paddle.optimizer.Adam", learning_rate=0.1, weight_decay=0.05,
                             beta1=0.8)
    # Paddle's own parameter names, or names= in their place
    assert groups == [uo.Group(match=(native_net.bias.name,), lr_scale=0.5,
                               weight_decay=0.0)]
    spec, groups = uo.from_native(native, names=native_net)
    assert groups == [uo.Group(match=("bias",), lr_scale=0.5, weight_decay=0.0)]
    built = uo.build(spec, built_net, groups=groups)
    for grad in GRADS:
        for n, opt in ((native_net, native), (built_net, built)):
            n.weight.grad = paddle.to_tensor(grad.T.copy())
            n.bias.grad = paddle.to_tensor(grad[:, 0].copy())
            opt.step()
            opt.clear_grad(set_to_zero=False)
    # the same class with the same groups: the same kernel on the same numbers
    for name in ("weight", "bias"):
        np.testing.assert_array_equal(getattr(built_net, name).numpy(),
                                      getattr(native_net, name).numpy())


@require("paddle")
def test_paddle_decay_function_becomes_rules():
    import paddle

    net = paddle.nn.Linear(3, 2)
    opt = paddle.optimizer.AdamW(parameters=net.parameters(), weight_decay=0.1,
                                 apply_decay_param_fun=lambda name: name.endswith("w_0"))
    spec, groups = uo.from_native(opt)
    assert spec == uo.preset("paddle.optimizer.AdamW", weight_decay=0.1)
    assert groups == [uo.Group(match=(net.bias.name,), weight_decay=0.0)]


@require("mindspore")
def test_mindspore_group_params_rebuild_the_optimizer():
    import mindspore as ms
    from mindspore import nn

    def net():
        ms.set_seed(0)
        return nn.SequentialCell([nn.Dense(3, 2), nn.LayerNorm((2,))])

    native_net, built_net = net(), net()
    params = native_net.trainable_params()
    native = nn.Adam([{"params": params[:2], "lr": 0.05},
                      {"params": params[2:], "weight_decay": 0.0}],
                     learning_rate=0.01, weight_decay=0.1)
    reading = read_native(native)
    assert reading.spec == uo.preset("mindspore.nn.Adam", learning_rate=0.01,
                                     weight_decay=0.1).replace(no_decay_names=())
    assert reading.notes and "no_decay_names=()" in reading.notes[0]
    assert reading.groups == [
        uo.Group(match=("0.weight", "0.bias"), lr=0.05, weight_decay=0.1),
        uo.Group(match=("1.gamma", "1.beta"), weight_decay=0.0)]
    built = uo.build(reading.spec, built_net, groups=reading.groups, prefer="native")
    shapes = [p.shape for p in params]
    for seed in range(6):
        rng = np.random.default_rng(seed)
        grads = tuple(ms.Tensor(rng.standard_normal(s).astype(np.float32)) for s in shapes)
        native(grads)
        built(grads)
    # the same class with the same groups: the same kernel on the same numbers (one
    # thread: conftest.py)
    for a, b in zip(native_net.trainable_params(), built_net.trainable_params()):
        np.testing.assert_array_equal(b.asnumpy(), a.asnumpy())


_PROXIMAL_LIVE = [
    ("FTRL", {"initial_accum": 0.5, "learning_rate": 0.1, "lr_power": -0.3, "l1": 0.2,
              "l2": 0.1, "loss_scale": 2.0},
     uo.FTRL(lr=0.1, lr_power=-0.3, l1=0.2, l2=0.1, initial_accumulator_value=0.5,
             l1_sign="positive", loss_scale=2.0),
     [uo.Group(match=("0.weight", "0.bias"), weight_decay=0.1),
      uo.Group(match=("1.gamma", "1.beta"), weight_decay=0.0)]),
    ("ProximalAdagrad", {"accum": 0.2, "learning_rate": 0.1, "l1": 0.05, "l2": 0.3},
     uo.ProximalAdagrad(lr=0.1, l1=0.05, l2=0.3, initial_accumulator_value=0.2),
     [uo.Group(match=("0.weight", "0.bias"), lr=0.3, weight_decay=0.1),
      uo.Group(match=("1.gamma", "1.beta"), weight_decay=0.0)]),
]


@require("mindspore")
@pytest.mark.parametrize("name,kwargs,spec,groups", _PROXIMAL_LIVE,
                         ids=[n for n, *_ in _PROXIMAL_LIVE])
def test_mindspore_proximal_classes_are_read_in_their_kernels_forms(name, kwargs, spec,
                                                                    groups):
    """nn.FTRL (l1_sign='positive') and nn.ProximalAdagrad (shrinkage_lr='adaptive') in
    groups, read and rebuilt on the own path: the same numbers as the live class, whose
    kernels depart from their documented forms (which would differ by far more)."""
    import mindspore as ms
    from mindspore import nn

    def net():
        ms.set_seed(0)
        return nn.SequentialCell([nn.Dense(3, 2), nn.LayerNorm((2,))])

    native_net, built_net = net(), net()
    params = native_net.trainable_params()
    first = {"params": params[:2], "weight_decay": 0.1}
    if name == "ProximalAdagrad":     # nn.FTRL refuses a group lr
        first["lr"] = 0.3
    native = getattr(nn, name)([first, {"params": params[2:], "weight_decay": 0.0}],
                               **kwargs)
    reading = read_native(native)
    assert reading.spec == spec and reading.groups == groups
    built = uo.build(reading.spec, built_net, groups=reading.groups, path="own")
    documented = uo.build(reading.spec.replace(
        **({"l1_sign": "linear"} if name == "FTRL" else {"shrinkage_lr": "constant"})),
        net(), groups=reading.groups, path="own")
    shapes = [p.shape for p in params]
    for seed in range(8):
        rng = np.random.default_rng(seed)
        grads = tuple(ms.Tensor(rng.standard_normal(s).astype(np.float32) * 2.0)
                      for s in shapes)
        for optimizer in (native, built, documented):
            optimizer(grads)
    gaps = {"built": 0.0, "documented": 0.0}
    for a, b, c in zip(params, built_net.trainable_params(),
                       documented.parameters):
        gaps["built"] = max(gaps["built"], float(np.abs(b.asnumpy() - a.asnumpy()).max()))
        gaps["documented"] = max(gaps["documented"],
                                 float(np.abs(c.asnumpy() - a.asnumpy()).max()))
    assert gaps["built"] < 1e-5 < 1e-2 < gaps["documented"], gaps


# -- schedulers ---------------------------------------------------------------------------------

# The lrs compared below with rel=1e-12 are Python floats on both sides (a scheduler's
# recursive or chained form against the spec's closed form): one rounding per step in
# double, an ulp more where libm's cos differs between platforms, and no vector code, so
# they agree to ~1e-15 relative on every CPU; 1e-12 leaves room for 60 steps of it.

TORCH = "torch.optim.lr_scheduler"
TORCH_SCHEDULERS = [
    ("StepLR", {"step_size": 3, "gamma": 0.5}),
    ("MultiStepLR", {"milestones": [2, 5, 5], "gamma": 0.5}),
    ("ConstantLR", {"factor": 0.5, "total_iters": 4}),
    ("LinearLR", {"start_factor": 0.25, "end_factor": 0.75, "total_iters": 6}),
    ("ExponentialLR", {"gamma": 0.9}),
    ("PolynomialLR", {"total_iters": 8, "power": 2.0}),
    ("CosineAnnealingLR", {"T_max": 10, "eta_min": 0.001}),
    ("CosineAnnealingWarmRestarts", {"T_0": 3, "T_mult": 2, "eta_min": 0.001}),
    ("CyclicLR", {"base_lr": 0.01, "max_lr": 0.1, "step_size_up": 4, "step_size_down": 2,
                  "mode": "triangular2"}),
    ("OneCycleLR", {"max_lr": 0.2, "total_steps": 60, "pct_start": 0.25,
                    "three_phase": True, "anneal_strategy": "linear"}),
]
_COMPOSED = [
    ("SequentialLR", [("LinearLR", {"start_factor": 0.1, "total_iters": 3}),
                      ("ExponentialLR", {"gamma": 0.9})], {"milestones": [3]}),
    ("ChainedScheduler", [("StepLR", {"step_size": 2}), ("ExponentialLR", {"gamma": 0.9})],
     {}),
]


def _torch_sgd(lr=0.1):
    import torch

    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(3))], lr=lr, momentum=0.9)


@require("torch")
@pytest.mark.parametrize("name,kwargs", TORCH_SCHEDULERS, ids=[n for n, _ in TORCH_SCHEDULERS])
def test_torch_scheduler_reads_as_its_schedule_preset(name, kwargs):
    import torch

    opt = _torch_sgd()
    scheduler = getattr(torch.optim.lr_scheduler, name)(opt, **kwargs)
    base = {} if name in ("CyclicLR", "OneCycleLR") else {"base_lr": 0.1}
    expected = uo.schedules.preset(f"{TORCH}.{name}", **base, **kwargs)
    reading = read_native(opt, scheduler)
    assert reading.spec == uo.preset("torch.optim.SGD", lr=reading.arguments["lr"],
                                     momentum=0.9).replace(lr=expected)
    assert reading.scheduler == f"{TORCH}.{name}" and reading.position == 0


@require("torch")
@pytest.mark.parametrize("name,subs,extra", _COMPOSED, ids=[n for n, _, _ in _COMPOSED])
def test_torch_composed_scheduler_reads_as_its_schedule_preset(name, subs, extra):
    import torch

    sched = torch.optim.lr_scheduler
    opt = _torch_sgd()
    natives = [getattr(sched, n)(opt, **kw) for n, kw in subs]
    scheduler = sched.SequentialLR(opt, natives, **extra) if name == "SequentialLR" \
        else sched.ChainedScheduler(natives)
    expected = uo.schedules.preset(f"{TORCH}.{name}", base_lr=0.1, schedulers=subs, **extra)
    assert uo.from_native(opt, scheduler)[0].lr == expected


@require("torch")
def test_torch_stepped_scheduler_reports_its_position():
    import torch

    opt = _torch_sgd()
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    fresh = uo.from_native(opt, scheduler)
    for _ in range(7):
        opt.step()
        scheduler.step()
    reading = read_native(opt, scheduler)
    assert reading.position == 7 == schedule_position(opt, scheduler)
    assert reading.spec == fresh[0]            # the schedule from step 0, not the current lr
    assert reading.spec.lr(7) == pytest.approx(opt.param_groups[0]["lr"], rel=1e-12)
    assert schedule_position(opt) is None


@require("torch")
@pytest.mark.parametrize("algorithm", ["Adam", "SGD"])
def test_torch_one_cycle_momentum_is_read(algorithm):
    import torch

    param = torch.nn.Parameter(torch.zeros(3))
    if algorithm == "Adam":
        opt = torch.optim.Adam([param], lr=0.1, betas=(0.9, 0.99))
    else:
        opt = torch.optim.SGD([param], lr=0.1, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.3, total_steps=60,
                                                    base_momentum=0.8, max_momentum=0.95)
    spec, _ = uo.from_native(opt, scheduler)
    assert spec.lr == uo.schedules.preset(f"{TORCH}.OneCycleLR", max_lr=0.3, total_steps=60,
                                          base_momentum=0.8, max_momentum=0.95)
    assert spec.lr.cycle_momentum
    for t in range(60):
        group = opt.param_groups[0]
        step = spec.at_step(t)
        native = group["betas"][0] if algorithm == "Adam" else group["momentum"]
        ours = step.betas[0] if algorithm == "Adam" else step.momentum
        assert ours == pytest.approx(native, rel=1e-12, abs=1e-15), t
        assert spec.lr(t) == pytest.approx(group["lr"], rel=1e-12), t
        if algorithm == "Adam":
            assert step.betas[1] == group["betas"][1] == 0.99
        param.grad = torch.ones(3)
        opt.step()
        scheduler.step()


@require("torch")
def test_torch_groups_under_a_scheduler_become_lr_factors():
    import torch

    net = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD([{"params": [net.weight]}, {"params": [net.bias], "lr": 0.05}],
                          lr=0.1)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
    spec, groups = uo.from_native(opt, scheduler, names=net)
    assert spec.lr == uo.schedules.preset(f"{TORCH}.ExponentialLR", base_lr=0.1, gamma=0.9)
    assert groups == [uo.Group(match=("bias",), lr_scale=0.5)]
    # an absolute eta_min makes the second group no multiple of the first
    opt = torch.optim.SGD([{"params": [net.weight]}, {"params": [net.bias], "lr": 0.05}],
                          lr=0.1)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10, eta_min=0.01)
    with pytest.raises(ValueError, match=r"param_groups\[1\].*lr_scale"):
        uo.from_native(opt, scheduler, names=net)


PADDLE = "paddle.optimizer.lr"
PADDLE_SCHEDULERS = [
    ("StepDecay", {"learning_rate": 0.1, "step_size": 3, "gamma": 0.5}),
    ("MultiStepDecay", {"learning_rate": 0.1, "milestones": [2, 5], "gamma": 0.5}),
    ("ExponentialDecay", {"learning_rate": 0.1, "gamma": 0.9}),
    ("NaturalExpDecay", {"learning_rate": 0.1, "gamma": 0.2}),
    ("InverseTimeDecay", {"learning_rate": 0.1, "gamma": 0.2}),
    ("PolynomialDecay", {"learning_rate": 0.1, "decay_steps": 8, "end_lr": 0.001,
                         "power": 2.0, "cycle": True}),
    ("PiecewiseDecay", {"boundaries": [3, 6], "values": [0.1, 0.05, 0.01]}),
    ("NoamDecay", {"d_model": 16, "warmup_steps": 4, "learning_rate": 2.0}),
    ("CosineAnnealingDecay", {"learning_rate": 0.1, "T_max": 10, "eta_min": 0.001}),
    ("LinearWarmup", {"learning_rate": 0.1, "warmup_steps": 3, "start_lr": 0.0,
                      "end_lr": 0.1}),
    ("OneCycleLR", {"max_learning_rate": 0.2, "total_steps": 40, "phase_pct": 0.3,
                    "three_phase": True}),
    ("CyclicLR", {"base_learning_rate": 0.01, "max_learning_rate": 0.1, "step_size_up": 4,
                  "mode": "exp_range", "exp_gamma": 0.9}),
    ("LinearLR", {"learning_rate": 0.1, "total_steps": 6, "start_factor": 0.2}),
    ("CosineAnnealingWarmRestarts", {"learning_rate": 0.1, "T_0": 3, "T_mult": 2}),
]


@require("paddle")
@pytest.mark.parametrize("name,kwargs", PADDLE_SCHEDULERS,
                         ids=[n for n, _ in PADDLE_SCHEDULERS])
def test_paddle_scheduler_reads_as_its_schedule_preset(name, kwargs):
    import paddle

    scheduler = getattr(paddle.optimizer.lr, name)(**kwargs)
    opt = paddle.optimizer.Momentum(scheduler, parameters=paddle.nn.Linear(3, 2).parameters())
    expected = uo.schedules.preset(f"{PADDLE}.{name}", **kwargs)
    reading = read_native(opt)
    assert reading.spec == uo.preset("paddle.optimizer.Momentum", learning_rate=expected)
    assert reading.scheduler == f"{PADDLE}.{name}" and reading.position == 0


@require("paddle")
def test_paddle_wrapped_and_stepped_scheduler():
    import paddle

    inner = paddle.optimizer.lr.CosineAnnealingDecay(0.1, T_max=10)
    scheduler = paddle.optimizer.lr.LinearWarmup(inner, warmup_steps=3, start_lr=0.0,
                                                 end_lr=0.1)
    opt = paddle.optimizer.SGD(scheduler, parameters=paddle.nn.Linear(3, 2).parameters())
    for _ in range(5):
        scheduler.step()
    reading = read_native(opt)
    cosine = uo.schedules.preset(f"{PADDLE}.CosineAnnealingDecay", learning_rate=0.1,
                                 T_max=10)
    assert reading.spec.lr == uo.schedules.preset(f"{PADDLE}.LinearWarmup",
                                                  learning_rate=cosine, warmup_steps=3,
                                                  start_lr=0.0, end_lr=0.1)
    assert reading.position == 5 == schedule_position(opt)
    assert reading.spec.lr(5) == pytest.approx(scheduler(), rel=1e-12)


MINDSPORE_CELLS = [
    ("CosineDecayLR", {"min_lr": 0.001, "max_lr": 0.1, "decay_steps": 10}),
    ("ExponentialDecayLR", {"learning_rate": 0.1, "decay_rate": 0.9, "decay_steps": 4,
                            "is_stair": True}),
    ("NaturalExpDecayLR", {"learning_rate": 0.1, "decay_rate": 0.2, "decay_steps": 4}),
    ("InverseDecayLR", {"learning_rate": 0.1, "decay_rate": 0.2, "decay_steps": 4}),
    ("PolynomialDecayLR", {"learning_rate": 0.1, "end_learning_rate": 0.01,
                           "decay_steps": 10, "power": 0.5}),
    ("WarmUpLR", {"learning_rate": 0.1, "warmup_steps": 5}),
]


@require("mindspore")
@pytest.mark.parametrize("name,kwargs", MINDSPORE_CELLS, ids=[n for n, _ in MINDSPORE_CELLS])
def test_mindspore_learning_rate_cell_reads_as_its_schedule_preset(name, kwargs):
    from mindspore import nn

    cell = getattr(nn, name)(**kwargs)
    opt = nn.Momentum(nn.Dense(3, 2).trainable_params(), cell, 0.9)
    expected = uo.schedules.preset(f"mindspore.nn.{name}", **kwargs)
    reading = read_native(opt)
    assert reading.spec == uo.preset("mindspore.nn.Momentum", learning_rate=expected,
                                     momentum=0.9)
    assert reading.position == 0


@require("mindspore")
@pytest.mark.parametrize("given", ["list", "cell"])
def test_mindspore_adam_weight_decay_reads_a_dynamic_lr(given):
    """nn.AdamWeightDecay keeps no init_learning_rate (it has no init_args): its list is
    the _IteratorLearningRate Cell MindSpore made of it."""
    import mindspore as ms
    from mindspore import nn

    params = nn.Dense(3, 2).trainable_params()
    lrs = [0.01, 0.02, 0.005, 0.001]
    lr = lrs if given == "list" else nn.WarmUpLR(learning_rate=0.01, warmup_steps=3)
    opt = nn.AdamWeightDecay(params, learning_rate=lr, weight_decay=0.05)
    reading = read_native(opt)
    expected = (uo.schedules.Piecewise(boundaries=[1, 2, 3], values=lrs) if given == "list"
                else uo.schedules.preset("mindspore.nn.WarmUpLR", learning_rate=0.01,
                                         warmup_steps=3))
    assert reading.spec == uo.preset("mindspore.nn.AdamWeightDecay", learning_rate=expected,
                                     weight_decay=0.05)
    opt(tuple(ms.Tensor(np.ones(p.shape, np.float32)) for p in params))
    assert read_native(opt).position == 1


@require("mindspore")
def test_mindspore_per_step_list_reads_as_its_table_and_position():
    import mindspore as ms
    from mindspore import nn

    lrs = nn.cosine_decay_lr(0.0, 0.1, total_step=12, step_per_epoch=2, decay_epoch=5)
    params = nn.Dense(3, 2).trainable_params()
    opt = nn.Momentum(params, lrs, 0.9)
    reading = read_native(opt)
    assert reading.spec.lr == uo.schedules.Piecewise(boundaries=list(range(1, 12)),
                                                     values=lrs)
    # the table is the list preset's schedule on the list's steps
    listed = uo.schedules.preset("mindspore.nn.cosine_decay_lr", min_lr=0.0, max_lr=0.1,
                                 total_step=12, step_per_epoch=2, decay_epoch=5)
    assert [reading.spec.lr(t) for t in range(12)] == pytest.approx(
        [listed(t) for t in range(12)], rel=1e-12)
    for _ in range(3):
        opt(tuple(ms.Tensor(np.ones(p.shape, np.float32)) for p in params))
    assert read_native(opt).position == 3


@require("mindspore")
def test_mindspore_group_lr_lists_read_as_factors_of_the_schedule():
    """Group lrs beside a per-step list (``learning_rate`` is then a CellList of each
    parameter's Cell, which the live-lr check used to call as one Cell: a bare
    NotImplementedError): a group's list that is a multiple of the optimizer's reads as
    its ``lr_scale``, each group's Cell checked at ``global_step``; a fixed group lr
    beside the list is refused with the reason."""
    import mindspore as ms
    from mindspore import nn

    lrs = [0.01 * 0.9 ** t for t in range(12)]
    weight, bias = nn.Dense(3, 2).trainable_params()
    grads = tuple(ms.Tensor(np.ones(p.shape, np.float32)) for p in (weight, bias))
    opt = nn.Adam([{"params": [weight]}, {"params": [bias], "lr": [0.5 * x for x in lrs]}],
                  learning_rate=lrs)
    for _ in range(3):
        opt(grads)
    reading = read_native(opt)
    assert reading.spec.lr == uo.schedules.Piecewise(boundaries=list(range(1, 12)),
                                                     values=lrs)
    assert reading.position == 3
    assert [g.lr_scale for g in reading.groups] == [None, 0.5]
    fixed = nn.Adam([{"params": [weight]}, {"params": [bias], "lr": 0.001}],
                    learning_rate=lrs)
    with pytest.raises(NotImplementedError, match=r"params\[1\] lr=0.001 is a fixed lr "
                                                  r"beside the optimizer's per-step lr"):
        read_native(fixed)


# -- refusals ---------------------------------------------------------------------------------

@require("torch")
def test_torch_refusals_name_the_argument_and_value():
    import torch

    opt = _torch_sgd()
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: 0.5 ** t)
    with pytest.raises(ValueError, match="LambdaLR's lr_lambda=<function .*sample_steps"):
        uo.from_native(opt, scheduler)
    spec, _ = uo.from_native(opt, scheduler, sample_steps=4)
    assert spec.lr == uo.schedules.Piecewise(boundaries=[1, 2, 3],
                                             values=[0.1, 0.05, 0.025, 0.0125])
    assert "tabulated" in read_native(opt, scheduler, sample_steps=4).notes[0]
    multiplicative = torch.optim.lr_scheduler.MultiplicativeLR(opt, lambda t: 0.5 + t / 10)
    with pytest.raises(ValueError, match="MultiplicativeLR's lr_lambda"):
        uo.from_native(opt, multiplicative)
    table = uo.from_native(opt, multiplicative, sample_steps=3)[0].lr
    for t in range(3):      # torch multiplies the lr by f(t) at each step
        assert table(t) == pytest.approx(opt.param_groups[0]["lr"], rel=1e-12)
        opt.step()
        multiplicative.step()
    with pytest.raises(ValueError, match="sample_steps must be"):
        uo.from_native(opt, scheduler, sample_steps=0)

    class ClippedAdam(torch.optim.Adam):
        pass

    with pytest.raises(ValueError, match="ClippedAdam is a subclass of torch.optim.Adam"):
        uo.from_native(ClippedAdam([torch.nn.Parameter(torch.zeros(2))]))
    with pytest.raises(TypeError, match="must be a torch.optim.optimizer.Optimizer, got "
                                        "Linear"):
        uo.from_native(torch.nn.Linear(2, 2))
    with pytest.raises(TypeError, match="must be a torch, Paddle or MindSpore optimizer "
                                        "object, got <object"):
        uo.from_native(object())
    with pytest.raises(TypeError, match="got the class torch.optim.adam.Adam"):
        uo.from_native(torch.optim.Adam)
    with pytest.raises(NotImplementedError, match="LBFGS.*line search"):
        uo.from_native(torch.optim.LBFGS([torch.nn.Parameter(torch.zeros(2))]))
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)
    with pytest.raises(ValueError, match="ReduceLROnPlateau cannot be read.*metric-driven"):
        uo.from_native(opt, plateau)
    with pytest.raises(TypeError, match="lr_scheduler must be"):
        uo.from_native(opt, "StepLR")


@require("paddle")
def test_paddle_refusals():
    import paddle

    params = paddle.nn.Linear(3, 2).parameters()
    scheduler = paddle.optimizer.lr.LambdaDecay(0.1, lambda e: 0.9 ** e)
    opt = paddle.optimizer.SGD(scheduler, parameters=params)
    with pytest.raises(ValueError, match="LambdaDecay's lr_lambda"):
        uo.from_native(opt)
    spec, _ = uo.from_native(opt, sample_steps=3)
    assert spec.lr.values == pytest.approx((0.1, 0.09, 0.081), rel=1e-12)
    scheduler = paddle.optimizer.lr.MultiplicativeDecay(0.1, lambda e: 0.5 + e / 10)
    opt = paddle.optimizer.SGD(scheduler, parameters=params)
    table = uo.from_native(opt, sample_steps=3)[0].lr
    for t in range(3):
        assert table(t) == pytest.approx(scheduler(), rel=1e-12)
        scheduler.step()
    opt = paddle.optimizer.SGD(paddle.optimizer.lr.ReduceOnPlateau(0.1), parameters=params)
    with pytest.raises(ValueError, match="ReduceOnPlateau cannot be read.*metric-driven"):
        uo.from_native(opt)

    class Custom(paddle.optimizer.lr.StepDecay):
        pass

    opt = paddle.optimizer.SGD(Custom(0.1, step_size=2), parameters=params)
    with pytest.raises(ValueError, match="Custom is a subclass of paddle.optimizer.lr.StepDecay"):
        uo.from_native(opt)
    opt = paddle.optimizer.SGD(0.1, parameters=params)
    with pytest.raises(TypeError, match="pass lr_scheduler=None"):
        uo.from_native(opt, lr_scheduler=scheduler)


@require("torch")
def test_torch_optimizer_with_step_hooks_or_built_by_uo_is_refused():
    import torch

    opt = _torch_sgd()
    opt.register_step_pre_hook(lambda *args: None)
    with pytest.raises(ValueError, match="step hooks"):
        uo.from_native(opt)
    built = uo.build(uo.AdamW(lr=0.1, grad_clip=uo.ClipByNorm(max_norm=1.0)),
                     [("w", torch.nn.Parameter(torch.zeros(2)))])
    with pytest.raises(ValueError, match="built by uo.build.*record_of"):
        uo.from_native(built)


@require("paddle")
def test_paddle_parameter_attributes_and_a_stepped_optimizer():
    import paddle

    net = paddle.nn.Linear(3, 2, bias_attr=paddle.ParamAttr(need_clip=False,
                                                            learning_rate=2.0))
    bias = net.bias.name
    optimizers = [
        (paddle.optimizer.Rprop(parameters=net.parameters(), learning_rate_range=(1e-4, 10),
                                etas=(0.4, 1.3)),
         uo.preset("paddle.optimizer.Rprop", learning_rate_range=(1e-4, 10), etas=(0.4, 1.3)),
         [uo.Group(match=(bias,), lr_scale=2.0)]),
        (paddle.optimizer.Adam(parameters=net.parameters(), weight_decay=0.01,
                               grad_clip=paddle.nn.ClipGradByGlobalNorm(1.0)),
         uo.preset("paddle.optimizer.Adam", weight_decay=0.01,
                   grad_clip=paddle.nn.ClipGradByGlobalNorm(1.0)),
         [uo.Group(match=(bias,), lr_scale=2.0, exclude_from=("grad_clip",))]),
        (paddle.optimizer.Lamb(parameters=net.parameters(),
                               exclude_from_weight_decay_fn=lambda p: p.name == bias),
         uo.preset("paddle.optimizer.Lamb"),
         [uo.Group(match=(bias,), lr_scale=2.0, weight_decay=0.0)]),
    ]
    for opt, spec, groups in optimizers:
        assert uo.from_native(opt) == (spec, groups)
        net(paddle.ones([4, 3])).sum().backward()
        opt.step()                      # Rprop now holds its ranges as float32 tensors
        opt.clear_grad()
        assert uo.from_native(opt) == (spec, groups)


@require("mindspore")
def test_mindspore_stepped_optimizer_is_read_the_same():
    import mindspore as ms
    from mindspore import nn

    params = nn.Dense(3, 2).trainable_params()
    opt = nn.AdamWeightDecay(params, learning_rate=0.003, weight_decay=0.02, eps=1e-7)
    expected = uo.preset("mindspore.nn.AdamWeightDecay", learning_rate=0.003,
                         weight_decay=0.02, eps=1e-7)
    assert uo.from_native(opt) == (expected, [])
    opt(tuple(ms.Tensor(np.ones(p.shape, np.float32)) for p in params))
    assert uo.from_native(opt) == (expected, [])


@require("mindspore")
def test_mindspore_name_rule_under_other_names():
    from mindspore import nn

    net = nn.SequentialCell([nn.Dense(3, 2), nn.LayerNorm((2,))])
    opt = nn.Adam(net.trainable_params(), weight_decay=0.1)
    expected = uo.preset("mindspore.nn.Adam", weight_decay=0.1)
    assert uo.from_native(opt) == (expected, [])
    # MindSpore decides by p.name; under other names the spec names what it spares
    renamed = [(f"layer{i}", p) for i, p in enumerate(net.trainable_params())]
    reading = read_native(opt, names=renamed)
    assert reading.spec == expected.replace(no_decay_names=("layer2", "layer3"))
    assert "spares" in reading.notes[0]


@require("paddle")
def test_paddle_lars_exclusions_under_other_names():
    import paddle

    net = paddle.nn.Linear(3, 2)
    opt = paddle.incubate.optimizer.LarsMomentumOptimizer(
        0.1, 0.9, parameter_list=net.parameters(), exclude_from_weight_decay=["b_0"])
    expected = uo.preset("paddle.incubate.optimizer.LarsMomentumOptimizer",
                         learning_rate=0.1, momentum=0.9, exclude_from_weight_decay=["b_0"])
    assert uo.from_native(opt)[0] == expected
    assert uo.from_native(opt, names=net)[0] == expected.replace(no_decay_names=("bias",))


EXPERIMENTAL = "mindspore.experimental.optim.lr_scheduler"
EXPERIMENTAL_SCHEDULERS = [
    ("StepLR", {"step_size": 3, "gamma": 0.5}),
    ("MultiStepLR", {"milestones": [2, 5], "gamma": 0.5}),
    ("ConstantLR", {"factor": 0.5, "total_iters": 4}),
    ("LinearLR", {"start_factor": 0.25, "end_factor": 0.75, "total_iters": 6}),
    ("ExponentialLR", {"gamma": 0.9}),
    ("PolynomialLR", {"total_iters": 8, "power": 2.0}),
    ("CosineAnnealingLR", {"T_max": 10, "eta_min": 0.001}),
    ("CosineAnnealingWarmRestarts", {"T_0": 3, "T_mult": 2, "eta_min": 0.001}),
]


@require("mindspore")
@pytest.mark.parametrize("name,kwargs", EXPERIMENTAL_SCHEDULERS,
                         ids=[n for n, _ in EXPERIMENTAL_SCHEDULERS])
def test_mindspore_experimental_scheduler_reads_as_its_schedule_preset(name, kwargs):
    from mindspore import nn
    from mindspore.experimental import optim

    opt = optim.Adam(nn.Dense(3, 2).trainable_params(), lr=0.1)
    scheduler = getattr(optim.lr_scheduler, name)(opt, **kwargs)
    expected = uo.schedules.preset(f"{EXPERIMENTAL}.{name}", base_lr=0.1, **kwargs)
    reading = read_native(opt, scheduler)
    assert reading.spec == uo.preset("mindspore.experimental.optim.Adam",
                                     lr=0.1).replace(lr=expected)
    assert reading.position == 0
    for _ in range(4):
        scheduler.step()
    assert read_native(opt, scheduler).position == 4
    assert read_native(opt, scheduler).spec == reading.spec


@require("mindspore")
def test_mindspore_refusals():
    import mindspore as ms
    from mindspore import nn

    class Halving(nn.learning_rate_schedule.LearningRateSchedule):
        def construct(self, global_step):
            return ms.Tensor(0.1, ms.float32)

    params = nn.Dense(3, 2).trainable_params()
    with pytest.raises(ValueError, match="the dynamic lr of type .*Halving has no schedule"):
        uo.from_native(nn.Momentum(params, Halving(), 0.9))
    with pytest.raises(ValueError, match="the dynamic weight decay of type .*Halving"):
        uo.from_native(nn.Adam(params, weight_decay=Halving()))

    class MyAdam(nn.Adam):
        pass

    with pytest.raises(ValueError, match="MyAdam is a subclass of mindspore.nn.Adam"):
        uo.from_native(MyAdam(params))
    with pytest.raises(TypeError, match="must be a mindspore.nn.optim.optimizer.Optimizer or "
                                        "mindspore.experimental.optim.optimizer.Optimizer"):
        uo.from_native(nn.Dense(3, 2))


@require("mindspore")
def test_mindspore_live_lr_is_checked():
    """An ``nn`` optimizer's lr Parameter written from outside, and one of two
    experimental schedulers over one optimizer, are refused naming both lrs."""
    import mindspore as ms
    from mindspore import nn, ops
    from mindspore.experimental import optim

    opt = nn.Adam(nn.Dense(3, 2).trainable_params(), learning_rate=0.01)
    assert uo.from_native(opt)[0].lr == 0.01
    ops.assign(opt.learning_rate, ms.Tensor(0.005, ms.float32))
    with pytest.raises(ValueError, match="learning_rate Parameter holds 0.005, not the "
                                         "constructor's lr 0.01"):
        uo.from_native(opt)
    opt = optim.SGD(nn.Dense(3, 2).trainable_params(), lr=0.1)
    step_lr = optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    optim.lr_scheduler.LinearLR(opt, start_factor=0.4, total_iters=5)
    with pytest.raises(ValueError, match=r"param_groups\[0\] runs its next step \(step 0\) "
                                         r"at lr 0.04.*StepLR read gives it 0.1 there"):
        uo.from_native(opt, step_lr)
