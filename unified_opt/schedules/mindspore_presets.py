"""Presets for MindSpore's dynamic lr: the ``mindspore.nn.*_lr`` list functions, the
``LearningRateSchedule`` Cells and ``mindspore.experimental.optim.lr_scheduler.*``.

Step convention: a MindSpore optimizer's call number ``t + 1`` reads list entry ``t`` or
calls the Cell with ``global_step = t``; that is the schedule's 0-based step ``t`` (so
``WarmUpLR``'s first step has lr 0). The list functions are epoch-based: entry ``i`` uses
epoch ``i // step_per_epoch``; the presets wrap the epoch formula in ``PerEpoch``. A list
has ``total_step`` entries (an optimizer raises past its end); the schedule continues the
same formula past it. Cells and the experimental schedulers compute in float32, so they
equal these float64 schedules within float32 rounding.
"""

from __future__ import annotations

from .. import _validation as v
from ._preset_registry import PLATEAU, no_resume, refuse, schedule_preset
from .base import check_list
from .compose import Lambda, Multiplicative, PerEpoch
from .cyclic import Cosine, CosineWarmRestarts
from .decay import Exponential, InverseTime, Linear, NaturalExp, Piecewise, Polynomial, Step
from .torch_presets import constant_lr, cyclic, linear_lr, multi_step, polynomial_lr, sequential

NN = "mindspore.nn"
EXP = "mindspore.experimental.optim.lr_scheduler"


def _float(q: str, name: str, value, positive: bool = True) -> float:
    """MindSpore's ``check_positive_float`` / ``check_non_negative_float`` with
    ``check_is_float``: a float (an int is a TypeError there), > 0 or >= 0."""
    return v.check_range(q, name, v.check_float(q, name, value), low=0.0, low_open=positive)


def _checked(q: str, *, positive=(), non_negative=(), counts=(), flags=()) -> None:
    """MindSpore's checks of a dynamic lr's arguments (``nn/dynamic_lr.py``,
    ``nn/learning_rate_schedule.py``), each ``(name, value)``: what it refuses, the
    preset refuses, before building a schedule it would not run."""
    for name, value in positive:
        _float(q, name, value)
    for name, value in non_negative:
        _float(q, name, value, positive=False)
    for name, value in counts:
        v.check_int(q, name, value, low=1)
    for name, value in flags:
        v.check_bool(q, name, value)


def _per_epoch(name, schedule, total_step, step_per_epoch):
    v.check_int(f"{NN}.{name}", "total_step", total_step, low=1)
    spe = v.check_int(f"{NN}.{name}", "step_per_epoch", step_per_epoch, low=1)
    return schedule if spe == 1 else PerEpoch(epoch_schedule=schedule, steps_per_epoch=spe)


def _decay_checked(name: str, learning_rate, decay_rate, steps, is_stair,
                   steps_name: str = "decay_epoch") -> None:
    _checked(f"{NN}.{name}", positive=[("learning_rate", learning_rate),
                                       ("decay_rate", decay_rate)],
             counts=[(steps_name, steps)], flags=[("is_stair", is_stair)])


def _cosine_checked(name: str, min_lr, max_lr, steps: tuple) -> None:
    q = f"{NN}.{name}"
    _checked(q, positive=[("max_lr", max_lr)], non_negative=[("min_lr", min_lr)],
             counts=[steps])
    if min_lr >= max_lr:
        raise ValueError(f"{q}: max_lr must be greater than min_lr, got max_lr={max_lr!r}, "
                         f"min_lr={min_lr!r}")


# -- mindspore.nn dynamic-lr list functions -----------------------------------------------

@schedule_preset(f"{NN}.piecewise_constant_lr")
def piecewise_constant_lr(milestone, learning_rates):
    """Entry ``i`` is ``learning_rates[k]`` for ``milestone[k-1] <= i < milestone[k]``."""
    milestone = check_list("piecewise_constant_lr", "milestone", milestone)
    learning_rates = check_list("piecewise_constant_lr", "learning_rates", learning_rates)
    q = f"{NN}.piecewise_constant_lr"
    _checked(q, counts=[(f"milestone[{i}]", m) for i, m in enumerate(milestone)])
    for i, lr in enumerate(learning_rates):
        v.check_float(q, f"learning_rates[{i}]", lr)
    if len(milestone) != len(learning_rates) or not milestone:
        raise ValueError(f"milestone and learning_rates must be non-empty and of the same "
                         f"length, got {list(milestone)!r} and {list(learning_rates)!r}")
    return Piecewise(boundaries=milestone[:-1], values=learning_rates)


@schedule_preset(f"{NN}.exponential_decay_lr")
def exponential_decay_lr(learning_rate, decay_rate, total_step, step_per_epoch, decay_epoch,
                         is_stair=False):
    _decay_checked("exponential_decay_lr", learning_rate, decay_rate, decay_epoch, is_stair)
    return _per_epoch("exponential_decay_lr", Exponential(
        lr=learning_rate, gamma=decay_rate, decay_steps=decay_epoch, staircase=is_stair),
        total_step, step_per_epoch)


@schedule_preset(f"{NN}.natural_exp_decay_lr")
def natural_exp_decay_lr(learning_rate, decay_rate, total_step, step_per_epoch, decay_epoch,
                         is_stair=False):
    _decay_checked("natural_exp_decay_lr", learning_rate, decay_rate, decay_epoch, is_stair)
    return _per_epoch("natural_exp_decay_lr", NaturalExp(
        lr=learning_rate, gamma=decay_rate, decay_steps=decay_epoch, staircase=is_stair),
        total_step, step_per_epoch)


@schedule_preset(f"{NN}.inverse_decay_lr")
def inverse_decay_lr(learning_rate, decay_rate, total_step, step_per_epoch, decay_epoch,
                     is_stair=False):
    _decay_checked("inverse_decay_lr", learning_rate, decay_rate, decay_epoch, is_stair)
    return _per_epoch("inverse_decay_lr", InverseTime(
        lr=learning_rate, gamma=decay_rate, decay_steps=decay_epoch, staircase=is_stair),
        total_step, step_per_epoch)


@schedule_preset(f"{NN}.cosine_decay_lr")
def cosine_decay_lr(min_lr, max_lr, total_step, step_per_epoch, decay_epoch):
    _cosine_checked("cosine_decay_lr", min_lr, max_lr, ("decay_epoch", decay_epoch))
    return _per_epoch("cosine_decay_lr", Cosine(lr=max_lr, T_max=decay_epoch, eta_min=min_lr,
                                                periodic=False),
                      total_step, step_per_epoch)


@schedule_preset(f"{NN}.polynomial_decay_lr")
def polynomial_decay_lr(learning_rate, end_learning_rate, total_step, step_per_epoch,
                        decay_epoch, power, update_decay_epoch=False):
    _checked(f"{NN}.polynomial_decay_lr", positive=[("learning_rate", learning_rate),
                                                    ("power", power)],
             non_negative=[("end_learning_rate", end_learning_rate)],
             counts=[("decay_epoch", decay_epoch)],
             flags=[("update_decay_epoch", update_decay_epoch)])
    return _per_epoch("polynomial_decay_lr", Polynomial(
        lr=learning_rate, decay_steps=decay_epoch, end_lr=end_learning_rate, power=power,
        cycle=update_decay_epoch), total_step, step_per_epoch)


@schedule_preset(f"{NN}.warmup_lr")
def warmup_lr(learning_rate, total_step, step_per_epoch, warmup_epoch):
    """Entry 0 is 0: ``learning_rate * min(epoch, warmup_epoch) / warmup_epoch``."""
    _checked(f"{NN}.warmup_lr", non_negative=[("learning_rate", learning_rate)],
             counts=[("warmup_epoch", warmup_epoch)])
    return _per_epoch("warmup_lr", Linear(lr=learning_rate, total_steps=warmup_epoch,
                                          start_factor=0.0, end_factor=1.0),
                      total_step, step_per_epoch)


# -- mindspore.nn LearningRateSchedule Cells (called with global_step = t) -----------------

@schedule_preset(f"{NN}.CosineDecayLR")
def cosine_decay_cell(min_lr, max_lr, decay_steps):
    _cosine_checked("CosineDecayLR", min_lr, max_lr, ("decay_steps", decay_steps))
    return Cosine(lr=max_lr, T_max=decay_steps, eta_min=min_lr, periodic=False)


@schedule_preset(f"{NN}.ExponentialDecayLR")
def exponential_decay_cell(learning_rate, decay_rate, decay_steps, is_stair=False):
    _decay_checked("ExponentialDecayLR", learning_rate, decay_rate, decay_steps, is_stair,
                   "decay_steps")
    return Exponential(lr=learning_rate, gamma=decay_rate, decay_steps=decay_steps,
                       staircase=is_stair)


@schedule_preset(f"{NN}.NaturalExpDecayLR")
def natural_exp_decay_cell(learning_rate, decay_rate, decay_steps, is_stair=False):
    _decay_checked("NaturalExpDecayLR", learning_rate, decay_rate, decay_steps, is_stair,
                   "decay_steps")
    return NaturalExp(lr=learning_rate, gamma=decay_rate, decay_steps=decay_steps,
                      staircase=is_stair)


@schedule_preset(f"{NN}.InverseDecayLR")
def inverse_decay_cell(learning_rate, decay_rate, decay_steps, is_stair=False):
    _decay_checked("InverseDecayLR", learning_rate, decay_rate, decay_steps, is_stair,
                   "decay_steps")
    return InverseTime(lr=learning_rate, gamma=decay_rate, decay_steps=decay_steps,
                       staircase=is_stair)


@schedule_preset(f"{NN}.PolynomialDecayLR")
def polynomial_decay_cell(learning_rate, end_learning_rate, decay_steps, power,
                          update_decay_steps=False):
    _checked(f"{NN}.PolynomialDecayLR", positive=[("learning_rate", learning_rate),
                                                  ("power", power)],
             non_negative=[("end_learning_rate", end_learning_rate)],
             counts=[("decay_steps", decay_steps)],
             flags=[("update_decay_steps", update_decay_steps)])
    return Polynomial(lr=learning_rate, decay_steps=decay_steps, end_lr=end_learning_rate,
                      power=power, cycle=update_decay_steps)


@schedule_preset(f"{NN}.WarmUpLR")
def warmup_cell(learning_rate, warmup_steps):
    """The first optimizer step has lr 0 (``global_step`` 0)."""
    _checked(f"{NN}.WarmUpLR", non_negative=[("learning_rate", learning_rate)],
             counts=[("warmup_steps", warmup_steps)])
    return Linear(lr=learning_rate, total_steps=warmup_steps, start_factor=0.0,
                  end_factor=1.0)


refuse(f"{NN}.learning_rate_schedule.LearningRateSchedule",
       "it is the abstract base Cell (construct raises NotImplementedError); a custom "
       "schedule is uo.schedules.Lambda(fn=...) or a Schedule subclass")


# -- mindspore.experimental.optim.lr_scheduler (torch semantics, float32 lr) --------------

@schedule_preset(f"{EXP}.StepLR")
def exp_step_lr(base_lr, step_size, gamma=0.1, last_epoch=-1):
    no_resume(f"{EXP}.StepLR", last_epoch)
    return Step(lr=base_lr, step_size=step_size, gamma=gamma)


@schedule_preset(f"{EXP}.LinearLR")
def exp_linear_lr(base_lr, start_factor=1.0 / 3, end_factor=1.0, total_iters=5, last_epoch=-1):
    no_resume(f"{EXP}.LinearLR", last_epoch)
    return linear_lr(base_lr, start_factor, end_factor, total_iters)


@schedule_preset(f"{EXP}.ExponentialLR")
def exp_exponential_lr(base_lr, gamma, last_epoch=-1):
    no_resume(f"{EXP}.ExponentialLR", last_epoch)
    return Exponential(lr=base_lr, gamma=gamma)


@schedule_preset(f"{EXP}.PolynomialLR")
def exp_polynomial_lr(base_lr, total_iters=5, power=1.0, last_epoch=-1):
    no_resume(f"{EXP}.PolynomialLR", last_epoch)
    return polynomial_lr(base_lr, total_iters, power)


@schedule_preset(f"{EXP}.MultiplicativeLR")
def exp_multiplicative_lr(base_lr, lr_lambda, last_epoch=-1):
    no_resume(f"{EXP}.MultiplicativeLR", last_epoch)
    return Multiplicative(fn=lr_lambda, lr=base_lr)


@schedule_preset(f"{EXP}.ConstantLR")
def exp_constant_lr(base_lr, factor=1.0 / 3, total_iters=5, last_epoch=-1):
    no_resume(f"{EXP}.ConstantLR", last_epoch)
    return constant_lr(base_lr, factor, total_iters)


@schedule_preset(f"{EXP}.MultiStepLR")
def exp_multi_step_lr(base_lr, milestones, gamma=0.1, last_epoch=-1):
    no_resume(f"{EXP}.MultiStepLR", last_epoch)
    return multi_step(base_lr, milestones, gamma)


@schedule_preset(f"{EXP}.LambdaLR")
def exp_lambda_lr(base_lr, lr_lambda, last_epoch=-1):
    """``lr_lambda`` receives the epoch as a float32 Tensor natively, an int here."""
    no_resume(f"{EXP}.LambdaLR", last_epoch)
    return Lambda(fn=lr_lambda, lr=base_lr)


_EXP_IN_SEQUENCE = {
    "ReduceLROnPlateau": "it is metric-driven",
    "SequentialLR": "nested sequences are not supported",
    "MultiStepLR": "MindSpore's MultiStepLR._get_closed_form_lr reads a missing attribute "
                   "(step_size), so SequentialLR fails natively at its milestone",
    "CyclicLR": "it rewrites the optimizer's lr when constructed, so the other schedulers' "
                "base lr depends on construction order",
}


@schedule_preset(f"{EXP}.SequentialLR")
def exp_sequential_lr(base_lr, schedulers, milestones, last_epoch=-1):
    """``schedulers``: ``[(name, native_kwargs), ...]`` without ``base_lr``."""
    no_resume(f"{EXP}.SequentialLR", last_epoch)
    for i, item in enumerate(schedulers if isinstance(schedulers, (list, tuple)) else ()):
        name = item[0].rpartition(".")[2] if isinstance(item, (list, tuple)) and item else ""
        if i > 0 and name in _EXP_IN_SEQUENCE:
            raise NotImplementedError(f"{EXP}.SequentialLR: schedulers[{i}]={name} is not "
                                      f"supported here: {_EXP_IN_SEQUENCE[name]}")
    return sequential(f"{EXP}.SequentialLR", EXP, base_lr, schedulers, milestones)


refuse(f"{EXP}.ReduceLROnPlateau", PLATEAU)
refuse(f"{EXP}.LRScheduler", "it is the abstract base class (get_lr raises "
       "NotImplementedError); a custom schedule is uo.schedules.Lambda(fn=...) or a Schedule "
       "subclass")


@schedule_preset(f"{EXP}.CyclicLR")
def exp_cyclic_lr(base_lr, max_lr, step_size_up=2000, step_size_down=None, mode="triangular",
                  gamma=1.0, scale_fn=None, scale_mode="cycle", last_epoch=-1):
    """``base_lr`` is CyclicLR's own lower bound; no momentum cycling in MindSpore."""
    no_resume(f"{EXP}.CyclicLR", last_epoch)
    return cyclic(f"{EXP}.CyclicLR", base_lr, max_lr, step_size_up, step_size_down, mode,
                  gamma, scale_fn, scale_mode)


@schedule_preset(f"{EXP}.CosineAnnealingWarmRestarts")
def exp_cosine_warm_restarts(base_lr, T_0, T_mult=1, eta_min=0, last_epoch=-1):
    no_resume(f"{EXP}.CosineAnnealingWarmRestarts", last_epoch)
    return CosineWarmRestarts(lr=base_lr, T_0=T_0, T_mult=T_mult, eta_min=eta_min)


@schedule_preset(f"{EXP}.CosineAnnealingLR")
def exp_cosine_annealing_lr(base_lr, T_max, eta_min=0.0, last_epoch=-1):
    no_resume(f"{EXP}.CosineAnnealingLR", last_epoch)
    return Cosine(lr=base_lr, T_max=T_max, eta_min=eta_min)
