r"""Decay schedules: constant, step, multi-step, piecewise, exponential, natural-exp,
inverse-time, polynomial, linear and Noam.

``t`` is the 0-based optimizer step. The formulas are written in the operation order of
the native closed forms (torch ``_get_closed_form_lr``, Paddle ``get_lr``), so a preset
reproduces the native lr to the last bit or within a few ulps where the native class
computes recursively.
"""

from __future__ import annotations

import bisect
import math

from .. import _validation as v
from .base import Schedule, check_list, check_lr, check_steps, schedule_dataclass


@schedule_dataclass
class Constant(Schedule):
    r"""``lr(t) = lr``."""

    name = "constant"
    lr: float

    def _check(self, owner):
        return {"lr": check_lr(owner, "lr", self.lr)}

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
        return {"lr": check_lr(owner, "lr", self.lr),
                "step_size": v.check_int(owner, "step_size", self.step_size, low=1),
                "gamma": v.check_range(owner, "gamma", self.gamma, low=0.0)}

    def value(self, step):
        return self.lr * self.gamma ** (step // self.step_size)


@schedule_dataclass
class MultiStep(Schedule):
    r"""``lr(t) = lr * gamma ** #{m in milestones: m <= t}``; a milestone listed twice
    counts twice (torch ``MultiStepLR``)."""

    name = "multi_step"
    lr: float
    milestones: tuple[int, ...]
    gamma: float = 0.1

    def _check(self, owner):
        return {"lr": check_lr(owner, "lr", self.lr),
                "milestones": check_steps(owner, "milestones", self.milestones),
                "gamma": v.check_range(owner, "gamma", self.gamma, low=0.0)}

    def value(self, step):
        return self.lr * self.gamma ** bisect.bisect_right(self.milestones, step)


@schedule_dataclass
class Piecewise(Schedule):
    r"""``lr(t) = values[i]`` for the first ``i`` with ``t < boundaries[i]``, else
    ``values[-1]``; ``len(values) == len(boundaries) + 1``."""

    name = "piecewise"
    boundaries: tuple[int, ...]
    values: tuple[float, ...]

    def _check(self, owner):
        boundaries = check_steps(owner, "boundaries", self.boundaries)
        values = check_list(owner, "values", self.values)
        if len(values) != len(boundaries) + 1:
            raise ValueError(f"{owner}: values must have len(boundaries) + 1 = "
                             f"{len(boundaries) + 1} entries, got {list(values)!r}")
        values = tuple(check_lr(owner, f"values[{i}]", x) for i, x in enumerate(values))
        return {"boundaries": boundaries, "values": values}

    def value(self, step):
        return self.values[bisect.bisect_right(self.boundaries, step)]


def _check_decay(owner, schedule):
    return {"lr": check_lr(owner, "lr", schedule.lr),
            "gamma": v.check_range(owner, "gamma", schedule.gamma, low=0.0),
            "decay_steps": v.check_int(owner, "decay_steps", schedule.decay_steps, low=1),
            "staircase": v.check_bool(owner, "staircase", schedule.staircase)}


@schedule_dataclass
class Exponential(Schedule):
    r"""``lr(t) = lr * gamma ** (t / decay_steps)``; with ``staircase`` the exponent is
    ``floor(t / decay_steps)`` (torch ``ExponentialLR`` is ``decay_steps=1``)."""

    name = "exponential"
    lr: float
    gamma: float
    decay_steps: int = 1
    staircase: bool = False

    def _check(self, owner):
        return _check_decay(owner, self)

    def value(self, step):
        if self.staircase:
            return self.lr * self.gamma ** (step // self.decay_steps)
        return self.lr * self.gamma ** (step / self.decay_steps)


@schedule_dataclass
class NaturalExp(Schedule):
    r"""``lr(t) = lr * exp(-gamma * p)`` with ``p = t``, or with ``staircase``
    ``p = decay_steps * floor(t / decay_steps)``.

    As in Paddle ``NaturalExpDecay`` and MindSpore ``NaturalExpDecayLR``, ``decay_steps``
    only sets the stair width: the exponent is not divided by it.
    """

    name = "natural_exp"
    lr: float
    gamma: float
    decay_steps: int = 1
    staircase: bool = False

    def _check(self, owner):
        return _check_decay(owner, self)

    def value(self, step):
        p = (step // self.decay_steps) * self.decay_steps if self.staircase else step
        return self.lr * math.exp(-self.gamma * p)


@schedule_dataclass
class InverseTime(Schedule):
    r"""``lr(t) = lr / (1 + gamma * t / decay_steps)``; with ``staircase``
    ``lr / (1 + gamma * floor(t / decay_steps))``."""

    name = "inverse_time"
    lr: float
    gamma: float
    decay_steps: int = 1
    staircase: bool = False

    def _check(self, owner):
        return _check_decay(owner, self)

    def value(self, step):
        if self.staircase:
            return self.lr / (1 + self.gamma * (step // self.decay_steps))
        return self.lr / (1 + self.gamma * step / self.decay_steps)


@schedule_dataclass
class Polynomial(Schedule):
    r"""``lr(t) = (lr - end_lr) (1 - t' / D') ** power + end_lr``.

    Without ``cycle``: ``t' = min(t, decay_steps)``, ``D' = decay_steps`` (then flat at
    ``end_lr``). With ``cycle``: ``t' = t`` and ``D' = decay_steps * max(ceil(t /
    decay_steps), 1)`` (Paddle ``cycle``, MindSpore ``update_decay_steps``).
    """

    name = "polynomial"
    lr: float
    decay_steps: int
    end_lr: float = 0.0
    power: float = 1.0
    cycle: bool = False

    def _check(self, owner):
        return {"lr": check_lr(owner, "lr", self.lr),
                "decay_steps": v.check_int(owner, "decay_steps", self.decay_steps, low=1),
                "end_lr": check_lr(owner, "end_lr", self.end_lr),
                "power": v.check_range(owner, "power", self.power, low=0.0),
                "cycle": v.check_bool(owner, "cycle", self.cycle)}

    def value(self, step):
        if self.cycle:
            t, decay = step, self.decay_steps * max(math.ceil(step / self.decay_steps), 1)
        else:
            t, decay = min(step, self.decay_steps), self.decay_steps
        return (self.lr - self.end_lr) * (1 - float(t) / float(decay)) ** self.power + self.end_lr


@schedule_dataclass
class Linear(Schedule):
    r"""``lr(t) = lr * (start_factor + (end_factor - start_factor) min(t, total_steps) /
    total_steps)``: a straight line, then flat (torch/Paddle ``LinearLR``; with
    ``start_factor=0`` MindSpore's ``WarmUpLR``)."""

    name = "linear"
    lr: float
    total_steps: int
    start_factor: float
    end_factor: float = 1.0

    def _check(self, owner):
        return {"lr": check_lr(owner, "lr", self.lr),
                "total_steps": v.check_int(owner, "total_steps", self.total_steps, low=1),
                "start_factor": v.check_range(owner, "start_factor", self.start_factor, low=0.0),
                "end_factor": v.check_range(owner, "end_factor", self.end_factor, low=0.0)}

    def value(self, step):
        span = (self.end_factor - self.start_factor) * min(self.total_steps, step)
        return self.lr * (self.start_factor + span / self.total_steps)


@schedule_dataclass
class Noam(Schedule):
    r"""``lr(t) = lr * d_model ** -0.5 * min(a, t * warmup_steps ** -1.5)`` with
    ``a = t ** -0.5`` (``a = 1`` at ``t = 0``, so step 0 has lr 0): Paddle ``NoamDecay``."""

    name = "noam"
    d_model: int
    warmup_steps: int
    lr: float = 1.0

    def _check(self, owner):
        return {"d_model": v.check_int(owner, "d_model", self.d_model, low=1),
                "warmup_steps": v.check_int(owner, "warmup_steps", self.warmup_steps, low=1),
                "lr": check_lr(owner, "lr", self.lr)}

    def value(self, step):
        a = 1 if step == 0 else step ** (-0.5)
        b = self.warmup_steps ** (-1.5) * step
        return self.lr * self.d_model ** (-0.5) * min(a, b)
