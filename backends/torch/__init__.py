"""The PyTorch backend: ``torch.optim`` classes where exact, :class:`SpecOptimizer`
otherwise.

* The lr schedule becomes a ``LambdaLR`` (exact: ``1.0 * schedule(t)``; a group's lr
  factor is its initial lr, so its lr is ``factor * schedule(t)``). Step it after every
  ``optimizer.step()``, as usual. With ``skip_nonfinite`` it reads the optimizer's count
  of steps taken, so a skipped step keeps the schedule position.
* ``uo.Group`` plans become param groups (one per distinct hyperparameters and lr).
* On the native path the gradient pre-step and per-step weight decay / momentum run in
  the optimizer's step hooks (:mod:`.steps`); the own path runs them in its ``step``.
"""

from __future__ import annotations

import dataclasses

from unified_opt.schedules import Schedule

NAME = "torch"


def build(spec, named, *, path, options, plans):
    import torch

    from unified_opt.build import BuildRecord

    from .lowering import NO_ZERO_SIZE, decide_for
    from .native import native_optimizer
    from .optimizer import SpecOptimizer
    from .steps import NativeStepHooks

    names = [n for n, _ in named]
    params = [p for _, p in named]
    for name, p in named:
        if not isinstance(p, torch.Tensor) or not p.is_leaf:
            raise TypeError(f"build: torch parameters must be leaf tensors, got {name or ''} "
                            f"{type(p).__name__}")
    decision = decide_for(spec, path, plans)
    empty = [name or f"#{i}" for i, (name, p) in enumerate(named) if p.numel() == 0]
    if decision.path == "native" and empty and decision.native in NO_ZERO_SIZE:
        if path == "native":
            raise ValueError(f"build: path='native': {decision.native} cannot take the "
                             f"zero-size parameters {empty} ({NO_ZERO_SIZE[decision.native]})")
        decision = dataclasses.replace(
            decision, path="own", native=None, lowering=None,
            reason=f"zero-size parameters {empty}: {decision.native} "
                   f"{NO_ZERO_SIZE[decision.native]}")
    scheduled = isinstance(spec.lr, Schedule)
    # each parameter's lr: with a schedule, the factor LambdaLR multiplies by schedule(t)
    # (fixed_lr is refused upstream there); else the plan's lr for the spec's lr
    lrs = [plan.lr(1.0 if scheduled else spec.lr) for plan in plans]
    skipped: list[bool] = []
    if decision.path == "native":
        optimizer, group_specs = native_optimizer(decision.lowering, params, plans, lrs,
                                                  options)
        NativeStepHooks(optimizer, spec, decision.lowering, params, plans, group_specs,
                        skipped)
    else:
        if options:
            raise ValueError(f"build: options {sorted(options)} apply to native classes; "
                             f"this spec runs the own implementation ({decision.reason})")
        # a spec whose state belongs on the host (adam_offload) keeps it there
        offload = getattr(spec, "state_device", None) == "host"
        optimizer = SpecOptimizer(params, spec, plans, lrs, offload=offload, skipped=skipped)
    scheduler = None
    if scheduled:
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _lr_factor(spec, optimizer))
    record = BuildRecord(spec, decision, names, params, scheduler, plans, skipped)
    return optimizer, record


def _lr_factor(spec, optimizer):
    """LambdaLR's factor: ``schedule(t)`` of its own counter, or with ``skip_nonfinite``
    of the optimizer's steps taken (a skipped step keeps the schedule position; step
    the scheduler every iteration as usual)."""
    if not spec.skip_nonfinite:
        return spec.lr
    from .steps import steps_taken

    schedule = spec.lr
    return lambda _epoch: schedule(steps_taken(optimizer))
