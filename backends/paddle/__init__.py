"""The PaddlePaddle backend: ``paddle.optimizer`` classes where exact,
:class:`SpecOptimizer` otherwise. A scheduled lr becomes a :class:`ScheduleLR`
(``paddle.optimizer.lr.LRScheduler``, exact: ``schedule(last_epoch)``)."""

from __future__ import annotations

import dataclasses

from unified_opt.schedules import Schedule

NAME = "paddle"


def _check_parameter(name, p, paddle) -> None:
    label = name if name is not None else getattr(p, "name", "")
    if not isinstance(p, paddle.Tensor) or not p.is_leaf:
        raise TypeError(f"build: paddle parameters must be leaf tensors, got {label} "
                        f"{type(p).__name__}")
    # Set by ParamAttr or left behind by a param-group optimizer (paddle.md §3); Paddle
    # optimizers would apply them on top of the spec.
    if getattr(p, "regularizer", None) is not None:
        raise ValueError(f"build: parameter {label} carries regularizer={p.regularizer!r}, "
                         "which Paddle adds to the spec's update; set p.regularizer = None "
                         "and give the decay in the spec")
    lr_scale = (getattr(p, "optimize_attr", None) or {}).get("learning_rate", 1.0)
    if lr_scale != 1.0:
        raise ValueError(f"build: parameter {label} carries optimize_attr['learning_rate']="
                         f"{lr_scale!r}, which Paddle multiplies into the spec's lr; "
                         "set it to 1.0")


def build(spec, named, *, path, options, plans):
    import paddle

    from unified_opt.build import BuildRecord

    from .lowering import decide_for
    from .native import PARAMETER_SHAPED_SCALARS, native_optimizer
    from .optimizer import ScheduleLR, SpecOptimizer

    for name, p in named:
        _check_parameter(name, p, paddle)
    names = [name if name is not None else p.name for name, p in named]
    params = [p for _, p in named]
    if len(set(names)) != len(names) or len({p.name for p in params}) != len(params):
        raise ValueError(f"build: parameters and their names must be unique, got names "
                         f"{names} for Paddle parameters {[p.name for p in params]}")
    decision = decide_for(spec, path)
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
    param_specs = [plan.spec for plan in plans]
    _refuse_unlowered(plans)
    if decision.path == "own" and options:
        raise ValueError(f"build: options {sorted(options)} apply to native classes; "
                         f"this spec runs the own implementation ({decision.reason})")
    scheduler = ScheduleLR(spec.lr) if isinstance(spec.lr, Schedule) else None
    learning_rate = scheduler if scheduler is not None else float(spec.lr)
    if decision.path == "native":
        optimizer = native_optimizer(decision.lowering, params, param_specs, learning_rate,
                                     options)
    else:
        optimizer = SpecOptimizer(params, spec, param_specs, learning_rate)
    record = BuildRecord(spec, decision, names, params, scheduler)
    return optimizer, record


def _refuse_unlowered(plans) -> None:
    scaled = [p.name for p in plans if p.lr_scale != 1.0 or p.fixed_lr is not None]
    if scaled:
        raise NotImplementedError(f"build: per-group lr for {scaled} is not lowered on "
                                  f"{NAME} yet")


def parameter_name(p) -> str:
    """The name rules see for a Paddle parameter passed without a name: its own."""
    return p.name
