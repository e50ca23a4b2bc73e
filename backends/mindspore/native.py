"""Building MindSpore optimizers from a lowering row, and reading their state.

Weight decay that differs by parameter (``no_decay_names``) becomes explicit parameter
groups, and so does any decay at all on ``mindspore.nn`` classes: given a flat list they
skip decay for names containing "beta"/"gamma", a rule the spec states itself when it
wants it. ``nn`` groups keep the parameter order through ``order_params``;
``experimental`` classes take the gradients in group order, so their groups are runs of
consecutive parameters.

Zero-size parameters are left out of the native optimizer: they have nothing to update,
and MindSpore cannot allocate their state ("initializer ... shape must be positive
integer"). Gradients go to the optimizer for ``optimizer.parameters`` (what
``nn.TrainOneStepCell`` and ``ms.Model`` differentiate), and a left-out parameter's state
is its initial, empty one.
"""

from __future__ import annotations

import importlib

_EXPERIMENTAL = "mindspore.experimental."
#: Arguments that choose an implementation, not the math, per native class (the nn
#: constructors hide their signatures behind a (*args, **kwargs) decorator). nn.Adam's
#: use_lazy changes only sparse (RowTensor) gradients; use_offload is another kernel
#: (the adam_offload algorithm), not a flag.
IMPLEMENTATION_FLAGS = {"mindspore.nn.Adam": ("use_locking", "use_lazy")}


def native_class(qualified_name: str):
    module, _, name = qualified_name.rpartition(".")
    return getattr(importlib.import_module(module), name)


def check_options(row, options: dict) -> None:
    accepted = set(IMPLEMENTATION_FLAGS.get(row.native, ()))
    bad = sorted(set(options) - accepted)
    if bad:
        raise ValueError(f"build: options {bad} are not implementation flags of "
                         f"{row.native}; allowed: {sorted(accepted)} (and total_steps for a "
                         "scheduled lr)")


#: nn classes that keep one scalar weight_decay of their own and ignore the group decay
#: (mindspore.md §4): the decay goes to the constructor and must be one value
SCALAR_DECAY = ("mindspore.nn.AdaFactor",)


def _lars(params, lr, shared, decays):
    """``nn.LARS`` over ``nn.Momentum`` (its documented use); LARS takes the decay off
    the inner optimizer and applies it in LARSUpdate, except to ``exclude_names``."""
    from mindspore import nn

    excluded = shared.pop("exclude_names")
    momentum = nn.Momentum(params, learning_rate=lr, momentum=shared.pop("momentum"),
                           weight_decay=max(decays))
    return nn.LARS(momentum, **shared,
                   lars_filter=lambda p: not any(name in p.name for name in excluded))


def native_optimizer(row, params, param_specs, lr, options):
    """``row.native`` over the non-empty ``params``; ``lr`` is a float or the per-step
    list (a row's own ``learning_rate`` argument replaces it: nn.AdaFactor's None)."""
    cls = native_class(row.native)
    held = [(p, spec) for p, spec in zip(params, param_specs) if p.size > 0]
    params, param_specs = [p for p, _ in held], [spec for _, spec in held]
    arguments = [row.arguments(spec) for spec in param_specs]
    shared = {k: v for k, v in arguments[0].items() if k != "weight_decay"}
    for args in arguments:
        if {k: v for k, v in args.items() if k != "weight_decay"} != shared:
            raise ValueError(f"build: {row.native} needs the same hyperparameters for every "
                             f"parameter except weight_decay, got {shared} and {args}")
    check_options(row, options)
    lr = shared.pop("learning_rate", lr)
    if row.native == "mindspore.nn.LARS":
        return _lars(params, lr, shared, [args["weight_decay"] for args in arguments])
    if row.native in SCALAR_DECAY:
        decays = {args["weight_decay"] for args in arguments}
        if len(decays) != 1:
            raise ValueError(f"build: {row.native} decays every parameter by one "
                             f"weight_decay, got {sorted(decays)}")
        return cls(params, learning_rate=lr, **shared, weight_decay=decays.pop(), **options)
    if "weight_decay" not in arguments[0]:
        # a class without weight decay (experimental.optim.Rprop)
        keyword = "lr" if row.native.startswith(_EXPERIMENTAL) else "learning_rate"
        return cls(params, **{keyword: lr}, **shared, **options)
    decays = [args["weight_decay"] for args in arguments]
    if row.native.startswith(_EXPERIMENTAL):
        runs: list[dict] = []
        for p, decay in zip(params, decays):
            if runs and runs[-1]["weight_decay"] == decay:
                runs[-1]["params"].append(p)
            else:
                runs.append({"params": [p], "weight_decay": decay})
        groups = params if len(runs) == 1 else runs
        return cls(groups, lr=lr, **shared, weight_decay=decays[0], **options)
    if not any(decays):
        return cls(params, learning_rate=lr, **shared, **options)
    by_decay: dict[float, list] = {}
    for p, decay in zip(params, decays):
        by_decay.setdefault(decay, []).append(p)
    groups = [{"params": ps, "weight_decay": decay} for decay, ps in by_decay.items()]
    return cls(groups + [{"order_params": list(params)}], learning_rate=lr, **shared,
               **options)


#: Spec states that are one 0-d value per parameter, the same for every parameter of the
#: optimizer (they depend only on the step and on hyperparameters all parameters share):
#: a left-out zero-size parameter reads them from the first held parameter, since the
#: spec advances them for it too.
SHARED_SCALARS = {"mindspore.experimental.optim.NAdam": ("mu_product",)}


def native_state(row, optimizer, p, spec) -> dict:
    """The native state of parameter ``p`` under ``spec``'s state names."""
    from .ops import mindspore_ops

    # the spec's state for this parameter's shape (factored specs: it depends on it)
    state = spec.init(p, mindspore_ops)
    index = next((i for i, q in enumerate(optimizer.parameters) if q is p), None)
    if index is None:   # a zero-size parameter, left out
        for ours in SHARED_SCALARS.get(row.native, ()):
            state[ours] = getattr(optimizer, row.state[ours])[0]
        return state
    # nn.AdaFactor keeps its row/column moments without the reduced axis: the spec's
    # keepdims shapes hold the same elements in the same order
    return {ours: getattr(optimizer, theirs)[index].reshape(state[ours].shape)
            for ours, theirs in row.state.items() if ours in state}
