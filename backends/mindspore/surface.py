"""torch's optimizer surface on the MindSpore optimizers ``uo.build`` returns
(:mod:`unified_opt.param_groups`): ``param_groups``, ``defaults`` and ``zero_grad`` (which
has nothing to clear: MindSpore keeps no gradient on a parameter) beside the Cell's own
``learning_rate``, ``get_lr()`` and ``opt(grads)``.

A MindSpore optimizer runs where Python calls it (PyNative: ``opt(grads)``, a PyNative
``TrainOneStepCell`` or ``Model.train``) or compiled into a graph (GRAPH_MODE, an
``@ms.jit`` step), where Python does not run at each step and the step reads only its
Parameters. So:

* a write of ``"lr"`` into a group is carried into the optimizer's ``learning_rate``
  Parameter when the spec's lr is constant and one lr serves every group (one group,
  or groups without factors of their own): every form of the step then reads it, as
  float32 (MindSpore holds its lr in float32); the own path's Python step uses the
  written value itself, in double precision, as torch's optimizers do;
* where it cannot be carried there (per-group lrs, a hyperparameter written into a
  group of the own path), only a step Python runs reads it: the write is refused in
  GRAPH_MODE, and accepted in PyNative, where a step compiled by ``@ms.jit`` would still
  not read it (it reads Parameters only): build a new optimizer there;
* a spec whose lr is a schedule sets every step's lr: a write of ``"lr"`` is refused;
* a native class reads every other hyperparameter when it is built: writing one is
  refused (naming ``path="own"``).

``state_dict()`` returns the portable form (:mod:`unified_opt.porting.state_dict`: the
same on every framework), and ``load_state_dict`` takes it (written on any framework) or
MindSpore's own form (parameter names -> tensors: what ``mindspore.nn.Cell.state_dict(opt)``
returns), which goes to ``Cell.load_state_dict`` (``strict`` applies to that form only). A
call with ``Cell.state_dict``'s arguments (``destination``, ``prefix``, ``keep_vars``: a
parent Cell's ``state_dict`` walking its children, a training cell holding the optimizer)
is the Cell's own, so those keep MindSpore's form.
"""

from __future__ import annotations

from typing import Any, Mapping

import mindspore as ms
import numpy as np

from unified_opt.param_groups import GroupSurface
from unified_opt.porting.state_dict import is_portable, load_either, state_dict_of
from unified_opt.schedules import Schedule


def attach(optimizer, spec, plans, params, native: str | None) -> GroupSurface:
    """Give ``optimizer`` its :class:`~unified_opt.param_groups.GroupSurface`
    (``native``: the native class's qualified name, None on the own path)."""
    surface = GroupSurface(type(optimizer).__name__, plans, params, float(spec.lr_at(0)),
                           native=native,
                           on_write=lambda g, key, value: _carry(optimizer, spec, g, key,
                                                                 value))
    surface.native_lr = (optimizer.next_lr if native is None
                         else lambda: _held_lr(optimizer, surface))
    object.__setattr__(optimizer, "_uo_surface", surface)
    object.__setattr__(optimizer, "param_groups", surface.groups)
    object.__setattr__(optimizer, "defaults", surface.defaults(spec))
    object.__setattr__(optimizer, "zero_grad", zero_grad)
    attach_state_dict(optimizer)
    return surface


def attach_state_dict(optimizer) -> None:
    """``state_dict`` in the portable form and ``load_state_dict`` taking it or
    MindSpore's own form (see the module), as instance attributes."""
    cls, owner = type(optimizer), type(optimizer).__name__

    def state_dict(*args, **kwargs) -> dict[str, Any]:
        """The portable form; with ``Cell.state_dict``'s arguments, the Cell's own."""
        if args or kwargs:
            return cls.state_dict(optimizer, *args, **kwargs)
        return state_dict_of(optimizer, owner)

    def load_state_dict(state_dict, strict: bool | None = None, *, transform=None,
                        model=None):
        """The portable form (from any framework), or MindSpore's own form."""
        if strict is not None and not isinstance(strict, bool):
            raise TypeError(f"{owner}.load_state_dict: strict must be a bool, got {strict!r}")

        def load_own(own):
            return cls.load_state_dict(optimizer, own, strict=True if strict is None else strict)

        if strict is not None and is_portable(state_dict):
            raise ValueError(f"{owner}.load_state_dict: strict applies to MindSpore's own "
                             "form, not to the portable form (which is loaded whole or not "
                             "at all)")
        return load_either(optimizer, state_dict, owner=owner, method="load_state_dict",
                           own_form=mindspore_form, own_name="MindSpore's own form "
                           "(parameter names -> tensors; what mindspore.nn.Cell.state_dict "
                           "returns)", load_own=load_own, transform=transform, model=model)

    object.__setattr__(optimizer, "state_dict", state_dict)
    object.__setattr__(optimizer, "load_state_dict", load_state_dict)


def mindspore_form(state_dict: Mapping) -> bool:
    """Whether ``state_dict`` has the shape of MindSpore's own form: some entries, each
    a tensor (a Parameter included) or an array."""
    return bool(state_dict) and all(isinstance(value, (ms.Tensor, np.ndarray))
                                    for value in state_dict.values())


def zero_grad(set_to_none: bool = True) -> None:
    """torch's ``zero_grad``: nothing to clear on MindSpore, whose parameters keep no
    gradient (each step's gradients are the optimizer call's argument, new tensors from
    ``mindspore.grad`` / ``value_and_grad``)."""
    if not isinstance(set_to_none, bool):
        raise TypeError(f"zero_grad: set_to_none must be a bool, got {set_to_none!r}")


def _carry(optimizer, spec, g: int, key: str, value) -> None:
    """Carry an accepted write where the step reads it, or refuse it (see the module)."""
    surface: GroupSurface = optimizer._uo_surface
    where = f"param_groups[{g}][{key!r}]"
    if key == "lr" and isinstance(spec.lr, Schedule):
        raise ValueError(f"{surface.owner}: {where} = {value!r}: the spec's lr is a schedule "
                         f"({type(spec.lr).__name__}), which sets every step's lr; build "
                         "with a constant lr to drive it from param_groups (uo.lr_scheduler)")
    parameter = _one_lr_parameter(optimizer, surface)
    if key == "lr" and parameter is not None:
        _assign(parameter, value)
        # the lr the step now reads from the Parameter: not a change of the framework's own
        surface.follow_native(optimizer.next_lr() if surface.native is None
                              else float(np.float32(value)))
        return
    if surface.native is not None:
        raise ValueError(f"{surface.owner}: {where} = {value!r}: {surface.native} holds one "
                         "lr Parameter for every group, and these groups' lrs differ; build "
                         "the own path, whose step takes each group's lr as written: "
                         "uo.build(spec, params, path='own')")
    if ms.get_context("mode") == ms.GRAPH_MODE:
        raise ValueError(f"{surface.owner}: {where} = {value!r}: in GRAPH_MODE the compiled "
                         "step reads only the optimizer's Parameters, and this value has no "
                         "Parameter to go to (only an lr shared by every group does); build "
                         "a new optimizer with it, or run the step in PyNative mode")


def _assign(parameter, value: float) -> None:
    """``parameter`` holds ``value`` (float32) in place: a compiled step (a class's
    ``@jit`` construct, a graph) keeps the Parameter's memory, not a new tensor that
    ``set_data`` would put there."""
    from .kernels import host_view

    view = host_view(parameter)
    if view is not None:
        view[...] = np.float32(value)
    else:
        ms.ops.assign(parameter, ms.Tensor(np.full(parameter.shape, value, dtype=np.float32)))


def _one_lr_parameter(optimizer, surface: GroupSurface):
    """The ``learning_rate`` Parameter one lr of every group is carried into, None where
    there is none (a scheduled or per-group lr, groups with factors)."""
    if any(plan.lr_scale != 1.0 or plan.fixed_lr is not None for plan in surface.plans):
        return None
    if getattr(optimizer, "dynamic_lr", False) or getattr(optimizer, "is_group_lr", False):
        return None
    parameter = getattr(optimizer, "learning_rate", None)
    return parameter if isinstance(parameter, ms.Parameter) else None


def _held_lr(optimizer, surface: GroupSurface) -> float:
    """A native class's lr as its groups follow it: its one ``learning_rate`` Parameter
    (the value the groups last followed where that is the same in float32); with a
    schedule Cell or per-group lrs, the groups keep the build's lrs."""
    parameter = _one_lr_parameter(optimizer, surface)
    seen = surface.native_seen[0]
    if parameter is None:
        return seen
    held = float(parameter.asnumpy().reshape(-1)[0])
    return seen if np.float32(held) == np.float32(seen) else held


def check_native_lrs(optimizer) -> None:
    """Before a native class's step that Python runs: every group's lr is the one its
    ``learning_rate`` Parameter holds (a loop writing the groups one by one carries
    each value there; the groups must agree once it is done); a value written into the
    Parameter from outside is followed by the groups (both at once: refused, as
    :meth:`~unified_opt.param_groups.GroupSurface.lrs` says)."""
    surface: GroupSurface = optimizer._uo_surface
    surface.check_groups()
    parameter = _one_lr_parameter(optimizer, surface)
    if parameter is None:
        return
    held = float(parameter.asnumpy().reshape(-1)[0])
    seen = surface.native_seen[0]
    if np.float32(held) == np.float32(seen):
        held = seen                        # unchanged (held in float32)
    # a value written from outside (mindspore.train.ReduceLROnPlateau): the groups follow
    lrs = surface.lrs(held)
    if any(np.float32(lr) != np.float32(held) for lr in lrs):
        raise ValueError(f"{surface.owner}: param_groups hold lrs {lrs}, but "
                         f"{surface.native} runs every group at its one learning_rate "
                         f"({held}); build the own path, whose step takes each group's lr "
                         "as written: uo.build(spec, params, path='own')")
