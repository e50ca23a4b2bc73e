"""Presets for the 17 ``paddle.optimizer.lr.*`` schedulers.

Paddle schedulers hold their own base lr (``learning_rate``). The constructor steps once
(``last_epoch`` 0), and in the usual loop ``opt.step(); sched.step()`` the 0-based step
``t`` runs with ``lr(last_epoch = t)``: the schedule's ``t``. ``verbose`` only prints.
"""

from __future__ import annotations

import warnings

from .. import _validation as v
from ._preset_registry import PLATEAU, no_resume, quiet, refuse, schedule_preset
from .base import Schedule, check_list
from .compose import Lambda, LinearWarmup, Multiplicative
from .cyclic import Cosine, CosineWarmRestarts, OneCycle
from .decay import (
    Constant,
    Exponential,
    InverseTime,
    Linear,
    MultiStep,
    NaturalExp,
    Noam,
    Piecewise,
    Polynomial,
    Step,
)
from .torch_presets import cyclic

NS = "paddle.optimizer.lr"


def _common(name, last_epoch, verbose):
    no_resume(f"{NS}.{name}", last_epoch)
    quiet(f"{NS}.{name}", verbose)


@schedule_preset(f"{NS}.NoamDecay")
def noam_decay(d_model, warmup_steps, learning_rate=1.0, last_epoch=-1, verbose=False):
    _common("NoamDecay", last_epoch, verbose)
    return Noam(d_model=d_model, warmup_steps=warmup_steps, lr=learning_rate)


@schedule_preset(f"{NS}.PiecewiseDecay")
def piecewise_decay(boundaries, values, last_epoch=-1, verbose=False):
    _common("PiecewiseDecay", last_epoch, verbose)
    boundaries = check_list("PiecewiseDecay", "boundaries", boundaries)
    values = check_list("PiecewiseDecay", "values", values)
    if len(values) > len(boundaries) + 1:
        # Paddle accepts these and never reads them; say so rather than drop them quietly.
        warnings.warn(f"{NS}.PiecewiseDecay: values {list(values[len(boundaries) + 1:])} past "
                      f"the first len(boundaries) + 1 are never used (as in Paddle)",
                      stacklevel=3)
        values = values[:len(boundaries) + 1]
    return Piecewise(boundaries=boundaries, values=values)


@schedule_preset(f"{NS}.NaturalExpDecay")
def natural_exp_decay(learning_rate, gamma, last_epoch=-1, verbose=False):
    _common("NaturalExpDecay", last_epoch, verbose)
    return NaturalExp(lr=learning_rate, gamma=gamma)


@schedule_preset(f"{NS}.InverseTimeDecay")
def inverse_time_decay(learning_rate, gamma, last_epoch=-1, verbose=False):
    _common("InverseTimeDecay", last_epoch, verbose)
    return InverseTime(lr=learning_rate, gamma=gamma)


@schedule_preset(f"{NS}.PolynomialDecay")
def polynomial_decay(learning_rate, decay_steps, end_lr=0.0001, power=1.0, cycle=False,
                     last_epoch=-1, verbose=False):
    _common("PolynomialDecay", last_epoch, verbose)
    return Polynomial(lr=learning_rate, decay_steps=decay_steps, end_lr=end_lr, power=power,
                      cycle=cycle)


@schedule_preset(f"{NS}.LinearWarmup")
def linear_warmup(learning_rate, warmup_steps, start_lr, end_lr, last_epoch=-1, verbose=False):
    """``learning_rate``: a float, or the wrapped scheduler as a Schedule (e.g.
    ``preset("paddle.optimizer.lr.CosineAnnealingDecay", ...)``)."""
    _common("LinearWarmup", last_epoch, verbose)
    after = learning_rate if isinstance(learning_rate, Schedule) else Constant(lr=learning_rate)
    if isinstance(after, CosineWarmRestarts) and after.T_mult > 1:
        # LinearWarmup steps the inner scheduler with step(epoch), where Paddle finds the
        # restart with int(math.log(...)): measured T_0=1, T_mult=10 misses the restart at
        # epoch 111 (log gives 2.9999999999999996).
        warnings.warn(f"{NS}.LinearWarmup: Paddle locates the restarts of the wrapped "
                      "CosineAnnealingWarmRestarts (T_mult > 1) with a float log and can miss "
                      "one where the log rounds down; the schedule restarts exactly",
                      stacklevel=3)
    return LinearWarmup(after=after, warmup_steps=warmup_steps, start_lr=start_lr,
                        end_lr=end_lr)


@schedule_preset(f"{NS}.ExponentialDecay")
def exponential_decay(learning_rate, gamma, last_epoch=-1, verbose=False):
    _common("ExponentialDecay", last_epoch, verbose)
    return Exponential(lr=learning_rate, gamma=gamma)


@schedule_preset(f"{NS}.MultiStepDecay")
def multi_step_decay(learning_rate, milestones, gamma=0.1, last_epoch=-1, verbose=False):
    _common("MultiStepDecay", last_epoch, verbose)
    return MultiStep(lr=learning_rate, milestones=milestones, gamma=gamma)


@schedule_preset(f"{NS}.StepDecay")
def step_decay(learning_rate, step_size, gamma=0.1, last_epoch=-1, verbose=False):
    _common("StepDecay", last_epoch, verbose)
    return Step(lr=learning_rate, step_size=step_size, gamma=gamma)


@schedule_preset(f"{NS}.LambdaDecay")
def lambda_decay(learning_rate, lr_lambda, last_epoch=-1, verbose=False):
    _common("LambdaDecay", last_epoch, verbose)
    return Lambda(fn=lr_lambda, lr=learning_rate)


refuse(f"{NS}.ReduceOnPlateau", PLATEAU)
refuse(f"{NS}.LRScheduler", "it is the abstract base class (get_lr raises "
       "NotImplementedError); a custom schedule is uo.schedules.Lambda(fn=...) or a Schedule "
       "subclass")


@schedule_preset(f"{NS}.CosineAnnealingDecay")
def cosine_annealing_decay(learning_rate, T_max, eta_min=0, last_epoch=-1, verbose=False):
    _common("CosineAnnealingDecay", last_epoch, verbose)
    return Cosine(lr=learning_rate, T_max=T_max, eta_min=eta_min)


@schedule_preset(f"{NS}.MultiplicativeDecay")
def multiplicative_decay(learning_rate, lr_lambda, last_epoch=-1, verbose=False):
    _common("MultiplicativeDecay", last_epoch, verbose)
    return Multiplicative(fn=lr_lambda, lr=learning_rate)


@schedule_preset(f"{NS}.OneCycleLR")
def one_cycle_lr(max_learning_rate, total_steps, divide_factor=25.0, end_learning_rate=0.0001,
                 phase_pct=0.3, anneal_strategy="cos", three_phase=False, last_epoch=-1,
                 verbose=False):
    """Unlike torch, the final lr is ``end_learning_rate`` itself, and there is no
    momentum cycling."""
    _common("OneCycleLR", last_epoch, verbose)
    if three_phase and phase_pct >= 0.5:
        raise ValueError(f"phase_pct must be < 0.5 when three_phase is True, got {phase_pct!r}")
    qualified = f"{NS}.OneCycleLR"
    start_lr = (v.check_real(qualified, "max_learning_rate", max_learning_rate)
                / v.check_range(qualified, "divide_factor", divide_factor, low=0.0,
                                low_open=True))
    return OneCycle(max_lr=max_learning_rate, total_steps=total_steps, start_lr=start_lr,
                    end_lr=end_learning_rate, pct_start=phase_pct,
                    anneal=anneal_strategy, three_phase=three_phase)


@schedule_preset(f"{NS}.CyclicLR")
def cyclic_lr(base_learning_rate, max_learning_rate, step_size_up, step_size_down=None,
              mode="triangular", exp_gamma=1.0, scale_fn=None, scale_mode="cycle",
              last_epoch=-1, verbose=False):
    _common("CyclicLR", last_epoch, verbose)
    return cyclic(f"{NS}.CyclicLR", base_learning_rate, max_learning_rate, step_size_up,
                  step_size_down, mode, exp_gamma, scale_fn, scale_mode)


@schedule_preset(f"{NS}.LinearLR")
def linear_lr(learning_rate, total_steps, start_factor=1.0 / 3, end_factor=1.0, last_epoch=-1,
              verbose=False):
    _common("LinearLR", last_epoch, verbose)
    return Linear(lr=learning_rate, total_steps=total_steps, start_factor=start_factor,
                  end_factor=end_factor)


@schedule_preset(f"{NS}.CosineAnnealingWarmRestarts")
def cosine_annealing_warm_restarts(learning_rate, T_0, T_mult=1, eta_min=0, last_epoch=-1,
                                   verbose=False):
    _common("CosineAnnealingWarmRestarts", last_epoch, verbose)
    return CosineWarmRestarts(lr=learning_rate, T_0=T_0, T_mult=T_mult, eta_min=eta_min)
