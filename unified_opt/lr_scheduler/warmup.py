"""Hugging Face ``transformers``' warm-up helpers with their signatures, returning uo
schedulers: each group's lr is ``uo.schedules.preset("transformers.<name>", base_lr=...)``
(the schedules of :mod:`unified_opt.schedules.warmup`), as ``transformers`` returns a
``torch.optim.lr_scheduler.LambdaLR`` computing ``initial_lr * factor(step)``.
"""

from __future__ import annotations

from typing import Any

from .base import LRScheduler


class WarmupScheduler(LRScheduler):
    """The scheduler a ``transformers``-style warm-up helper returns: a LambdaLR whose
    factor is the helper's (non-recursive: it sets ``initial_lr * factor(step)``).

    Args:
        optimizer: Any optimizer with ``param_groups``.
        helper: The helper's qualified name, ``transformers.get_..._schedule_with_warmup``.
        arguments: The helper's arguments (without the optimizer and last_epoch).
        last_epoch: -1 to start; the last step taken when resuming.
    """

    recursive = False

    def __init__(self, optimizer: Any, helper: str, arguments: dict[str, Any],
                 last_epoch: int = -1) -> None:
        self.preset = helper
        self._arguments = dict(arguments)
        super().__init__(optimizer, last_epoch)

    def _group_kwargs(self, count):
        return [dict(self._arguments) for _ in range(count)]


def get_linear_schedule_with_warmup(optimizer: Any, num_warmup_steps: int,
                                    num_training_steps: int,
                                    last_epoch: int = -1) -> WarmupScheduler:
    """lr rises linearly from 0 over ``num_warmup_steps``, then falls linearly to 0 at
    ``num_training_steps`` (``transformers.get_linear_schedule_with_warmup``;
    ``uo.schedules.WarmupLinear``).

    Args:
        optimizer: Any optimizer with ``param_groups``.
        num_warmup_steps: Steps of the warm-up.
        num_training_steps: The step at which the lr reaches 0.
        last_epoch: -1 to start; the last step taken when resuming.

    Returns:
        The scheduler; step it after each ``optimizer.step()``.

    Example:
        >>> sched = uo.lr_scheduler.get_linear_schedule_with_warmup(opt, 100, 1000)
    """
    return WarmupScheduler(optimizer, "transformers.get_linear_schedule_with_warmup",
                           dict(num_warmup_steps=num_warmup_steps,
                                num_training_steps=num_training_steps), last_epoch)


def get_cosine_schedule_with_warmup(optimizer: Any, num_warmup_steps: int,
                                    num_training_steps: int, num_cycles: float = 0.5,
                                    last_epoch: int = -1) -> WarmupScheduler:
    """lr rises linearly from 0 over ``num_warmup_steps``, then follows a cosine with
    ``num_cycles`` periods to ``num_training_steps``, never below 0
    (``transformers.get_cosine_schedule_with_warmup``; ``uo.schedules.WarmupCosine``).

    Args:
        optimizer: Any optimizer with ``param_groups``.
        num_warmup_steps: Steps of the warm-up.
        num_training_steps: Steps of the whole schedule.
        num_cycles: Cosine periods after the warm-up (0.5: down to 0 once).
        last_epoch: -1 to start; the last step taken when resuming.

    Returns:
        The scheduler; step it after each ``optimizer.step()``.

    Example:
        >>> sched = uo.lr_scheduler.get_cosine_schedule_with_warmup(opt, 100, 1000)
    """
    return WarmupScheduler(optimizer, "transformers.get_cosine_schedule_with_warmup",
                           dict(num_warmup_steps=num_warmup_steps,
                                num_training_steps=num_training_steps, num_cycles=num_cycles),
                           last_epoch)


def get_constant_schedule_with_warmup(optimizer: Any, num_warmup_steps: int,
                                      last_epoch: int = -1) -> WarmupScheduler:
    """lr rises linearly from 0 over ``num_warmup_steps``, then stays at the optimizer's
    lr (``transformers.get_constant_schedule_with_warmup``; ``uo.schedules.WarmupConstant``).

    Args:
        optimizer: Any optimizer with ``param_groups``.
        num_warmup_steps: Steps of the warm-up.
        last_epoch: -1 to start; the last step taken when resuming.

    Returns:
        The scheduler; step it after each ``optimizer.step()``.

    Example:
        >>> sched = uo.lr_scheduler.get_constant_schedule_with_warmup(opt, 100)
    """
    return WarmupScheduler(optimizer, "transformers.get_constant_schedule_with_warmup",
                           dict(num_warmup_steps=num_warmup_steps), last_epoch)
