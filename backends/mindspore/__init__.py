"""The MindSpore backend: ``mindspore.nn`` / ``mindspore.experimental.optim`` classes where
exact, :class:`SpecOptimizer` otherwise. The optimizer steps its lr itself (MindSpore has
no separate scheduler object to step): a scheduled lr becomes the native per-step list
``[s(0), ..., s(N-1)]``, and a scheduled weight decay the Cell form reading
``[wd(0), ..., wd(N-1)]``; both need ``options={"total_steps": N}``. The own
implementation evaluates ``s(step)`` itself.

Parameter groups (``uo.Group``) become MindSpore's: ``nn`` group dicts ``{"params",
"lr", "weight_decay"}`` plus ``{"order_params": [...]}`` (a group lr is a float or, for
a scheduled lr, the per-step list scaled by ``lr_scale``), ``experimental`` groups as
runs of consecutive parameters. ``loss_scale`` goes to the ``nn`` classes that divide
by it; clipping, overflow skipping and gradient centralization run in the own
implementation (see ``lowering``)."""

from __future__ import annotations

import dataclasses

from unified_opt.schedules import Schedule

NAME = "mindspore"


def build(spec, named, *, path, options, plans):
    import mindspore as ms

    from unified_opt.build import BuildRecord

    from .lowering import decide_for
    from .native import native_optimizer
    from .optimizer import SpecOptimizer

    names = [n for n, _ in named]
    params = [p for _, p in named]
    for name, p in named:
        if not isinstance(p, ms.Parameter):
            raise TypeError(f"build: mindspore parameters must be mindspore.Parameter, got "
                            f"{name or ''} {type(p).__name__}")
        if p.dtype != ms.float32:
            # MindSpore rounds Python float scalars to float32 even in float64 tensor
            # arithmetic, and its optimizer kernels compute in float32.
            raise TypeError(f"build: the MindSpore backend takes float32 parameters, got "
                            f"{name or p.name} {p.dtype}")
        if not p.requires_grad:
            raise ValueError(f"build: parameter {name or p.name} has requires_grad=False; a "
                             "MindSpore optimizer updates every parameter it holds (pass "
                             "net.trainable_params())")
    options = dict(options)
    total_steps = options.pop("total_steps", None)
    scheduled = isinstance(spec.lr, Schedule)
    decay_scheduled = any(isinstance(getattr(plan.spec, "weight_decay", None), Schedule)
                          for plan in plans)
    if total_steps is not None:
        if isinstance(total_steps, bool) or not isinstance(total_steps, int):
            raise TypeError(f"build: options['total_steps'] must be an int, got {total_steps!r}")
        if total_steps < 1:
            raise ValueError(f"build: options['total_steps'] must be >= 1, got {total_steps}")
        if not scheduled and not decay_scheduled:
            raise ValueError(f"build: options['total_steps']={total_steps} is for a scheduled "
                             f"lr or weight decay; this spec's lr is the constant {spec.lr!r} "
                             "and its weight decay is constant")
    decision = decide_for(spec, path, device=ms.get_context("device_target"), plans=plans)
    if decision.path == "native" and all(p.size == 0 for p in params):
        if path == "native":
            raise ValueError(f"build: path='native': every parameter has zero size and "
                             f"{decision.native} cannot hold none")
        decision = dataclasses.replace(
            decision, path="own", native=None, lowering=None,
            reason=f"every parameter has zero size ({decision.native} cannot hold none)")
    elif decision.path == "native" and any(p.size == 0 for p in params):
        empty = [n or p.name for n, p in named if p.size == 0]
        decision = dataclasses.replace(
            decision, reason=f"{decision.reason}; zero-size parameters {empty} are left out "
                             "of it (nothing to update)")
    if decision.path == "native":
        if (scheduled or decay_scheduled) and total_steps is None:
            what = "lr" if scheduled else "weight decay"
            raise ValueError(f"build: a scheduled {what} on {decision.native} needs "
                             "options={'total_steps': N} (it takes the per-step list "
                             "[s(0), ..., s(N-1)])")
        optimizer = native_optimizer(decision.lowering, params, plans, spec, total_steps,
                                     options)
        skipped = []   # a native class never skips: skip_nonfinite goes to SpecOptimizer
    else:
        if options:
            raise ValueError(f"build: options {sorted(options)} apply to native classes; "
                             f"this spec runs the own implementation ({decision.reason})")
        if ms.get_context("mode") == ms.GRAPH_MODE:
            raise ValueError(f"build: the own implementation ({decision.reason}) runs in "
                             "PyNative mode only; GRAPH_MODE is set")
        optimizer = SpecOptimizer(params, spec, plans, total_steps)
        skipped = optimizer.skipped
    record = BuildRecord(spec, decision, names, params, None, skipped=skipped)
    return optimizer, record


def __getattr__(name):
    # The own optimizer class, imported (with mindspore) only when asked for.
    if name == "SpecOptimizer":
        from .optimizer import SpecOptimizer
        return SpecOptimizer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

