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


def check_options(cls_info, options: dict) -> None:
    """``options`` must be the class's implementation flags (nn.Adam's ``use_lazy``
    changes only sparse RowTensor gradients; ``use_offload`` is another kernel, the
    adam_offload lowering, not a flag)."""
    accepted = set(cls_info.implementation_flags)
    bad = sorted(set(options) - accepted)
    if bad:
        raise ValueError(f"build: options {bad} are not implementation flags of "
                         f"{cls_info.name}; allowed: {sorted(accepted)} (and total_steps for "
                         "a scheduled lr)")


def _lars(params, lr, spec, shared, decays):
    """``nn.LARS`` over ``nn.Momentum`` (its documented use); LARS takes the decay off
    the inner optimizer and applies it in LARSUpdate, except to ``exclude_names``."""
    from mindspore import nn

    inner = shared.pop("optimizer")
    momentum = nn.Momentum(params, learning_rate=lr, momentum=float(inner.momentum),
                           weight_decay=max(decays))
    excluded = spec.exclude_names
    return nn.LARS(momentum, **shared,
                   lars_filter=lambda p: not name_matches(p.name, excluded))


def per_step(schedule, total_steps: int) -> list[float]:
    """MindSpore's per-step list of a schedule: ``[s(0), ..., s(N-1)]``."""
    return [schedule(t) for t in range(total_steps)]


def _group_lr(plan, base):
    """A parameter's native lr: None where it is the optimizer's (``base``, a float or the
    per-step list), else its fixed lr or ``lr_scale`` times ``base`` (per entry)."""
    if plan.fixed_lr is not None:
        return plan.fixed_lr
    if plan.lr_scale == 1.0:
        return None
    if isinstance(base, list):
        return [plan.lr_scale * x for x in base]
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


def native_optimizer(cls_info, lowering, params, plans, spec, total_steps, options):
    """``cls_info.name`` over the non-empty ``params`` (one plan each, see
    :mod:`unified_opt.groups`). The lr is ``spec.lr``, a scheduled one as the per-step
    list of ``total_steps`` entries (a lowering's own ``learning_rate`` argument replaces it:
    nn.AdaFactor's None); a group's lr is its fixed lr or its ``lr_scale`` times that, per
    entry; a weight-decay schedule becomes a :class:`~.cells.PerStepTable` Cell; a
    ``loss_scale`` goes to the classes that divide by it (the descriptor's ``loss_scale``)."""
    from unified_opt.schedules import Schedule

    cls = import_native(cls_info.name)
    held = [(p, plan) for p, plan in zip(params, plans) if p.size > 0]
    params, plans = [p for p, _ in held], [plan for _, plan in held]
    arguments = [arguments_of(lowering, plan.spec) for plan in plans]
    shared = {k: v for k, v in arguments[0].items() if k != "weight_decay"}
    for args in arguments:
        if {k: v for k, v in args.items() if k != "weight_decay"} != shared:
            raise ValueError(f"build: {cls_info.name} needs the same hyperparameters for every "
                             f"parameter except weight_decay, got {shared} and {args}")
    check_options(cls_info, options)
    base = per_step(spec.lr, total_steps) if isinstance(spec.lr, Schedule) else spec.lr
    lr = shared.pop("learning_rate", base)
    if spec.loss_scale != 1.0:
        shared["loss_scale"] = float(spec.loss_scale)
    if cls_info.wraps_optimizer:
        return _lars(params, lr, spec, shared, [plan.spec.weight_decay for plan in plans])
    if cls_info.scalar_decay:
        decays = {args["weight_decay"] for args in arguments}
        if len(decays) != 1:
            raise ValueError(f"build: {cls_info.name} decays every parameter by one "
                             f"weight_decay, got {sorted(decays)}")
        return cls(params, learning_rate=lr, **shared, weight_decay=decays.pop(), **options)
    decays = [args.get("weight_decay") for args in arguments]
    if cls_info.experimental:
        return _experimental(cls, params, plans, decays, base, shared, options)
    lrs = [_group_lr(plan, base) for plan in plans]
    if all(x is None for x in lrs) and not any(isinstance(d, Schedule) or d for d in decays):
        return cls(params, learning_rate=lr, **shared, **options)
    groups: dict = {}   # (lr, decay) -> group dict, in order of first appearance
    for p, plan, group_lr, decay in zip(params, plans, lrs, decays):
        key = (group_lr is not None and (plan.fixed_lr, plan.lr_scale), repr(decay))
        if key not in groups:
            groups[key] = {"params": []}
            if group_lr is not None:
                groups[key]["lr"] = group_lr
            if decay is not None:
                groups[key]["weight_decay"] = decay
        groups[key]["params"].append(p)
    for group in groups.values():   # a Cell per group: MindSpore wraps each one
        if isinstance(group.get("weight_decay"), Schedule):
            from .cells import PerStepTable
            group["weight_decay"] = PerStepTable(per_step(group["weight_decay"], total_steps))
    return cls(list(groups.values()) + [{"order_params": list(params)}], learning_rate=lr,
               **shared, **options)


def _experimental(cls, params, plans, decays, base, shared, options):
    """experimental.optim classes take the gradients in group order: their groups are
    runs of consecutive parameters with the same lr and decay."""
    runs: list[dict] = []
    for p, plan, decay in zip(params, plans, decays):
        group = {"lr": plan.lr(base)}
        if decay is not None:
            group["weight_decay"] = decay
        if runs and {k: v for k, v in runs[-1].items() if k != "params"} == group:
            runs[-1]["params"].append(p)
        else:
            runs.append({"params": [p], **group})
    if len(runs) == 1:
        run = runs[0]
        return cls(run.pop("params"), **run, **shared, **options)
    return cls(runs, lr=base, **shared, **options)


def native_state(cls_info, optimizer, p, spec) -> dict:
    """The native state of parameter ``p`` under ``spec``'s state names. A left-out
    zero-size parameter reads the class's shared scalars (one 0-d value per parameter,
    the same for every parameter: they depend only on the step and on hyperparameters
    all parameters share) from the first held parameter."""
    from .ops import mindspore_ops

    # the spec's state for this parameter's shape (factored specs: it depends on it)
    state = spec.init(p, mindspore_ops)
    index = next((i for i, q in enumerate(optimizer.parameters) if q is p), None)
    if index is None:   # a zero-size parameter, left out
        for ours in cls_info.shared_scalars:
            state[ours] = getattr(optimizer, cls_info.state[ours])[0]
        return state
    # nn.AdaFactor keeps its row/column moments without the reduced axis: the spec's
    # keepdims shapes hold the same elements in the same order
    return {ours: getattr(optimizer, theirs)[index].reshape(state[ours].shape)
            for ours, theirs in cls_info.state.items() if ours in state}


def native_lr(cls_info, optimizer, p) -> float:
    """The lr ``optimizer`` uses for parameter ``p`` at its next step (its group's)."""
    if cls_info.experimental:
        group = next(g for g in optimizer.param_groups if any(q is p for q in g["params"]))
        return float(group["lr"].asnumpy())
    lr = optimizer.get_lr()
    if optimizer.is_group_lr:
        lr = lr[next(i for i, q in enumerate(optimizer.parameters) if q is p)]
    return float(lr.asnumpy())
