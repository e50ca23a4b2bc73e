"""Building paddle.optimizer classes from a lowering row, and reading their state."""

from __future__ import annotations

import importlib
import inspect

import paddle
from paddle.utils import unique_name

# Constructor arguments that are not implementation flags: build sets them, or they
# change the numbers the optimizer computes.
_NOT_OPTIONS = {
    "learning_rate": "build sets it from spec.lr",
    "parameters": "build sets it",
    "weight_decay": "it comes from the spec",
    "apply_decay_param_fun": "build derives it from the spec's no_decay_names",
    "exclude_from_weight_decay_fn": "build derives it from the spec's no_decay_names",
    "exclude_from_weight_decay": "build derives it from the spec's names",
    "parameter_list": "build sets it",
    "regularization": "the decay comes from the spec",
    "grad_clip": "gradient clipping is not part of the spec",
    "lr_ratio": "it scales the lr per parameter",
    "rescale_grad": "it scales the gradient (and the CPU kernel ignores it)",
    "lazy_mode": "it updates only the touched rows of sparse gradients",
}
_MULTI_TENSOR_DTYPES = (paddle.float32, paddle.float16, paddle.bfloat16)


def native_class(qualified_name: str):
    module, _, name = qualified_name.rpartition(".")
    return getattr(importlib.import_module(module), name)


def check_options(cls, options: dict, hyperparameters: dict, params) -> None:
    qualified = f"{cls.__module__}.{cls.__name__}"
    signature = inspect.signature(cls.__init__).parameters
    flags = sorted(set(signature) - {"self"} - set(hyperparameters) - set(_NOT_OPTIONS))
    for key, value in options.items():
        if key in _NOT_OPTIONS or key in hyperparameters:
            why = _NOT_OPTIONS.get(key, "it is set from the spec")
            raise ValueError(f"build: option {key!r} of {qualified} is not an implementation "
                             f"flag ({why}); allowed: {flags}")
        if key not in flags:
            raise ValueError(f"build: options [{key!r}] are not implementation flags of "
                             f"{qualified}; allowed: {flags}")
        if isinstance(signature[key].default, bool) and not isinstance(value, bool):
            raise TypeError(f"build: option {key!r} must be a bool, got {value!r}")
    if options.get("use_multi_tensor"):
        wrong = sorted({str(p.dtype) for p in params} - {str(d) for d in _MULTI_TENSOR_DTYPES})
        if wrong:
            raise ValueError(f"build: use_multi_tensor=True needs float32/float16/bfloat16 "
                             f"parameters (Paddle's multi-tensor kernels), got {wrong}")


def _decay_only(param_names):
    names = frozenset(param_names)

    def apply_decay_param_fun(name: str) -> bool:
        return name in names

    return apply_decay_param_fun


def _excluded(param_names):
    names = frozenset(param_names)

    def exclude_from_weight_decay_fn(param) -> bool:   # Paddle passes the parameter
        return param.name in names

    return exclude_from_weight_decay_fn


def _excluded_substrings(params, excluded):
    """LarsMomentumOptimizer excludes every parameter whose name contains one of the
    strings: the excluded parameters' names, checked to pick out no other parameter."""
    names = [p.name for p in excluded]
    for p in params:
        if p.name not in names and any(n in p.name for n in names):
            raise ValueError(f"build: Paddle parameter {p.name} contains the name of an "
                             f"excluded parameter ({names}); LarsMomentumOptimizer would "
                             "drop its decay too")
    return names


#: Classes whose per-parameter weight decay (0 for ``no_decay_names``) is one value plus
#: a selector: (decay keyword, selector keyword, selector from (params, decayed, excluded))
DECAY_SELECTORS = {
    "paddle.optimizer.AdamW": ("weight_decay", "apply_decay_param_fun",
                               lambda params, decayed, excluded: _decay_only(
                                   [p.name for p in decayed])),
    "paddle.optimizer.Lamb": ("lamb_weight_decay", "exclude_from_weight_decay_fn",
                              lambda params, decayed, excluded: _excluded(
                                  [p.name for p in excluded])),
    "paddle.incubate.optimizer.LarsMomentumOptimizer": (
        "lars_weight_decay", "exclude_from_weight_decay",
        lambda params, decayed, excluded: _excluded_substrings(params, excluded)),
}
#: the constructor keyword of the parameter list, where it is not ``parameters``
PARAMETERS_KEYWORD = {"paddle.incubate.optimizer.LarsMomentumOptimizer": "parameter_list"}


def _per_parameter_decay(row, params, per_param: list[dict]) -> dict:
    """One argument set for all parameters, where they differ only by a decay of 0
    (``no_decay_names``): the class's selector (:data:`DECAY_SELECTORS`) then names the
    decayed or the excluded ones."""
    if row.native not in DECAY_SELECTORS:
        raise ValueError(f"build: {row.native} takes one argument set for all parameters, "
                         f"but the spec gives them different ones: {per_param}")
    keyword, selector_keyword, selector = DECAY_SELECTORS[row.native]

    def rest(a):
        return {k: v for k, v in a.items() if k != keyword}

    decays = {a[keyword] for a in per_param} - {0.0}
    if len(decays) != 1 or any(rest(a) != rest(per_param[0]) for a in per_param):
        raise ValueError(f"build: {row.native} takes one argument set for all parameters, "
                         f"but the spec gives them different ones: {per_param}")
    decayed = [p for p, a in zip(params, per_param) if a[keyword] != 0.0]
    excluded = [p for p, a in zip(params, per_param) if a[keyword] == 0.0]
    return {**per_param[0], keyword: decays.pop(),
            selector_keyword: selector(params, decayed, excluded)}


def native_optimizer(row, params, param_specs, learning_rate, options):
    """``row.native`` over ``params``, its accumulators created now inside
    ``unique_name.guard()`` so that their names (the state_dict keys) end in ``_0`` in
    every build, as they do for the own optimizer."""
    cls = native_class(row.native)
    per_param = [row.arguments(s) for s in param_specs]
    arguments = per_param[0]
    if any(a != arguments for a in per_param):
        arguments = _per_parameter_decay(row, params, per_param)
    check_options(cls, options, arguments, params)
    with unique_name.guard():
        keyword = PARAMETERS_KEYWORD.get(row.native, "parameters")
        optimizer = cls(learning_rate=learning_rate, **{keyword: params}, **arguments,
                        **options)
        block = paddle.static.default_main_program().global_block()
        optimizer._create_accumulators(block, [p for p in params if not p.stop_gradient])
    return optimizer


#: Spec states that are one 0-d value per parameter, which Paddle keeps as an accumulator
#: of the parameter's shape with every element equal (NAdam's running product of the
#: momentum schedule): the spec's value is one element. It depends only on the step and
#: on hyperparameters every parameter of the optimizer shares, so a zero-size parameter
#: (which has no element, and which Paddle's step skips) reads it from a non-empty one.
PARAMETER_SHAPED_SCALARS = {"paddle.optimizer.NAdam": ("mu_product",)}


def _accumulator(optimizer, theirs, p):
    # Paddle prefixes accumulator names with the optimizer's name= when given.
    key = theirs if optimizer._name is None else f"{optimizer._name}_{theirs}"
    return optimizer._accumulators.get(key, {}).get(p.name)


def native_state(row, optimizer, p, spec) -> dict:
    """The native state of parameter ``p`` under ``spec``'s state names (the native
    classes create some accumulators, e.g. RMSProp's ``momentum``, that the spec has
    only for some settings)."""
    from .ops import paddle_ops

    out = {}
    scalars = PARAMETER_SHAPED_SCALARS.get(row.native, ())
    names = spec.init(p.detach(), paddle_ops)   # the spec's state for this parameter's shape
    for ours, theirs in row.state.items():
        if ours not in names:
            continue
        accumulator = _accumulator(optimizer, theirs, p)
        if ours in scalars:
            holder = p if p.size else next(q for q in optimizer._parameter_list if q.size)
            accumulator = _accumulator(optimizer, theirs, holder).flatten()[0]
        if accumulator is not None:
            out[ours] = accumulator
    return out
