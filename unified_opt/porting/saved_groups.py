"""What a state file records of an optimizer's param groups
(:mod:`unified_opt.param_groups`): the build's record with its group dicts as
``uo.Group`` rules (:func:`saved_record`), and per parameter the live values of the
group holding it (:func:`group_values_of`), which loading sets again
(:func:`check_group_values`, :func:`set_group_values`).

The live values are the group's ``"lr"`` (the lr its next step uses: a scheduler's or
a hand loop's write over a constant spec lr) and its scheduler bookkeeping: every key
that is not ``"params"``, not a field of the spec, not a hyperparameter of torch's
optimizers or of the native class (its ``defaults``: ``foreach``, ``fused``, ...), not
uo's own count (:data:`OWN_KEYS`), and holds a JSON number or bool (torch's and
``uo.lr_scheduler``'s ``initial_lr``, ``max_lr``, ``min_lr``, ``base_momentum``,
``max_momentum``; a key holding anything else is not a scheduler's number and is not
recorded). A spec whose lr is a ``uo.schedules`` schedule sets every step's lr from the
file's schedule position: its recorded lr is not written back."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ..groups import NAME_RULES
from ..param_groups import PADDLE_LR_FACTOR, TORCH_HYPERPARAMETERS, GroupSurface, differs
from ..schedules import Schedule

#: keys uo itself keeps in a group (the torch backend's count of steps taken), never a
#: scheduler's
OWN_KEYS = frozenset({"steps_taken"})


def surface_of(optimizer: Any) -> GroupSurface | None:
    """The :class:`GroupSurface` of an optimizer ``uo.build`` made (None: a native torch
    class, whose groups torch keeps), reading its current groups."""
    surface = optimizer.__dict__.get("_uo_surface") or optimizer.__dict__.get("_surface")
    if isinstance(surface, GroupSurface):
        groups = getattr(optimizer, "param_groups", None)
        if isinstance(groups, list) and len(groups) == len(surface.groups):
            surface.groups = groups            # torch's load_state_dict puts new dicts
        return surface
    return None


def saved_record(record: Any, optimizer: Any, caller: str = "save_state") -> Any:
    """``record`` (a build's :class:`~unified_opt.backend.BuildRecord`) as a state file
    holds it: group dicts become ``uo.Group`` rules over the parameters' names; the spec
    is the build's. An lr written into ``param_groups`` (``uo.lr_scheduler``, a
    hand-written loop) is not part of the record: the file keeps each group's live lr
    beside it (:func:`group_values_of`). Any other hyperparameter written into the
    groups, or group dicts a rule cannot say, is a ValueError naming it: the file would
    resume another run (an lr written over a scheduled spec lr: each backend's check)."""
    surface = surface_of(optimizer)
    rules = tuple(record.groups)
    if record.dict_groups:
        # exact names first: a build's pattern rule must not take a dict's parameter
        rules = _rules_of_group_dicts(record, caller) + rules
    if surface is not None:
        for g in range(min(len(surface.plans), len(surface.groups))):
            # (a group past the plans: the backend's snapshot refuses its parameters)
            written = surface.written_values(g)
            if written:
                raise ValueError(f"{caller}: param_groups[{g}] holds {written}, written after "
                                 "the build; a state file records the spec and its uo.Group "
                                 "rules, so build with those values (spec.replace(...), "
                                 "uo.Group(...)) to save this run")
    if rules == tuple(record.groups):
        return record
    return dataclasses.replace(record, groups=rules)


def _rules_of_group_dicts(record: Any, caller: str) -> tuple:
    """The ``uo.Group`` rules that give each parameter the plan its group dict gave."""
    import glob

    from ..groups import Group

    rules = []
    for g in record.dict_groups:
        members = [i for i, plan in enumerate(record.plans) if plan.group == g]
        if not members:
            continue
        names = [record.names[i] for i in members]
        if any(name is None for name in names):
            raise ValueError(f"{caller}: params[{g}]'s parameters have no names, and the file "
                             "keys state and groups by name; give (name, parameter) pairs "
                             "in the group dicts")
        plan = record.plans[members[0]]
        base = record.spec.for_parameter(names[0])
        decay = getattr(plan.spec, "weight_decay", None)
        changes = {f.name for f in dataclasses.fields(plan.spec)
                   if f.name not in ("weight_decay", *NAME_RULES)
                   and differs(getattr(plan.spec, f.name), getattr(base, f.name))}
        if changes:
            raise ValueError(f"{caller}: params[{g}] sets {sorted(changes)}, which a state "
                             "file's uo.Group rules cannot hold (they hold lr, lr_scale and "
                             "weight_decay); build with the spec holding them to save")
        keys: dict[str, Any] = {}
        if plan.fixed_lr is not None:
            keys["lr"] = plan.fixed_lr
        elif plan.lr_scale != 1.0:
            keys["lr_scale"] = plan.lr_scale
        if decay is not None and differs(decay, getattr(base, "weight_decay", None)):
            keys["weight_decay"] = decay
        rules.append(Group(match=tuple(glob.escape(n) for n in names), **keys))
    return tuple(rules)


def _bookkeeping(key: Any, value: Any, skipped: set) -> bool:
    """Whether group key ``key`` holding ``value`` is scheduler bookkeeping (module)."""
    return (isinstance(key, str) and key not in skipped
            and isinstance(value, (bool, int, float))
            and (isinstance(value, bool) or math.isfinite(value)))


def _skipped_keys(record: Any, optimizer: Any) -> set:
    defaults = getattr(optimizer, "defaults", None)
    return {"params", "lr", PADDLE_LR_FACTOR, *OWN_KEYS, *TORCH_HYPERPARAMETERS,
            *(f.name for f in dataclasses.fields(record.spec)),
            *(defaults if isinstance(defaults, dict) else ())}


def _named_groups(record: Any, optimizer: Any) -> list[tuple[dict, list[str]]]:
    """Each of ``optimizer.param_groups`` with the names of the parameters it holds
    (those the build named; ``record``'s names)."""
    name_of = {id(p): name for p, name in zip(record.params, record.names)}
    groups = getattr(optimizer, "param_groups", None) or []
    return [(group, [name_of[id(p)] for p in group["params"] if id(p) in name_of])
            for group in groups]


def group_values_of(record: Any, optimizer: Any) -> dict[str, dict[str, Any]]:
    """Parameter name -> the live values of the param group holding it (module): its
    ``"lr"`` as a float and its scheduler bookkeeping numbers. ``record``'s names name
    the parameters (every one, checked by the backend's snapshot)."""
    from ..lr_scheduler.base import lr_of

    skipped = _skipped_keys(record, optimizer)
    out: dict[str, dict[str, Any]] = {}
    for group, names in _named_groups(record, optimizer):
        values = {"lr": float(lr_of(group))}
        for key in list(group):
            value = dict.__getitem__(group, key)
            if _bookkeeping(key, value, skipped):
                values[key] = value
        for name in names:
            out[name] = dict(values)
    return out


def check_group_values(record: Any, optimizer: Any, saved: Any, caller: str,
                       source: str) -> None:
    """Refuse (ValueError) a snapshot whose recorded group values differ among the
    parameters of one of ``optimizer``'s groups (a group of the target is one lr: the
    file would be loaded as another run)."""
    if saved.group_values is None:
        return
    for g, (_, names) in enumerate(_named_groups(record, optimizer)):
        seen: list[tuple[dict, list[str]]] = []
        for name in names:
            values = saved.group_values[name]
            for known, holders in seen:
                if known == values:
                    holders.append(name)
                    break
            else:
                seen.append((values, [name]))
        if len(seen) > 1:
            parts = "; ".join(f"{holders}: {values}" for values, holders in seen)
            raise ValueError(f"{caller}: {source} records different group values for the "
                             f"parameters of the optimizer's param_groups[{g}] ({parts}); "
                             "a group holds one lr: build with the saved run's groups "
                             "(uo.Group rules or group dicts) to load it")


def set_group_values(record: Any, optimizer: Any, saved: Any) -> None:
    """Set each of ``optimizer``'s groups to the values ``saved`` records for its
    parameters (checked by :func:`check_group_values`), after the state is written:
    the lr through the group surface, as a user's write (``param_groups[g]["lr"] =
    lr``: the next step uses it; the surface carries it into Paddle's ``set_lr`` or
    MindSpore's ``learning_rate`` where the path needs it; a MindSpore
    ``experimental.optim`` group's lr Parameter is assigned in place, as
    ``uo.lr_scheduler`` writes it), and only where it differs
    from the group's lr now (an untouched run writes nothing); a scheduled spec lr is
    set by the file's position, not here. The bookkeeping keys become plain entries."""
    from ..lr_scheduler.base import lr_of, write_lr

    if saved.group_values is None:
        return
    scheduled = isinstance(record.spec.lr, Schedule)
    for group, names in _named_groups(record, optimizer):
        if not names:
            continue
        values = saved.group_values[names[0]]
        for key, value in values.items():
            if key == "lr":
                if not scheduled and differs(lr_of(group), value):
                    write_lr(group, value)
            elif key not in group or differs(dict.__getitem__(group, key), value):
                group[key] = value
