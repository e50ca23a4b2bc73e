"""Building paddle.optimizer classes from their descriptors, and reading their state."""

from __future__ import annotations

import contextlib
import inspect

import paddle
from paddle.utils import unique_name

from unified_opt.native import import_native
from unified_opt.step_loop import DENSE, check_gradients

from .surface import attach, step_lrs

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
    "grad_clip": "it comes from the spec's grad_clip",
    "lr_ratio": "it scales the lr per parameter",
    "rescale_grad": "it scales the gradient (and the CPU kernel ignores it)",
    "lazy_mode": "it updates only the touched rows of sparse gradients",
}
_MULTI_TENSOR_DTYPES = (paddle.float32, paddle.float16, paddle.bfloat16)


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


#: The selector arguments (a descriptor's ``decay_selector``) that say which parameters
#: take the one weight decay: selector keyword -> selector from (params, decayed, excluded)
DECAY_SELECTORS = {
    "apply_decay_param_fun":
        lambda params, decayed, excluded: _decay_only([p.name for p in decayed]),
    "exclude_from_weight_decay_fn":
        lambda params, decayed, excluded: _excluded([p.name for p in excluded]),
    "exclude_from_weight_decay":
        lambda params, decayed, excluded: _excluded_substrings(params, excluded),
}


def native_clip(clip):
    """The ``paddle.nn`` clip computing the spec's ``grad_clip`` (eps=0, which the
    lowering checks)."""
    from unified_opt.clipping import ClipByGlobalNorm, ClipByNorm, ClipByValue

    if isinstance(clip, ClipByGlobalNorm):
        return paddle.nn.ClipGradByGlobalNorm(clip_norm=clip.max_norm)
    if isinstance(clip, ClipByNorm):
        return paddle.nn.ClipGradByNorm(clip_norm=clip.max_norm)
    if isinstance(clip, ClipByValue):
        return paddle.nn.ClipGradByValue(max=clip.max, min=clip.min)
    raise TypeError(f"build: no paddle.nn clip computes {clip!r}")


class _HeldAttributes:
    """Mixin for a Paddle optimizer class: what Paddle writes onto the Parameter objects
    for parameter groups (``regularizer`` and ``optimize_attr['learning_rate']``, in
    ``_add_param_group``) and for clip exclusions (``need_clip``) is kept here, and is
    on the Parameters only while ``step``/``minimize`` runs, where Paddle's own code
    reads it. Paddle would leave it there, and a later optimizer over the same
    Parameters would silently apply it (measured on Paddle 3.3)."""

    purpose = "keeping its per-parameter attributes off the Parameters between steps"

    def _add_param_group(self, param_group):
        params = param_group["params"]
        params = [params] if isinstance(params, paddle.Tensor) else list(params)
        before = [_attributes(p) for p in params]
        super()._add_param_group(param_group)
        for p, attributes in zip(params, before):
            self._hold(p, regularizer=getattr(p, "regularizer", None),
                       learning_rate=p.optimize_attr["learning_rate"])
            _set_attributes(p, attributes)

    def _hold(self, p, **attributes) -> None:
        held = self.__dict__.setdefault("_held_attributes", {})
        held.setdefault(p.name, (p, {}))[1].update(attributes)

    @contextlib.contextmanager
    def _attributes_on_parameters(self):
        held = list(self.__dict__.get("_held_attributes", {}).values())
        saved = [(p, _attributes(p)) for p, _ in held]
        try:
            for p, attributes in held:
                _set_attributes(p, attributes)
            yield
        finally:
            for p, attributes in saved:
                _set_attributes(p, attributes)

    def step(self):
        with self._attributes_on_parameters():
            return super().step()

    def minimize(self, *args, **kwargs):
        with self._attributes_on_parameters():
            return super().minimize(*args, **kwargs)


def _attributes(p) -> dict:
    return {"regularizer": getattr(p, "regularizer", None),
            "learning_rate": p.optimize_attr.get("learning_rate", 1.0),
            "need_clip": getattr(p, "need_clip", True)}


def _set_attributes(p, attributes: dict) -> None:
    for key, value in attributes.items():
        if key == "learning_rate":
            p.optimize_attr["learning_rate"] = value
        else:
            setattr(p, key, value)


class _FiniteGradientsOnly:
    """Mixin for a Paddle optimizer class that computes garbage from a non-finite
    gradient (its descriptor's ``nonfinite``): a step whose gradients hold inf or NaN is
    refused with ``FloatingPointError`` before anything changes."""

    purpose = "refusing a step with a non-finite gradient"
    _nonfinite = ""

    def _check_finite(self) -> None:
        for p in _parameters(self):
            g = p.grad
            if g is not None and g.size and not bool(paddle.isfinite(g).all()):
                raise FloatingPointError(
                    f"{type(self).__name__}: the gradient of {p.name} holds inf or NaN, "
                    f"and {self._nonfinite}; nothing was changed. Skip such steps "
                    "(spec skip_nonfinite=True, or paddle.amp.GradScaler) or build with "
                    "path='own' (the spec's update, which makes the parameter NaN)")

    def step(self):
        self._check_finite()
        return super().step()

    def minimize(self, *args, **kwargs):
        self._check_finite()
        return super().minimize(*args, **kwargs)


def describe(tensor) -> tuple:
    """``(shape, dtype, place, form)`` of a Paddle parameter or gradient
    (:data:`unified_opt.step_loop.DESCRIBED`): a gradient must have its parameter's.
    ``form`` is "selected_rows" for the SelectedRows gradient of a ``sparse=True``
    embedding (its shape is the rows', not the parameter's), else "dense"."""
    return (tensor.shape, tensor.dtype, tensor.place,
            "selected_rows" if tensor.is_selected_rows() else DENSE)


#: where a SelectedRows gradient is refused, how to avoid one
SELECTED_ROWS_HINT = (": a SelectedRows gradient comes from paddle.nn.Embedding("
                      "sparse=True): build the embedding with sparse=False")


def check_parameter_gradients(optimizer, params) -> None:
    """Every gradient of ``params`` a Paddle step would read (not ``stop_gradient``)
    checked against its parameter, before anything changes
    (:func:`unified_opt.step_loop.check_gradients`)."""
    params = [p for p in params if not p.stop_gradient]
    check_gradients(type(optimizer).__name__, _names(optimizer, params), params,
                    [p._grad_ivar() for p in params], describe, hint=SELECTED_ROWS_HINT)


def _names(optimizer, params) -> list[str]:
    """Each parameter's name in errors: the name ``uo.build`` knew (a module's
    attribute path) with Paddle's own, else Paddle's."""
    known = optimizer.__dict__.get("_uo_names", {})
    return [f"{known[p.name]} ({p.name})" if known.get(p.name, p.name) != p.name else p.name
            for p in params]


class _CheckedGradients:
    """Mixin for every Paddle optimizer class ``uo.build`` returns: each step's gradients
    checked against their parameters first (:func:`check_parameter_gradients`: shape,
    dtype, place, dense), a mismatch refused naming the parameter before anything
    changes. Paddle's classes broadcast a 1-element gradient or raise only at the
    parameter whose kernel refuses it, after updating the ones before it (the step runs
    per parameter group and per parameter)."""

    purpose = "checking each gradient against its parameter before the step"

    def step(self, closure=None):
        """Paddle's step, after the gradients' check and the param groups' lr
        (:func:`.surface.step_lrs`); ``closure`` (torch's form) runs first, with
        gradients on, and its loss is returned."""
        loss = None
        if closure is not None:
            with paddle.enable_grad():
                loss = closure()
        check_parameter_gradients(self, _parameters(self))
        if "_uo_surface" in self.__dict__:
            step_lrs(self)
        super().step()
        self._count_steps()
        return loss

    def minimize(self, *args, **kwargs):
        if "_uo_surface" in self.__dict__:
            step_lrs(self)
        out = super().minimize(*args, **kwargs)
        self._count_steps()
        return out

    def _count_steps(self) -> None:
        """Each parameter's updates (Paddle's step skips one without a gradient), in
        ``_uo_steps`` (parameter name -> count): ``save_state`` reads a class that keeps
        no step count (``Momentum``) there. None once Paddle's own form of a state dict
        was loaded (its count is unknown then)."""
        counts = self.__dict__.get("_uo_steps")
        if counts is None:
            return
        for p in _parameters(self):
            if not p.stop_gradient and p.grad is not None:
                counts[p.name] = counts.get(p.name, 0) + 1

    def backward(self, *args, **kwargs):
        # minimize's gradients: checked before its _apply_optimize changes anything
        params_grads = super().backward(*args, **kwargs)
        params = [p for p, _ in params_grads]
        check_gradients(type(self).__name__, _names(self, params), params,
                        [g for _, g in params_grads], describe, hint=SELECTED_ROWS_HINT)
        return params_grads


_SUBCLASSES: dict[tuple, type] = {}


def subclass_with(cls, mixins: tuple, nonfinite: str = ""):
    """``cls`` with ``mixins`` (:class:`_CheckedGradients`, :class:`_HeldAttributes`,
    :class:`_FiniteGradientsOnly`):
    one subclass per combination, with ``cls``'s name, so the optimizer is still an
    instance of ``cls``."""
    key = (cls, mixins, nonfinite)
    if not mixins:
        return cls
    if key not in _SUBCLASSES:
        _SUBCLASSES[key] = type(cls.__name__, (*mixins, cls), {
            "__module__": __name__, "__qualname__": cls.__name__, "_nonfinite": nonfinite,
            "__doc__": f"{cls.__module__}.{cls.__name__}, "
                       + " and ".join(m.purpose for m in mixins)})
    return _SUBCLASSES[key]


def native_optimizer(cls_info, lowering, spec, params, plans, learning_rate, options,
                     dtypes=()):
    """``cls_info.name`` over ``params`` with Paddle's own parameter groups and
    ``grad_clip`` (:mod:`.layout`), its accumulators created now inside
    ``unique_name.guard()`` so that their names (the state_dict keys) end in ``_0`` in
    every build, as they do for the own optimizer."""
    from .layout import paddle_layout

    layout = paddle_layout(cls_info, lowering, spec, plans, dtypes)
    if isinstance(layout, str):   # the decision has checked it
        raise ValueError(f"build: {cls_info.name} needs {layout}")
    cls = import_native(cls_info.name)
    arguments = dict(layout.arguments)
    if layout.decayed is not None:
        selector = DECAY_SELECTORS[cls_info.decay_selector]
        chosen = set(layout.decayed)
        arguments[cls_info.decay_selector] = selector(
            params, [params[i] for i in sorted(chosen)],
            [p for i, p in enumerate(params) if i not in chosen])
    if layout.clip is not None:
        arguments["grad_clip"] = native_clip(layout.clip)
    check_options(cls, options, arguments, params)
    parameters = params
    if layout.groups is not None:
        parameters = [{"params": [params[i] for i in indices], **keys}
                      for indices, keys in layout.groups]
    mixins = (_CheckedGradients,) + \
        ((_FiniteGradientsOnly,) if cls_info.refuses_nonfinite else ()) + \
        ((_HeldAttributes,) if layout.holds_attributes else ())
    cls = subclass_with(cls, mixins, cls_info.nonfinite)
    with unique_name.guard():
        optimizer = cls(learning_rate=learning_rate, **{cls_info.parameters_keyword: parameters},
                        **arguments, **options)
        for i in layout.unclipped:
            optimizer._hold(params[i], need_clip=False)
        attach(optimizer, spec, plans, params, cls_info.name)
        # the names uo.build knew, for the gradient check's errors (_CheckedGradients)
        optimizer._uo_names = {p.name: plan.name for p, plan in zip(params, plans)
                               if plan.name is not None}
        optimizer._uo_steps = {}           # _CheckedGradients._count_steps
        block = paddle.static.default_main_program().global_block()
        optimizer._create_accumulators(block, [p for p in params if not p.stop_gradient])
    return optimizer


def _accumulator(optimizer, theirs, p):
    # Paddle prefixes accumulator names with the optimizer's name= when given.
    key = theirs if optimizer._name is None else f"{optimizer._name}_{theirs}"
    return optimizer._accumulators.get(key, {}).get(p.name)


def _parameters(optimizer) -> list:
    """The optimizer's parameters, also where it holds parameter groups (dicts): those
    its step walks, ``_param_groups`` (Paddle's ``_add_param_group`` extends it, not
    ``_parameter_list``)."""
    groups = getattr(optimizer, "_param_groups", None)
    entries = groups if groups and isinstance(groups[0], dict) else optimizer._parameter_list
    out = []
    for entry in entries:
        out += entry["params"] if isinstance(entry, dict) else [entry]
    return out


def native_state(cls_info, optimizer, p, spec) -> dict:
    """The native state of parameter ``p`` under ``spec``'s state names (the native
    classes create some accumulators, e.g. RMSProp's ``momentum``, that the spec has
    only for some settings). A parameter-shaped scalar (NAdam's ``mu_product``: every
    element the spec's 0-d value) is read as one element; it depends only on the step and
    on hyperparameters every parameter shares, so a zero-size parameter (which has no
    element, and which Paddle's step skips) reads it from a non-empty one."""
    from unified_opt.porting.state import state_layout

    out = {}
    scalars = cls_info.parameter_shaped_scalars
    # the spec's state names for this parameter's shape; state_layout holds no memory of
    # the state's size (spec.init on the parameter would make all of it: save_state's peak)
    names = state_layout(spec, tuple(p.shape), paddle.zeros([0], dtype=p.dtype).numpy().dtype)
    for ours, theirs in cls_info.state.items():
        if ours not in names:
            continue
        accumulator = _accumulator(optimizer, theirs, p)
        if ours in scalars:
            holder = p if p.size else next(q for q in _parameters(optimizer) if q.size)
            accumulator = _accumulator(optimizer, theirs, holder).flatten()[0]
        if accumulator is not None:
            out[ours] = accumulator
    return out
