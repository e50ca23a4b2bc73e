"""MindSpore's parameter-group rule as a preset: group dicts -> ``uo.Group`` rules.

A ``mindspore.nn`` optimizer given group dicts ``[{"params": [...], "lr": ...,
"weight_decay": ...}, ..., {"order_params": [...]}]`` (measured on MindSpore 2.10, and
the MindSpore/PyTorch migration guide's "参数分组"):

* decays a group exactly when its ``weight_decay > 0``: the ``"beta"``/``"gamma"`` name
  rule of a flat parameter list is off in groups;
* gives a group without ``lr`` / ``weight_decay`` the optimizer's ``learning_rate`` /
  ``weight_decay``;
* takes a group ``lr`` as a float or as a per-step list (its own dynamic lr);
* requires every parameter in exactly one group (``order_params``, when given, lists
  them all and only fixes their order, which changes no number).

:func:`mindspore_groups` reads the same dicts with the parameters given by *name* and
returns the ``uo.Group`` list that makes ``uo.build(spec, named_params, groups=...)``
compute what MindSpore computes, on any backend.
"""

from __future__ import annotations

import math
import re
from typing import Any, Sequence

import numpy as np

from .. import _validation as v
from ..groups import Group, name_matches
from ..schedules import Schedule
from ..spec import Spec

_KEYS = ("params", "lr", "weight_decay", "grad_centralization")
_CALLER = "mindspore_groups"


def mindspore_groups(params: Sequence[dict], spec: Spec) -> list[Group]:
    """The ``uo.Group`` rules reproducing MindSpore group dicts exactly.

    ``params``: MindSpore's ``params`` argument with parameter *names* in place of the
    Parameters, e.g. ``[{"params": ["conv.weight"], "weight_decay": 0.01, "lr": 0.1},
    {"params": ["bn.gamma", "bn.beta"]}, {"order_params": [...every name...]}]``.
    ``spec``: the optimizer's spec (``uo.preset("mindspore.nn.Momentum",
    learning_rate=..., weight_decay=..., ...)``), whose lr and weight decay the groups
    without ``lr`` / ``weight_decay`` keep.

    Args:
        params: the group dicts, names in place of Parameters (above).
        spec: the optimizer's spec.

    Returns:
        list[Group]: one ``uo.Group`` per group dict (below).

    Raises:
        ValueError: a group lr list that is no constant multiple of the spec's schedule,
            or a decay schedule the spec's name rule does not spare.
        NotImplementedError: the configurations refused below.

    One ``uo.Group`` per group dict, in order, matching exactly its parameter
    names (escaped for ``fnmatch``):

    * ``weight_decay``: the group's, or the optimizer's (``spec.weight_decay``) when the
      dict has none. Always set, so the spec's beta/gamma name rule is off, as in
      MindSpore's groups (a group inheriting a weight-decay *schedule* keeps
      ``weight_decay=None``; that needs a spec whose ``no_decay_names`` spare the
      group's names, else ValueError).
    * ``lr``: a float group lr beside a constant ``spec.lr`` -> ``lr=`` (absolute); a
      per-step list beside a scheduled ``spec.lr`` -> ``lr_scale=k`` where the list is
      ``k * spec.lr(t)`` at every step ``t`` it has (checked to float32 rounding, the
      precision MindSpore holds lrs in; ValueError otherwise). No ``lr`` -> no factor.

    Refused (NotImplementedError): a float group lr beside a scheduled optimizer lr
    (MindSpore then computes that group's lr as ``lr + 1.0 - 1.0`` in float32, which
    rounds it: 0.001 becomes 0.0010000467), a list beside a constant optimizer lr, a
    group weight-decay Cell or schedule, and ``grad_centralization=True`` (MindSpore's
    rule: per group, only gradients with ``shape[1] % 16 == 0``; the spec's is global).
    """
    if isinstance(params, (str, bytes, dict)) or not isinstance(params, Sequence):
        raise TypeError(f"{_CALLER}: params must be a list of group dicts, got {params!r}")
    if not hasattr(spec, "lr_at"):
        raise TypeError(f"{_CALLER}: spec must be a unified_opt spec, got {spec!r}")
    groups: list[Group] = []
    order: Any = None
    seen: dict[str, int] = {}
    for index, group in enumerate(params):
        where = f"params[{index}]"
        if not isinstance(group, dict):
            raise TypeError(f"{_CALLER}: {where} must be a dict, got {group!r}")
        if "order_params" in group:
            if len(group) != 1:
                raise ValueError(f"{_CALLER}: {where} holds 'order_params' and must hold "
                                 f"nothing else, got keys {sorted(group)}")
            order = _names(group["order_params"], f"{where}['order_params']")
            continue
        bad = sorted(set(group) - set(_KEYS))
        if bad:
            raise ValueError(f"{_CALLER}: {where} keys must be in {list(_KEYS)} or "
                             f"'order_params', got {bad}")
        if "params" not in group:
            raise ValueError(f"{_CALLER}: {where} has no 'params'")
        names = _names(group["params"], f"{where}['params']")
        for name in names:
            if name in seen:
                raise ValueError(f"{_CALLER}: parameter {name!r} is in params[{seen[name]}] "
                                 f"and {where} (MindSpore refuses a repeated parameter)")
            seen[name] = index
        if group.get("grad_centralization", False) is not False:
            raise NotImplementedError(
                f"{_CALLER}: {where} grad_centralization={group['grad_centralization']!r} is "
                "not supported: MindSpore centralizes per group and only gradients with "
                "shape[1] % 16 == 0; the spec's grad_centralization is one rule for all")
        match = tuple(_escaped(n) for n in names)
        groups.append(Group(match=match, **_decay(group, spec, names, where),
                            **_lr(group, spec, where)))
    if not groups:
        raise ValueError(f"{_CALLER}: params holds no group with 'params'")
    if order is not None and sorted(order) != sorted(seen):
        raise ValueError(f"{_CALLER}: order_params must list every grouped parameter once, "
                         f"got {order} for {sorted(seen)}")
    return groups


def _names(value: Any, where: str) -> list[str]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
        raise TypeError(f"{_CALLER}: {where} must be a non-empty list of parameter names, "
                        f"got {value!r}")
    for i, name in enumerate(value):
        if not isinstance(name, str) or not name:
            raise TypeError(f"{_CALLER}: {where}[{i}] must be a parameter name (str), got "
                            f"{name!r}")
    if len(set(value)) != len(value):
        raise ValueError(f"{_CALLER}: {where} repeats a name: {list(value)}")
    return list(value)


def _escaped(name: str) -> str:
    """``name`` as an fnmatch pattern matching exactly it."""
    return re.sub(r"([*?\[])", r"[\1]", name)


def _decay(group: dict, spec, names: list[str], where: str) -> dict:
    if "weight_decay" in group:
        decay = group["weight_decay"]
        if isinstance(decay, Schedule) or not isinstance(decay, (int, float)) or \
                isinstance(decay, bool):
            raise NotImplementedError(
                f"{_CALLER}: {where} weight_decay={decay!r} is not supported: a group's "
                "weight decay is a float here (a per-group dynamic weight decay has no "
                "uo.Group form yet)")
        return {"weight_decay": v.check_range(_CALLER, f"{where} weight_decay", decay,
                                              low=0.0)}
    if not hasattr(spec, "weight_decay"):
        return {}
    if not isinstance(spec.weight_decay, Schedule):
        return {"weight_decay": spec.weight_decay}
    spared = [n for n in names if name_matches(n, spec.no_decay_names)]
    if spared:
        raise ValueError(f"{_CALLER}: {where} inherits the weight-decay schedule, and the "
                         f"spec's no_decay_names={spec.no_decay_names!r} would spare "
                         f"{spared}, which MindSpore's groups decay; build the spec with "
                         "no_decay_names=()")
    return {}


def _lr(group: dict, spec, where: str) -> dict:
    if "lr" not in group:
        return {}
    lr = group["lr"]
    scheduled = isinstance(spec.lr, Schedule)
    if isinstance(lr, (int, float)) and not isinstance(lr, bool):
        if scheduled:
            raise NotImplementedError(
                f"{_CALLER}: {where} lr={lr!r} is a fixed lr beside the optimizer's "
                "per-step lr: no uo.Group form (MindSpore computes it as lr + 1.0 - 1.0 in "
                "float32, which rounds it: 0.001 becomes 0.0010000467)")
        return {"lr": v.check_range(_CALLER, f"{where} lr", lr, low=0.0)}
    if isinstance(lr, (str, bytes)) or not isinstance(lr, (Sequence, np.ndarray)):
        raise TypeError(f"{_CALLER}: {where} lr must be a float or a per-step list of "
                        f"floats, got {lr!r} of type {type(lr).__name__}")
    values = [v.check_range(_CALLER, f"{where} lr[{t}]", x, low=0.0)
              for t, x in enumerate(list(lr))]
    if not values:
        raise ValueError(f"{_CALLER}: {where} lr is an empty list")
    if not scheduled:
        raise NotImplementedError(
            f"{_CALLER}: {where} lr is a per-step list beside the optimizer's constant lr "
            f"{spec.lr!r}: no uo.Group form (give the optimizer a schedule, whose multiple "
            "the list is)")
    return {"lr_scale": _scale(values, spec.lr, where)}


def _scale(values: list[float], schedule: Schedule, where: str) -> float:
    """The k with ``values[t] == k * schedule(t)`` for every t, to float32 rounding."""
    base = [schedule(t) for t in range(len(values))]
    top = max(range(len(base)), key=lambda t: abs(base[t]))
    if base[top] == 0.0:
        raise ValueError(f"{_CALLER}: {where} lr: the optimizer's schedule is 0 at every "
                         f"step of the list, so the list is no multiple of it")
    scale = values[top] / base[top]
    tolerance = float(np.finfo(np.float32).eps)
    for t, (value, b) in enumerate(zip(values, base)):
        if not math.isclose(value, scale * b, rel_tol=tolerance, abs_tol=0.0):
            raise ValueError(f"{_CALLER}: {where} lr is not a multiple of the optimizer's "
                             f"schedule: lr[{t}]={value!r}, but {scale!r} x "
                             f"{type(schedule).__name__}({t})={scale * b!r} (lr[{top}] / "
                             f"schedule({top}) gives the factor {scale!r})")
    return scale
