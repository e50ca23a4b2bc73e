"""Parameter names and weight layouts across frameworks.

The same model written in two frameworks names some parameters differently and keeps
some weights transposed. Both follow from the module type, so they are a table here:

* **names** (:data:`ATTRIBUTES`): MindSpore's ``LayerNorm``, ``BatchNorm*`` and
  ``GroupNorm`` call their parameters ``gamma`` and ``beta`` where torch and Paddle say
  ``weight`` and ``bias``; MindSpore's ``Embedding`` keeps ``embedding_table`` where the
  others keep ``weight``. The module path before the attribute is the model's own (the
  attribute names a script gives its submodules) and is kept.
* **layouts** (:data:`LAYOUTS`): torch's ``Linear`` and MindSpore's ``Dense`` keep their
  weight as ``(out, in)``, Paddle's ``Linear`` as ``(in, out)``; convolutions and
  embeddings keep one layout everywhere.

:func:`name_map` maps a source framework's names onto a target model's parameters;
:func:`parameter_modules` gives each parameter's module type and attribute. State files
(:mod:`.state`) use both when a run moves between frameworks: ``uo.resume`` and
``uo.load_state`` rename and transpose by them, and refuse a square weight whose
layout no module type decides (its shape cannot tell). :func:`map_rules` renames a
spec's name rules and ``uo.Group`` rules (``uo.from_native(..., names=model)``'s, written
over one framework's names) onto another framework's model, as ``resume`` does;
:func:`mindspore_filter_onto` says MindSpore's beta/gamma no-decay filter in a torch or
Paddle model's names (``uo.build`` calls it).

A module type is known when the module is the framework's own class (or a subclass of
it): ``torch.nn.Linear``, ``paddle.nn.Linear``, ``mindspore.nn.Dense``, ... Nothing here
imports a framework: the model's classes are read by their module and name.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

from ..backend import framework_of

#: module type -> framework -> class names (in that framework's ``nn``)
KINDS = {
    "linear": {"torch": ("Linear",), "paddle": ("Linear",), "mindspore": ("Dense",)},
    "layer_norm": {"torch": ("LayerNorm",), "paddle": ("LayerNorm",),
                   "mindspore": ("LayerNorm",)},
    "batch_norm": {"torch": ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d"),
                   "paddle": ("BatchNorm", "BatchNorm1D", "BatchNorm2D", "BatchNorm3D"),
                   "mindspore": ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d")},
    "group_norm": {"torch": ("GroupNorm",), "paddle": ("GroupNorm",),
                   "mindspore": ("GroupNorm",)},
    "embedding": {"torch": ("Embedding",), "paddle": ("Embedding",),
                  "mindspore": ("Embedding",)},
    "conv": {"torch": ("Conv1d", "Conv2d", "Conv3d"), "paddle": ("Conv1D", "Conv2D", "Conv3D"),
             "mindspore": ("Conv1d", "Conv2d", "Conv3d")},
}
_NORM = {"torch": ("weight", "bias"), "paddle": ("weight", "bias"),
         "mindspore": ("gamma", "beta")}
_WEIGHT_BIAS = {"torch": ("weight", "bias"), "paddle": ("weight", "bias"),
                "mindspore": ("weight", "bias")}
#: module type -> framework -> its parameters' attribute names, position by position
ATTRIBUTES = {
    "linear": _WEIGHT_BIAS, "conv": _WEIGHT_BIAS,
    "layer_norm": _NORM, "batch_norm": _NORM, "group_norm": _NORM,
    "embedding": {"torch": ("weight",), "paddle": ("weight",),
                  "mindspore": ("embedding_table",)},
}
#: module type -> framework -> the layout of its 2-D weight
LAYOUTS = {"linear": {"torch": "(out, in)", "paddle": "(in, out)", "mindspore": "(out, in)"}}
FRAMEWORKS = ("torch", "paddle", "mindspore")


def module_kind(module: Any, framework: str) -> str | None:
    """The module type of ``module`` (its class or the first base class that is
    ``framework``'s own, by name), None when none is in :data:`KINDS`."""
    for klass in type(module).__mro__:
        if (klass.__module__ or "").split(".")[0] != framework:
            continue
        for kind, classes in KINDS.items():
            if klass.__name__ in classes[framework]:
                return kind
    return None


def _modules(model: Any, framework: str):
    """``(path, module, [(attribute, parameter), ...])`` of every module of ``model``,
    the parameters its own (not its submodules')."""
    if framework == "torch":
        for path, module in model.named_modules():
            yield path, module, list(module.named_parameters(recurse=False))
    elif framework == "paddle":
        for path, layer in model.named_sublayers(include_self=True):
            yield path, layer, list(layer.named_parameters(include_sublayers=False))
    else:
        for path, cell in model.cells_and_names():
            yield path, cell, list(cell._params.items())


def parameter_modules(model: Any) -> dict[str, tuple[str | None, str]]:
    """``{parameter name: (module type or None, attribute)}`` for every parameter of
    ``model`` (a torch Module, Paddle Layer or MindSpore Cell), under the names
    ``uo.build`` gives them."""
    framework = framework_of(model)
    if framework is None or not any(hasattr(model, m) for m in (
            "named_modules", "named_sublayers", "cells_and_names")):
        raise TypeError(f"name_map: model must be a torch Module, Paddle Layer or "
                        f"MindSpore Cell, got {type(model).__qualname__}")
    out = {}
    for path, module, params in _modules(model, framework):
        kind = module_kind(module, framework)
        for attribute, _ in params:
            name = f"{path}.{attribute}" if path else attribute
            out[name] = (kind, attribute)
    return out


def name_map(source_framework: str, target_model: Any) -> dict[str, str]:
    """``{name in source_framework: name in target_model}`` for every parameter of
    ``target_model``: the same module path, the attribute as ``source_framework``'s
    class of that module type calls it (``ln.weight`` -> ``ln.gamma`` into MindSpore).
    A parameter of a module type not in the table keeps its name."""
    if source_framework not in FRAMEWORKS:
        raise ValueError(f"name_map: source_framework must be one of {FRAMEWORKS}, got "
                         f"{source_framework!r}")
    target = framework_of(target_model)
    out = {}
    for name, (kind, attribute) in parameter_modules(target_model).items():
        source = name
        if kind is not None and target is not None:
            own = ATTRIBUTES[kind][target]
            if attribute in own:
                path = name[:len(name) - len(attribute)]
                source = path + ATTRIBUTES[kind][source_framework][own.index(attribute)]
        if source in out:
            raise ValueError(f"name_map: {source!r} would name both {out[source]!r} and "
                             f"{name!r} of the {target} model")
        out[source] = name
    return out


def layout(framework: str, kind: str | None) -> str | None:
    """The layout of a 2-D weight of module type ``kind`` in ``framework`` (None: the
    module type keeps one layout in every framework, or is unknown)."""
    return LAYOUTS.get(kind, {}).get(framework)


def layouts_differ(a: str, b: str) -> bool:
    """Whether some module type keeps its weight in another layout in ``a`` than in
    ``b`` (then a square weight of an unknown module type is undecidable)."""
    return any(t.get(a) != t.get(b) for t in LAYOUTS.values())


def renamed_rules(spec: Any, groups: Sequence[Any], names: Sequence[str],
                  rename: Mapping[str, str], caller: str) -> tuple[Any, list]:
    """``spec``'s name rules and the ``uo.Group`` rules ``groups``, written over the
    parameter ``names``, as rules over exactly the parameters each took, under the names
    ``rename`` gives them (a rule that took none is dropped from the spec's name rules;
    a group that takes none is refused by ``plan_parameters``, which checks them over
    ``names`` first)."""
    from ..groups import NAME_RULES, escaped, name_matches, plan_parameters

    plans = plan_parameters(spec, list(names), list(groups) or None, caller)
    out = []
    for index, rule in enumerate(groups):
        taken = sorted(rename[n] for n, plan in zip(names, plans) if plan.group == index)
        out.append(dataclasses.replace(rule, match=tuple(escaped(n) for n in taken)))
    changes = {}
    for key in NAME_RULES:
        patterns = getattr(spec, key, ())
        if patterns:
            taken = sorted(rename[n] for n in names if name_matches(n, patterns))
            changes[key] = tuple(escaped(n) for n in taken)
    return (spec.replace(**changes) if changes else spec), out


def map_rules(spec: Any, groups: Sequence[Any], source_framework: str,
              model: Any) -> tuple[Any, list]:
    """``(spec, groups)`` read on ``source_framework`` (``uo.from_native(optimizer,
    names=module)``: ``uo.Group`` rules of exact names, a spec's ``no_decay_names``)
    renamed onto ``model``, another framework's module, by :func:`name_map`.

    Each rule becomes the exact names, in ``model``, of the parameters it took under the
    source names; a rule naming a parameter ``model`` does not have is a ValueError
    (``plan_parameters``), so nothing falls back to the spec's values unseen.

    Args:
        spec: the spec read (its name rules are renamed too).
        groups: the ``uo.Group`` rules read with it.
        source_framework: "torch", "paddle" or "mindspore": whose names the rules use.
        model: the torch Module, Paddle Layer or MindSpore Cell the spec is built on.

    Returns:
        ``(spec, groups)`` for ``uo.build(spec, model, groups=groups)``.

    Raises:
        ValueError: ``source_framework`` is unknown, or a rule names a parameter the
            model has not (under :func:`name_map`'s names).
        TypeError: ``model`` is no module of a framework.

    Example:
        >>> spec, groups = uo.from_native(torch_opt, names=torch_model)  # doctest: +SKIP
        >>> spec, groups = uo.porting.map_rules(spec, groups, "torch", ms_model)  # doctest: +SKIP
        >>> opt = uo.build(spec, ms_model, groups=groups)  # doctest: +SKIP
    """
    mapping = name_map(source_framework, model)
    return renamed_rules(spec, groups, list(mapping), mapping, "map_rules")


def mindspore_filter_onto(spec, params: Any, names: Sequence[str | None], framework: str,
                          caller: str):
    """``spec`` with MindSpore's default filter (``groups.MINDSPORE_NO_DECAY``, a MindSpore
    preset's ``no_decay_names``) said in the names of a torch or Paddle model: there a
    norm's parameters are ``weight`` and ``bias``, which ``*beta*``/``*gamma*`` never
    match, so the rule as written would decay what MindSpore spares. A module
    (``params``) names each parameter as MindSpore would (:func:`name_map`: a
    LayerNorm's, BatchNorm's, GroupNorm's ``weight``/``bias`` are its ``gamma``/``beta``),
    and the rule becomes the exact names of the parameters whose MindSpore name it
    matches (none: ``()``, MindSpore then decays every parameter too). Other parameters
    (pairs, bare parameters, group dicts) carry no module type: their names are taken as
    MindSpore's where the rule matches one of them (``ln.gamma``), else the rule is refused
    (ValueError) where it would act (a weight decay), naming the ways to say it.
    ``names``: the parameters' names as the build names them (a tied weight once)."""
    from ..groups import MINDSPORE_NO_DECAY, escaped, name_matches

    if (framework == "mindspore" or not hasattr(spec, "no_decay_names")
            or tuple(spec.no_decay_names) != MINDSPORE_NO_DECAY):
        return spec
    if any(hasattr(params, m) for m in ("named_modules", "named_sublayers")):
        built = set(names)
        spared = sorted(own for mindspore_name, own in name_map("mindspore", params).items()
                        if own in built and name_matches(mindspore_name, MINDSPORE_NO_DECAY))
        return spec.replace(no_decay_names=tuple(escaped(n) for n in spared))
    if spec.weight_decay == 0.0 or any(
            n is not None and name_matches(n, MINDSPORE_NO_DECAY) for n in names):
        return spec           # no decay to spare from, or names said as MindSpore says them
    raise ValueError(
        f"{caller}: no_decay_names={MINDSPORE_NO_DECAY!r} is MindSpore's filter (it spares "
        f"its norm layers' gamma and beta), and these {framework} parameters carry no module "
        "type to find the norms by (their names are weight and bias here): pass the model "
        "itself, or say which parameters decay: spec.replace(no_decay_names=(...)) with "
        "this model's names, or () to decay every parameter")
