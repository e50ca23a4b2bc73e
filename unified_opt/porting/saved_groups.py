"""What a state file records of an optimizer's param groups
(:mod:`unified_opt.param_groups`): the build's record with its group dicts as
``uo.Group`` rules and an lr written into the groups as the spec's constant lr."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..groups import NAME_RULES
from ..param_groups import GroupSurface, differs
from ..schedules import Schedule


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
    holds it: group dicts become ``uo.Group`` rules over the parameters' names, and an lr
    written into ``param_groups`` (``uo.lr_scheduler``, a hand-written loop) becomes the
    spec's constant lr, where one lr gives every group its value; a scheduler's own
    position is its ``state_dict``'s. Any other value written into the groups, or group
    dicts a rule cannot say, is a ValueError naming it: the file would resume another
    run (torch's groups' lr: the torch backend's own check)."""
    surface = surface_of(optimizer)
    rules = tuple(record.groups)
    if record.dict_groups:
        # exact names first: a build's pattern rule must not take a dict's parameter
        rules = _rules_of_group_dicts(record, caller) + rules
    spec = record.spec
    if surface is not None:
        for g in range(min(len(surface.plans), len(surface.groups))):
            # (a group past the plans: the backend's snapshot refuses its parameters)
            written = surface.written_values(g)
            if written:
                raise ValueError(f"{caller}: param_groups[{g}] holds {written}, written after "
                                 "the build; a state file records the spec and its uo.Group "
                                 "rules, so build with those values (spec.replace(...), "
                                 "uo.Group(...)) to save this run")
        if record.decision.backend != "torch":
            # torch's groups hold the lr its native scheduler writes: the torch backend's
            # snapshot judges them against the spec and its schedule itself
            spec = _spec_with_written_lr(record, surface, caller)
    if spec is record.spec and rules == tuple(record.groups):
        return record
    return dataclasses.replace(record, spec=spec, groups=rules)


def _spec_with_written_lr(record: Any, surface: GroupSurface, caller: str):
    lrs = [group["lr"] for group in surface.groups]
    if all(not differs(plan.lr(native), lr)
           for plan, lr, native in zip(surface.plans, lrs, surface.native_seen)):
        return record.spec
    plain = all(plan.lr_scale == 1.0 and plan.fixed_lr is None for plan in surface.plans)
    if isinstance(record.spec.lr, Schedule) or not plain or len(set(lrs)) != 1:
        raise ValueError(f"{caller}: param_groups hold lrs {lrs}, written after the build, "
                         "that no constant spec lr gives every group (a scheduled spec lr, "
                         "groups with lr factors or lrs of their own); the file would "
                         "resume another lr")
    return record.spec.replace(lr=lrs[0])


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
