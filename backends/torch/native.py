"""Building a torch.optim class from its descriptor and lowering."""

from __future__ import annotations

import inspect

from unified_opt.native import import_native

from .steps import partition


def check_options(cls, options: dict, hyperparameters: dict) -> None:
    accepted = set(inspect.signature(cls.__init__).parameters) - {"self", "params", "lr"}
    bad = sorted(set(options) - (accepted - set(hyperparameters)))
    if bad:
        raise ValueError(f"build: options {bad} are not implementation flags of "
                         f"{cls.__module__}.{cls.__name__}; allowed: "
                         f"{sorted(accepted - set(hyperparameters))}")


#: devices and dtypes torch's fused optimizer kernels take (torch 2.13: CPU and CUDA)
FUSED_DEVICES = ("cpu", "cuda")
FUSED_DTYPES = ("float16", "bfloat16", "float32", "float64")


def fast_flags(cls, context) -> dict:
    """The implementation flag ``uo.build`` sets where the options set none: ``fused=True``
    for the classes with a fused kernel (SGD, Adam, AdamW, Adagrad), on CPU and CUDA,
    floating dtypes, unsharded parameters. The fused kernel computes the class's update
    in one pass per tensor (bias corrections in double, as the reference does); it
    passes the conformance suite like the for-loop it replaces and steps 5x faster on
    CPU for Adam (4096x4096 float32, benchmarks/results/algorithm_step_time.md). The
    for-loop stays where the options name ``fused`` or ``foreach``."""
    if "fused" not in inspect.signature(cls.__init__).parameters or \
            {"fused", "foreach"} & set(context.options) or context.sharded:
        return {}
    devices = set(context.device.split(",")) if context.device else set()
    if not devices or not devices <= set(FUSED_DEVICES) or \
            not set(context.dtypes) <= set(FUSED_DTYPES):
        return {}
    return {"fused": True}


def native_optimizer(cls_info, lowering, params, plans, lrs, options):
    """``cls_info.name`` over ``params``, one param group per distinct (hyperparameters, lr)
    of the parameters' plans (e.g. weight_decay 0 for names in ``no_decay_names`` or a
    ``uo.Group``; a group's lr factor). Returns ``(optimizer, group_specs)``: the spec of
    each param group, whose ``at_step(t)`` gives the group's values at step ``t``."""
    cls = import_native(cls_info.name)
    parts = partition([(lowering.to_native(plan.spec), lr) for plan, lr in zip(plans, lrs)])
    specs = [plans[indices[0]].spec for indices in parts]
    # the constructor takes step 0's values (a weight-decay schedule, cycled momentum)
    arguments = [dict(lowering.to_native(s.at_step(0)), lr=lrs[indices[0]])
                 for s, indices in zip(specs, parts)]
    check_options(cls, options, arguments[0])
    # Arguments every group shares go to the constructor, only the differing ones into
    # the groups: some classes read constructor arguments where a group value should
    # win (torch Adagrad seeds every state sum from its initial_accumulator_value).
    shared = {k: v for k, v in arguments[0].items()
              if all(a.get(k) == v for a in arguments)}
    if len(parts) == 1:
        return cls(list(params), **shared, **options), specs
    return cls([{"params": [params[i] for i in indices],
                 **{k: v for k, v in a.items() if k not in shared}}
                for indices, a in zip(parts, arguments)], **shared, **options), specs
