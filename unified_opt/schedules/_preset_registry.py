"""Scheduler presets: qualified native scheduler name -> function of its native kwargs.

A preset function has the native constructor's signature (without the optimizer; torch
and MindSpore-experimental presets add ``base_lr``, the optimizer lr they scale) with the
native defaults, and returns the :class:`Schedule` giving the native lr at every step.
"""

from __future__ import annotations

import warnings
from typing import Any

from .._native_registry import NativeRegistry
from .base import Schedule

REGISTRY = NativeRegistry("schedule preset", "uo.schedules.presets()")
schedule_preset = REGISTRY.register
refuse = REGISTRY.refuse
refusal = REGISTRY.refusal

#: What a metric-driven scheduler's preset says (they have no lr(step)).
PLATEAU = ("it is metric-driven: the lr depends on the values passed to step(metrics), so "
           "it has no lr(step) a schedule could hold. Its rule is "
           "uo.schedules.plateau.ReduceOnPlateau.from_native(qualified_name, **native_kwargs) "
           "(lrs(initial_lr, metrics) gives the lr after each report); "
           "uo.plateau_scheduler(opt, rule) makes the framework's own "
           "scheduler for a constant-lr optimizer from uo.build: torch ReduceLROnPlateau, "
           "Paddle ReduceOnPlateau via opt.set_lr_scheduler, MindSpore the experimental "
           "ReduceLROnPlateau (experimental.optim optimizers) or the "
           "mindspore.train.ReduceLROnPlateau callback (mindspore.nn optimizers)")


def presets(refused: bool = False) -> list[str]:
    """Qualified names of every native scheduler with a preset; with ``refused=True``,
    those whose preset raises NotImplementedError saying why."""
    return REGISTRY.names(refused)


def preset(qualified_name: str, **native_kwargs: Any) -> Schedule:
    """The schedule giving, at every step, the lr ``qualified_name(**native_kwargs)`` gives."""
    fn = REGISTRY.checked(qualified_name, native_kwargs)
    try:
        return fn(**native_kwargs)
    except (TypeError, ValueError) as exc:
        if str(exc).startswith(qualified_name):
            raise
        # The schedule's message names its own field; the prefix names the native call.
        raise type(exc)(f"{qualified_name}: {exc}") from exc


# -- helpers for the preset modules -------------------------------------------------------

def no_resume(qualified_name: str, last_epoch: Any) -> None:
    if last_epoch != -1:
        raise NotImplementedError(f"{qualified_name}: last_epoch={last_epoch!r} (resuming) is "
                                  "not supported: the preset describes a run from step 0; "
                                  "resume by starting the run at that step")


def quiet(qualified_name: str, verbose: Any) -> None:
    if verbose:
        warnings.warn(f"{qualified_name}: verbose={verbose!r} only prints; the schedule does "
                      "not carry it", stacklevel=3)


def one_group(qualified_name: str, argument: str, value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        raise NotImplementedError(f"{qualified_name}: {argument}={value!r} gives one value per "
                                  "parameter group; a schedule preset takes one value (build "
                                  "one schedule per group)")
    return value


def sub_presets(qualified_name: str, namespace: str, schedulers: Any,
                refuse_inside: dict[str, str], **shared: Any) -> list[tuple[str, Schedule]]:
    """``schedulers`` given as ``[(name, native_kwargs), ...]`` (the name bare or qualified
    in ``namespace``), each read with ``shared`` (``base_lr``) added."""
    if not isinstance(schedulers, (list, tuple)) or not schedulers:
        raise TypeError(f"{qualified_name}: schedulers must be a non-empty list of (name, "
                        f"native_kwargs) pairs, got {schedulers!r}")
    out = []
    for i, item in enumerate(schedulers):
        if (not isinstance(item, (list, tuple)) or len(item) != 2
                or not isinstance(item[0], str) or not isinstance(item[1], dict)):
            raise TypeError(f"{qualified_name}: schedulers[{i}] must be a (name, native_kwargs)"
                            f" pair, e.g. ('LinearLR', {{'total_iters': 5}}), got {item!r}")
        if set(shared) & set(item[1]):
            raise TypeError(f"{qualified_name}: schedulers[{i}] must not set "
                            f"{sorted(set(shared) & set(item[1]))}: the schedulers share the "
                            f"optimizer's lr, given once to {qualified_name}")
        name = item[0] if "." in item[0] else f"{namespace}.{item[0]}"
        bare = name.rpartition(".")[2]
        if not name.startswith(namespace + "."):
            raise ValueError(f"{qualified_name}: schedulers[{i}] must be a {namespace} "
                             f"scheduler, got {item[0]!r}")
        if bare in refuse_inside:
            raise NotImplementedError(f"{qualified_name}: schedulers[{i}]={bare} is not "
                                      f"supported here: {refuse_inside[bare]}")
        out.append((bare, preset(name, **shared, **item[1])))
    return out
