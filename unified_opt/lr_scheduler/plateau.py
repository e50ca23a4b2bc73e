"""``ReduceLROnPlateau``: torch's metric-driven scheduler on any optimizer with
``param_groups``, following the rule ``uo.schedules.ReduceOnPlateau`` (its torch preset,
one per group for per-group ``min_lr``).

As torch's: each report reduces every group's *current* lr (an lr written by hand or by
another scheduler is the one reduced), ``new = max(lr * factor, min_lr)`` taken only when
``lr - new > eps``; the best metric, the count of bad reports and the cooldown are shared
by the groups.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from .. import _validation as v
from .base import (
    LRScheduler,
    checked_groups,
    lr_of,
    metric_value,
    per_group,
    refuse_scheduled_spec,
    write_lr,
)

TORCH = "torch.optim.lr_scheduler.ReduceLROnPlateau"


class ReduceLROnPlateau(LRScheduler):
    """Reduces the lr when a metric stops improving (torch ``ReduceLROnPlateau``).

    Args:
        optimizer: Any optimizer with ``param_groups``.
        mode: "min" or "max".
        factor: The reduction factor, < 1.
        patience: Bad reports tolerated before a reduction.
        threshold: What counts as an improvement.
        threshold_mode: "rel" or "abs".
        cooldown: Reports after a reduction during which bad reports are not counted.
        min_lr: The lowest lr, or one per group.
        eps: A reduction smaller than this is not made.

    Attributes:
        rules: The ``uo.schedules.ReduceOnPlateau`` rule of each group.
        schedules: None: the lr depends on the metrics, not on the step alone.

    Example:
        >>> sched = uo.lr_scheduler.ReduceLROnPlateau(opt, patience=3)
        >>> sched.step(val_loss)
    """

    recursive = False

    def __init__(self, optimizer: Any, mode: str = "min", factor: float = 0.1,
                 patience: int = 10, threshold: float = 1e-4, threshold_mode: str = "rel",
                 cooldown: int = 0, min_lr: float | list[float] = 0, eps: float = 1e-8) -> None:
        from ..schedules import ReduceOnPlateau

        owner = type(self).__name__
        groups = checked_groups(owner, optimizer)
        refuse_scheduled_spec(owner, optimizer)
        if isinstance(factor, (int, float)) and not isinstance(factor, bool) and factor >= 1.0:
            raise ValueError(f"{owner}: factor should be < 1.0, got {factor!r}")
        min_lrs = per_group(owner, "min_lr", min_lr, len(groups))
        try:
            rules = [ReduceOnPlateau.from_native(TORCH, mode=mode, factor=factor,
                                                 patience=patience, threshold=threshold,
                                                 threshold_mode=threshold_mode,
                                                 cooldown=cooldown, min_lr=m, eps=eps)
                     for m in min_lrs]
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"{owner}: {str(exc).replace(TORCH + ': ', '')}") from exc
        self.optimizer = optimizer
        self.rules = rules
        self.schedules = None  # type: ignore[assignment]  # metric-driven: no lr(step)
        self.base_lrs = [float(lr_of(g)) for g in groups]
        self.last_epoch = 0
        self._owner = None
        self._kwargs = []
        self._last_lr = list(self.base_lrs)
        self._state = rules[0].start(self.base_lrs[0])

    def step(self, metrics: Any, epoch: int | None = None) -> None:  # type: ignore[override]
        """Reports one metric value; reduces the lrs where the rule says so.

        Args:
            metrics: The metric: a real number or a one-element tensor.
            epoch: None (torch's deprecated epoch is refused: it only renumbers).

        Raises:
            TypeError: ``metrics`` is not a number or a one-element tensor.
        """
        owner = type(self).__name__
        if epoch is not None:
            raise TypeError(f"{owner}.step: epoch={epoch!r} is not supported (torch's "
                            "deprecated argument only renumbers the reports); call step(metrics)")
        metric = metric_value(owner, metrics)
        groups = checked_groups(owner, self.optimizer)
        if len(groups) != len(self.rules):
            raise RuntimeError(f"{owner}: the optimizer has {len(groups)} param groups, "
                               f"{len(self.rules)} when the scheduler was made")
        shared = None
        for group, rule in zip(groups, self.rules):
            current = dataclasses.replace(self._state, lr=float(lr_of(group)))
            after = rule.report(current, metric)
            if after.lr != current.lr:
                write_lr(group, after.lr)
            shared = after
        assert shared is not None
        self._state = shared
        self.last_epoch += 1
        self._last_lr = [lr_of(g) for g in groups]

    @property
    def best(self) -> float:
        """The best metric so far (the worst value before the first report)."""
        return float(self._state.best if self._state.best is not None else float("nan"))

    @property
    def num_bad_epochs(self) -> int:
        """Bad reports since the last improvement or reduction."""
        return self._state.bad

    @property
    def cooldown_counter(self) -> int:
        """Reports of cooldown left."""
        return self._state.cooldown_left

    def state_dict(self) -> dict[str, Any]:
        """The counters, the best metric and the last lrs, as plain data.

        Returns:
            ``{"last_epoch", "_last_lr", "best", "num_bad_epochs", "cooldown_counter"}``.
        """
        return {"last_epoch": self.last_epoch, "_last_lr": list(self._last_lr),
                "best": self.best, "num_bad_epochs": self.num_bad_epochs,
                "cooldown_counter": self.cooldown_counter}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores what :meth:`state_dict` returned.

        Args:
            state_dict: A dict from :meth:`state_dict`.

        Raises:
            TypeError: A value of the wrong type.
            ValueError: Other keys.
        """
        owner = type(self).__name__
        keys = set(self.state_dict())
        if not isinstance(state_dict, dict) or set(state_dict) != keys:
            raise ValueError(f"{owner}.load_state_dict: expected a dict with keys "
                             f"{sorted(keys)}, got {state_dict!r}")
        last_lr = state_dict["_last_lr"]
        if not isinstance(last_lr, list) or len(last_lr) != len(self.rules):
            raise ValueError(f"{owner}.load_state_dict: state_dict['_last_lr'] must be a list "
                             f"of {len(self.rules)} lrs, got {last_lr!r}")
        best = state_dict["best"]
        if isinstance(best, bool) or not isinstance(best, (int, float)):
            raise TypeError(f"{owner}.load_state_dict: state_dict['best'] must be a float, "
                            f"got {best!r}")
        self._state = dataclasses.replace(
            self._state, best=float(best),
            bad=v.check_int(owner, "state_dict['num_bad_epochs']",
                            state_dict["num_bad_epochs"], low=0),
            cooldown_left=v.check_int(owner, "state_dict['cooldown_counter']",
                                      state_dict["cooldown_counter"], low=0))
        self.last_epoch = v.check_int(owner, "state_dict['last_epoch']",
                                      state_dict["last_epoch"], low=0)
        self._last_lr = [v.check_range(owner, f"state_dict['_last_lr'][{i}]", x, low=0.0)
                         for i, x in enumerate(last_lr)]
