"""Presets for ``torch.optim.lr_scheduler.*``.

Torch schedulers scale the optimizer's lr (``initial_lr``): each preset takes it as
``base_lr`` (``CyclicLR`` and ``OneCycleLR`` set the lr themselves and take none beyond
their own arguments). Step ``t`` is the ``t``-th optimizer step of the usual loop
``opt.step(); sched.step()``: the constructor sets lr(0).

Most torch schedulers compute recursively from the current lr (``get_lr``); the schedules
here are the closed forms, equal within float rounding (checked against torch at every
step by ``tests/test_schedules_native.py``). The builders are shared with the MindSpore
``experimental`` schedulers, which copy torch's semantics.
"""

from __future__ import annotations

from .. import _validation as v
from ._preset_registry import PLATEAU, no_resume, one_group, refuse, schedule_preset, sub_presets
from .compose import Lambda, Multiplicative, Product, Sequential
from .cyclic import Cosine, CosineWarmRestarts, Cyclic, OneCycle
from .decay import Constant, Exponential, Linear, MultiStep, Piecewise, Polynomial, Step

NS = "torch.optim.lr_scheduler"


# -- builders shared with mindspore.experimental.optim.lr_scheduler -------------------

def multi_step(base_lr, milestones, gamma):
    if isinstance(milestones, (str, bytes)) or not hasattr(milestones, "__iter__"):
        raise TypeError(f"milestones must be an iterable of ints, got {milestones!r}")
    items = [v.check_int("MultiStepLR", f"milestones[{i}]", m, low=0)
             for i, m in enumerate(milestones)]
    # the native class counts milestones (a Counter): order does not matter, repeats do
    return MultiStep(lr=base_lr, milestones=sorted(items), gamma=gamma)


def constant_lr(base_lr, factor, total_iters):
    factor = v.check_range("ConstantLR", "factor", factor, low=0.0, high=1.0, low_open=True)
    total_iters = v.check_int("ConstantLR", "total_iters", total_iters, low=0)
    if total_iters == 0:          # the native class never undoes the factor then
        return Constant(lr=base_lr * factor)
    return Piecewise(boundaries=[total_iters], values=[base_lr * factor, base_lr])


def linear_lr(base_lr, start_factor, end_factor, total_iters):
    start_factor = v.check_range("LinearLR", "start_factor", start_factor, low=0.0, high=1.0,
                                 low_open=True)
    end_factor = v.check_range("LinearLR", "end_factor", end_factor, low=0.0, high=1.0)
    total_iters = v.check_int("LinearLR", "total_iters", total_iters, low=0)
    if total_iters == 0:          # natively: start_factor at step 0, then never changed
        return Constant(lr=base_lr * start_factor)
    return Linear(lr=base_lr, total_steps=total_iters, start_factor=start_factor,
                  end_factor=end_factor)


def polynomial_lr(base_lr, total_iters, power):
    if v.check_int("PolynomialLR", "total_iters", total_iters, low=0) == 0:
        return Constant(lr=base_lr)   # natively never decays then
    return Polynomial(lr=base_lr, decay_steps=total_iters, end_lr=0.0, power=power)


def cyclic(qualified, base_lr, max_lr, step_size_up, step_size_down, mode, gamma, scale_fn,
           scale_mode, **momentum):
    for name, value in [("base_lr", base_lr), ("max_lr", max_lr), *momentum.items()]:
        one_group(qualified, name, value)
    if scale_fn is None:
        scale_mode = None         # natively the mode picks the scale mode
    elif mode not in ("triangular", "triangular2", "exp_range"):
        mode = "triangular"       # natively any mode is accepted (and unused) with scale_fn
    return Cyclic(base_lr=base_lr, max_lr=max_lr, step_size_up=step_size_up,
                  step_size_down=step_size_down, mode=mode, gamma=gamma, scale_fn=scale_fn,
                  scale_mode=scale_mode, **momentum)


#: Schedulers a SequentialLR cannot hold as a pure function of the step.
IN_SEQUENCE = {
    "ReduceLROnPlateau": "it is metric-driven",
    "SequentialLR": "nested sequences are not supported",
    "ChainedScheduler": "a chain inside a sequence is not supported",
    "OneCycleLR": "it rewrites the optimizer's initial_lr when constructed, so the other "
                  "schedulers' base lr depends on construction order",
    "CyclicLR": "it rewrites the optimizer's lr when constructed, so the other schedulers' "
                "base lr depends on construction order",
}


def sequential(qualified, namespace, base_lr, schedulers, milestones):
    subs = sub_presets(qualified, namespace, schedulers, IN_SEQUENCE, base_lr=base_lr)
    for i, (bare, _) in enumerate(subs):
        if i > 0 and bare == "MultiplicativeLR":
            raise NotImplementedError(
                f"{qualified}: schedulers[{i}]=MultiplicativeLR after a milestone continues "
                "from the previous scheduler's lr instead of restarting; not supported")
    return Sequential(schedules=[s for _, s in subs], milestones=milestones)


# -- torch.optim.lr_scheduler ---------------------------------------------------------

@schedule_preset(f"{NS}.LambdaLR")
def lambda_lr(base_lr, lr_lambda, last_epoch=-1):
    no_resume(f"{NS}.LambdaLR", last_epoch)
    return Lambda(fn=one_group(f"{NS}.LambdaLR", "lr_lambda", lr_lambda), lr=base_lr)


@schedule_preset(f"{NS}.MultiplicativeLR")
def multiplicative_lr(base_lr, lr_lambda, last_epoch=-1):
    no_resume(f"{NS}.MultiplicativeLR", last_epoch)
    return Multiplicative(fn=one_group(f"{NS}.MultiplicativeLR", "lr_lambda", lr_lambda),
                          lr=base_lr)


@schedule_preset(f"{NS}.StepLR")
def step_lr(base_lr, step_size, gamma=0.1, last_epoch=-1):
    no_resume(f"{NS}.StepLR", last_epoch)
    return Step(lr=base_lr, step_size=step_size, gamma=gamma)


@schedule_preset(f"{NS}.MultiStepLR")
def multi_step_lr(base_lr, milestones, gamma=0.1, last_epoch=-1):
    no_resume(f"{NS}.MultiStepLR", last_epoch)
    return multi_step(base_lr, milestones, gamma)


@schedule_preset(f"{NS}.ConstantLR")
def constant_lr_preset(base_lr, factor=1.0 / 3, total_iters=5, last_epoch=-1):
    no_resume(f"{NS}.ConstantLR", last_epoch)
    return constant_lr(base_lr, factor, total_iters)


@schedule_preset(f"{NS}.LinearLR")
def linear_lr_preset(base_lr, start_factor=1.0 / 3, end_factor=1.0, total_iters=5,
                     last_epoch=-1):
    no_resume(f"{NS}.LinearLR", last_epoch)
    return linear_lr(base_lr, start_factor, end_factor, total_iters)


@schedule_preset(f"{NS}.ExponentialLR")
def exponential_lr(base_lr, gamma, last_epoch=-1):
    no_resume(f"{NS}.ExponentialLR", last_epoch)
    return Exponential(lr=base_lr, gamma=gamma)


@schedule_preset(f"{NS}.SequentialLR")
def sequential_lr(base_lr, schedulers, milestones, last_epoch=-1):
    """``schedulers``: ``[(name, native_kwargs), ...]`` without ``base_lr``, e.g.
    ``[("LinearLR", {"start_factor": 0.1, "total_iters": 5}), ("CosineAnnealingLR",
    {"T_max": 45})]``."""
    no_resume(f"{NS}.SequentialLR", last_epoch)
    return sequential(f"{NS}.SequentialLR", NS, base_lr, schedulers, milestones)


@schedule_preset(f"{NS}.PolynomialLR")
def polynomial_lr_preset(base_lr, total_iters=5, power=1.0, last_epoch=-1):
    no_resume(f"{NS}.PolynomialLR", last_epoch)
    return polynomial_lr(base_lr, total_iters, power)


@schedule_preset(f"{NS}.CosineAnnealingLR")
def cosine_annealing_lr(base_lr, T_max, eta_min=0.0, last_epoch=-1):
    no_resume(f"{NS}.CosineAnnealingLR", last_epoch)
    return Cosine(lr=base_lr, T_max=T_max, eta_min=eta_min)


#: Chain members whose update is "multiply the current lr by a ratio": the chain is then
#: the product of their factors. The others set or add to the lr, so a chain of them
#: depends on the order of updates in a way no product describes.
_CHAIN_REFUSED = {name: "it sets or adds to the lr rather than multiplying it, so the chain "
                  "is no product of factors" for name in
                  ("LambdaLR", "CosineAnnealingLR", "CyclicLR", "OneCycleLR",
                   "CosineAnnealingWarmRestarts", "SequentialLR", "ChainedScheduler")}
_CHAIN_REFUSED["ReduceLROnPlateau"] = "it is metric-driven"


@schedule_preset(f"{NS}.ChainedScheduler")
def chained_scheduler(base_lr, schedulers, optimizer=None):
    """``schedulers`` as for SequentialLR; supported members: StepLR, MultiStepLR,
    ConstantLR, LinearLR, ExponentialLR, PolynomialLR, MultiplicativeLR."""
    if optimizer is not None:
        raise TypeError(f"{NS}.ChainedScheduler: optimizer must be None in a preset (the "
                        f"optimizer's lr is base_lr), got {optimizer!r}")
    subs = sub_presets(f"{NS}.ChainedScheduler", NS, schedulers, _CHAIN_REFUSED, base_lr=1.0)
    return Product(lr=base_lr, factors=[s for _, s in subs])


refuse(f"{NS}.ReduceLROnPlateau", PLATEAU)
for _base in ("LRScheduler", "_LRScheduler"):
    refuse(f"{NS}.{_base}", "it is the abstract base class (get_lr raises "
           "NotImplementedError); a custom schedule is uo.schedules.Lambda(fn=...) or a "
           "Schedule subclass")


@schedule_preset(f"{NS}.CyclicLR")
def cyclic_lr(base_lr, max_lr, step_size_up=2000, step_size_down=None, mode="triangular",
              gamma=1.0, scale_fn=None, scale_mode="cycle", cycle_momentum=True,
              base_momentum=0.8, max_momentum=0.9, last_epoch=-1):
    """``base_lr`` is CyclicLR's own lower bound (it overwrites the optimizer's lr)."""
    no_resume(f"{NS}.CyclicLR", last_epoch)
    return cyclic(f"{NS}.CyclicLR", base_lr, max_lr, step_size_up, step_size_down, mode,
                  gamma, scale_fn, scale_mode, cycle_momentum=cycle_momentum,
                  base_momentum=base_momentum, max_momentum=max_momentum)


@schedule_preset(f"{NS}.CosineAnnealingWarmRestarts")
def cosine_warm_restarts(base_lr, T_0, T_mult=1, eta_min=0.0, last_epoch=-1):
    no_resume(f"{NS}.CosineAnnealingWarmRestarts", last_epoch)
    return CosineWarmRestarts(lr=base_lr, T_0=T_0, T_mult=T_mult, eta_min=eta_min)


@schedule_preset(f"{NS}.OneCycleLR")
def one_cycle_lr(max_lr, total_steps=None, epochs=None, steps_per_epoch=None, pct_start=0.3,
                 anneal_strategy="cos", cycle_momentum=True, base_momentum=0.85,
                 max_momentum=0.95, div_factor=25.0, final_div_factor=1e4, three_phase=False,
                 last_epoch=-1):
    """No ``base_lr``: OneCycleLR ignores the optimizer's lr (it starts at
    ``max_lr / div_factor``)."""
    qualified = f"{NS}.OneCycleLR"
    no_resume(qualified, last_epoch)
    for name, value in [("max_lr", max_lr), ("base_momentum", base_momentum),
                        ("max_momentum", max_momentum)]:
        one_group(qualified, name, value)
    if total_steps is None:
        if epochs is None or steps_per_epoch is None:
            raise ValueError("total_steps is None: give total_steps, or epochs and "
                             f"steps_per_epoch (got epochs={epochs!r}, "
                             f"steps_per_epoch={steps_per_epoch!r})")
        total_steps = (v.check_int(qualified, "epochs", epochs, low=1)
                       * v.check_int(qualified, "steps_per_epoch", steps_per_epoch, low=1))
    start_lr = v.check_real(qualified, "max_lr", max_lr) / v.check_range(
        qualified, "div_factor", div_factor, low=0.0, low_open=True)
    end_lr = start_lr / v.check_range(qualified, "final_div_factor", final_div_factor,
                                      low=0.0, low_open=True)
    return OneCycle(max_lr=max_lr, total_steps=total_steps, start_lr=start_lr, end_lr=end_lr,
                    pct_start=pct_start, anneal=anneal_strategy, three_phase=three_phase,
                    cycle_momentum=cycle_momentum, base_momentum=base_momentum,
                    max_momentum=max_momentum)
