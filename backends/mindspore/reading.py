"""Reading a live MindSpore optimizer (``mindspore.nn`` and
``mindspore.experimental.optim``) and its dynamic lr (``uo.from_native``; the shared
rules are in :mod:`unified_opt.porting.live`).

Facts relied on (MindSpore 2.10):

* Most ``nn`` constructors are wrapped by ``opt_init_args_register``, which keeps the
  bound arguments: ``init_args`` (every argument but the parameters and the lr; ``nn.Adam``
  keeps ``use_lazy`` / ``use_offload`` under ``init_args['kwargs']``),
  ``init_learning_rate`` (the lr as given: a float, a per-step list, or None for a
  ``LearningRateSchedule`` Cell, then ``optimizer.learning_rate``) and ``init_params``
  (the ``params`` argument, group dicts included). ``nn.AdamWeightDecay`` and
  ``nn.AdamOffload`` keep none of these: their values are read from their float32
  Parameters/Tensors (``beta1``, ``eps``, ``weight_decay``, ``learning_rate``) as the
  shortest decimal that rounds to the float32 value (what the kernel computes with).
* Group dicts: :func:`unified_opt.presets.mindspore_groups.mindspore_groups` reads them
  (with the parameters by name: ``p.name``, or ``names=``). In groups MindSpore's
  beta/gamma name rule is off and every group's decay is explicit, so the spec read has
  ``no_decay_names=()`` there (a note says so).
* ``nn.LARS`` keeps the wrapped optimizer as ``opt`` (read as its spec) and its filter's
  answer per parameter as ``lars_flag``: the filter is read as the names it leaves out
  (MindSpore's default filter is the spec's ``exclude_names`` default).
* A dynamic lr: a ``LearningRateSchedule`` Cell keeps its arguments as attributes
  (``PolynomialDecayLR`` the lr as ``start_learning_rate``); a per-step list (the
  ``mindspore.nn.*_lr`` functions make them) keeps no record of the function that made
  it, so it is read as the table it is, ``uo.schedules.Piecewise`` (exact on every step
  of the list; MindSpore raises past its end). The optimizer's call number ``t + 1``
  runs with ``global_step = t``: the position is ``global_step``.
* ``experimental.optim`` classes follow torch: ``defaults`` and ``param_groups`` (the lr
  a float32 Parameter; the constructor's lr is ``defaults['lr']``). Their schedulers
  (``lr_scheduler=``) keep torch's attributes, as float32 Tensors/Parameters where
  torch keeps floats (``base_lrs``, ``last_epoch``, ``T_0``): read as the constructor's
  lr where it rounds to the same float32, else the shortest decimal rounding to them.
  ``SequentialLR`` and ``CyclicLR`` are not read (their attributes are rewritten in
  float32 at construction), nor ``ReduceLROnPlateau`` (metric-driven).
* A constant lr is kept as the float32 Parameter ``learning_rate``, which a callback
  may overwrite (``ops.assign``): it must hold the constructor's lr (float32), else the
  reading is refused.
* The live lr of the next step: an ``nn`` optimizer's schedule Cell called at
  ``global_step`` (a per-step list is such a Cell, ``_IteratorLearningRate``;
  ``get_lr()`` is not called, as it advances ``global_step``), an ``experimental``
  group's float32 ``lr`` Parameter. Both are float32: checked against the schedule
  read at the position within :data:`unified_opt.porting.live_lr.LR_RTOL_FLOAT32` (the
  Cells' closed forms) or :data:`~unified_opt.porting.live_lr.LR_RTOL_FLOAT32_PER_STEP`
  a step (the experimental schedulers' recursive forms, rounded in float32 each step).
"""

from __future__ import annotations

import inspect

import numpy as np

from unified_opt import schedules as uo_schedules
from unified_opt.groups import name_matches
from unified_opt.porting import live, live_lr
from unified_opt.presets.mindspore_groups import mindspore_groups
from unified_opt.schedules import Piecewise
from unified_opt.schedules._preset_registry import REGISTRY

NN = "mindspore.nn"
#: LearningRateSchedule Cells: preset argument -> attribute, where they differ
_CELL_ATTRIBUTES = {"PolynomialDecayLR": {"learning_rate": "start_learning_rate"}}


def read(optimizer, lr_scheduler=None, *, names=None, sample_steps=None):
    from mindspore import nn
    from mindspore.experimental import optim

    cls = live.descriptor_of("mindspore", optimizer, (nn.Optimizer, optim.Optimizer))
    given = live.parameter_names(names)
    if cls.experimental:
        return _read_experimental(optimizer, cls, given, lr_scheduler, sample_steps)
    # the schedule Cell the optimizer holds is accepted (a script passes what it has)
    if lr_scheduler is not None and lr_scheduler is not getattr(optimizer, "learning_rate",
                                                                None):
        raise TypeError(f"{live.CALLER}: a mindspore.nn optimizer holds its dynamic lr as "
                        f"its learning_rate; pass lr_scheduler=None (or the schedule it "
                        f"holds), got {lr_scheduler!r}")
    return _read_nn(optimizer, cls, given)


def position(optimizer, lr_scheduler=None):
    if lr_scheduler is not None and lr_scheduler is getattr(optimizer, "learning_rate", None):
        lr_scheduler = None             # an nn optimizer's own schedule Cell
    if lr_scheduler is not None:
        return _number(lr_scheduler.last_epoch, int)
    if getattr(optimizer, "dynamic_lr", False):
        return int(optimizer.global_step.asnumpy().reshape(-1)[0])
    return None


# -- mindspore.nn ----------------------------------------------------------------------------

def _read_nn(optimizer, cls, given):
    notes: list[str] = []
    signature = inspect.signature(cls.from_native).parameters
    if cls.wraps_optimizer:
        return _read_lars(optimizer, cls, given)
    if hasattr(optimizer, "init_args"):
        stored = dict(optimizer.init_args)
        stored.update(stored.pop("kwargs", {}) or {})
        arguments = {k: stored[k] for k in signature if k in stored}
        lr = optimizer.init_learning_rate
    else:
        arguments = {k: _float32_read(optimizer, k, cls.name) for k in signature
                     if k != "learning_rate" and hasattr(optimizer, k)}
        lr = None if optimizer.dynamic_lr else _shortest(optimizer.learning_rate)
    missing = [k for k in signature if k not in arguments and k != "learning_rate"
               and inspect.signature(cls.from_native).parameters[k].default
               is inspect.Parameter.empty]
    if missing:
        raise ValueError(f"{live.CALLER}: cannot read {cls.name}'s arguments {missing} from "
                         "the live object")
    schedule = None
    if lr is None and getattr(optimizer, "is_group", False) and optimizer.dynamic_lr:
        raise ValueError(f"{live.CALLER}: {cls.name} in parameter groups with a "
                         "LearningRateSchedule Cell as learning_rate: MindSpore keeps only "
                         "each group's Cell, so the optimizer's schedule cannot be read")
    if lr is None and optimizer.dynamic_lr:
        schedule = _cell_schedule(optimizer.learning_rate)
        lr = schedule
    elif isinstance(lr, (list, tuple)):
        schedule = _table(lr)
        lr = schedule
    if schedule is None and isinstance(lr, float):
        _check_constant_lr(optimizer, lr, cls.name)
    if "weight_decay" in arguments and not isinstance(arguments["weight_decay"],
                                                       (int, float)):
        arguments["weight_decay"] = _cell_schedule(arguments["weight_decay"],
                                                   "the dynamic weight decay")
    if "learning_rate" in signature:
        arguments["learning_rate"] = lr
    spec = live.call_preset(cls, arguments)
    groups: list = []
    init_params = getattr(optimizer, "init_params", {}).get("params")
    if not getattr(optimizer, "is_group", False) and getattr(spec, "no_decay_names", ()):
        spec = _decay_rule(optimizer, spec, given, notes)
    if getattr(optimizer, "is_group", False):
        dicts = _named_groups(init_params, given)
        if hasattr(spec, "no_decay_names") and spec.no_decay_names:
            spec = spec.replace(no_decay_names=())
            notes.append("in parameter groups MindSpore's beta/gamma no-decay rule is off: "
                         "the spec has no_decay_names=() and each group's weight_decay is "
                         "a rule")
        groups = mindspore_groups(dicts, spec)
    if schedule is not None:
        # each lr Cell at global_step: what the next call of the optimizer computes with
        at = position(optimizer)
        for where, lr_cell, scale in _lr_cells(optimizer, groups, given):
            live_lr.check_live_lr(where, _number(lr_cell(optimizer.global_step).reshape(()),
                                                 float),
                                  schedule, at, scale, live_lr.LR_RTOL_FLOAT32,
                                  _schedule_name(optimizer))
    return live.NativeReading(spec, groups, cls.name, arguments,
                              _schedule_name(optimizer) if schedule is not None else None,
                              position(optimizer), tuple(notes))


def _lr_cells(optimizer, groups, given) -> list[tuple[str, object, float]]:
    """``(where, lr Cell, scale)`` of a scheduled nn optimizer: its one ``learning_rate``
    Cell (scale 1), or, with group lrs (``is_group_lr``: ``learning_rate`` is a
    ``CellList`` of each parameter's Cell, a group's shared by its parameters), each
    distinct Cell with the ``lr_scale`` of its parameter's group."""
    if not getattr(optimizer, "is_group_lr", False):
        return [("the optimizer (learning_rate at global_step)", optimizer.learning_rate,
                 1.0)]
    out, seen = [], set()
    for parameter, cell in zip(optimizer.parameters, optimizer.learning_rate):
        if id(cell) in seen:
            continue
        seen.add(id(cell))
        name = live.name_of(parameter, given, lambda q: q.name, "the optimizer")
        group = next((g for g in groups if g.matches(name)), None)
        scale = group.lr_scale if group is not None and group.lr_scale is not None else 1.0
        out.append((f"the learning_rate of parameter {name!r}'s group at global_step",
                    cell, scale))
    return out


def _check_constant_lr(optimizer, lr, name):
    """The constructor's constant lr must be what the optimizer's ``learning_rate``
    Parameter holds (float32): a callback or a loop may have written another
    (``ops.assign``), which reading the constructor's would silently undo."""
    held = getattr(optimizer, "learning_rate", None)
    if getattr(optimizer, "is_group_lr", False) or not hasattr(held, "asnumpy"):
        return
    value = held.asnumpy().reshape(-1)
    if value.size == 1 and np.float32(lr) != value[0]:
        raise ValueError(f"{live.CALLER}: {name}'s learning_rate Parameter holds "
                         f"{live.shortest_float32(value)[0]!r}, not the constructor's lr "
                         f"{lr!r}: something wrote it (a callback or a loop changing the "
                         "lr), and read as the constructor's the run would change; build "
                         "the optimizer with "
                         "the lr it runs at, or with its schedule (a LearningRateSchedule "
                         "Cell or a per-step list) as learning_rate")


def _decay_rule(optimizer, spec, given, notes):
    """The preset's beta/gamma name rule, checked against the parameters MindSpore
    decays (``decay_flags``: its filter on ``p.name``): where ``names=`` names them
    otherwise, the rule becomes the names MindSpore spares, exactly."""
    names = [live.name_of(p, given, lambda q: q.name, "the optimizer")
             for p in optimizer.parameters]
    spared = [n for n, flag in zip(names, optimizer.decay_flags) if not flag]
    if [n for n in names if name_matches(n, spec.no_decay_names)] == spared:
        return spec
    notes.append(f"MindSpore spares {spared} from weight decay by their own names "
                 f"({spec.no_decay_names!r} on p.name); under the names given the spec "
                 "names them")
    return spec.replace(no_decay_names=tuple(live.escaped(n) for n in spared))


def _read_lars(optimizer, cls, given):
    from unified_opt.backends.mindspore.classes.large_batch import LARS_EXCLUDED

    inner = read(optimizer.opt, names=given and _pairs(optimizer, given))
    stored = dict(optimizer.init_args)
    arguments = {"optimizer": inner.spec, "epsilon": stored["epsilon"],
                 "coefficient": stored["coefficient"], "use_clip": stored["use_clip"],
                 "lars_filter": None}
    spec = live.call_preset(cls, arguments)
    parameters = list(optimizer.parameters)
    names_of = [live.name_of(p, given, lambda q: q.name, cls.name) for p in parameters]
    excluded = tuple(n for n, flag in zip(names_of, optimizer.lars_flag) if not flag)
    if excluded != tuple(n for n in names_of if name_matches(n, LARS_EXCLUDED)):
        # another filter than MindSpore's default: the names it leaves out, exactly
        spec = spec.replace(exclude_names=tuple(live.escaped(n) for n in excluded))
    return live.NativeReading(spec, inner.groups, cls.name, arguments, inner.scheduler,
                              inner.position, inner.notes)


def _pairs(optimizer, given):
    return [(given[id(p)], p) for p in optimizer.parameters if id(p) in given]


def _named_groups(init_params, given):
    """The group dicts with each Parameter replaced by its name."""
    out = []
    for index, group in enumerate(init_params):
        named = {}
        for key, value in group.items():
            if key in ("params", "order_params"):
                value = [live.name_of(p, given, lambda q: q.name, f"params[{index}]")
                         for p in value]
            named[key] = value
        out.append(named)
    return out


def _float32_read(optimizer, key, name):
    value = getattr(optimizer, key)
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    return _shortest(value)


def _shortest(value):
    """A float32 Tensor/Parameter as the shortest decimal(s) that round to it."""
    floats = live.shortest_float32(value.asnumpy())
    return floats[0] if len(floats) == 1 else tuple(floats)


def _schedule_name(optimizer) -> str:
    """What the optimizer's dynamic lr was given as. A class without ``init_args``
    (``nn.AdamWeightDecay``) keeps no ``init_learning_rate``: a list given it is the
    ``_IteratorLearningRate`` Cell MindSpore made of it."""
    lr = optimizer.learning_rate
    given = getattr(optimizer, "init_learning_rate", None)
    if isinstance(given, (list, tuple)) or type(lr).__name__ == "_IteratorLearningRate":
        return "a per-step lr list"
    return f"{NN}.{type(lr).__name__}"


def _table(values) -> Piecewise:
    values = [float(x) for x in values]
    return Piecewise(boundaries=list(range(1, len(values))), values=values)


def _cell_schedule(cell, what="the dynamic lr"):
    """A ``LearningRateSchedule`` Cell (or the list MindSpore made a Cell) as its schedule."""
    from mindspore import nn

    klass = type(cell)
    bare = klass.__name__
    if bare == "_IteratorLearningRate":     # MindSpore keeps the list as float32
        return _table(live.shortest_float32(cell.learning_rate.asnumpy()))
    name = f"{NN}.{bare}"
    if getattr(nn, bare, None) is not klass or name not in REGISTRY.names():
        raise ValueError(f"{live.CALLER}: {what} of type {live.qualified(klass)} has "
                         "no schedule preset (a mindspore.nn LearningRateSchedule Cell, a "
                         "subclass or a Cell of your own cannot be read as a schedule)")
    attributes = _CELL_ATTRIBUTES.get(bare, {})
    arguments = {key: getattr(cell, attributes.get(key, key))
                 for key in REGISTRY.signature(name).parameters}
    return uo_schedules.preset(name, **arguments)


# -- mindspore.experimental.optim ----------------------------------------------------------

EXP = "mindspore.experimental.optim.lr_scheduler"
#: experimental schedulers that multiply the base lr: their arguments (attributes)
_EXP_SCALING = {
    "StepLR": ("step_size", "gamma"),
    "MultiStepLR": ("milestones", "gamma"),
    "ConstantLR": ("factor", "total_iters"),
    "LinearLR": ("start_factor", "end_factor", "total_iters"),
    "ExponentialLR": ("gamma",),
    "PolynomialLR": ("total_iters", "power"),
    "CosineAnnealingLR": ("T_max", "eta_min"),
    "CosineAnnealingWarmRestarts": ("T_0", "T_mult", "eta_min"),
}


def _read_experimental(optimizer, cls, given, scheduler, sample_steps):
    signature = inspect.signature(cls.from_native).parameters
    groups = optimizer.param_groups
    defaults = optimizer.defaults
    arguments = {k: defaults[k] for k in signature if k in defaults}
    schedule, name, notes, bases = None, None, (), None
    if scheduler is not None:
        schedule, name, notes, bases = _experimental_schedule(optimizer, scheduler,
                                                              sample_steps)
    else:
        first_lr = _group_lr(groups[0])
        if np.float32(defaults["lr"]) != np.float32(first_lr):
            raise ValueError(f"{live.CALLER}: the first parameter group's lr is "
                             f"{first_lr!r}, not the constructor's {defaults['lr']!r}: "
                             "something changed it (a scheduler: pass it as lr_scheduler=)")
    spec = live.with_schedule(live.call_preset(cls, arguments), schedule)
    if schedule is not None:
        at = position(optimizer, scheduler)
        for index, group in enumerate(groups):
            scale = live.scale_of(bases[index], bases[0], f"param_groups[{index}]")
            live_lr.check_live_lr(f"param_groups[{index}]", _group_lr(group), schedule, at,
                                  scale, live_lr.per_step(live_lr.LR_RTOL_FLOAT32_PER_STEP, at),
                                  name)
    rules = []
    for index, group in enumerate(groups[1:], start=1):
        where = f"param_groups[{index}]"
        changes = {}
        for key in signature:
            if key == "lr" or key not in group:
                continue
            if group[key] != arguments.get(key, group[key]):
                if key != "weight_decay":
                    raise live.not_a_rule(where, key, group[key], arguments[key])
                changes["weight_decay"] = float(group[key])
        if bases is not None:
            scale = live.scale_of(bases[index], bases[0], where)
            if scale != 1.0:
                changes["lr_scale"] = scale
        else:
            lr = _group_lr(group)
            if np.float32(lr) != np.float32(defaults["lr"]):
                changes["lr"] = lr
        if changes:
            names_of = [live.name_of(p, given, lambda q: q.name, where) for p in group["params"]]
            rules.append(live.rule(names_of, **changes))
    return live.NativeReading(spec, rules, cls.name, arguments, name,
                              position(optimizer, scheduler), tuple(notes))


def _experimental_schedule(optimizer, s, sample_steps):
    """(schedule of the first group, name, notes, each group's base lr) of an
    experimental scheduler over ``optimizer``: torch's semantics, float32 values."""
    from mindspore.experimental.optim import lr_scheduler

    klass = type(s)
    bare = klass.__name__
    name = f"{EXP}.{bare}"
    if getattr(lr_scheduler, bare, None) is not klass or not isinstance(
            s, lr_scheduler.LRScheduler):
        raise ValueError(f"{live.CALLER}: lr_scheduler of type {live.qualified(klass)} is no "
                         f"{EXP} scheduler with a schedule preset (a subclass is not read as "
                         "its parent: its lrs may differ)")
    if s.optimizer is not optimizer:
        raise ValueError(f"{live.CALLER}: lr_scheduler={s!r} schedules another optimizer "
                         "than the one given")
    if bare in ("ReduceLROnPlateau", "SequentialLR", "CyclicLR"):
        raise ValueError(f"{live.CALLER}: lr_scheduler {name} is not read: "
                         + ("it is metric-driven" if bare == "ReduceLROnPlateau" else
                            "reading it from its float32 attributes is not supported yet; "
                            "give the schedule as uo.schedules.preset(...)"))
    bases = [_base(b, optimizer.defaults["lr"]) for b in s.base_lrs]
    if bare in ("LambdaLR", "MultiplicativeLR"):
        f = s.lr_lambdas[0]
        if sample_steps is None:
            raise live.lambda_refused(name, "lr_lambda", f)
        if bare == "LambdaLR":
            lrs = [bases[0] * f(t) for t in range(sample_steps)]
        else:
            lrs = [bases[0]]
            for t in range(1, sample_steps):
                lrs.append(lrs[-1] * f(t))
        schedule, note = live.sampled([float(x) for x in lrs], name)
        return schedule, name, (note,), bases
    arguments = {key: _number(getattr(s, key)) for key in _EXP_SCALING[bare]}
    if bare == "MultiStepLR":
        arguments["milestones"] = sorted(s.milestones.elements())
    schedule = uo_schedules.preset(name, base_lr=bases[0], **arguments)
    for i, base in enumerate(bases[1:], start=1):
        scale = live.scale_of(base, bases[0], f"param_groups[{i}]")
        own = uo_schedules.preset(name, base_lr=base, **arguments)
        if any(not np.isclose(own(t), scale * schedule(t), rtol=1e-12, atol=0.0)
               for t in range(200)):
            raise ValueError(f"{live.CALLER}: {name} gives param_groups[{i}] no multiple of "
                             "the first group's schedule: no uo.Group lr_scale gives it")
    return schedule, name, (), bases


def _base(value, constructor):
    """A float32 base lr: the constructor's float where it rounds to it."""
    value = _number(value)
    return constructor if np.float32(constructor) == np.float32(value) else value


def _number(value, kind=None):
    """A Python number from a MindSpore scalar Tensor/Parameter (float32 values as the
    shortest decimal rounding to them), or the number itself."""
    if hasattr(value, "asnumpy"):
        array = value.asnumpy()
        if kind is int or np.issubdtype(array.dtype, np.integer):
            return int(array.reshape(-1)[0])
        value = live.shortest_float32(array)[0]
        return int(value) if value.is_integer() and kind is not float else value
    return value


def _group_lr(group) -> float:
    lr = group["lr"]
    return lr if isinstance(lr, float) else _shortest(lr)
