r"""Schedules built from other schedules or from Python callables.

``LinearWarmup`` (warm-up around any schedule), ``Sequential`` (one schedule after
another, each restarted at its milestone), ``Product`` (factors multiplied: torch's
``ChainedScheduler``), ``PerEpoch`` (epoch-indexed schedules on optimizer steps),
``Lambda`` and ``Multiplicative`` (Python callables; they work but cannot be serialised).

Epoch-based schedules: a schedule written in epochs (torch schedulers stepped once per
epoch, MindSpore's ``*_decay_lr(..., step_per_epoch, decay_epoch)``) becomes a step-based
one with ``PerEpoch(epoch_schedule=s, steps_per_epoch=k)``: optimizer step ``t`` runs with
``s(t // k)``, the epoch's lr held for its ``k`` steps.
"""

from __future__ import annotations

import bisect

from .. import _validation as v
from .base import (
    Schedule,
    check_callable,
    check_list,
    check_lr,
    check_schedule,
    check_steps,
    checked_factor,
    schedule_dataclass,
)


@schedule_dataclass
class LinearWarmup(Schedule):
    r"""Linear warm-up from ``start_lr`` to ``end_lr`` over ``warmup_steps``, then
    ``after(t - warmup_steps)`` (Paddle ``LinearWarmup``'s step convention).

    ``lr(t) = start_lr + (end_lr - start_lr) t / warmup_steps`` for ``t < warmup_steps``;
    ``end_lr=None`` means ``after(0)``, so the warm-up meets the schedule it wraps.
    """

    name = "linear_warmup"
    after: Schedule
    warmup_steps: int
    start_lr: float = 0.0
    end_lr: float | None = None

    def _check(self, owner):
        out = {"after": check_schedule(owner, "after", self.after),
               "warmup_steps": v.check_int(owner, "warmup_steps", self.warmup_steps, low=1),
               "start_lr": check_lr(owner, "start_lr", self.start_lr)}
        if self.end_lr is not None:
            out["end_lr"] = check_lr(owner, "end_lr", self.end_lr)
        return out

    def value(self, step):
        if step < self.warmup_steps:
            end = self.after(0) if self.end_lr is None else self.end_lr
            return self.start_lr + (end - self.start_lr) * step / self.warmup_steps
        return self.after(step - self.warmup_steps)


@schedule_dataclass
class Sequential(Schedule):
    r"""``schedules[i](t - milestones[i-1])`` for ``milestones[i-1] <= t < milestones[i]``
    (torch ``SequentialLR``: each schedule starts from its own step 0 at its milestone)."""

    name = "sequential"
    schedules: tuple[Schedule, ...]
    milestones: tuple[int, ...]

    def _check(self, owner):
        items = check_list(owner, "schedules", self.schedules)
        if not items:
            raise ValueError(f"{owner}: schedules must not be empty, got {self.schedules!r}")
        items = tuple(check_schedule(owner, f"schedules[{i}]", s) for i, s in enumerate(items))
        milestones = check_steps(owner, "milestones", self.milestones)
        if len(milestones) != len(items) - 1:
            raise ValueError(f"{owner}: milestones must have len(schedules) - 1 = "
                             f"{len(items) - 1} entries, got {list(milestones)!r}")
        return {"schedules": items, "milestones": milestones}

    def value(self, step):
        i = bisect.bisect_right(self.milestones, step)
        return self.schedules[i](step - (self.milestones[i - 1] if i else 0))


@schedule_dataclass
class Product(Schedule):
    r"""``lr(t) = lr * factors[0](t) * factors[1](t) * ...``: each factor a schedule with
    base 1 (torch ``ChainedScheduler`` of multiplicative schedulers)."""

    name = "product"
    lr: float
    factors: tuple[Schedule, ...]

    def _check(self, owner):
        items = check_list(owner, "factors", self.factors)
        if not items:
            raise ValueError(f"{owner}: factors must not be empty, got {self.factors!r}")
        return {"lr": check_lr(owner, "lr", self.lr),
                "factors": tuple(check_schedule(owner, f"factors[{i}]", s)
                                 for i, s in enumerate(items))}

    def value(self, step):
        out = self.lr
        for factor in self.factors:
            out = out * factor(step)
        return out


@schedule_dataclass
class PerEpoch(Schedule):
    r"""``lr(t) = epoch_schedule(t // steps_per_epoch)``: an epoch-indexed schedule on
    optimizer steps."""

    name = "per_epoch"
    epoch_schedule: Schedule
    steps_per_epoch: int

    def _check(self, owner):
        return {"epoch_schedule": check_schedule(owner, "epoch_schedule", self.epoch_schedule),
                "steps_per_epoch": v.check_int(owner, "steps_per_epoch", self.steps_per_epoch,
                                               low=1)}

    def value(self, step):
        return self.epoch_schedule(step // self.steps_per_epoch)


@schedule_dataclass
class Lambda(Schedule):
    r"""``lr(t) = lr * fn(t)`` for a Python callable ``fn`` (torch ``LambdaLR``, Paddle
    ``LambdaDecay``). It works everywhere a schedule does, but ``to_dict`` raises:
    a callable cannot be serialised."""

    name = "lambda"
    fn: object
    lr: float = 1.0

    def _check(self, owner):
        return {"fn": check_callable(owner, "fn", self.fn), "lr": check_lr(owner, "lr", self.lr)}

    def value(self, step):
        return self.lr * checked_factor(self, step, self.fn(step))


@schedule_dataclass
class Multiplicative(Schedule):
    r"""``lr(t) = lr * fn(1) * fn(2) * ... * fn(t)`` (torch ``MultiplicativeLR``, Paddle
    ``MultiplicativeDecay``); not serialisable, as :class:`Lambda`."""

    name = "multiplicative"
    fn: object
    lr: float = 1.0

    def _check(self, owner):
        return {"fn": check_callable(owner, "fn", self.fn), "lr": check_lr(owner, "lr", self.lr)}

    def value(self, step):
        # the running products, kept: lr * fn(1) * ... * fn(t), multiplied in that order
        products = self.__dict__.setdefault("_products", [self.lr])
        while len(products) <= step:
            factor = checked_factor(self, len(products), self.fn(len(products)))
            products.append(products[-1] * factor)
        return products[step]
