"""Reading a live ``paddle.optimizer`` optimizer and its ``paddle.optimizer.lr``
scheduler (``uo.from_native``; the shared rules are in :mod:`unified_opt.porting.live`).

Facts relied on (Paddle 3.3):

* The constructor keeps each argument as an attribute: ``_<name>`` (``_beta1``,
  ``_epsilon``, ``_learning_rate``, ``_grad_clip``, ...), a few without the underscore
  (Adagrad ``initial_accumulator_value``, Lamb ``always_adapt``); Rprop wraps its pairs
  in a list (``_learning_rate_range = [range]``, ``_etas = [etas]``), and makes them a
  float32 tensor at its first step: read back as the shortest decimals that round to
  those float32 values.
* The weight decay: most classes keep it as the regularizer ``regularization`` (a float
  is made ``L2Decay(float)``), and a parameter's own ``p.regularizer`` (from a
  ``ParamAttr`` or a parameter group's ``weight_decay``) takes its place for that
  parameter. ``Momentum`` fuses an ``L2Decay`` into its kernel
  (``_regularization_coeff``, per group ``regularization_coeff``); ``AdamW`` keeps the
  float ``_weight_decay`` (per group ``weight_decay``) and spares the parameters whose
  name ``_apply_decay_param_fun`` refuses; ``Lamb`` keeps ``_lamb_weight_decay`` (per
  group ``lamb_weight_decay``) and spares the parameters ``_exclude_from_weight_decay_fn``
  accepts. Those functions are called here on the live parameters, as Paddle calls
  them, and their answers become ``uo.Group(weight_decay=0.0)`` rules.
* A parameter's lr is the optimizer's times ``p.optimize_attr['learning_rate']`` (a
  group's ``learning_rate``, or a ``ParamAttr``'s): a ``uo.Group(lr_scale=...)``;
  ``p.need_clip = False`` keeps it out of clipping: ``exclude_from=('grad_clip',)``.
* Every other per-group value (``beta1``, ``epsilon``, ...) must equal the optimizer's
  (``_default_dict``), else no rule expresses it (ValueError).
* An ``LRScheduler`` passed as ``learning_rate`` is the optimizer's ``_learning_rate``;
  its constructor steps once, so ``last_epoch`` is the 0-based step the next
  ``optimizer.step()`` runs (the position). Its arguments are its attributes
  (``base_lr`` is ``learning_rate``); ``OneCycleLR`` keeps ``phase_pct`` only as phase
  ends ``phase_pct * total_steps - 1``, read back as the shortest decimal giving the
  same ends; ``CyclicLR`` keeps ``cycle_size`` and ``step_up_pct``.
* ``optimizer.get_lr()`` is the scheduler's ``last_lr`` (a Python float), the lr of the
  next step before each parameter's multiplier: it is checked against the schedule
  read at the position (:func:`unified_opt.porting.live_lr.check_live_lr`, float64
  tolerance per step: ``CosineAnnealingDecay`` steps a recursive form; the multiplier
  is the same factor on both sides).
"""

from __future__ import annotations

import inspect

from unified_opt import schedules as uo_schedules
from unified_opt.porting import live, live_lr
from unified_opt.schedules import Cyclic, OneCycle
from unified_opt.schedules._preset_registry import REGISTRY

NS = "paddle.optimizer.lr"
#: preset argument -> the attribute holding it, where it is not ``_<argument>``
_ATTRIBUTES = {"initial_accumulator_value": "initial_accumulator_value",
               "always_adapt": "always_adapt", "regularization": "regularization"}
#: Rprop keeps these pairs wrapped in a one-element list
_WRAPPED = ("learning_rate_range", "etas")
#: a scheduler's preset arguments read from other attributes
_SCHEDULER_ATTRIBUTES = {"learning_rate": "base_lr"}
_FUNCTIONS = {"LambdaDecay", "MultiplicativeDecay"}


def read(optimizer, lr_scheduler=None, *, names=None, sample_steps=None):
    import paddle

    cls = live.descriptor_of("paddle", optimizer, paddle.optimizer.Optimizer)
    # a script written once for three frameworks passes the scheduler it has: the very
    # one the optimizer holds is accepted, any other refused
    if lr_scheduler is not None and lr_scheduler is not _learning_rate(optimizer):
        raise TypeError(f"{live.CALLER}: a Paddle optimizer holds its scheduler as its "
                        f"learning_rate, and lr_scheduler={lr_scheduler!r} is not the one it "
                        f"holds ({_learning_rate(optimizer)!r}); pass lr_scheduler=None "
                        "(or the one it holds)")
    notes: list[str] = []
    arguments = {}
    for key in inspect.signature(cls.from_native).parameters:
        arguments[key] = _argument(optimizer, cls, key)
    scheduler = _learning_rate(optimizer)
    schedule = None
    if scheduler is not None:
        schedule, note = _schedule(scheduler, sample_steps)
        notes += note
        arguments["learning_rate"] = schedule
        at = position(optimizer)
        live_lr.check_live_lr("the optimizer (get_lr())", optimizer.get_lr(), schedule, at,
                              1.0, live_lr.per_step(live_lr.LR_RTOL_FLOAT64_PER_STEP, at),
                              _scheduler_name(scheduler))
    decay_functions = {k: arguments[k] for k in ("apply_decay_param_fun",
                                                 "exclude_from_weight_decay_fn")
                       if k in arguments}
    for key in decay_functions:            # read per parameter below, as Paddle calls them
        arguments[key] = None
    spec = live.call_preset(cls, arguments)
    given = live.parameter_names(names)
    if given is not None and arguments.get("exclude_from_weight_decay"):
        spec = _excluded_by_given_names(optimizer, spec, arguments, given, notes)
    groups = _rules(optimizer, cls, spec, decay_functions, given)
    return live.NativeReading(spec, groups, cls.name, arguments,
                              _scheduler_name(scheduler) if scheduler is not None else None,
                              position(optimizer), tuple(notes))


def position(optimizer, lr_scheduler=None):
    scheduler = _learning_rate(optimizer)
    return None if scheduler is None else int(scheduler.last_epoch)


def _learning_rate(optimizer):
    from paddle.optimizer.lr import LRScheduler

    lr = optimizer._learning_rate
    return lr if isinstance(lr, LRScheduler) else None


def _argument(optimizer, cls, key):
    if key == "weight_decay" and cls.name == "paddle.optimizer.Momentum":
        if optimizer._regularization_method == "l2_decay":
            return float(optimizer._regularization_coeff)
        return optimizer.regularization          # None, or what Momentum does not fuse
    if key == "weight_decay" and cls.name != "paddle.optimizer.AdamW":
        return optimizer.regularization
    attribute = _ATTRIBUTES.get(key, f"_{key}")
    if not hasattr(optimizer, attribute):
        raise ValueError(f"{live.CALLER}: cannot read {cls.name}'s argument {key!r} from the "
                         f"live object (no attribute {attribute!r} in this Paddle version)")
    value = getattr(optimizer, attribute)
    if key in _WRAPPED:
        value = _unwrapped(value, key, cls.name)
    return value


def _unwrapped(value, key, name):
    if hasattr(value, "numpy"):
        # made a float32 tensor at the first step (what the kernel computes with)
        value = live.shortest_float32(value.numpy())
    if isinstance(value, (list, tuple)) and len(value) == 1:
        value = value[0]
    if not (isinstance(value, (list, tuple)) and len(value) == 2):
        raise ValueError(f"{live.CALLER}: cannot read {name}'s {key} from {value!r}")
    return tuple(float(x) for x in value)


# -- parameters and groups ---------------------------------------------------------------

def _parameters(optimizer):
    """[(group index or None, group dict or None, parameter)] in order."""
    groups = optimizer._param_groups
    if groups and isinstance(groups[0], dict):
        return [(i, g, p) for i, g in enumerate(groups) for p in g["params"]]
    return [(None, None, p) for p in (optimizer._parameter_list or [])]


def _rules(optimizer, cls, spec, decay_functions, given):
    defaults = getattr(optimizer, "_default_dict", {}) or {}
    handled = {"params", "learning_rate", "weight_decay", "regularization_method",
               "regularization_coeff", cls.decay_keyword, *decay_functions}
    checked = set()
    by_changes: dict[tuple, list[str]] = {}
    for index, group, p in _parameters(optimizer):
        where = f"parameter {p.name!r}" if group is None else \
            f"parameter group {index} (parameter {p.name!r})"
        if group is not None and index not in checked:
            checked.add(index)
            for key, value in group.items():
                if key not in handled and key in defaults and value != defaults[key]:
                    raise live.not_a_rule(f"parameter group {index}", key, value,
                                          defaults[key])
        changes = {}
        scale = float(p.optimize_attr.get("learning_rate", 1.0))
        if scale != 1.0:
            changes["lr_scale"] = scale
        decay = _decay(optimizer, cls, spec, group, p, decay_functions, where)
        if decay is not None and decay != spec.weight_decay:
            changes["weight_decay"] = decay
        if spec.grad_clip is not None and getattr(p, "need_clip", True) is False:
            changes["exclude_from"] = ("grad_clip",)
        if changes:
            name = live.name_of(p, given, lambda q: q.name, where)
            by_changes.setdefault(tuple(sorted(changes.items())), []).append(name)
    return [live.rule(names, **dict(changes)) for changes, names in by_changes.items()]


def _excluded_by_given_names(optimizer, spec, arguments, given, notes):
    """LarsMomentumOptimizer excludes parameters whose Paddle name contains one of
    ``exclude_from_weight_decay``; under other names (``names=``) the spec names them."""
    strings = arguments["exclude_from_weight_decay"]
    excluded = [live.name_of(p, given, lambda q: q.name, "the optimizer")
                for _, _, p in _parameters(optimizer) if any(s in p.name for s in strings)]
    notes.append(f"exclude_from_weight_decay={list(strings)!r} matches Paddle's own names; "
                 f"under the names given the spec names the parameters it excludes, "
                 f"{excluded}")
    return spec.replace(no_decay_names=tuple(live.escaped(n) for n in excluded))


def _decay(optimizer, cls, spec, group, p, decay_functions, where):
    """The weight decay parameter ``p`` runs with (None: the spec's)."""
    from paddle.regularizer import L2Decay

    own = getattr(p, "regularizer", None)
    if cls.name == "paddle.optimizer.Momentum":
        # Momentum fuses an L2Decay into its kernel: the parameter's own first, else the
        # group's (or the optimizer's) regularization_coeff
        if isinstance(own, L2Decay):
            return float(own._coeff)
        if own is not None:
            raise ValueError(f"{live.CALLER}: {where} has the regularizer {own!r}: only "
                             "L2Decay is a weight decay a spec expresses")
        if group is None:
            return None
        return float(group["regularization_coeff"]) \
            if group.get("regularization_method") == "l2_decay" else 0.0
    if cls.name == "paddle.optimizer.AdamW" or cls.decay_keyword != "weight_decay":
        # AdamW, Lamb, LARS: their own decay; a parameter's regularizer adds L2 beside it
        if own is not None:
            raise ValueError(f"{live.CALLER}: {where} carries the regularizer {own!r} (from "
                             "a ParamAttr, or a parameter group of an earlier optimizer "
                             f"over it: Paddle leaves it on the parameter), which {cls.name} "
                             "adds as an L2 term beside its own decay: no spec expresses "
                             "both")
        keyword = cls.decay_keyword
        decay = None
        if group is not None and keyword in group:
            decay = float(group[keyword])
        fn = decay_functions.get("apply_decay_param_fun")
        if fn is not None and not fn(p.name):
            decay = 0.0
        fn = decay_functions.get("exclude_from_weight_decay_fn")
        if fn is not None and fn(p):
            decay = 0.0
        return decay
    if own is None:
        return None
    if not isinstance(own, L2Decay):
        raise ValueError(f"{live.CALLER}: {where} has the regularizer {own!r}: only L2Decay "
                         "is a weight decay a spec expresses")
    return float(own._coeff)


# -- schedulers -----------------------------------------------------------------------------

def _scheduler_name(s) -> str:
    import paddle.optimizer.lr as lr

    klass = type(s)
    if getattr(lr, klass.__name__, None) is klass:
        return f"{NS}.{klass.__name__}"
    parents = [k.__name__ for k in klass.__mro__[1:]
               if getattr(lr, k.__name__, None) is k and k.__name__ != "LRScheduler"]
    if parents:
        raise ValueError(f"{live.CALLER}: learning_rate of type {live.qualified(klass)} is a "
                         f"subclass of {NS}.{parents[0]}, not that class: its lrs may differ, "
                         "so it is not read as it")
    raise ValueError(f"{live.CALLER}: learning_rate of type {live.qualified(klass)} is no "
                     f"{NS} scheduler with a schedule preset (uo.schedules.presets())")


def _schedule(s, sample_steps):
    """(schedule, notes) of a Paddle LRScheduler."""
    name = _scheduler_name(s)
    bare = name.rpartition(".")[2]
    if bare == "ReduceOnPlateau":
        raise ValueError(f"{live.CALLER}: learning_rate {name} cannot be read as a schedule: "
                         + uo_schedules.refusal(name))
    if bare in _FUNCTIONS:
        if sample_steps is None:
            raise live.lambda_refused(name, "lr_lambda", s.lr_lambda)
        lrs = [s.base_lr * s.lr_lambda(t) for t in range(sample_steps)] \
            if bare == "LambdaDecay" else _products(s, sample_steps)
        schedule, note = live.sampled([float(x) for x in lrs], name)
        return schedule, [note]
    if bare == "OneCycleLR":
        return _one_cycle(s), []
    if bare == "CyclicLR":
        return _cyclic(s), []
    notes: list[str] = []
    arguments = {}
    for key in REGISTRY.signature(name).parameters:
        if key in ("last_epoch", "verbose"):
            continue
        # LinearWarmup keeps the wrapped lr as learning_rate (its base_lr is start_lr)
        attribute = key if bare == "LinearWarmup" else _SCHEDULER_ATTRIBUTES.get(key, key)
        value = getattr(s, attribute)
        if bare == "LinearWarmup" and key == "learning_rate" and not isinstance(value,
                                                                                float):
            value, inner = _schedule(value, sample_steps)
            notes += inner
        arguments[key] = value
    return uo_schedules.preset(name, **arguments), notes


def _products(s, steps):
    lrs = [s.base_lr]
    for t in range(1, steps):
        lrs.append(lrs[-1] * s.lr_lambda(t))
    return lrs


def _one_cycle(s):
    ends = s._step_config
    three = len(s._lr_config) == 4
    total = s.total_steps
    estimate = (ends[1] + 1) / total
    pct = estimate
    for digits in range(1, 18):
        p = round(estimate, digits)
        if p * total - 1 == ends[1] and (not three or 2 * p * total - 2 == ends[2]):
            pct = p
            break
    anneal = "cos" if s.anneal_func.__func__ is type(s)._cos_annealing else "linear"
    return OneCycle(max_lr=s._lr_config[1], total_steps=total, start_lr=s._lr_config[0],
                    end_lr=s._lr_config[-1], pct_start=pct, anneal=anneal, three_phase=three)


def _cyclic(s):
    up = round(s.cycle_size * s.step_up_pct)
    down = round(s.cycle_size) - up
    if up / (up + down) != s.step_up_pct:
        raise ValueError(f"{live.CALLER}: {NS}.CyclicLR's step sizes cannot be read back from "
                         f"cycle_size={s.cycle_size!r}, step_up_pct={s.step_up_pct!r}")
    custom = getattr(s.scale_fn, "__self__", None) is not s
    return Cyclic(base_lr=s.base_lr, max_lr=s.max_lr, step_size_up=up,
                  step_size_down=None if down == up else down,
                  mode=s.mode if s.mode in ("triangular", "triangular2", "exp_range")
                  else "triangular",
                  gamma=s.gamma, scale_fn=s.scale_fn if custom else None,
                  scale_mode=s.scale_mode if custom else None)
