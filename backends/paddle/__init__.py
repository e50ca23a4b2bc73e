"""The PaddlePaddle backend: ``paddle.optimizer`` classes where exact,
:class:`SpecOptimizer` otherwise. A scheduled lr becomes a :class:`ScheduleLR`
(``paddle.optimizer.lr.LRScheduler``, exact: ``schedule(last_epoch)``).

Parameter groups become Paddle's own (``{"params", "learning_rate": <multiplier>,
"weight_decay"/"lamb_weight_decay"}``) and the spec's ``grad_clip`` Paddle's
``grad_clip`` (``paddle.nn.ClipGradBy*``, ``need_clip=False`` for the excluded
parameters), see :mod:`.layout`; what Paddle writes onto the Parameter objects for them
stays in the optimizer between steps (:class:`.native._HeldAttributes`)."""

from __future__ import annotations

import dataclasses

from unified_opt.schedules import Schedule

NAME = "paddle"


def _check_parameter(name, p, spec, paddle) -> None:
    label = name if name is not None else getattr(p, "name", "")
    if not isinstance(p, paddle.Tensor) or not p.is_leaf:
        raise TypeError(f"build: paddle parameters must be leaf tensors, got {label} "
                        f"{type(p).__name__}")
    # Set by ParamAttr or left behind by a param-group optimizer built by hand
    # (paddle.md §3); Paddle optimizers would apply them on top of the spec.
    if getattr(p, "regularizer", None) is not None:
        raise ValueError(f"build: parameter {label} carries regularizer={p.regularizer!r}, "
                         "which Paddle adds to the spec's update; set p.regularizer = None "
                         "and give the decay in the spec (or a uo.Group)")
    lr_scale = (getattr(p, "optimize_attr", None) or {}).get("learning_rate", 1.0)
    if lr_scale != 1.0:
        raise ValueError(f"build: parameter {label} carries optimize_attr['learning_rate']="
                         f"{lr_scale!r}, which Paddle multiplies into the spec's lr; "
                         "set it to 1.0 (or give the factor as uo.Group(lr_scale=...))")
    if spec.grad_clip is not None and getattr(p, "need_clip", True) is False:
        raise ValueError(f"build: parameter {label} carries need_clip=False, which Paddle's "
                         "clip honours and the spec's grad_clip does not; set it to True "
                         "and leave it out with uo.Group(match=..., "
                         "exclude_from=('grad_clip',))")


def build(spec, named, *, path, options, plans):
    import paddle

    from unified_opt.build import BuildRecord

    from .lowering import decide_for
    from .native import PARAMETER_SHAPED_SCALARS, native_optimizer
    from .optimizer import ScheduleLR, SpecOptimizer

    for name, p in named:
        _check_parameter(name, p, spec, paddle)
    names = [name if name is not None else p.name for name, p in named]
    params = [p for _, p in named]
    if len(set(names)) != len(names) or len({p.name for p in params}) != len(params):
        raise ValueError(f"build: parameters and their names must be unique, got names "
                         f"{names} for Paddle parameters {[p.name for p in params]}")
    dtypes = tuple(sorted({str(p.dtype).removeprefix("paddle.") for p in params}))
    decision = decide_for(spec, path, plans, dtypes)
    if decision.path == "native" and decision.native in PARAMETER_SHAPED_SCALARS and \
            all(p.size == 0 for p in params):
        # Paddle's step skips zero-size parameters, so their per-parameter scalar state
        # (NAdam's mu_product, read from a non-empty parameter) would never advance.
        if path == "native":
            raise ValueError(f"build: path='native': every parameter has zero size, and "
                             f"{decision.native} keeps no advancing "
                             f"{'/'.join(PARAMETER_SHAPED_SCALARS[decision.native])} for them")
        decision = dataclasses.replace(
            decision, path="own", native=None, lowering=None,
            reason=f"every parameter has zero size ({decision.native} skips them and keeps "
                   f"no advancing {'/'.join(PARAMETER_SHAPED_SCALARS[decision.native])})")
    if decision.path == "own" and options:
        raise ValueError(f"build: options {sorted(options)} apply to native classes; "
                         f"this spec runs the own implementation ({decision.reason})")
    scheduler = ScheduleLR(spec.lr) if isinstance(spec.lr, Schedule) else None
    learning_rate = scheduler if scheduler is not None else float(spec.lr)
    skipped: list[bool] = []
    if decision.path == "native":
        # the native path never skips a step (skip_nonfinite runs the own update)
        optimizer = native_optimizer(decision.lowering, spec, params, plans, learning_rate,
                                     options, dtypes)
    else:
        optimizer = SpecOptimizer(params, spec, plans, learning_rate, skipped)
    record = BuildRecord(spec, decision, names, params, scheduler, plans=plans,
                         skipped=skipped)
    return optimizer, record


def parameter_name(p) -> str:
    """The name rules see for a Paddle parameter passed without a name: its own."""
    return p.name
