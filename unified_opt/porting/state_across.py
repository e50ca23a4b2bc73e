"""A :class:`~.snapshot.Snapshot` written on one framework, as a run on another reads it
(:func:`across`): parameter names mapped through the target module (:mod:`.names`) and
the state of weights whose layout differs there transposed; and ``transform``, the
caller's own function per parameter.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import numpy as np

from .snapshot import Snapshot

#: ``load_state``'s ``transform``: parameter name -> a function of each state array, or
#: a function of the name returning one (or None: that parameter's arrays as they are)
Transform = Mapping[str, Callable[[Any], Any]] | Callable[[str], Callable[[Any], Any] | None]

def transformer(transform, caller: str) -> Callable[[str], Callable | None]:
    """``transform`` as a function of the parameter name (TypeError for another type)."""
    if transform is None:
        return lambda name: None
    if isinstance(transform, Mapping):
        return transform.get
    if callable(transform):
        return transform
    raise TypeError(f"{caller}: transform must be a mapping parameter name -> function, "
                    f"or a function of the name, got {transform!r}")


def model_of(model: Any, framework: str, caller: str) -> Any:
    """``model`` checked to be a module of ``framework`` (None stays None)."""
    if model is None:
        return None
    from ..build import framework_of

    if framework_of(model) != framework or not any(hasattr(model, m) for m in (
            "named_modules", "named_sublayers", "cells_and_names")):
        raise TypeError(f"{caller}: model must be the {framework} module whose parameters "
                        f"the optimizer holds, got {type(model).__qualname__}")
    return model


def _renamed(saved: Snapshot, rename: dict[str, str], caller: str) -> Snapshot:
    """``saved`` under the names ``rename`` gives; its groups and the spec's name rules
    (written over the old names) become rules over exactly the parameters they took."""
    from .names import renamed_rules

    new = [rename[n] for n in saved.names]
    spec, groups = renamed_rules(saved.spec, saved.groups, saved.names, rename, caller)
    return dataclasses.replace(
        saved, spec=spec, groups=tuple(groups), names=new,
        shapes={rename[n]: s for n, s in saved.shapes.items()},
        param_steps={rename[n]: s for n, s in saved.param_steps.items()},
        arrays={rename[n]: a for n, a in saved.arrays.items()},
        group_values=None if saved.group_values is None else {
            rename[n]: values for n, values in saved.group_values.items()})


def _transposed(name: str, shape: tuple, arrays: dict, why: str, caller: str) -> dict:
    """A 2-D weight's state in the other layout: arrays of its shape transposed, a
    factored moment's row and column statistics exchanged (the rows of the transposed
    weight are the columns of the saved one; kept as 2-D ``(n, 1)`` / ``(1, n)``
    arrays, each transposed too), scalars kept."""
    out = {}
    for key, array in arrays.items():
        partner = {"_row": "_col", "_col": "_row"}.get(key[-4:])
        if array.shape == tuple(shape):
            out[key] = np.ascontiguousarray(array.T)
        elif partner is not None and key[:-4] + partner in arrays:
            other = arrays[key[:-4] + partner]
            out[key] = np.ascontiguousarray(other.T) if other.ndim == 2 else other
        elif array.size == 1 or array.ndim == 0:
            out[key] = array
        else:
            raise ValueError(f"{caller}: parameter {name!r} is stored transposed ({why}), "
                             f"and its state {key!r} of shape {array.shape} has no known "
                             "transposed form; pass transform= for it")
    return out


def across(saved: Snapshot, framework: str, names: list[str], model: Any = None,
           transform=None, caller: str = "load_state") -> Snapshot:
    """``saved`` as a run on ``framework`` reads it (:mod:`.names`): a file written on
    another framework is renamed by :func:`.names.name_map` where ``model`` (the target
    module) is given and the names differ, and the state of each 2-D weight whose module
    types keep other layouts there is transposed; a square 2-D weight of no known
    module type is refused where the frameworks' layouts differ (its shape cannot tell).
    A parameter ``transform`` covers is left to it."""
    from .names import layout, layouts_differ, name_map, parameter_modules

    if saved.framework == framework:
        return saved
    transform_of = transformer(transform, caller)
    modules = parameter_modules(model) if model is not None else {}
    if model is not None and sorted(saved.names) != sorted(names):
        mapping = name_map(saved.framework, model)
        saved = _renamed(saved, {n: mapping.get(n, n) for n in saved.names}, caller)
    arrays, shapes = dict(saved.arrays), dict(saved.shapes)
    for name in saved.names:
        shape = tuple(saved.shapes[name])
        if len(shape) != 2 or transform_of(name) is not None:
            continue
        kind = modules.get(name, (None, None))[0]
        if kind is None:
            if shape[0] == shape[1] and layouts_differ(saved.framework, framework):
                where = ("its module is of no known type" if name in modules else
                         "no model says its module type")
                raise ValueError(
                    f"{caller}: parameter {name!r} is a square {shape} weight saved on "
                    f"{saved.framework} and loaded on {framework}, and {where}: a Linear "
                    f"keeps its weight {layout(saved.framework, 'linear')} on "
                    f"{saved.framework} and {layout(framework, 'linear')} on {framework}, "
                    "which a square shape cannot tell; pass model=<the module> (its "
                    f"module types decide), or transform={{{name!r}: np.transpose}} (or "
                    "an identity function) for it")
            continue
        source, target = layout(saved.framework, kind), layout(framework, kind)
        if source is not None and target is not None and source != target:
            why = f"a {kind} weight: {source} on {saved.framework}, {target} on {framework}"
            arrays[name] = _transposed(name, shape, saved.arrays[name], why, caller)
            shapes[name] = shape[::-1]
    return dataclasses.replace(saved, arrays=arrays, shapes=shapes)

