"""Reading a live ``torch.optim`` optimizer and ``torch.optim.lr_scheduler`` scheduler
(``uo.from_native``; the shared rules are in :mod:`unified_opt.porting.live`).

Facts relied on (torch 2.13):

* ``optimizer.defaults`` holds every constructor keyword argument but the parameters;
  each ``param_groups[i]`` holds the same keys with the group's own values (a group
  dict without a key takes the default), so group 0 is read as the spec and the other
  groups as ``uo.Group`` rules against it. torch holds parameters unnamed: ``names=``
  names them where a rule is needed.
* An ``LRScheduler`` stores ``initial_lr`` in each group and ``base_lrs`` (those
  values); ``last_epoch`` counts its ``step()`` calls, so the next ``optimizer.step()``
  runs at 0-based step ``last_epoch`` (the position). Most schedulers multiply the base
  lr, and a group with another base runs ``base_i / base_0`` times group 0's schedule
  (checked over the schedule's steps, e.g. ``CosineAnnealingLR``'s absolute ``eta_min``
  breaks it). ``CyclicLR`` and ``OneCycleLR`` set absolute lrs from their own per-group
  values (``max_lrs``/``base_lrs``; ``max_lr``/``initial_lr``/``min_lr`` in the groups).
* With ``cycle_momentum=True`` they write ``momentum`` (or ``betas[0]`` where
  ``use_beta1``) into the groups at every step, so the constructor's value is read from
  ``optimizer.defaults`` and the spec's schedule carries the cycling.
* ``OneCycleLR`` keeps ``pct_start`` only as phase ends ``float(pct_start *
  total_steps) - 1``; it is read back as the shortest decimal giving the same ends (so
  the same lrs).
* Several schedulers over one optimizer each rewrite the group's ``lr`` from the value
  before (their chainable form: StepLR multiplies it by ``gamma``, LinearLR by the ratio
  of its factors), so stepped together they compose as ``ChainedScheduler`` composes
  them; the first one made stores ``initial_lr`` (``setdefault``), the base of all.
  ``lr_scheduler=[s1, s2]`` is read that way, their ``last_epoch`` equal.
* A loop writing ``param_group['lr']`` leaves no trace in the optimizer. Its schedule,
  given as a ``uo.schedules`` schedule, stands at the optimizer's step count: the
  ``step`` every parameter's state holds (Adam, AdamW, ...: one per ``optimizer.step()``
  that reached it), none before the first step. ``SGD`` keeps no count (without
  momentum no state at all), so its position cannot be read.
* ``group["lr"]`` is the lr of the next ``optimizer.step()``: schedulers write it at
  their ``step()``; it is checked against the schedule read
  (:func:`unified_opt.porting.live_lr.check_live_lr`, float64 tolerance per step).
"""

from __future__ import annotations

import inspect

from unified_opt import schedules as uo_schedules
from unified_opt.porting import live, live_lr
from unified_opt.presets._registry import IMPLEMENTATION_FLAGS
from unified_opt.schedules import Cyclic, OneCycle, Schedule

NS = "torch.optim.lr_scheduler"
#: schedulers that multiply the optimizer's base lr: their keyword arguments (attributes)
_SCALING = {
    "StepLR": ("step_size", "gamma"),
    "MultiStepLR": ("milestones", "gamma"),
    "ConstantLR": ("factor", "total_iters"),
    "LinearLR": ("start_factor", "end_factor", "total_iters"),
    "ExponentialLR": ("gamma",),
    "PolynomialLR": ("total_iters", "power"),
    "CosineAnnealingLR": ("T_max", "eta_min"),
    "CosineAnnealingWarmRestarts": ("T_0", "T_mult", "eta_min"),
}
_FUNCTIONS = {"LambdaLR", "MultiplicativeLR"}
#: the key of torch's per-parameter step count
STEP = "step"


def read(optimizer, lr_scheduler=None, *, names=None, sample_steps=None):
    import torch

    cls = live.descriptor_of("torch", optimizer, torch.optim.Optimizer)
    hooks = [h for table in (optimizer._optimizer_step_pre_hooks,
                             optimizer._optimizer_step_post_hooks) for h in table.values()]
    if hooks:
        raise ValueError(f"{live.CALLER}: the optimizer has step hooks {hooks!r} "
                         "(register_step_pre_hook / register_step_post_hook), which may "
                         "change what a step does and which no spec reads")
    groups = optimizer.param_groups
    reading = _read_scheduler(optimizer, lr_scheduler, sample_steps) if lr_scheduler \
        is not None else None
    signature = inspect.signature(cls.from_native).parameters
    cycled = reading.cycled if reading else ()
    arguments = {}
    for key in signature:
        if key in cycled:          # the scheduler rewrites it each step: the constructor's
            arguments[key] = optimizer.defaults[key]
        elif key in groups[0]:
            arguments[key] = groups[0][key]
    if reading is not None:
        arguments["lr"] = reading.base_lrs[0]
        for index, group in enumerate(groups):
            tolerance = live_lr.per_step(live_lr.LR_RTOL_FLOAT64_PER_STEP, reading.position)
            live_lr.check_live_lr(f"param_groups[{index}]", group["lr"], reading.schedule,
                                  reading.position, reading.scales[index], tolerance,
                                  reading.name)
    spec = live.with_schedule(live.call_preset(cls, arguments),
                              reading.schedule if reading else None)
    given = live.parameter_names(names)
    rules = []
    for index, group in enumerate(groups[1:], start=1):
        where = f"param_groups[{index}]"
        changes = {}
        for key in signature:
            if key in ("lr", *cycled, *IMPLEMENTATION_FLAGS) or key not in group:
                continue
            if group[key] != arguments.get(key, group[key]):
                if key != "weight_decay":
                    raise live.not_a_rule(where, key, group[key], arguments[key])
                changes["weight_decay"] = float(group[key])
        if reading is not None:
            scale = reading.scales[index]
            if scale != 1.0:
                changes["lr_scale"] = scale
        elif group["lr"] != groups[0]["lr"]:
            changes["lr"] = group["lr"]
        if changes and group["params"]:
            names_of = [live.name_of(p, given, lambda p: None, where) for p in group["params"]]
            rules.append(live.rule(names_of, **changes))
    return live.NativeReading(spec, rules, cls.name, arguments,
                              reading.name if reading else None,
                              reading.position if reading else None,
                              reading.notes if reading else ())


def position(optimizer, lr_scheduler=None):
    if lr_scheduler is None:
        return None
    if isinstance(lr_scheduler, Schedule):
        return _steps_taken(optimizer)
    if isinstance(lr_scheduler, (list, tuple)):
        return _chain_position(list(lr_scheduler))
    return _position(lr_scheduler)


def _position(s) -> int:
    # ChainedScheduler keeps no last_epoch: its schedulers step together
    return int(s.last_epoch if hasattr(s, "last_epoch") else s._schedulers[0].last_epoch)


def _chain_position(schedulers) -> int:
    positions = [_position(s) for s in schedulers]
    if len(set(positions)) != 1:
        raise ValueError(f"{live.CALLER}: the schedulers given stand at different steps "
                         f"(last_epoch {positions}): stepped together, as a "
                         f"{NS}.ChainedScheduler steps them, they would stand at one")
    return positions[0]


def _steps_taken(optimizer) -> int:
    """The optimizer steps taken (module docstring): the parameters' ``step`` count."""
    held = [state for state in optimizer.state.values() if state]
    counts = sorted({int(state[STEP]) for state in held if STEP in state})
    if len(counts) > 1:
        raise ValueError(f"{live.CALLER}: the parameters' step counts differ ({counts}): "
                         "some took steps others did not, so the step a schedule stands at "
                         "is not one number; pass the scheduler that counts them")
    if counts:
        return counts[0]
    if held or type(optimizer).__name__ == "SGD":
        raise ValueError(f"{live.CALLER}: {type(optimizer).__qualname__} keeps no step count "
                         "in its state, so the step a uo.schedules schedule stands at cannot "
                         "be read; drive it with a torch.optim.lr_scheduler scheduler (its "
                         "last_epoch is the position)")
    return 0


# -- the scheduler ---------------------------------------------------------------------------

class _Scheduler:
    """A scheduler read: the schedule (group 0's), each group's lr factor, the base lr
    of group 0 (what the preset reads as ``lr``), the keys it cycles, its position."""

    def __init__(self, name, schedule, base_lrs, scales, cycled, position, notes=()):
        self.name, self.schedule, self.base_lrs = name, schedule, base_lrs
        self.scales, self.cycled, self.position, self.notes = scales, cycled, position, notes


def _read_scheduler(optimizer, s, sample_steps):
    import torch

    sched = torch.optim.lr_scheduler
    if isinstance(s, Schedule):
        return _given_schedule(optimizer, s)
    if isinstance(s, (list, tuple)):
        if not s:
            raise ValueError(f"{live.CALLER}: lr_scheduler is an empty {type(s).__name__}; "
                             "pass the schedulers that step the optimizer, or None")
        if len(s) > 1:
            return _chain(optimizer, list(s))
        s = s[0]
    if _is_uo_scheduler(s):
        return _uo_scheduler(optimizer, s)
    if not isinstance(s, sched.LRScheduler):
        raise TypeError(f"{live.CALLER}: lr_scheduler must be a torch.optim.lr_scheduler "
                        "scheduler (several: a list, read as ChainedScheduler), a "
                        "uo.schedules schedule or a uo.lr_scheduler scheduler, got "
                        f"{s!r} of type {type(s).__qualname__}")
    _over(optimizer, s)
    bare = _bare(s)
    name = f"{NS}.{bare}"
    if bare == "ReduceLROnPlateau":
        raise ValueError(f"{live.CALLER}: lr_scheduler {name} cannot be read as a schedule: "
                         + uo_schedules.refusal(name))
    groups = optimizer.param_groups
    position = _position(s)
    if bare in ("CyclicLR", "OneCycleLR"):
        per_group = [_absolute(s, bare, i) for i in range(len(groups))]
        schedule = per_group[0]
        scales = [_proportion(schedule, g, f"param_groups[{i}]", name)
                  for i, g in enumerate(per_group)]
        cycled = ()
        if schedule.cycle_momentum:
            cycled = ("betas",) if s.use_beta1 else ("momentum",)
        return _Scheduler(name, schedule, [g["initial_lr"] if "initial_lr" in g else
                                           schedule(0) for g in groups],
                          scales, cycled, position)
    # SequentialLR and ChainedScheduler keep no base_lrs: each group's initial_lr is it
    bases = list(s.base_lrs) if hasattr(s, "base_lrs") else [g["initial_lr"] for g in groups]
    if bare in _FUNCTIONS:
        schedule, note = _tabulated(s, bare, bases, sample_steps)
        notes = (note,)
    else:
        notes = ()
        schedule = uo_schedules.preset(name, base_lr=bases[0], **_arguments(s))
    scales = [live.scale_of(b, bases[0], f"param_groups[{i}]") for i, b in enumerate(bases)]
    for i, (base, scale) in enumerate(zip(bases, scales)):
        if i and scale != 1.0 and bare not in _FUNCTIONS:
            own = uo_schedules.preset(name, base_lr=base, **_arguments(s))
            live.check_multiple(own, schedule, scale, f"param_groups[{i}]", name)
    return _Scheduler(name, schedule, bases, scales, (), position, notes)


def _over(optimizer, s, where="lr_scheduler") -> None:
    if s.optimizer is not optimizer:
        raise ValueError(f"{live.CALLER}: {where}={s!r} schedules another optimizer than "
                         "the one given")


def _chain(optimizer, schedulers):
    """Several torch schedulers stepped together: ``ChainedScheduler``'s composition."""
    import torch

    for i, s in enumerate(schedulers):
        if not isinstance(s, torch.optim.lr_scheduler.LRScheduler):
            raise TypeError(f"{live.CALLER}: lr_scheduler[{i}] must be a "
                            f"torch.optim.lr_scheduler scheduler, got {s!r} of type "
                            f"{type(s).__qualname__}")
        _over(optimizer, s, f"lr_scheduler[{i}]")
    name = f"{NS}.ChainedScheduler"
    position = _chain_position(schedulers)
    arguments = {"schedulers": _members(schedulers, name)}
    groups = optimizer.param_groups
    bases = [g["initial_lr"] for g in groups]
    schedule = uo_schedules.preset(name, base_lr=bases[0], **arguments)
    scales = [live.scale_of(b, bases[0], f"param_groups[{i}]") for i, b in enumerate(bases)]
    for i, (base, scale) in enumerate(zip(bases, scales)):
        if i and scale != 1.0:
            own = uo_schedules.preset(name, base_lr=base, **arguments)
            live.check_multiple(own, schedule, scale, f"param_groups[{i}]", name)
    return _Scheduler(name, schedule, bases, scales, (), position)


def _given_schedule(optimizer, schedule):
    """A ``uo.schedules`` schedule of group 0's lr, a loop of the script's own writing
    it: each group runs at its lr's ratio to group 0's (checked at the position)."""
    position = _steps_taken(optimizer)
    lrs = [float(g["lr"]) for g in optimizer.param_groups]
    if len(lrs) > 1 and lrs[0] == 0.0 and any(lr != 0.0 for lr in lrs):
        raise ValueError(f"{live.CALLER}: param_groups[0] runs at lr 0.0 and others do not "
                         f"({lrs}): no factor of the schedule gives their lrs")
    scales = [1.0 if lr == lrs[0] else lr / lrs[0] for lr in lrs]
    name = f"uo.schedules.{type(schedule).__name__}"
    notes = ()
    if len(lrs) > 1:
        # the object shows one moment of the loop: the ratios are read from it, said
        notes = (f"the param groups run at {scales} x group 0's lr at step {position}: "
                 f"read as constant factors of {name} (uo.Group lr_scale), as a loop "
                 "that writes one lr (times a fixed factor) into every group keeps them",)
    return _Scheduler(name, schedule, [schedule(0) * k for k in scales], scales, (),
                      position, notes)


def _is_uo_scheduler(s) -> bool:
    """A ``uo.lr_scheduler`` scheduler: one ``uo.schedules`` schedule per group
    (``schedules``) and its step (``last_epoch``)."""
    from unified_opt.lr_scheduler.base import LRScheduler

    return isinstance(s, LRScheduler)


def _uo_scheduler(optimizer, s):
    if getattr(s, "optimizer", optimizer) is not optimizer:
        raise ValueError(f"{live.CALLER}: lr_scheduler={s!r} schedules another optimizer "
                         "than the one given")
    name = f"{type(s).__module__}.{type(s).__qualname__}"
    if s.schedules is None:
        raise ValueError(f"{live.CALLER}: lr_scheduler {name} cannot be read as a schedule: "
                         "its lr depends on the metrics it is given, not on the step alone")
    schedules = list(s.schedules)
    groups = optimizer.param_groups
    if len(schedules) != len(groups):
        raise ValueError(f"{live.CALLER}: lr_scheduler={s!r} holds {len(schedules)} "
                         f"schedules for the optimizer's {len(groups)} param groups")
    schedule = schedules[0]
    scales = [1.0]
    for i, own in enumerate(schedules[1:], start=1):
        where = f"param_groups[{i}]"
        scale = live.scale_of(own(0), schedule(0), where)
        live.check_multiple(own, schedule, scale, where, name)
        scales.append(scale)
    return _Scheduler(name, schedule, [x(0) for x in schedules], scales, (),
                      int(s.last_epoch))


def _bare(s) -> str:
    """The scheduler's class name in ``torch.optim.lr_scheduler`` (ValueError for a
    subclass or another class)."""
    import torch

    klass = type(s)
    native = getattr(torch.optim.lr_scheduler, klass.__name__, None)
    if native is klass:
        return klass.__name__
    parents = [k.__name__ for k in klass.__mro__[1:]
               if getattr(torch.optim.lr_scheduler, k.__name__, None) is k
               and k.__name__ not in ("LRScheduler", "_LRScheduler")]
    if parents:
        raise ValueError(f"{live.CALLER}: lr_scheduler of type {live.qualified(klass)} is a "
                         f"subclass of {NS}.{parents[0]}, not that class: its lrs may differ, "
                         "so it is not read as it")
    raise ValueError(f"{live.CALLER}: lr_scheduler of type {live.qualified(klass)} is no "
                     f"{NS} scheduler with a schedule preset (uo.schedules.presets())")


def _arguments(s) -> dict:
    """A multiplying scheduler's own keyword arguments (no base lr), from its attributes;
    SequentialLR and ChainedScheduler as ``[(name, arguments), ...]``."""
    bare = _bare(s)
    if bare in _SCALING:
        out = {key: getattr(s, key) for key in _SCALING[bare]}
        if bare == "MultiStepLR":      # a Counter of milestones: repeats count
            out["milestones"] = sorted(s.milestones.elements())
        return out
    if bare in ("SequentialLR", "ChainedScheduler"):
        subs = _members(s._schedulers, f"{NS}.{bare}")
        if bare == "SequentialLR":
            return {"schedulers": subs, "milestones": list(s._milestones)}
        return {"schedulers": subs}
    raise ValueError(f"{live.CALLER}: {NS}.{bare} cannot be read inside another scheduler")


def _members(schedulers, name) -> list:
    """``[(class name, arguments), ...]`` of the schedulers composed by ``name``."""
    subs = []
    for i, sub in enumerate(schedulers):
        sub_bare = _bare(sub)
        if sub_bare in _FUNCTIONS:
            raise live.lambda_refused(f"{name}'s schedulers[{i}] {sub_bare}", "lr_lambda",
                                      sub.lr_lambdas[0])
        subs.append((sub_bare, _arguments(sub)))
    return subs


def _tabulated(s, bare, bases, sample_steps):
    """LambdaLR / MultiplicativeLR: refused, or tabulated over ``sample_steps`` steps by
    calling the function as torch does (LambdaLR: ``base * f(t)``; MultiplicativeLR:
    ``lr(t-1) * f(t)``)."""
    name = f"{NS}.{bare}"
    functions = s.lr_lambdas
    if sample_steps is None:
        raise live.lambda_refused(name, "lr_lambda", functions[0])
    if any(f is not functions[0] for f in functions):
        raise ValueError(f"{live.CALLER}: {name} holds one lr function per group "
                         f"({functions!r}); a tabulated schedule is one function for all")
    f = functions[0]
    if bare == "LambdaLR":
        lrs = [bases[0] * f(t) for t in range(sample_steps)]
    else:
        lrs = [bases[0]]
        for t in range(1, sample_steps):
            lrs.append(lrs[-1] * f(t))
    return live.sampled([float(x) for x in lrs], name)


def _absolute(s, bare, index):
    """CyclicLR / OneCycleLR for group ``index``, from its own values."""
    if bare == "CyclicLR":
        up = round(s.total_size * s.step_ratio)
        down = round(s.total_size) - up
        if up / float(up + down) != s.step_ratio:
            raise ValueError(f"{live.CALLER}: {NS}.CyclicLR's step sizes cannot be read "
                             f"back from total_size={s.total_size!r}, step_ratio="
                             f"{s.step_ratio!r}")
        momentum = {}
        if s.cycle_momentum:
            momentum = {"base_momentum": s.base_momentums[index],
                        "max_momentum": s.max_momentums[index]}
        return Cyclic(base_lr=s.base_lrs[index], max_lr=s.max_lrs[index], step_size_up=up,
                      step_size_down=None if down == up else down, mode=s.mode,
                      gamma=s.gamma, scale_fn=s._scale_fn_custom,
                      scale_mode=s.scale_mode if s._scale_fn_custom is not None else None,
                      cycle_momentum=s.cycle_momentum, **momentum)
    group = s.optimizer.param_groups[index]
    phases = s._schedule_phases
    momentum = {}
    if s.cycle_momentum:
        momentum = {"base_momentum": group["base_momentum"],
                    "max_momentum": group["max_momentum"]}
    return OneCycle(max_lr=group["max_lr"], total_steps=s.total_steps,
                    start_lr=group["initial_lr"], end_lr=group["min_lr"],
                    pct_start=_pct_start(phases, s.total_steps),
                    anneal=s._anneal_func_type, three_phase=len(phases) == 3,
                    cycle_momentum=s.cycle_momentum, **momentum)


def _pct_start(phases, total_steps) -> float:
    """The shortest decimal ``p`` with ``float(p * total_steps) - 1`` equal to the first
    phase's end (and ``2 p total_steps - 2`` to the second's, three-phase): the same
    phase ends as the native ``pct_start``, so the same lrs."""
    end = phases[0]["end_step"]
    estimate = (end + 1) / total_steps
    for digits in range(1, 18):
        p = round(estimate, digits)
        ends = [float(p * total_steps) - 1]
        if len(phases) == 3:
            ends.append(float(2 * p * total_steps) - 2)
        if ends == [ph["end_step"] for ph in phases[:len(ends)]]:
            return p
    return estimate


def _proportion(schedule, own, where, name) -> float:
    """The factor of group ``own``'s absolute schedule over group 0's (equal momenta)."""
    if own is schedule:
        return 1.0
    if own.momentum(0) is not None and any(own.momentum(t) != schedule.momentum(t)
                                           for t in range(live.checked_steps(own))):
        raise ValueError(f"{live.CALLER}: {name} cycles {where}'s momentum between other "
                         "values than the first group's: a uo.Group cannot set a momentum")
    scale = live.scale_of(own(0), schedule(0), where)
    live.check_multiple(own, schedule, scale, where, name)
    return scale

