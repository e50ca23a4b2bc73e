"""How parameter groups and a gradient clip become Paddle's own (imports no framework).

Given a native class's descriptor and lowering, the spec and one
:class:`unified_opt.groups.ParameterPlan` per parameter, :func:`paddle_layout` says which
parameters share a Paddle parameter group (``{"params": [...], "learning_rate":
<multiplier>, <decay keyword>: ...}``), the optimizer-level arguments, which parameters
a decay selector (``apply_decay_param_fun``, Lamb's ``exclude_from_weight_decay_fn``,
LARS's ``exclude_from_weight_decay``) keeps decaying, and which ones Paddle's
``grad_clip`` must leave out (``need_clip=False``). Or, when Paddle cannot compute that
exactly, why not (a string).

Paddle's rules used here (read in ``paddle/optimizer/optimizer.py``, measured):

* a group's ``learning_rate`` multiplies the optimizer's lr or LRScheduler value, in
  the lr tensor's dtype: float32 parameters run ``float32(float32(lr) * float32(m))``;
* a group's ``weight_decay`` is the coupled L2 (``None``: none), AdamW's decoupled
  coefficient, Lamb's ``lamb_weight_decay``;
* ``grad_clip`` runs once per group, so ``ClipGradByGlobalNorm`` takes one norm per group
  (the spec's ``ClipByGlobalNorm(per_group=True)``; ``per_group=False`` only when every
  clipped parameter sits in one group).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from unified_opt.clipping import ClipByGlobalNorm, ClipByNorm
from unified_opt.groups import ParameterPlan, plan_parameters
from unified_opt.groups import distinct as distinct_items
from unified_opt.native import NAME_RULES


@dataclass(frozen=True)
class Layout:
    arguments: dict                 # optimizer-level constructor arguments (the decay too)
    groups: tuple | None            # None: a plain list; else ((indices, group keys), ...)
    decayed: tuple[int, ...] | None  # the selector's decayed parameters (None: no selector)
    unclipped: tuple[int, ...]      # need_clip=False while Paddle clips
    clip: object | None             # the spec's grad_clip, for paddle.nn.ClipGradBy*

    @property
    def holds_attributes(self) -> bool:
        """Whether Paddle would write attributes onto the Parameters (groups, need_clip)."""
        return self.groups is not None or bool(self.unclipped)


def resolved(spec):
    """A parameter's spec with its name rules already applied (they are, per plan)."""
    rules = {k: () for k in NAME_RULES if getattr(spec, k, ())}
    return spec.replace(**rules) if rules else spec


def name_free_plans(spec) -> list[ParameterPlan]:
    """Plans standing for every kind of parameter a spec's name rules make, for
    ``explain(spec)`` without parameters: one name matching no rule, one per rule part."""
    parts = [p for k in NAME_RULES for p in getattr(spec, k, ())]
    return plan_parameters(spec, [""] + parts, None, "explain")


def _multiplier(plan, spec, dtypes) -> float | str:
    if plan.fixed_lr is None:
        return float(plan.lr_scale)
    base, fixed = float(spec.lr), float(plan.fixed_lr)
    if base == 0.0:
        return 1.0 if fixed == 0.0 else (f"spec lr > 0 for group lr={fixed!r} (Paddle's "
                                         "group learning_rate multiplies the lr)")
    m = fixed / base
    exact = base * m == fixed
    if "float32" in dtypes:
        f32 = np.float32
        exact = exact and f32(f32(base) * f32(m)) == f32(fixed)
    if not exact:
        return (f"group lr={fixed!r} to be lr={base!r} x {m!r} exactly in the parameters' "
                "dtype (Paddle multiplies its lr tensor by the group's learning_rate; this "
                "product rounds to another number)")
    return m


def paddle_layout(cls, lowering, spec, plans, dtypes=()) -> Layout | str:
    """The layout of ``cls`` (a :class:`.classes.PaddleClass`) for ``spec`` over
    ``plans``, or why Paddle cannot compute it (a string)."""
    specs = [resolved(p.spec) for p in plans]
    distinct_specs = distinct_items(specs)   # a few kinds of parameter, many parameters
    unmet = sorted({text for s in distinct_specs for text in lowering.unmet(s)})
    if unmet:
        return ("every parameter's own spec (groups and name rules applied) to meet it: "
                + "; ".join(unmet))
    arguments_of = [(s, lowering.to_native(s)) for s in distinct_specs]
    per_param = [next(a for t, a in arguments_of if s is t or s == t) for s in specs]
    keyword = cls.decay_keyword
    selects = bool(cls.decay_selector)

    def rest(a):
        return {k: v for k, v in a.items() if k != keyword}

    if any(rest(a) != rest(per_param[0]) for a in per_param):
        return "parameters that differ only in lr and weight decay"
    decays = [a.get(keyword) for a in per_param]
    nonzero = list(dict.fromkeys(d for d in decays if d))
    selector = selects and bool(nonzero) and not all(decays)
    decay_in_key = len(nonzero) > 1 if selects else \
        len(set(decays)) > 1

    multipliers = [_multiplier(plan, spec, dtypes) for plan in plans]
    bad = next((m for m in multipliers if isinstance(m, str)), None)
    if bad is not None:
        return bad
    clip = spec.grad_clip
    per_group = isinstance(clip, ClipByGlobalNorm) and clip.per_group
    keys = [(plan.group if per_group and plan.clipped else None, m,
             d if decay_in_key else None)
            for plan, m, d in zip(plans, multipliers, decays)]
    distinct = list(dict.fromkeys(keys))
    grouped = len(distinct) > 1 or distinct[0][1] != 1.0
    if grouped and cls.no_groups:
        return (f"one Paddle parameter group for all parameters, with one lr, one weight "
                f"decay and one clip norm ({cls.no_groups})")

    index = [distinct.index(k) for k in keys]
    clipped = [i for i, plan in enumerate(plans) if plan.clipped]
    if isinstance(clip, ClipByGlobalNorm):
        sets: dict = {}
        for i in clipped:
            sets.setdefault(plans[i].group if per_group else None, set()).add(index[i])
        if any(len(s) > 1 for s in sets.values()):
            return (f"the clipped parameters of each norm in one Paddle group "
                    f"(ClipByGlobalNorm(per_group={per_group}): Paddle's "
                    "ClipGradByGlobalNorm takes one norm per group, and here they need "
                    "groups with different lr or weight decay)")
    if isinstance(clip, ClipByNorm) and set(dtypes) - {"float32"}:
        return (f"float32 parameters for ClipByNorm (Paddle's clip_by_norm CPU kernel is "
                f"float32 only; got {sorted(dtypes)})")

    arguments = dict(per_param[0])
    if keyword in arguments:
        if selector or (decay_in_key and selects):
            arguments[keyword] = nonzero[0]
        elif decay_in_key:
            arguments[keyword] = None   # each group carries its own coupled decay
    groups = None
    if grouped:
        groups = []
        for j, (_, m, d) in enumerate(distinct):
            extra = {"learning_rate": m}
            if decay_in_key:
                extra[keyword] = d if d or not selects else 0.0
            groups.append((tuple(i for i, k in enumerate(index) if k == j), extra))
        groups = tuple(groups)
    decayed = tuple(i for i, d in enumerate(decays) if d) if selector else None
    unclipped = tuple(i for i, p in enumerate(plans) if not p.clipped) if clip else ()
    return Layout(arguments, groups, decayed, unclipped, clip)


@dataclass(frozen=True)
class Joining:
    """How parameters added after the build (``add_param_group``) join a native Paddle
    optimizer: ``layout``, that of every parameter (as a build given all of them would
    make it); ``first``, the index of the first added parameter; ``groups``, where
    ``layout`` has Paddle parameter groups, for each of them the index of the optimizer's
    group it is (None: a new group), its added parameters and its keys. Where the
    optimizer holds a plain list and ``layout`` groups, that list becomes Paddle's first
    group (``converts``)."""

    layout: Layout
    first: int
    groups: tuple = ()      # ((optimizer's group or None, added indices, keys), ...)
    converts: bool = False


def joining(cls, lowering, spec, plans, first: int, dtypes_before=(),
            dtypes=()) -> Joining | str:
    """How the parameters of ``plans[first:]`` join a native optimizer built over
    ``plans[:first]`` (:class:`Joining`), or why they cannot without rebuilding it (a
    string): a build with every parameter would need other optimizer-level arguments
    or would group the built parameters otherwise than they are.

    One optimizer-level argument may differ: the coupled decay of a class without a
    decay selector (a build with every parameter moves it into the groups). Paddle
    applies a group's ``weight_decay`` as the regularizer of its parameters, before the
    optimizer's own, so the optimizer keeps its built decay and every group holding
    added parameters carries its own (0.0 for none: None would fall back to the
    optimizer's)."""
    before = paddle_layout(cls, lowering, spec, plans[:first], dtypes_before)
    after = paddle_layout(cls, lowering, spec, plans, dtypes)
    if isinstance(after, str):
        return after
    assert not isinstance(before, str)      # the build took it
    keyword = cls.decay_keyword
    changed = sorted(k for k in before.arguments.keys() | after.arguments.keys()
                     if before.arguments.get(k) != after.arguments.get(k))
    in_groups = bool(changed) and changed == [keyword] and not cls.decay_selector
    if changed and not in_groups:
        return ("other optimizer-level arguments (" + "; ".join(
            f"{k}: {before.arguments.get(k)!r} as built, {after.arguments.get(k)!r} with "
            "the group" for k in changed) + ")")
    if after.groups is None:
        return Joining(after, first)

    def compared(keys):         # a decay moved into the groups is not compared
        return None if keys is None else \
            {k: v for k, v in keys.items() if not (in_groups and k == keyword)}

    built = before.groups if before.groups is not None else ((tuple(range(first)), None),)
    held = [(tuple(i for i in indices if i < first), keys) for indices, keys in after.groups]
    held = [(indices, keys) for indices, keys in held if indices]
    if [indices for indices, _ in held] != [indices for indices, _ in built] or any(
            built_keys is not None and compared(built_keys) != compared(keys)
            for (_, keys), (_, built_keys) in zip(held, built)):
        return ("other groups for the built parameters (Paddle groups "
                f"{[list(i) for i, _ in built]}; with the group they would be "
                f"{[list(i) for i, _ in held]} with keys {[k for _, k in held]})")
    groups = []
    for indices, keys in after.groups:
        added = tuple(i for i in indices if i >= first)
        joins = next((g for g, (old, _) in enumerate(built) if set(old) & set(indices)), None)
        if in_groups and joins is not None and not (before.groups is None and joins == 0):
            keys = None         # a built group's own keys stand
        elif in_groups:
            keys = {**keys, keyword: keys.get(keyword) or 0.0}
        groups.append((joins, added, keys))
    return Joining(after, first, tuple(groups), converts=before.groups is None)
