"""Building MindSpore optimizers from their descriptors, and reading their state.

Weight decay and lr that differ by parameter (``no_decay_names``, ``uo.Group``) become
explicit parameter groups, and so does any decay at all on ``mindspore.nn`` classes:
given a flat list they skip decay for names containing "beta"/"gamma", a rule the spec
states itself when it wants it. ``nn`` groups keep the parameter order through ``order_params``;
``experimental`` classes take the gradients in group order, so their groups are runs of
consecutive parameters.

Zero-size parameters are left out of the native optimizer: they have nothing to update,
and MindSpore cannot allocate their state ("initializer ... shape must be positive
integer"). Gradients go to the optimizer for ``optimizer.parameters`` (what
``nn.TrainOneStepCell`` and ``ms.Model`` differentiate), and a left-out parameter's state
is its initial, empty one.
"""

from __future__ import annotations

from unified_opt.groups import name_matches
from unified_opt.native import import_native
from unified_opt.step_loop import DENSE, check_gradients


def _tensor_class():
    from mindspore import Tensor  # not at import time: the core imports this lazily

    return Tensor


def describe(tensor) -> tuple:
    """``(shape, dtype, device, form)`` of a MindSpore parameter or gradient
    (:data:`unified_opt.step_loop.DESCRIBED`): a gradient must have its parameter's. A
    process runs on one ``device_target``, so the device is None; a gradient that is not
    a Tensor (a RowTensor, a sparse embedding's gradient in a graph) has its type's
    name as its form."""
    if not isinstance(tensor, _tensor_class()):
        return (getattr(tensor, "dense_shape", None), getattr(tensor, "dtype", None), None,
                type(tensor).__name__)
    return (tuple(tensor.shape), tensor.dtype, None, DENSE)


def check_call(optimizer, gradients) -> None:
    """The gradients of a call of a native optimizer checked against
    ``optimizer.parameters`` before MindSpore runs the step
    (:func:`unified_opt.step_loop.check_gradients`: shape, no broadcasting, dtype, a
    Tensor), naming the parameter."""
    params = list(optimizer.parameters)
    if not isinstance(gradients, tuple):
        raise TypeError(f"{type(optimizer).__name__}: gradients must be a tuple of Tensors "
                        f"in parameter order, got {type(gradients).__name__}")
    if len(gradients) != len(params):
        hint = ""
        if len(gradients) in getattr(optimizer, "lengths_before_adds", ()):
            hint = (f"; it held {len(gradients)} parameters before add_param_group, and a "
                    "train step made then (nn.TrainOneStepCell, ms.Model, a gradient "
                    "function over optimizer.parameters) passes gradients of those only: "
                    "make it again after add_param_group. Nothing was changed")
        raise ValueError(f"{type(optimizer).__name__}: got {len(gradients)} gradients for "
                         f"{len(params)} parameters{hint}")
    check_gradients(type(optimizer).__name__, [p.name for p in params], params, gradients,
                    describe)


class _CheckedCall:
    """Mixin in front of every native optimizer class ``uo.build`` returns: each call's
    gradients checked first (:func:`check_call`). ``__call__``, since a forward pre-hook
    is compiled into the class's ``@jit`` construct (and a raise with a formatted message
    cannot be). Python sees each call where it calls the optimizer: PyNative
    (``opt(grads)``, ``nn.TrainOneStepCell``, ``ms.Model``) and ``opt(grads)`` in
    GRAPH_MODE. Compiled into an outer graph (a GRAPH_MODE train step), MindSpore's own
    shape and dtype inference refuses a mismatch when the graph compiles, before any
    step runs, naming an operator rather than the parameter."""

    def __call__(self, *args, **kwargs):
        if args:
            check_call(self, args[0])
        if "_uo_surface" in self.__dict__:
            from .surface import check_native_lrs

            check_native_lrs(self)
        return super().__call__(*args, **kwargs)


_CHECKED: dict[type, type] = {}


def checked_class(cls) -> type:
    """``cls`` with :class:`_CheckedCall` in front: same name, constructor and
    Parameters, ``isinstance(opt, cls)`` holds; ``uo_native_class`` (its own attribute,
    not inherited by a further subclass) names ``cls`` for readers of the class."""
    if cls not in _CHECKED:
        _CHECKED[cls] = type(cls.__name__, (_CheckedCall, cls),
                             {"__module__": cls.__module__, "__qualname__": cls.__qualname__,
                              "uo_native_class": cls})
    return _CHECKED[cls]


def check_options(cls_info, options: dict) -> None:
    """``options`` must be the class's implementation flags (nn.Adam's ``use_lazy``
    changes only sparse RowTensor gradients; ``use_offload`` is another kernel, the
    adam_offload lowering, not a flag)."""
    accepted = set(cls_info.implementation_flags)
    bad = sorted(set(options) - accepted)
    if bad:
        raise ValueError(f"build: options {bad} are not implementation flags of "
                         f"{cls_info.name}; allowed: {sorted(accepted)} (and total_steps for "
                         "a scheduled lr or weight decay)")


def _lars(cls, params, lr, spec, shared, decays):
    """``cls`` (``nn.LARS``) over ``nn.Momentum`` (its documented use); LARS takes the
    decay off the inner optimizer and applies it in LARSUpdate, except to
    ``exclude_names``. The two share ``global_step``."""
    from mindspore import nn

    inner = shared.pop("optimizer")
    momentum = nn.Momentum(params, learning_rate=lr, momentum=float(inner.momentum),
                           weight_decay=max(decays))
    excluded = spec.exclude_names
    return cls(momentum, **shared, lars_filter=lambda p: not name_matches(p.name, excluded))


def per_step(schedule, total_steps: int) -> list[float]:
    """MindSpore's per-step list of a schedule: ``[s(0), ..., s(N-1)]``."""
    return [schedule(t) for t in range(total_steps)]


def scheduled(schedule, scale: float = 1.0, *, cells: bool, total_steps: int | None,
              owner: str, decay: bool = False):
    """The native form of ``scale`` times ``schedule``: a
    :class:`~.cells.ScheduleCell` (``cells``: Python computes ``float32(scale * s(t))`` at
    every step, no step limit unless ``total_steps``), else MindSpore's per-step list of
    ``total_steps`` entries ``scale * s(t)``, as a :class:`~.cells.PerStepTable` for a
    weight decay (``decay``). Both give the same float32 numbers."""
    from .cells import PerStepTable, ScheduleCell

    if cells:
        return ScheduleCell(schedule, scale, total_steps, owner)
    values = per_step(schedule, total_steps)
    if scale != 1.0:
        values = [scale * x for x in values]
    return PerStepTable(values) if decay else values


def _group_lr(plan, base, scaled_lr):
    """A group's native lr (the group has its own: a fixed lr or an ``lr_scale``): its
    fixed lr, else ``scaled_lr(lr_scale)`` for a scheduled lr, else ``lr_scale * base``."""
    if plan.fixed_lr is not None:
        return plan.fixed_lr
    if scaled_lr is not None:
        return scaled_lr(plan.lr_scale)
    return plan.lr_scale * base


def arguments_of(lowering, spec) -> dict:
    """``lowering.to_native`` with a weight-decay schedule kept as the schedule."""
    from unified_opt.schedules import Schedule

    decay = getattr(spec, "weight_decay", None)
    if not isinstance(decay, Schedule):
        return lowering.to_native(spec)
    args = lowering.to_native(spec.replace(weight_decay=0.0))
    args["weight_decay"] = decay
    return args


def native_optimizer(cls_info, lowering, params, plans, spec, options, *, cells: bool = True,
                     total_steps: int | None = None):
    """``cls_info.name`` (:func:`checked_class`: each call's gradients checked first)
    over the non-empty ``params`` (one plan each, see
    :mod:`unified_opt.groups`). The lr is ``spec.lr`` (a lowering's own ``learning_rate``
    argument replaces it: nn.AdaFactor's None); a group's lr is its fixed lr or its
    ``lr_scale`` times that. A scheduled lr or weight decay takes the form
    :func:`scheduled` gives (``cells``: a :class:`~.cells.ScheduleCell`; else the per-step
    list of ``total_steps`` entries, and the class made :func:`~.cells.step_limited`); a
    ``loss_scale`` goes to the classes that divide by it (the descriptor's ``loss_scale``)."""
    from unified_opt.schedules import Schedule

    cls = checked_class(import_native(cls_info.name))
    held = [(p, plan) for p, plan in zip(params, plans) if p.size > 0]
    params, plans = [p for p, _ in held], [plan for _, plan in held]
    arguments = [arguments_of(lowering, plan.spec) for plan in plans]
    shared = {k: v for k, v in arguments[0].items() if k != "weight_decay"}
    for args in arguments:
        if {k: v for k, v in args.items() if k != "weight_decay"} != shared:
            raise ValueError(f"build: {cls_info.name} needs the same hyperparameters for every "
                             f"parameter except weight_decay, got {shared} and {args}")
    check_options(cls_info, options)
    decays = [args.get("weight_decay") for args in arguments]
    lr_scheduled = isinstance(spec.lr, Schedule)
    form = {"cells": cells, "total_steps": total_steps, "owner": cls_info.name}
    if not cells and (lr_scheduled or any(isinstance(d, Schedule) for d in decays)):
        from .cells import step_limited
        cls = step_limited(cls, total_steps, cls_info.name)   # our error, not Gather's
    scaled_lr = (lambda scale: scheduled(spec.lr, scale, **form)) if lr_scheduled else None
    if "learning_rate" in shared:   # the lowering's own (nn.AdaFactor: a constant lr)
        lr = shared.pop("learning_rate")
    else:
        lr = scaled_lr(1.0) if lr_scheduled else spec.lr
    if spec.loss_scale != 1.0:
        shared["loss_scale"] = float(spec.loss_scale)
    if cls_info.wraps_optimizer:
        return _lars(cls, params, lr, spec, shared, [plan.spec.weight_decay for plan in plans])
    if cls_info.scalar_decay:
        decays = {args["weight_decay"] for args in arguments}
        if len(decays) != 1:
            raise ValueError(f"build: {cls_info.name} decays every parameter by one "
                             f"weight_decay, got {sorted(decays)}")
        return cls(params, learning_rate=lr, **shared, weight_decay=decays.pop(), **options)
    if cls_info.experimental:
        return _experimental(cls, params, plans, decays, spec.lr, shared, options)
    own_lr = [plan.fixed_lr is not None or plan.lr_scale != 1.0 for plan in plans]
    if not any(own_lr) and not any(isinstance(d, Schedule) or d for d in decays):
        return cls(params, learning_rate=lr, **shared, **options)
    groups: dict = {}   # (lr, decay) -> group dict, in order of first appearance
    for p, plan, own, decay in zip(params, plans, own_lr, decays):
        key = (own and (plan.fixed_lr, plan.lr_scale), repr(decay))
        if key not in groups:   # one lr Cell and one decay Cell per group
            groups[key] = {"params": []}
            if own:
                groups[key]["lr"] = _group_lr(plan, spec.lr, scaled_lr)
            if isinstance(decay, Schedule):
                groups[key]["weight_decay"] = scheduled(decay, **form, decay=True)
            elif decay is not None:
                groups[key]["weight_decay"] = decay
        groups[key]["params"].append(p)
    return cls(list(groups.values()) + [{"order_params": list(params)}], learning_rate=lr,
               **shared, **options)


def _experimental(cls, params, plans, decays, base, shared, options):
    """experimental.optim classes take the gradients in group order: their groups are
    runs of consecutive parameters with the same lr and decay, and of one group (a
    ``uo.Group`` rule, a group dict: each its own, as torch keeps each dict)."""
    runs: list[tuple[tuple, dict]] = []
    for p, plan, decay in zip(params, plans, decays):
        group = {"lr": plan.lr(base)}
        if decay is not None:
            group["weight_decay"] = decay
        key = (plan.group, group)
        if runs and runs[-1][0] == key:
            runs[-1][1]["params"].append(p)
        else:
            runs.append((key, {"params": [p], **group}))
    if len(runs) == 1:
        run = runs[0][1]
        return cls(run.pop("params"), **run, **shared, **options)
    return cls([run for _, run in runs], lr=base, **shared, **options)


def native_state(cls_info, optimizer, p, spec) -> dict:
    """The native state of parameter ``p`` under ``spec``'s state names. A left-out
    zero-size parameter reads the class's shared scalars (one 0-d value per parameter,
    the same for every parameter: they depend only on the step and on hyperparameters
    all parameters share) from the first held parameter."""
    import numpy as np
    from mindspore import Tensor

    from unified_opt.ops import numpy_ops

    index = next((i for i, q in enumerate(optimizer.parameters) if q is p), None)
    if index is None:   # a zero-size parameter, left out
        state = {k: Tensor.from_numpy(np.array(v)) for k, v in
                 spec.init(np.zeros(tuple(p.shape), dtype=np.float32), numpy_ops).items()}
        for ours in cls_info.shared_scalars:
            state[ours] = getattr(optimizer, cls_info.state[ours])[0]
        return state
    # the spec's state shapes for this parameter (factored specs: they depend on its
    # shape), from numpy: no framework operation. nn.AdaFactor keeps its row/column
    # moments without the reduced axis: the spec's keepdims shapes hold the same
    # elements in the same order
    shapes = {k: np.shape(v) for k, v in
              spec.init(np.zeros(tuple(p.shape), dtype=np.float32), numpy_ops).items()}
    out = {}
    for ours, theirs in cls_info.state.items():
        if ours in shapes:
            value = getattr(optimizer, theirs)[index]
            out[ours] = value if tuple(value.shape) == shapes[ours] else \
                value.reshape(shapes[ours])
    return out


def native_lr(cls_info, optimizer, p) -> float:
    """The lr ``optimizer`` uses for parameter ``p`` at its next step (its group's)."""
    if cls_info.experimental:
        group = next(g for g in optimizer.param_groups if any(q is p for q in g["params"]))
        return float(group["lr"].asnumpy())
    lr = optimizer.get_lr()
    if optimizer.is_group_lr:
        lr = lr[next(i for i, q in enumerate(optimizer.parameters) if q is p)]
    return float(lr.asnumpy())
