"""The PyTorch backend: ``torch.optim`` classes where exact, :class:`SpecOptimizer`
otherwise. The lr schedule becomes a ``LambdaLR`` (exact: ``1.0 * schedule(t)``)."""

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

    names = [n for n, _ in named]
    params = [p for _, p in named]
    for name, p in named:
        if not isinstance(p, torch.Tensor) or not p.is_leaf:
            raise TypeError(f"build: torch parameters must be leaf tensors, got {name or ''} "
                            f"{type(p).__name__}")
    decision = decide_for(spec, path)
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
    lr = 1.0 if scheduled else spec.lr
    param_specs = [plan.spec for plan in plans]
    _refuse_unlowered(plans)
    if decision.path == "native":
        optimizer = native_optimizer(decision.lowering, params, param_specs, lr, options)
    else:
        if options:
            raise ValueError(f"build: options {sorted(options)} apply to native classes; "
                             f"this spec runs the own implementation ({decision.reason})")
        # a spec whose state belongs on the host (adam_offload) keeps it there
        offload = getattr(spec, "state_device", None) == "host"
        optimizer = SpecOptimizer(params, spec, param_specs, lr, offload=offload)
    scheduler = None
    if scheduled:
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, spec.lr)
    record = BuildRecord(spec, decision, names, params, scheduler)
    return optimizer, record


def _refuse_unlowered(plans) -> None:
    scaled = [p.name for p in plans if p.lr_scale != 1.0 or p.fixed_lr is not None]
    if scaled:
        raise NotImplementedError(f"build: per-group lr for {scaled} is not lowered on "
                                  f"{NAME} yet")
