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
file's schedule position: its recorded lr is not written back.

The live values also hold the spec's hyperparameters written into the group after the
build (:func:`written_hyperparameters`: the keys whose group value differs from what the
build's plan gives, such as the ``betas`` or ``momentum`` that torch's and
``uo.lr_scheduler``'s ``OneCycleLR`` and ``CyclicLR`` write at every step with
``cycle_momentum=True``), a tuple as a JSON list. Saving checks them as the step would
(``spec.replace``; a write that changes the state's layout, such as ``amsgrad``, is
refused). Loading writes them back through the group surface as a user's write, read
back as the type the group holds (a tuple): the own path reads them at the next step,
torch's native classes and MindSpore's ``experimental.optim`` classes (which keep
torch's groups, no uo surface) read their groups at every step; a Paddle native class or
a MindSpore ``nn`` class cannot take them (it reads its hyperparameters when built), so
such a load is refused before anything is written, naming the key and ``path='own'``. A value the
target's group holds written but the file does not record is set back to the plan's."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from ..groups import NAME_RULES
from ..param_groups import (
    PADDLE_LR_FACTOR,
    TORCH_HYPERPARAMETERS,
    GroupSurface,
    differs,
    group_hyperparameters,
    with_writes,
)
from ..schedules import Schedule
from ..spec import layout_names

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
    hand-written loop) or any other hyperparameter written into the groups is not part
    of the record: the file keeps each group's live values beside it
    (:func:`group_values_of`). Group dicts a rule cannot say are a ValueError naming
    them (an lr written over a scheduled spec lr: each backend's check)."""
    rules = tuple(record.groups)
    if record.dict_groups:
        # exact names first: a build's pattern rule must not take a dict's parameter
        rules = _rules_of_group_dicts(record, caller) + rules
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
                             "keys state and groups by name; pass names=<module> or give "
                             "(name, parameter) pairs in the group dicts")
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


def _plain(value: Any) -> Any:
    """A group value as plain Python: a tensor's number or list (``tolist``), a sequence
    as a tuple (torch allows a tensor ``lr`` or ``betas``)."""
    if hasattr(value, "tolist") and not isinstance(value, (bool, int, float)):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        return tuple(_plain(x) for x in value)
    return value


def _json_number(value: Any) -> bool:
    return isinstance(value, (bool, int, float)) and (isinstance(value, bool)
                                                      or math.isfinite(value))


def _as_held(held: Any, value: Any) -> Any:
    """A recorded value (a JSON list for a tuple) as the type the group holds it in."""
    if isinstance(value, list) and isinstance(held, (list, tuple)):
        return type(held)(value)
    return value


def _validated(spec: Any, written: dict, caller: str, where: str, params: Any) -> None:
    """Refuse (ValueError naming ``where``) written values the spec does not accept
    (``spec.replace``'s validation) or that change the state's layout (``amsgrad``,
    Adafactor's ``beta1`` on or off) for the group's ``params``: the state held could not
    be stepped with them."""
    _, before, after = with_writes(spec, written, params, caller, where)
    if after != before:
        raise ValueError(f"{caller}: {where} holds {written}, which changes the state "
                         f"{type(spec).__name__} keeps ({layout_names(before)} -> "
                         f"{layout_names(after)}); a state file cannot carry that: "
                         "build with the spec holding it (spec.replace(...))")


def _plan_of_groups(record: Any, optimizer: Any) -> list[Any]:
    """The build's plan of each of ``optimizer.param_groups`` (None: a group of
    parameters the build was not given, which the backend's snapshot refuses)."""
    index = {id(p): i for i, p in enumerate(record.params)}
    out = []
    for group in getattr(optimizer, "param_groups", None) or []:
        members = [index[id(p)] for p in group["params"] if id(p) in index]
        out.append(record.plans[members[0]] if members else None)
    return out


def _baselines(record: Any, optimizer: Any) -> list[dict[str, Any]]:
    """Per group of ``optimizer``, the spec hyperparameters it holds as the build made
    them (key -> value): the surface's exposed values (the own paths, Paddle's native
    classes, MindSpore's ``nn`` classes); on a class that keeps torch's groups itself
    (torch's native classes, MindSpore's ``experimental.optim``: no surface), the
    class's argument for each spec field it takes under the field's own name and value
    (``to_native``, at the step uo's step hooks last wrote), as it reads it from the
    group at every step. A spec field the class takes otherwise is not here: the
    backend's check refuses a write of it."""
    surface = surface_of(optimizer)
    groups = getattr(optimizer, "param_groups", None) or []
    if surface is not None:
        return [dict(surface.exposed[g]) if g < len(surface.exposed) else {}
                for g in range(len(groups))]
    taken = int(groups[0].get("steps_taken", 0)) if groups else 0
    step = max(taken - 1, 0)        # the step hooks write at_step(t) before step t
    lowering = getattr(record.decision, "lowering", None)
    out = []
    for plan in _plan_of_groups(record, optimizer):
        if plan is None or lowering is None:
            out.append({})
            continue
        spec = plan.spec.at_step(step)
        native = lowering.to_native(spec)
        out.append({key: value for key, value in group_hyperparameters(spec).items()
                    if key in native and not differs(_plain(native[key]), _plain(value))})
    return out


def written_hyperparameters(record: Any, optimizer: Any,
                            caller: str = "save_state") -> list[dict[str, Any]]:
    """Per group of ``optimizer.param_groups``, the spec hyperparameters written into it
    after the build (key -> value as plain Python, a sequence as a tuple): the keys whose
    group value differs from what the build's plan gives (:func:`_baselines`). Each is
    checked as the step would check it: a value the spec refuses, one that changes the
    state's layout, or one that is no JSON number, bool or sequence of them is a
    ValueError naming it (a state file could not carry it)."""
    groups = getattr(optimizer, "param_groups", None) or []
    plans = _plan_of_groups(record, optimizer)
    out = []
    for g, (group, baseline, plan) in enumerate(zip(groups, _baselines(record, optimizer),
                                                    plans)):
        written = {key: _plain(group[key]) for key in baseline
                   if key in group and differs(_plain(group[key]), _plain(baseline[key]))}
        where = f"param_groups[{g}]"
        for key, value in written.items():
            parts = value if isinstance(value, tuple) else (value,)
            if not all(_json_number(x) for x in parts):
                raise ValueError(f"{caller}: {where}[{key!r}] is {value!r}, written after "
                                 "the build: a state file holds a written hyperparameter as "
                                 "finite numbers or bools")
        if written and plan is not None:
            _validated(plan.spec, written, caller, where, group["params"])
        out.append(written)
    return out


def _lr_not_held(record: Any) -> bool:
    """MindSpore's ``nn.AdaFactor`` with ``relative_step`` is built with
    ``learning_rate=None`` and its groups report 0.0: the step size is the spec's (its
    relative step's cap), which the file records and a load leaves alone."""
    return (record.decision.backend == "mindspore" and record.decision.path == "native"
            and bool(getattr(record.spec, "relative_step", False)))


def group_values_of(record: Any, optimizer: Any,
                    caller: str = "save_state") -> dict[str, dict[str, Any]]:
    """Parameter name -> the live values of the param group holding it (module): its
    ``"lr"`` as a float, the spec hyperparameters written into it after the build (a
    tuple as a list: :func:`written_hyperparameters`) and its scheduler bookkeeping
    numbers. ``record``'s names name the parameters (every one, checked by the
    backend's snapshot)."""
    from ..lr_scheduler.base import lr_of

    skipped = _skipped_keys(record, optimizer)
    written = written_hyperparameters(record, optimizer, caller)
    out: dict[str, dict[str, Any]] = {}
    relative = _lr_not_held(record)
    for (group, names), hyper in zip(_named_groups(record, optimizer), written):
        values: dict[str, Any] = {"lr": float(record.spec.lr if relative else lr_of(group))}
        values.update({key: list(value) if isinstance(value, tuple) else value
                       for key, value in hyper.items()})
        for key in list(group):
            value = dict.__getitem__(group, key)
            if _bookkeeping(key, value, skipped):
                values[key] = value
        for name in names:
            out[name] = dict(values)
    return out


def _recorded_hyperparameters(values: dict, group: Any, plan: Any) -> dict[str, Any]:
    """The recorded spec hyperparameters of one group (``values``: the file's for its
    parameters), as the type ``group`` holds each in."""
    fields = {f.name for f in dataclasses.fields(plan.spec)} if plan is not None else set()
    return {key: _as_held(group.get(key), value) for key, value in values.items()
            if key != "lr" and key in fields}


def check_group_values(record: Any, optimizer: Any, saved: Any, caller: str,
                       source: str) -> None:
    """Refuse (ValueError), before anything is written, a snapshot whose recorded group
    values differ among the parameters of one of ``optimizer``'s groups (a group of the
    target is one lr: the file would be loaded as another run), or that records a
    written hyperparameter the target cannot take: a spec field its group does not hold
    (one per optimizer, or a schedule's), a value its step refuses, or any changed value
    on a Paddle native class or a MindSpore ``nn`` class (the refusal names the key and
    ``path='own'``)."""
    if saved.group_values is None:
        return
    surface = surface_of(optimizer)
    _check_native_lrs(record, optimizer, surface, saved, caller, source)
    plans = _plan_of_groups(record, optimizer)
    baselines = _baselines(record, optimizer)
    for g, (group, names) in enumerate(_named_groups(record, optimizer)):
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
        if not names:
            continue
        hyper = _recorded_hyperparameters(seen[0][0], group, plans[g])
        unheld = sorted(set(hyper) - set(baselines[g]))
        if unheld:
            raise ValueError(f"{caller}: {source} records {unheld} for param_groups[{g}] "
                             f"(parameters {names}), which the optimizer's group does not "
                             f"hold (it holds {sorted(baselines[g])})")
        changed = {key: value for key, value in hyper.items()
                   if differs(_plain(group[key]), _plain(value))}
        where = f"param_groups[{g}]"
        for key, value in changed.items():
            if surface is None:
                continue
            try:
                surface.check_write(g, key, value)
            except (TypeError, ValueError) as error:
                raise type(error)(f"{caller}: {source} records {where}[{key!r}] = {value!r}, "
                                  f"written after the build (a scheduler's momentum cycling, "
                                  f"a hand edit), which this optimizer cannot take: "
                                  f"{error}") from None
        final = {key: hyper[key] for key in hyper
                 if differs(_plain(hyper[key]), _plain(baselines[g][key]))}
        if final and plans[g] is not None:      # the values the next step runs with
            _validated(plans[g].spec, final, caller, where, group["params"])


def _check_native_lrs(record: Any, optimizer: Any, surface: GroupSurface | None, saved: Any,
                      caller: str, source: str) -> None:
    """A native class runs every group at one lr (Paddle's, times each group's factor;
    MindSpore's ``learning_rate`` Parameter, for groups without factors): recorded group
    lrs that no one lr gives are refused before anything is written (its step would
    refuse them, or, compiled in a MindSpore graph, run them at the one lr)."""
    from ..lr_scheduler.base import lr_of

    if surface is None or surface.native is None or isinstance(record.spec.lr, Schedule) \
            or _lr_not_held(record):
        return
    named = _named_groups(record, optimizer)
    now = [float(lr_of(group)) for group, _ in named]
    lrs = [float(saved.group_values[names[0]]["lr"]) if names else lr
           for (_, names), lr in zip(named, now)]
    if not any(differs(a, b) for a, b in zip(now, lrs)):
        return                                     # nothing to write
    plans = surface.plans
    plain = [plan.lr_scale == 1.0 and plan.fixed_lr is None for plan in plans]
    taken = plain[0] and all(not differs(plan.lr(lrs[0]), lr) for plan, lr in zip(plans, lrs))
    if record.decision.backend == "mindspore":     # one Parameter, no factors
        taken = taken and all(plain)
    if not taken:
        raise ValueError(f"{caller}: {source} records the groups' lrs {lrs}, and "
                         f"{surface.native} runs every group at one lr (times each group's "
                         "own factor on Paddle), which no value gives; build the own path, "
                         "whose step takes each group's lr: uo.build(spec, params, "
                         "path='own')")


def set_group_values(record: Any, optimizer: Any, saved: Any) -> None:
    """Set each of ``optimizer``'s groups to the values ``saved`` records for its
    parameters (checked by :func:`check_group_values`), after the state is written:
    the lr through the group surface, as a user's write (``param_groups[g]["lr"] =
    lr``: the next step uses it; the surface carries it into Paddle's ``set_lr`` or
    MindSpore's ``learning_rate`` where the path needs it; a MindSpore
    ``experimental.optim`` group's lr Parameter is assigned in place, as
    ``uo.lr_scheduler`` writes it), and only where it differs
    from the group's lr now (an untouched run writes nothing); a scheduled spec lr is
    set by the file's position, not here. A recorded spec hyperparameter is written the
    same way (``param_groups[g]["betas"] = (...)``, as the type the group holds), and
    one the group holds written but the file does not record is set back to the
    build's value. The bookkeeping keys become plain entries."""
    from ..lr_scheduler.base import lr_of, write_lr

    if saved.group_values is None:
        return
    scheduled = isinstance(record.spec.lr, Schedule)
    plans = _plan_of_groups(record, optimizer)
    baselines = _baselines(record, optimizer)
    for g, (group, names) in enumerate(_named_groups(record, optimizer)):
        if not names:
            continue
        values = saved.group_values[names[0]]
        hyper = _recorded_hyperparameters(values, group, plans[g])
        for key, value in baselines[g].items():
            target = hyper.get(key, value)
            if key in group and differs(_plain(group[key]), _plain(target)):
                group[key] = target
        for key, value in values.items():
            if key == "lr":
                if not scheduled and not _lr_not_held(record) and differs(lr_of(group), value):
                    write_lr(group, value)
            elif key in hyper:
                continue
            elif key not in group or differs(dict.__getitem__(group, key), value):
                group[key] = value
