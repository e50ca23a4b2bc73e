"""The first schedules: constant, step, exponential, cosine, linear warm-up."""

from __future__ import annotations

import math

from .. import _validation as v
from .base import Schedule, schedule_dataclass


@schedule_dataclass
class Constant(Schedule):
    r"""``lr(t) = lr``."""

    name = "constant"
    lr: float

    def _check(self, owner):
        return {"lr": v.check_range(owner, "lr", self.lr, low=0.0)}

    def value(self, step):
        return self.lr


@schedule_dataclass
class Step(Schedule):
    r"""``lr(t) = lr * gamma ** floor(t / step_size)`` (torch ``StepLR``, paddle ``StepDecay``)."""

    name = "step"
    lr: float
    step_size: int
    gamma: float = 0.1

    def _check(self, owner):
        return {"lr": v.check_range(owner, "lr", self.lr, low=0.0),
                "step_size": v.check_int(owner, "step_size", self.step_size, low=1),
                "gamma": v.check_range(owner, "gamma", self.gamma, low=0.0)}

    def value(self, step):
        return self.lr * self.gamma ** (step // self.step_size)


@schedule_dataclass
class Exponential(Schedule):
    r"""``lr(t) = lr * gamma ** t``."""

    name = "exponential"
    lr: float
    gamma: float

    def _check(self, owner):
        return {"lr": v.check_range(owner, "lr", self.lr, low=0.0),
                "gamma": v.check_range(owner, "gamma", self.gamma, low=0.0)}

    def value(self, step):
        return self.lr * self.gamma ** step


@schedule_dataclass
class Cosine(Schedule):
    r"""``lr(t) = eta_min + (lr - eta_min) (1 + cos(pi t / T_max)) / 2``.

    Periodic past ``T_max`` exactly as torch ``CosineAnnealingLR``'s closed form.
    """

    name = "cosine"
    lr: float
    T_max: int
    eta_min: float = 0.0

    def _check(self, owner):
        return {"lr": v.check_range(owner, "lr", self.lr, low=0.0),
                "T_max": v.check_int(owner, "T_max", self.T_max, low=1),
                "eta_min": v.check_range(owner, "eta_min", self.eta_min, low=0.0)}

    def value(self, step):
        cos = 1.0 + math.cos(math.pi * step / self.T_max)
        return self.eta_min + (self.lr - self.eta_min) * cos / 2.0


@schedule_dataclass
class LinearWarmup(Schedule):
    r"""Linear warm-up from ``start_lr`` to ``after(0)`` over ``warmup_steps``, then
    ``after(t - warmup_steps)`` (paddle ``LinearWarmup``'s step convention)."""

    name = "linear_warmup"
    after: Schedule
    warmup_steps: int
    start_lr: float = 0.0

    def _check(self, owner):
        if not isinstance(self.after, Schedule):
            raise TypeError(f"{owner}: after must be a Schedule, got {self.after!r}")
        return {"warmup_steps": v.check_int(owner, "warmup_steps", self.warmup_steps, low=1),
                "start_lr": v.check_range(owner, "start_lr", self.start_lr, low=0.0)}

    def value(self, step):
        if step < self.warmup_steps:
            end = self.after(0)
            return self.start_lr + (end - self.start_lr) * step / self.warmup_steps
        return self.after(step - self.warmup_steps)
