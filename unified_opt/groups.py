"""Parameter groups as rules over parameter names: ``uo.Group``.

``uo.build(spec, params, groups=[uo.Group(match="*.bias", weight_decay=0.0), ...])``.
Each parameter takes the first group whose rule matches its name (parameters no rule
matches keep the spec's own hyperparameters). A group may set:

* ``lr`` (an absolute lr; only with a constant ``spec.lr``) or ``lr_scale`` (a factor on
  the spec's lr or schedule; torch group ``lr``, Paddle's ``learning_rate`` multiplier,
  a scaled MindSpore group ``lr`` list);
* ``weight_decay`` (replaces the spec's, and its name rule ``no_decay_names``, for the
  group: MindSpore's rule inside groups, where a group decays exactly when its
  ``weight_decay > 0``);
* ``exclude_from``: ``"weight_decay"`` (the same as ``weight_decay=0``) and/or
  ``"grad_clip"`` (left out of clipping and of the clipping norm: Paddle's
  ``need_clip=False``).

``match`` is a shell-style pattern (``fnmatch``, e.g. ``"*bias"``, ``"encoder.*.w"``), a
tuple of them, or a Python callable ``name -> bool`` (which works, and cannot be
serialised: say it with patterns to put it in a conformance case or a JSON file).

Every name rule of the library matches this one way (:func:`name_matches`): groups, a
spec's ``no_decay_names`` and LARS's ``exclude_names``. A rule that matches no
parameter is an error, since a typo would otherwise silently change which parameters
decay (a rule's patterns may each match some of the parameters: MindSpore's default
``("*beta*", "*gamma*")`` on a network with only ``gamma`` names is fine). A rule of
exact names only (no wildcard; ``uo.from_native`` writes its rules so, a name's own
``*``, ``?`` or ``[`` escaped as ``[*]``) must find every one of them: names read on
another framework's model differ in part (MindSpore's ``ln.gamma`` and
``emb.embedding_table`` for torch's ``ln.weight`` and ``emb.weight``), and the names
left unmatched would silently fall back to the spec's values.
``uo.porting.map_rules`` renames such rules onto a model (``uo.porting.name_map``).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

from . import _validation as v

EXCLUSIONS = ("weight_decay", "grad_clip")
#: spec fields that are name rules: shell-style patterns over parameter names
NAME_RULES = ("no_decay_names", "exclude_names", "adamw_names")


def exact_name(pattern: str) -> str | None:
    """The one name ``pattern`` matches where it holds no wildcard (``[*]``, ``[?]`` and
    ``[[]`` are the characters themselves), else None."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == "[" and i + 2 < len(pattern) and pattern[i + 2] == "]" \
                and pattern[i + 1] in "*?[":
            out.append(pattern[i + 1])
            i += 3
            continue
        if c in "*?[":
            return None
        out.append(c)
        i += 1
    return "".join(out)


def exact_names(patterns) -> list[str] | None:
    """The names of a rule of exact names only (:func:`exact_name`), else None."""
    if isinstance(patterns, str):
        patterns = (patterns,)
    names = [exact_name(p) for p in patterns]
    return None if any(n is None for n in names) else [n for n in names if n is not None]


def _unmatched_exact(patterns, known: set, caller: str, what: str) -> None:
    """ValueError where ``patterns`` are exact names and some name no parameter."""
    exact = exact_names(patterns)
    missing = [n for n in exact or () if n not in known]
    if missing:
        shown = sorted(known)[:8] + (["..."] if len(known) > 8 else [])
        raise ValueError(f"{caller}: {what} names exact parameters, and {missing} name none "
                         f"here (parameter names: {shown}); those would run the spec's own "
                         "values. Names read on another framework's model differ there "
                         "(MindSpore's LayerNorm gamma/beta and Embedding embedding_table "
                         "for torch's and Paddle's weight/bias): rename the rules onto this "
                         "model with uo.porting.map_rules(spec, groups, source_framework, "
                         "model) (which uses uo.porting.name_map)")


def name_matches(name: str, patterns) -> bool:
    """Whether ``name`` matches one of the shell-style ``patterns`` (case-sensitive)."""
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


@dataclass(frozen=True, kw_only=True)
class Group:
    """One rule of parameter groups (see the module docstring).

    Args:
        match: a shell-style pattern over whole parameter names, a tuple of them, or a
            callable ``name -> bool`` (not serialisable).
        lr: an absolute lr for the group (only with a constant ``spec.lr``), or None.
        lr_scale: a factor on the spec's lr or schedule, or None (not with ``lr``).
        weight_decay: the group's weight decay (replacing the spec's and its
            ``no_decay_names``), or None.
        exclude_from: ``"weight_decay"`` and/or ``"grad_clip"``: what the group is left
            out of.

    Example:
        >>> import unified_opt as uo
        >>> rules = [uo.Group(match=("*.bias", "*norm*"), weight_decay=0.0),
        ...          uo.Group(match="head.*", lr_scale=10.0)]
    """

    match: str | tuple[str, ...] | Callable[[str], bool]
    lr: float | None = None
    lr_scale: float | None = None
    weight_decay: float | None = None
    exclude_from: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        owner = "Group"
        match = self.match
        if isinstance(match, list):
            match = tuple(match)
        if isinstance(match, tuple):
            if not match or not all(isinstance(m, str) and m for m in match):
                raise TypeError(f"{owner}: match must be a pattern, a non-empty tuple of "
                                f"patterns or a callable, got {self.match!r}")
        elif not isinstance(match, str) and not callable(match):
            raise TypeError(f"{owner}: match must be a pattern, a non-empty tuple of "
                            f"patterns or a callable, got {self.match!r} of type "
                            f"{type(self.match).__name__}")
        elif isinstance(match, str) and not match:
            raise ValueError(f"{owner}: match must not be empty")
        object.__setattr__(self, "match", match)
        if self.lr is not None and self.lr_scale is not None:
            raise ValueError(f"{owner}: give lr or lr_scale, not both (got lr={self.lr!r}, "
                             f"lr_scale={self.lr_scale!r})")
        for key in ("lr", "lr_scale", "weight_decay"):
            value = getattr(self, key)
            if value is not None:
                object.__setattr__(self, key, v.check_range(owner, key, value, low=0.0))
        exclude = self.exclude_from
        if isinstance(exclude, str) or not isinstance(exclude, (tuple, list)):
            raise TypeError(f"{owner}: exclude_from must be a tuple of {EXCLUSIONS}, got "
                            f"{exclude!r}")
        bad = [e for e in exclude if e not in EXCLUSIONS]
        if bad:
            raise ValueError(f"{owner}: exclude_from entries must be in {EXCLUSIONS}, got "
                             f"{bad}")
        if "weight_decay" in exclude and self.weight_decay not in (None, 0.0):
            raise ValueError(f"{owner}: exclude_from=('weight_decay',) contradicts "
                             f"weight_decay={self.weight_decay!r}")
        object.__setattr__(self, "exclude_from", tuple(exclude))

    def matches(self, name: str | None) -> bool:
        if name is None:
            raise ValueError("Group rules need parameter names; pass a module or "
                             "(name, parameter) pairs")
        if callable(self.match):
            return bool(self.match(name))
        return name_matches(name, (self.match,) if isinstance(self.match, str) else self.match)

    def to_dict(self) -> dict[str, Any]:
        if callable(self.match):
            raise TypeError(f"Group: match={self.match!r} is a Python callable and cannot be "
                            "serialised; use shell-style name patterns")
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["match"] = self.match if isinstance(self.match, str) else list(self.match)
        out["exclude_from"] = list(self.exclude_from)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Group":
        data = dict(data)
        if isinstance(data.get("match"), list):
            data["match"] = tuple(data["match"])
        if isinstance(data.get("exclude_from"), list):     # (JSON has no tuples)
            data["exclude_from"] = tuple(data["exclude_from"])
        return cls(**data)


@dataclass(frozen=True)
class ParameterPlan:
    """How one parameter is optimised: its spec (name rules and group applied), its lr
    factor, its group (index into the groups, None for the spec's defaults) and whether
    clipping sees it. The parameters of one group (a ``uo.Group`` rule, a group dict)
    are one param group of their own, in order, however equal another group's values
    (torch keeps each dict, and scripts address groups by position: layer-wise lr
    decay), and stay so through a state file, which holds dicts as rules."""

    name: str | None
    spec: Any
    lr_scale: float = 1.0
    fixed_lr: float | None = None   # a group's absolute lr (constant spec lr only)
    group: int | None = None
    clipped: bool = True

    def lr(self, base_lr: float) -> float:
        """This parameter's lr when the optimizer's lr is ``base_lr``: with a fixed group
        lr, exactly it while the lr is the spec's, and in proportion once something
        outside (a plateau scheduler) changes the optimizer's lr."""
        if self.fixed_lr is None:
            return base_lr * self.lr_scale
        if base_lr == self.spec.lr or self.spec.lr == 0.0:
            return self.fixed_lr
        return base_lr * (self.fixed_lr / self.spec.lr)


def check_groups(groups: Any, caller: str) -> tuple[Group, ...]:
    if groups is None:
        return ()
    if isinstance(groups, Group) or not isinstance(groups, Sequence) or isinstance(groups, str):
        raise TypeError(f"{caller}: groups must be a list of uo.Group, got {groups!r}")
    for i, g in enumerate(groups):
        if not isinstance(g, Group):
            raise TypeError(f"{caller}: groups[{i}] must be a uo.Group, got {g!r}")
    return tuple(groups)


def plan_parameters(spec, names: Sequence[str | None], groups: Any = None,
                    caller: str = "build") -> list[ParameterPlan]:
    """One :class:`ParameterPlan` per name, in order."""
    from .schedules import Schedule

    groups = check_groups(groups, caller)
    plans = []
    for name in names:
        index = next((i for i, g in enumerate(groups) if g.matches(name)), None)
        if index is None:
            plans.append(ParameterPlan(name, spec.for_parameter(name)))
            continue
        group = groups[index]
        param_spec = spec.for_parameter(name)
        decay = 0.0 if "weight_decay" in group.exclude_from else group.weight_decay
        if decay is not None:
            if not hasattr(spec, "weight_decay"):
                raise ValueError(f"{caller}: groups[{index}] sets weight_decay, but "
                                 f"{type(spec).__name__} has no weight decay")
            changes = {"weight_decay": decay}
            if hasattr(spec, "no_decay_names"):
                changes["no_decay_names"] = ()
            param_spec = spec.replace(**changes).for_parameter(name)
        if group.lr is not None and isinstance(spec.lr, Schedule):
            raise ValueError(f"{caller}: groups[{index}] sets lr={group.lr!r}, but the "
                             "spec's lr is a schedule; give the group lr_scale= instead")
        scale = 1.0 if group.lr_scale is None else group.lr_scale
        plans.append(ParameterPlan(name, param_spec, scale, group.lr, index,
                                   "grad_clip" not in group.exclude_from))
    _check_name_rules(spec, names, caller)
    used = {plan.group for plan in plans}
    for index, group in enumerate(groups):
        if index not in used:   # a typo in a pattern would otherwise pass unnoticed
            shown = [n for n in names[:8]] + (["..."] if len(names) > 8 else [])
            raise ValueError(f"{caller}: groups[{index}] (match={group.match!r}) matches no "
                             f"parameter that an earlier group has not taken; parameter "
                             f"names: {shown}")
    known = {n for n in names if n is not None}
    for index, group in enumerate(groups):
        if not callable(group.match):
            _unmatched_exact(group.match, known, caller,
                             f"groups[{index}] (match={group.match!r})")
    return plans


#: MindSpore ``nn`` optimizers' own filter: no decay for names holding "beta" or "gamma"
#: (norm layers). A framework default, not a user's pattern: on a network without such
#: names MindSpore decays every parameter, and so does the spec, without an error.
MINDSPORE_NO_DECAY = ("*beta*", "*gamma*")


def escaped(name: str) -> str:
    """``name`` as a pattern matching exactly it (its own ``*``, ``?`` and ``[`` escaped
    as ``[*]``, ``[?]``, ``[[]``): a rule of exact names."""
    return re.sub(r"([*?\[])", r"[\1]", name)


def _check_name_rules(spec, names: Sequence[str | None], caller: str) -> None:
    """Each of the spec's name rules must match a parameter (where the rule acts:
    ``no_decay_names`` with a weight decay), except MindSpore's default filter."""
    known = [n for n in names if n is not None]
    for rule in NAME_RULES:
        patterns = getattr(spec, rule, ())
        if not patterns or (rule == "no_decay_names" and spec.weight_decay == 0.0):
            continue
        if rule == "no_decay_names" and tuple(patterns) == MINDSPORE_NO_DECAY:
            continue
        if not any(name_matches(n, patterns) for n in known):
            shown = known[:8] + (["..."] if len(known) > 8 else [])
            raise ValueError(
                f"{caller}: {rule}={patterns!r} matches no parameter (shell-style patterns "
                f"that match whole names: '*bias' for every name ending in 'bias'); "
                f"parameter names: {shown}. Give patterns that match, "
                f"spec.replace({rule}=(...)), or () for none")
        _unmatched_exact(patterns, set(known), caller, f"{rule}={patterns!r}")


Group.__init__ = v.checked_keyword_init(Group, Group.__init__)


def distinct(items) -> list:
    """The distinct items in order of first appearance, compared by ``==`` (specs hold
    schedules and tuples of them: they are compared, not hashed)."""
    out: list = []
    for item in items:
        if all(item is not seen and item != seen for seen in out):
            out.append(item)
    return out
