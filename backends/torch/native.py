"""Building a torch.optim class from its descriptor and lowering."""

from __future__ import annotations

import inspect

from unified_opt.native import import_native
from unified_opt.param_groups import partition


def check_options(cls, options: dict, hyperparameters: dict) -> None:
    """The options are implementation flags of ``cls`` (not the spec's hyperparameters),
    each a bool where the flag is one (torch's ``foreach`` and ``fused`` take None too):
    torch checks none of their types, and a truthy string would switch a kernel on."""
    signature = inspect.signature(cls.__init__).parameters
    accepted = set(signature) - {"self", "params", "lr"}
    bad = sorted(set(options) - (accepted - set(hyperparameters)))
    if bad:
        raise ValueError(f"build: options {bad} are not implementation flags of "
                         f"{cls.__module__}.{cls.__name__}; allowed: "
                         f"{sorted(accepted - set(hyperparameters))}")
    for name, value in options.items():
        default = signature[name].default
        if isinstance(default, bool) or (default is None and name in ("foreach", "fused")):
            if not isinstance(value, bool) and not (default is None and value is None):
                raise TypeError(f"build: options {name}={value!r} must be a bool"
                                f"{' or None' if default is None else ''} (a flag of "
                                f"{cls.__module__}.{cls.__name__}), got "
                                f"{type(value).__name__}")


#: devices and dtypes torch's fused optimizer kernels take (torch 2.13: CPU and CUDA)
FUSED_DEVICES = ("cpu", "cuda")
FUSED_DTYPES = ("float16", "bfloat16", "float32", "float64")
#: classes whose fused kernel runs on fewer devices than :data:`FUSED_DEVICES`.
#: ``Adagrad(fused=True)`` is CPU-only up to torch 2.11 (its device check passes
#: ``cuda_unsupported=True``: "fused=True requires all the params to be floating point
#: Tensors of supported devices: [..., 'cpu', ...] but torch.float32 and cuda", measured
#: on an H200, issue 20); later versions add a CUDA kernel no run here has checked. The
#: for-loop Adagrad is exact on every device, so fused is chosen on the CPU only.
FUSED_DEVICES_OF = {"Adagrad": ("cpu",)}


def fused_devices(cls) -> tuple[str, ...]:
    """The device types on which ``uo.build`` gives ``cls`` ``fused=True``."""
    return FUSED_DEVICES_OF.get(cls.__name__, FUSED_DEVICES)


def fused_elsewhere(cls, context) -> bool:
    """Whether ``cls`` has a fused kernel that :func:`fast_flags` leaves out only for
    the parameters' device (Adagrad on CUDA), the options naming no implementation."""
    return "fused" in inspect.signature(cls.__init__).parameters and \
        not {"fused", "foreach"} & set(context.options) and bool(context.device) and \
        not set(context.device.split(",")) <= set(fused_devices(cls))


def fast_flags(cls, context) -> dict:
    """The implementation flag ``uo.build`` sets where the options set none: ``fused=True``
    for the classes with a fused kernel (SGD, Adam, AdamW on CPU and CUDA; Adagrad on
    the CPU only: :data:`FUSED_DEVICES_OF`), floating dtypes, unsharded parameters. The
    fused kernel computes the class's update in one pass per tensor (bias corrections
    in double, as the reference does); it passes the conformance suite like the
    for-loop it replaces and steps 5x faster on CPU for Adam (4096x4096 float32,
    benchmarks/results/algorithm_step_time.md). The for-loop stays where the options
    name ``fused`` or ``foreach`` or set ``differentiable`` (which torch's fused kernels
    refuse), where any parameter is on another device, and for amsgrad (below)."""
    if "fused" not in inspect.signature(cls.__init__).parameters or \
            {"fused", "foreach"} & set(context.options) or context.sharded or \
            context.options.get("differentiable"):    # torch's fused kernels are not
        return {}
    if any(getattr(plan.spec, "amsgrad", False) for plan in context.plans or ()):
        # the fused kernel's running maximum drops a NaN (max(m, NaN) keeps m): after a
        # non-finite gradient max_exp_avg_sq stays finite where the spec's (and torch's
        # for-loop's) is NaN, so amsgrad runs the for-loop
        return {}
    devices = set(context.device.split(",")) if context.device else set()
    if not devices or not devices <= set(fused_devices(cls)) or \
            not set(context.dtypes) <= set(FUSED_DTYPES):
        return {}
    return {"fused": True}


def native_optimizer(cls_info, lowering, params, plans, lrs, options):
    """``cls_info.name`` over ``params``, one param group per distinct (hyperparameters, lr)
    of the parameters' plans (e.g. weight_decay 0 for names in ``no_decay_names`` or a
    ``uo.Group``; a group's lr factor) and per group (a rule, a dict: each its own). Returns
    ``(optimizer, group_specs)``: the spec of each param group, whose ``at_step(t)``
    gives the group's values at step ``t``."""
    cls = import_native(cls_info.name)
    parts = partition([(lowering.to_native(plan.spec), lr, plan.group)
                       for plan, lr in zip(plans, lrs)])
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
