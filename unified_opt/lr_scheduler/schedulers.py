"""torch's step-driven schedulers, each the ``uo.schedules`` preset of its torch name per
parameter group (see :mod:`unified_opt.lr_scheduler.base`).

Arguments, defaults and per-group lists follow ``torch.optim.lr_scheduler``; the argument
checks are the schedules' (a wrong type is a TypeError, a wrong value a ValueError, each
naming the argument and the value).
"""

from __future__ import annotations

from typing import Any, Callable

from .. import _validation as v
from .base import LRScheduler, per_group, write_lr


def _lambdas(owner: str, lr_lambda: Any, count: int) -> list[dict[str, Any]]:
    if isinstance(lr_lambda, (list, tuple)) and len(lr_lambda) != count:
        raise ValueError(f"{owner}: expected {count} lr_lambdas (one per param group), but "
                         f"got {len(lr_lambda)}")
    fns = per_group(owner, "lr_lambda", lr_lambda, count)
    for i, fn in enumerate(fns):
        if not callable(fn):
            raise TypeError(f"{owner}: lr_lambda should be a function, but got {fn!r} of "
                            f"type {type(fn).__name__}" + (f" (group {i})" if count > 1
                                                           else ""))
    return [{"lr_lambda": fn} for fn in fns]


class _OfLambdas(LRScheduler):
    """A scheduler given a function of the step, or one per group (``lr_lambda``)."""

    def __init__(self, optimizer: Any, lr_lambda: Callable | list[Callable],
                 last_epoch: int = -1) -> None:
        self._lr_lambda = lr_lambda
        super().__init__(optimizer, last_epoch)

    def _group_kwargs(self, count):
        return _lambdas(type(self).__name__, self._lr_lambda, count)


class LambdaLR(_OfLambdas):
    """``lr = initial_lr * lr_lambda(step)`` (torch ``LambdaLR``).

    Args:
        optimizer: Any optimizer with ``param_groups`` (every ``uo.build`` result).
        lr_lambda: A function of the step, or a list of them, one per group.
        last_epoch: -1 to start; the last step taken when resuming.

    Example:
        >>> sched = uo.lr_scheduler.LambdaLR(opt, lambda t: 0.95 ** t)
    """

    preset = "LambdaLR"
    recursive = False


class MultiplicativeLR(_OfLambdas):
    """``lr = initial_lr * lr_lambda(1) * ... * lr_lambda(step)`` (torch
    ``MultiplicativeLR``).

    Args:
        optimizer: Any optimizer with ``param_groups``.
        lr_lambda: A function of the step giving the factor, or one per group.
        last_epoch: -1 to start; the last step taken when resuming.

    Example:
        >>> sched = uo.lr_scheduler.MultiplicativeLR(opt, lambda t: 0.97)
    """

    preset = "MultiplicativeLR"


class _Fixed(LRScheduler):
    """A scheduler whose arguments are the same for every group."""

    def __init__(self, optimizer: Any, last_epoch: int, **kwargs: Any) -> None:
        self._arguments = kwargs
        super().__init__(optimizer, last_epoch)

    def _group_kwargs(self, count):
        return [dict(self._arguments) for _ in range(count)]


class StepLR(_Fixed):
    """``lr = initial_lr * gamma ** (step // step_size)`` (torch ``StepLR``).

    Args:
        optimizer: Any optimizer with ``param_groups``.
        step_size: Steps between decays (an int >= 1).
        gamma: The decay factor.
        last_epoch: -1 to start; the last step taken when resuming.

    Example:
        >>> sched = uo.lr_scheduler.StepLR(opt, step_size=30, gamma=0.1)
    """

    preset = "StepLR"

    def __init__(self, optimizer: Any, step_size: int, gamma: float = 0.1,
                 last_epoch: int = -1) -> None:
        super().__init__(optimizer, last_epoch, step_size=step_size, gamma=gamma)


class MultiStepLR(_Fixed):
    """``lr = initial_lr * gamma ** (number of milestones <= step)`` (torch
    ``MultiStepLR``; a milestone listed twice counts twice).

    Args:
        optimizer: Any optimizer with ``param_groups``.
        milestones: Steps at which the lr is multiplied by ``gamma``.
        gamma: The decay factor.
        last_epoch: -1 to start; the last step taken when resuming.

    Example:
        >>> sched = uo.lr_scheduler.MultiStepLR(opt, [30, 80], gamma=0.1)
    """

    preset = "MultiStepLR"

    def __init__(self, optimizer: Any, milestones: Any, gamma: float = 0.1,
                 last_epoch: int = -1) -> None:
        super().__init__(optimizer, last_epoch, milestones=milestones, gamma=gamma)


class ConstantLR(_Fixed):
    """``lr = initial_lr * factor`` until ``total_iters``, then ``initial_lr`` (torch
    ``ConstantLR``).

    Args:
        optimizer: Any optimizer with ``param_groups``.
        factor: In (0, 1].
        total_iters: Steps at the reduced lr.
        last_epoch: -1 to start; the last step taken when resuming.

    Example:
        >>> sched = uo.lr_scheduler.ConstantLR(opt, factor=0.5, total_iters=4)
    """

    preset = "ConstantLR"

    def __init__(self, optimizer: Any, factor: float = 1.0 / 3, total_iters: int = 5,
                 last_epoch: int = -1) -> None:
        super().__init__(optimizer, last_epoch, factor=factor, total_iters=total_iters)


class LinearLR(_Fixed):
    """The lr factor goes linearly from ``start_factor`` to ``end_factor`` over
    ``total_iters`` steps, then stays (torch ``LinearLR``).

    Args:
        optimizer: Any optimizer with ``param_groups``.
        start_factor: In (0, 1].
        end_factor: In [0, 1].
        total_iters: Steps of the ramp.
        last_epoch: -1 to start; the last step taken when resuming.

    Example:
        >>> sched = uo.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=10)
    """

    preset = "LinearLR"

    def __init__(self, optimizer: Any, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5, last_epoch: int = -1) -> None:
        super().__init__(optimizer, last_epoch, start_factor=start_factor,
                         end_factor=end_factor, total_iters=total_iters)


class ExponentialLR(_Fixed):
    """``lr = initial_lr * gamma ** step`` (torch ``ExponentialLR``).

    Args:
        optimizer: Any optimizer with ``param_groups``.
        gamma: The factor per step.
        last_epoch: -1 to start; the last step taken when resuming.

    Example:
        >>> sched = uo.lr_scheduler.ExponentialLR(opt, gamma=0.99)
    """

    preset = "ExponentialLR"

    def __init__(self, optimizer: Any, gamma: float, last_epoch: int = -1) -> None:
        super().__init__(optimizer, last_epoch, gamma=gamma)


class PolynomialLR(_Fixed):
    """``lr = initial_lr * (1 - min(step, total_iters) / total_iters) ** power`` (torch
    ``PolynomialLR``).

    Args:
        optimizer: Any optimizer with ``param_groups``.
        total_iters: Steps of the decay.
        power: The polynomial's power.
        last_epoch: -1 to start; the last step taken when resuming.

    Example:
        >>> sched = uo.lr_scheduler.PolynomialLR(opt, total_iters=100, power=2.0)
    """

    preset = "PolynomialLR"

    def __init__(self, optimizer: Any, total_iters: int = 5, power: float = 1.0,
                 last_epoch: int = -1) -> None:
        super().__init__(optimizer, last_epoch, total_iters=total_iters, power=power)


class CosineAnnealingLR(_Fixed):
    """``lr = eta_min + (initial_lr - eta_min) (1 + cos(pi step / T_max)) / 2``, rising
    again past ``T_max`` (torch ``CosineAnnealingLR``, whose recursive form this closed
    form equals within rounding).

    Args:
        optimizer: Any optimizer with ``param_groups``.
        T_max: Steps of the half period.
        eta_min: The lowest lr.
        last_epoch: -1 to start; the last step taken when resuming.

    Example:
        >>> sched = uo.lr_scheduler.CosineAnnealingLR(opt, T_max=100)
    """

    preset = "CosineAnnealingLR"

    def __init__(self, optimizer: Any, T_max: int, eta_min: float = 0.0,
                 last_epoch: int = -1) -> None:
        super().__init__(optimizer, last_epoch, T_max=T_max, eta_min=eta_min)


class CosineAnnealingWarmRestarts(_Fixed):
    """SGDR: cosines from ``initial_lr`` to ``eta_min`` over ``T_0``, ``T_0 * T_mult``, ...
    steps (torch ``CosineAnnealingWarmRestarts``).

    ``step(epoch)`` takes an int step: torch's fractional epochs (``epoch + i / iters``)
    have no integer-step schedule and are refused; count ``T_0`` in optimizer steps.

    Args:
        optimizer: Any optimizer with ``param_groups``.
        T_0: Steps of the first period (an int >= 1).
        T_mult: Growth of the period at each restart (an int >= 1).
        eta_min: The lowest lr.
        last_epoch: -1 to start; the last step taken when resuming.

    Example:
        >>> sched = uo.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=10)
    """

    preset = "CosineAnnealingWarmRestarts"
    recursive = False

    def __init__(self, optimizer: Any, T_0: int, T_mult: int = 1, eta_min: float = 0.0,
                 last_epoch: int = -1) -> None:
        super().__init__(optimizer, last_epoch, T_0=T_0, T_mult=T_mult, eta_min=eta_min)


# -- the cycling schedulers: they set the lr (and the momentum) themselves ----------------

class _Cycling(LRScheduler):
    """OneCycleLR and CyclicLR: the lr from their own bounds, and, with
    ``cycle_momentum``, each group's ``"betas"[0]`` (where the group has ``betas``) or
    ``"momentum"`` set from the schedule's ``momentum(step)``."""

    recursive = False
    scales_lr = False
    _arguments: dict[str, Any]        # the same for every group
    _per_group: dict[str, Any]        # a value, or one per group

    def _group_kwargs(self, count):
        lists = {k: per_group(type(self).__name__, k, x, count)
                 for k, x in self._per_group.items()}
        return [{**self._arguments, **{k: lists[k][g] for k in lists}} for g in range(count)]

    def _check_momentum(self, groups: list[dict]) -> None:
        if not self._arguments["cycle_momentum"]:
            return
        for i, group in enumerate(groups):
            if "betas" not in group and "momentum" not in group:
                raise ValueError(f"{type(self).__name__}: cycle_momentum=True needs an "
                                 "optimizer with momentum or beta1, but "
                                 f"optimizer.param_groups[{i}] has neither 'momentum' nor "
                                 f"'betas' (keys: {sorted(group)}); pass "
                                 "cycle_momentum=False")
        # torch asks optimizer.defaults once; here each group's own key says

    def _after_write(self, groups):
        if not self._arguments["cycle_momentum"]:
            return
        for group, schedule in zip(groups, self.schedules):
            momentum = schedule.momentum(self.last_epoch)
            if "betas" in group:
                group["betas"] = (momentum, *tuple(group["betas"])[1:])
            else:
                group["momentum"] = momentum


class CyclicLR(_Cycling):
    """The cyclical lr policy (torch ``CyclicLR``): triangles between ``base_lr`` and
    ``max_lr``, scaled by ``mode`` or ``scale_fn``; with ``cycle_momentum`` the
    momentum cycles the other way between ``max_momentum`` and ``base_momentum``.

    Args:
        optimizer: Any optimizer with ``param_groups``; with ``cycle_momentum`` each group
            needs ``"momentum"`` or ``"betas"``.
        base_lr: The lower bound (overwrites the groups' lr), or one per group.
        max_lr: The upper bound, or one per group.
        step_size_up: Steps of the rising half.
        step_size_down: Steps of the falling half (None: ``step_size_up``).
        mode: "triangular", "triangular2" or "exp_range".
        gamma: The "exp_range" factor per step.
        scale_fn: A function replacing the mode's scaling (not serialisable).
        scale_mode: "cycle" or "iterations": what ``scale_fn`` is applied to.
        cycle_momentum: Cycle the momentum too.
        base_momentum: Lower momentum bound, or one per group.
        max_momentum: Upper momentum bound, or one per group.
        last_epoch: -1 to start; the last step taken when resuming.

    Example:
        >>> sched = uo.lr_scheduler.CyclicLR(opt, 0.001, 0.1, step_size_up=500)
    """

    preset = "CyclicLR"

    def __init__(self, optimizer: Any, base_lr: float | list[float],
                 max_lr: float | list[float], step_size_up: int = 2000,
                 step_size_down: int | None = None, mode: str = "triangular",
                 gamma: float = 1.0, scale_fn: Callable | None = None,
                 scale_mode: str = "cycle", cycle_momentum: bool = True,
                 base_momentum: float | list[float] = 0.8,
                 max_momentum: float | list[float] = 0.9, last_epoch: int = -1) -> None:
        owner = type(self).__name__
        if mode not in ("triangular", "triangular2", "exp_range") and scale_fn is None:
            raise ValueError(f"{owner}: mode is invalid and scale_fn is None: mode must be "
                             f"'triangular', 'triangular2' or 'exp_range', got {mode!r}")
        self._arguments = dict(
            step_size_up=step_size_up, step_size_down=step_size_down, mode=mode,
            gamma=gamma, scale_fn=scale_fn, scale_mode=scale_mode,
            cycle_momentum=v.check_bool(owner, "cycle_momentum", cycle_momentum))
        self._per_group = dict(base_lr=base_lr, max_lr=max_lr, base_momentum=base_momentum,
                               max_momentum=max_momentum)
        super().__init__(optimizer, last_epoch)

    def _base_lrs(self, groups, last_epoch):
        self._check_momentum(groups)
        return [kw["base_lr"] for kw in self._group_kwargs(len(groups))]

    def _prepare(self, groups):
        if self.last_epoch != -1:
            return
        for group, kwargs in zip(groups, self._kwargs):
            write_lr(group, kwargs["base_lr"])    # torch's constructor sets it
            if self._arguments["cycle_momentum"]:
                group["max_momentum"] = kwargs["max_momentum"]
                group["base_momentum"] = kwargs["base_momentum"]


class OneCycleLR(_Cycling):
    """The one-cycle policy (torch ``OneCycleLR``): from ``max_lr / div_factor`` up to
    ``max_lr`` over ``pct_start`` of ``total_steps``, then down to ``initial_lr /
    final_div_factor`` (``three_phase``: back to the start first); with
    ``cycle_momentum`` the momentum goes the other way. Stepping past ``total_steps``
    raises, as torch does.

    Args:
        optimizer: Any optimizer with ``param_groups``; with ``cycle_momentum`` each group
            needs ``"momentum"`` or ``"betas"``.
        max_lr: The peak lr, or one per group.
        total_steps: Steps of the cycle; or give ``epochs`` and ``steps_per_epoch``.
        epochs: With ``steps_per_epoch``, ``total_steps = epochs * steps_per_epoch``.
        steps_per_epoch: See ``epochs``.
        pct_start: Fraction of the cycle spent rising.
        anneal_strategy: "cos" or "linear".
        cycle_momentum: Cycle the momentum too.
        base_momentum: Lower momentum bound, or one per group.
        max_momentum: Upper momentum bound, or one per group.
        div_factor: ``initial_lr = max_lr / div_factor``.
        final_div_factor: ``min_lr = initial_lr / final_div_factor``.
        three_phase: Three phases instead of two.
        last_epoch: -1 to start; the last step taken when resuming.

    Example:
        >>> sched = uo.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=1000)
    """

    preset = "OneCycleLR"

    def __init__(self, optimizer: Any, max_lr: float | list[float],
                 total_steps: int | None = None, epochs: int | None = None,
                 steps_per_epoch: int | None = None, pct_start: float = 0.3,
                 anneal_strategy: str = "cos", cycle_momentum: bool = True,
                 base_momentum: float | list[float] = 0.85,
                 max_momentum: float | list[float] = 0.95, div_factor: float = 25.0,
                 final_div_factor: float = 1e4, three_phase: bool = False,
                 last_epoch: int = -1) -> None:
        owner = type(self).__name__
        if total_steps is None and (epochs is None or steps_per_epoch is None):
            raise ValueError(f"{owner}: you must define either total_steps OR (epochs AND "
                             f"steps_per_epoch); got total_steps=None, epochs={epochs!r}, "
                             f"steps_per_epoch={steps_per_epoch!r}")
        self._arguments = dict(
            total_steps=total_steps, epochs=epochs, steps_per_epoch=steps_per_epoch,
            pct_start=pct_start, anneal_strategy=anneal_strategy,
            cycle_momentum=v.check_bool(owner, "cycle_momentum", cycle_momentum),
            div_factor=div_factor, final_div_factor=final_div_factor,
            three_phase=three_phase)
        self._per_group = dict(max_lr=max_lr, base_momentum=base_momentum,
                               max_momentum=max_momentum)
        super().__init__(optimizer, last_epoch)

    def _base_lrs(self, groups, last_epoch):
        self._check_momentum(groups)
        if last_epoch != -1:
            return [g["initial_lr"] for g in groups]
        # max_lr / div_factor, as the preset computes it
        return [self._schedule(0.0, kw).start_lr for kw in self._group_kwargs(len(groups))]

    def _prepare(self, groups):
        if self.last_epoch != -1:
            return
        for group, schedule in zip(groups, self.schedules):
            # torch's constructor writes these keys (its get_lr reads them)
            group["initial_lr"] = schedule.start_lr
            group["max_lr"] = schedule.max_lr
            group["min_lr"] = schedule.end_lr
            if self._arguments["cycle_momentum"]:
                group["max_momentum"] = schedule.max_momentum
                group["base_momentum"] = schedule.base_momentum
