"""The PyTorch backend: ``torch.optim`` classes where exact, :class:`SpecOptimizer`
otherwise. The lr schedule becomes a ``LambdaLR`` (exact: ``1.0 * schedule(t)``)."""

from __future__ import annotations

from unified_opt.schedules import Schedule

NAME = "torch"


def build(spec, named, *, path, options):
    import torch

    from unified_opt.build import BuildRecord

    from .lowering import decide_for
    from .native import native_optimizer
    from .optimizer import SpecOptimizer

    names = [n for n, _ in named]
    params = [p for _, p in named]
    for name, p in named:
        if not isinstance(p, torch.Tensor) or not p.is_leaf:
            raise TypeError(f"build: torch parameters must be leaf tensors, got {name or ''} "
                            f"{type(p).__name__}")
    decision = decide_for(spec, path)
    scheduled = isinstance(spec.lr, Schedule)
    lr = 1.0 if scheduled else spec.lr
    param_specs = [spec.for_parameter(n) for n in names]
    if decision.path == "native":
        optimizer = native_optimizer(decision.lowering, params, param_specs, lr, options)
    else:
        if options:
            raise ValueError(f"build: options {sorted(options)} apply to native classes; "
                             f"this spec runs the own implementation ({decision.reason})")
        optimizer = SpecOptimizer(params, spec, param_specs, lr)
    scheduler = None
    if scheduled:
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, spec.lr)
    record = BuildRecord(spec, decision, names, params, scheduler)
    return optimizer, record
