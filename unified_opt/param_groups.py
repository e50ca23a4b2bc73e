"""``param_groups`` on every optimizer ``uo.build`` makes, and torch-style group dicts.

torch's optimizers keep their hyperparameters in ``optimizer.param_groups``, a list of
dicts, and read them at every step: a scheduler or a hand-written loop
(``for g in opt.param_groups: g["lr"] = lr``) changes the next step. The optimizers
``uo.build`` returns keep that surface on torch, Paddle and MindSpore, on the native
classes and on the own path:

* each group is a dict with ``"params"``, ``"lr"`` (the lr of the next step) and the
  spec's hyperparameters under the spec's field names (``weight_decay``, ``betas``,
  ``eps``, ``momentum``, ...): every field but the lr and those that are one per
  optimizer (:data:`PER_OPTIMIZER`: the gradient pre-step, the state dtype, the name
  rules);
* the groups are the parameters that share a plan (:mod:`unified_opt.groups`): one per
  ``uo.Group`` rule or group dict, one for the rest, split further where a spec's own
  name rule (``no_decay_names``) gives some parameters another weight decay;
* a value written into a group is read at the next step. The own path runs the step of
  the spec with the written values (``spec.replace``, validated as the spec's
  constructor validates, the error naming ``param_groups[g][key]``); a value that
  would change the state's layout (``amsgrad``, a factored moment's options) is refused.
  A native class reads its hyperparameters when it is built: there only ``lr`` may be
  written, and any other change is refused, naming the key and ``path="own"``, whose
  step reads them all;
* other keys (a scheduler's ``initial_lr``, a user's own bookkeeping such as timm's and
  MAE's ``lr_scale``) are kept and not read, as torch keeps them; a key torch's
  optimizers read that the spec does not have (:data:`TORCH_HYPERPARAMETERS`, e.g.
  ``momentum`` on Adam) is refused, since a script writing it expects an effect, and so
  is a near miss of a key a step reads (``weight_decya``: :func:`unread_key`).

The lr has two writers on Paddle and MindSpore: the framework's own (Paddle's
``set_lr`` and ``LRScheduler``, MindSpore's ``learning_rate`` and the spec's schedule)
and the groups. At each step the one that changed since the last step is used; when
both changed, the step is refused (:meth:`GroupSurface.lrs`).

``uo.build(spec, [{"params": [...], "lr": 0.1, "weight_decay": 0.0}, ...])`` takes
group dicts of any framework's parameters (:func:`plans_of_group_dicts`): torch's keys
(an absolute ``lr``, any of the spec's hyperparameters) and Paddle's
``learning_rate`` (a factor on the optimizer's lr, as Paddle's groups take it); each
dict is one param group of its own, in order, and keeps the caller's other keys
(:func:`group_dict_extras`, :func:`carry_extras`). torch
and Paddle take the same dict in ``add_param_group`` after the build
(:func:`added_group`), on the own paths and on the native classes (in the class's own
group form, the class's conditions checked again over every parameter:
:mod:`unified_opt.native_groups`; what it cannot take is refused naming
``path='own'``); so does MindSpore in PyNative mode, on the own path (new state
Parameters; a parameter added later counts its own steps) and the
``experimental.optim`` classes (before the first step where the class shares one step
counter), its ``nn`` classes refusing it naming ``path='own'``
(``backends/mindspore/added_groups.py``, ``added_native.py``).

``uo.save_state`` writes what the groups hold
(:mod:`unified_opt.porting.saved_groups`): group dicts as ``uo.Group`` rules over the
parameters' names, and each group's live lr, the spec hyperparameters written into it
after the build (a scheduler's momentum cycling) and its scheduler bookkeeping beside
the build's spec (set back on loading, as writes into the groups); a written value
that changes the state's layout is refused, since the file would resume another run.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
from typing import Any, Callable, Mapping, Sequence

from . import _validation as v
from .groups import NAME_RULES, ParameterPlan, _check_name_rules
from .schedules import Schedule
from .spec import layout_names, state_layout

#: spec fields that are one per optimizer, not per group: the gradient pre-step (a
#: global-norm clip spans every group), the state dtype and the name rules
PER_OPTIMIZER = ("grad_clip", "loss_scale", "skip_nonfinite", "grad_centralization",
                 "state_dtype", *NAME_RULES)

#: hyperparameter names of torch's optimizers: written into a group of a spec without
#: that field, the value would not be read (see the module)
TORCH_HYPERPARAMETERS = frozenset({
    "weight_decay", "momentum", "dampening", "nesterov", "betas", "eps", "amsgrad",
    "maximize", "foreach", "fused", "capturable", "differentiable", "decoupled_weight_decay",
    "momentum_decay", "lr_decay", "initial_accumulator_value", "rho", "alpha", "centered",
    "lambd", "t0", "etas", "step_sizes", "beta1", "beta2", "beta3", "eps2", "d",
    "clip_threshold", "scale_parameter", "relative_step", "warmup_init"})

#: Paddle's group key: a factor on the optimizer's lr
PADDLE_LR_FACTOR = "learning_rate"

#: keys torch's schedulers keep in a param group (every scheduler's ``initial_lr``,
#: OneCycleLR's, SWALR's): read by them, never by a step, and no near miss of one
SCHEDULER_KEYS = frozenset({"initial_lr", "max_lr", "min_lr", "max_momentum",
                            "base_momentum", "swa_lr"})


def unread_key(key: Any, spec, exposed: Mapping[str, Any] | set) -> str | None:
    """Why a group key no step of ``spec`` reads is refused, or None where it is kept
    unread (a key of the caller's own, as torch keeps them). Refused: a key torch's
    optimizers read (:data:`TORCH_HYPERPARAMETERS`: a script setting it expects an
    effect) and a near miss of a key a step reads (``weight_decya``: a misspelt write
    would do nothing)."""
    if key in TORCH_HYPERPARAMETERS:
        return (f"{type(spec).__name__} has no {key!r}; its hyperparameters are "
                f"{sorted(exposed)}")
    if not isinstance(key, str) or key in SCHEDULER_KEYS:
        return None
    near = _near_miss(key, frozenset(exposed))
    if near is None:
        return None
    return (f"no step reads {key!r}; is it {near!r} misspelt? ({type(spec).__name__}'s "
            f"hyperparameters are {sorted(exposed)})")


@functools.lru_cache(maxsize=1024)
def _near_miss(key: str, exposed: frozenset) -> str | None:
    """The key a step reads that ``key`` is a near miss of (difflib's ratio 0.85 or
    more), else None; cached: torch's own-path optimizer checks every key of every
    group at each step."""
    read = sorted({*exposed, *TORCH_HYPERPARAMETERS, "lr", "params", PADDLE_LR_FACTOR})
    near = difflib.get_close_matches(key, read, n=1, cutoff=0.85)
    return near[0] if near else None


def group_hyperparameters(spec) -> dict[str, Any]:
    """The spec's values a param group holds (see the module), by field name; a field
    holding a schedule (a weight-decay schedule) is the spec's to set at every step, and
    is not held."""
    return {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)
            if f.name != "lr" and f.name not in PER_OPTIMIZER
            and not isinstance(getattr(spec, f.name), Schedule)}


def partition(keys: Sequence) -> list[list[int]]:
    """Indices of equal keys, grouped in order of first appearance (keys need only
    ``==``: specs and schedules are compared, not hashed)."""
    parts: list[tuple[object, list[int]]] = []
    for i, key in enumerate(keys):
        for seen, indices in parts:
            if seen == key:
                indices.append(i)
                break
        else:
            parts.append((key, [i]))
    return [indices for _, indices in parts]


def partition_plans(plans: Sequence[ParameterPlan]) -> list[list[int]]:
    """Indices of the parameters of each param group: equal plan spec, lr factor and
    fixed lr, and the same group (a ``uo.Group`` rule, a group dict:
    ``ParameterPlan.group``), in order of first appearance."""
    return partition([(plan.spec, plan.lr_scale, plan.fixed_lr, plan.group)
                      for plan in plans])


# -- group dicts given to uo.build ---------------------------------------------------

def is_group_dicts(params: Any) -> bool:
    """Whether ``params`` is a list or tuple of group dicts (torch's and Paddle's form)."""
    return (isinstance(params, (list, tuple)) and bool(params)
            and all(isinstance(g, Mapping) for g in params))


def flatten_group_dicts(groups: Sequence[Mapping], caller: str) -> list[list]:
    """Each group's parameters (its ``"params"``: a list, a tuple, a generator or a
    single parameter), checked to be given."""
    members = []
    for g, group in enumerate(groups):
        if "params" not in group:
            raise ValueError(f"{caller}: params[{g}] is a group dict without 'params' "
                             f"(keys: {sorted(group, key=str)})")
        items = group["params"]
        if isinstance(items, (str, bytes, Mapping)):
            raise TypeError(f"{caller}: params[{g}]['params'] must be parameters, got "
                            f"{type(items).__name__}")
        items = list(items) if hasattr(items, "__iter__") and not hasattr(items, "shape") \
            else [items]
        if not items:
            raise ValueError(f"{caller}: params[{g}]['params'] is empty")
        members.append(items)
    return members


def plans_of_group_dicts(spec, groups: Sequence[Mapping],
                         names: Sequence[Sequence[str | None]],
                         caller: str = "build", first: int = 0,
                         name_rules: bool = True) -> list[ParameterPlan]:
    """One plan per parameter of the group dicts ``groups`` (``names``: each group's
    parameter names, for the spec's own name rules), in order.

    A group's keys: ``params``; ``lr`` (an absolute lr: only with a constant spec lr);
    ``learning_rate`` (Paddle's factor on the optimizer's lr); any of the spec's
    hyperparameters (:func:`group_hyperparameters`), validated as the spec validates
    them. A group that sets ``weight_decay`` replaces the spec's ``no_decay_names`` for
    its parameters, as a ``uo.Group`` does. Other keys: kept unread at the build
    (:func:`group_dict_extras`), except those :func:`unread_key` refuses; refused in
    ``add_param_group``; a refusal is a ValueError naming the key.
    ``first``: the plans' group index of the first dict (``add_param_group``: after the
    build's groups); ``name_rules``: check that the spec's own name rules match a
    parameter (a group added later need not hold one)."""
    allowed = set(group_hyperparameters(spec))
    plans = []
    for g, (group, group_names) in enumerate(zip(groups, names)):
        where = f"params[{g}]" if caller == "build" else "param_group"
        _extras(spec, group, allowed, caller, where, keep=caller == "build")   # refusals
        if "lr" in group and PADDLE_LR_FACTOR in group:
            raise ValueError(f"{caller}: {where} gives both 'lr' (torch's absolute lr) and "
                             f"'{PADDLE_LR_FACTOR}' (Paddle's factor); give one")
        fixed_lr = scale = None
        if "lr" in group:
            if isinstance(spec.lr, Schedule):
                raise ValueError(f"{caller}: {where} sets lr={group['lr']!r}, but the spec's "
                                 "lr is a schedule; give the group a factor "
                                 f"('{PADDLE_LR_FACTOR}': ...) or drive every group's lr "
                                 "with uo.lr_scheduler")
            fixed_lr = v.check_range(caller, f"{where}['lr']", group["lr"], low=0.0)
        if PADDLE_LR_FACTOR in group:
            scale = v.check_range(caller, f"{where}['{PADDLE_LR_FACTOR}']",
                                  group[PADDLE_LR_FACTOR], low=0.0)
        changes = {k: group[k] for k in group if k in allowed}
        if "weight_decay" in changes and hasattr(spec, "no_decay_names"):
            changes["no_decay_names"] = ()
        group_spec = replaced(spec, changes, caller, where) if changes else spec
        for name in group_names:
            plans.append(ParameterPlan(name, group_spec.for_parameter(name),
                                       1.0 if scale is None else scale, fixed_lr, first + g))
    if name_rules:
        _check_name_rules(spec, [n for group_names in names for n in group_names], caller)
    return plans


def _extras(spec, group: Mapping, allowed: set, caller: str, where: str, keep: bool):
    """The keys of a group dict that no step reads, as ``(key, value)`` pairs; refused
    (ValueError naming them) where :func:`unread_key` says so, or where they cannot be
    kept (``keep`` False: ``add_param_group``, whose groups hold what the step reads)."""
    unknown = sorted(set(group) - allowed - {"params", "lr", PADDLE_LR_FACTOR}, key=str)
    for key in unknown:
        reason = unread_key(key, spec, allowed)
        if reason is None and not keep:
            reason = (f"{type(spec).__name__} has no field for it, and a group added "
                      "later keeps no keys of its own (give them in the build's group "
                      "dicts)")
        if reason is not None:
            raise ValueError(f"{caller}: {where}[{key!r}] would not be read: {reason}; a "
                             f"group may hold 'params', 'lr', '{PADDLE_LR_FACTOR}' "
                             f"(Paddle's lr factor) and {sorted(allowed)}")
    return [(key, group[key]) for key in unknown]


def group_dict_extras(spec, groups: Sequence[Mapping]) -> dict[int, dict]:
    """The caller's own keys of each group dict given to ``uo.build`` (timm's and MAE's
    ``lr_scale``, a name), by the dict's index: kept in its param group, unread
    (:func:`carry_extras`), as torch keeps them."""
    allowed = set(group_hyperparameters(spec))
    out = {}
    for g, group in enumerate(groups):
        extras = dict(_extras(spec, group, allowed, "build", f"params[{g}]", keep=True))
        if extras:
            out[g] = extras
    return out


def carry_extras(param_groups: Sequence, params: Sequence, plans: Sequence[ParameterPlan],
                 extras: Mapping[int, Mapping]) -> None:
    """Each group dict's own keys (:func:`group_dict_extras`) into the param groups made
    of its parameters (each dict's parameters are groups of their own), as torch keeps
    them: set as a dict sets them, not as writes the step would check."""
    if not extras:
        return
    plan_of = {id(p): plan for p, plan in zip(params, plans)}
    for group in param_groups:
        members = dict.get(group, "params") or []
        plan = plan_of.get(id(members[0])) if members else None
        if plan is not None and plan.group is not None and plan.group in extras:
            for key, value in extras[plan.group].items():
                dict.__setitem__(group, key, value)


def added_group(record: Any, group: Any, owner: str, framework: str,
                name_of: Callable[[Any], str | None],
                exchanges: bool = False) -> tuple[list, list, list]:
    """``(names, params, plans)`` of the group dict ``group`` given to
    ``add_param_group`` of the optimizer ``record`` describes, and ``record`` extended
    with them (so ``uo.save_state`` writes them: names are needed there). Refused, a
    TypeError or ValueError naming the reason, before anything changes: an optimizer
    that ``exchanges`` gradients over ranks (its exchange holds the build's parameters),
    not a dict,
    parameters of another framework or already held, a key the spec has no field for, a
    scheduled lr (the scheduler ``uo.build`` made drives the groups it was made with)."""
    from .backend import check_parameters
    from .parameters import named_parameters

    caller = f"{owner}.add_param_group"
    if exchanges:
        raise ValueError(f"{caller}: a data-parallel optimizer's exchange holds the "
                         "parameters it was built with; build a new one with every "
                         "parameter")
    if not isinstance(group, Mapping):
        raise TypeError(f"{caller}: param_group must be a dict, got {type(group).__name__}")
    if record.lr_scheduler is not None:
        raise ValueError(f"{caller}: the spec's lr is a schedule, and the scheduler uo.build "
                         "made drives the groups it was made with; build with every "
                         "parameter, or drive the lr with uo.lr_scheduler over a constant "
                         "spec lr")
    named = named_parameters(flatten_group_dicts([group], caller)[0], caller)
    found = check_parameters(named, caller)
    if found != framework:
        raise TypeError(f"{caller}: the parameters are {found} objects; this optimizer "
                        f"holds {framework} parameters")
    held = {id(p) for p in record.params}
    again = [n or f"params[{k}]" for k, (n, p) in enumerate(named) if id(p) in held]
    if again or len({id(p) for _, p in named}) != len(named):
        raise ValueError(f"{caller}: {again or 'a parameter given twice'} already in the "
                         "optimizer: a parameter belongs to one group")
    names = [n if n is not None else name_of(p) for n, p in named]
    known = [n for n in record.names if n is not None]
    clash = sorted(set(known) & {n for n in names if n is not None})
    if clash:
        raise ValueError(f"{caller}: parameter names {clash} are the names of parameters "
                         "the optimizer holds")
    index = 1 + max([len(record.groups) - 1, *record.dict_groups,
                     *(plan.group for plan in record.plans if plan.group is not None)])
    plans = plans_of_group_dicts(record.spec, [group], [names], caller, first=index,
                                 name_rules=False)
    params = [p for _, p in named]
    record.params = [*record.params, *params]
    record.names = [*record.names, *names]
    record.plans = [*(record.plans or []), *plans]
    record.dict_groups = (*record.dict_groups, index)
    return names, params, plans


def with_writes(base, written: Mapping[str, Any], params: Sequence, caller: str,
                where: str):
    """``(spec, before, after)``: ``base`` with the values ``written`` into a group of
    ``params`` (a written ``weight_decay`` replaces the spec's ``no_decay_names``, as a
    group dict's does), validated as the spec validates them (the error naming
    ``where``), and the state layouts (:func:`~unified_opt.spec.state_layout`) of
    ``base`` and of it over the parameters' shapes: a write that changes the layout
    cannot be stepped on the state held."""
    changes = dict(written)
    if "weight_decay" in changes and hasattr(base, "no_decay_names"):
        changes["no_decay_names"] = ()
    spec = replaced(base, changes, caller, where)
    shapes = [tuple(p.shape) for p in params]
    return spec, state_layout(base, shapes), state_layout(spec, shapes)


def replaced(spec, changes: Mapping[str, Any], caller: str, where: str):
    """``spec.replace(**changes)``, its validation error naming ``where``."""
    try:
        return spec.replace(**changes)
    except (TypeError, ValueError) as error:
        raise type(error)(f"{caller}: {where}: {error}") from None


# -- the surface of a built optimizer ----------------------------------------------------

class ParamGroup(dict):
    """One param group of an optimizer ``uo.build`` made on Paddle or MindSpore: a dict
    (torch's form) whose writes are checked when they are made (:meth:`GroupSurface.
    check_write`), so a value the step could not honour raises at the write, before any
    step runs."""

    def __init__(self, data: Mapping, check: Callable[[str, Any], None],
                 refresh: Callable[[], None] = lambda: None):
        super().__init__(data)
        self._check = check
        self._refresh = refresh

    def __getitem__(self, key):
        if key == "lr":         # the lr of the next step: the framework's may have moved
            self._refresh()
        return super().__getitem__(key)

    def get(self, key, default=None):
        return self[key] if key in self else default

    def __setitem__(self, key, value) -> None:
        self._check(key, value)
        super().__setitem__(key, value)

    def update(self, *args, **kwargs) -> None:     # dict.update would skip the check
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return dict.__getitem__(self, key)

    def __delitem__(self, key) -> None:
        self._check(key, _DELETED)
        super().__delitem__(key)

    def pop(self, key, *default):
        if key in self:
            self._check(key, _DELETED)
        return super().pop(key, *default)

    def __reduce__(self):                          # copies are plain dicts
        return (dict, (dict(self),))


_DELETED = object()


class GroupSurface:
    """The ``param_groups`` of one optimizer and what its step reads from them.

    ``plans``: one per parameter; ``params``: the parameters; ``lr``: the optimizer's
    lr at build (before group factors); ``native``: the native class's qualified name,
    None on the own path (a native class may vary the lr only); ``checked``: make the
    groups :class:`ParamGroup` (writes checked when made) rather than plain dicts."""

    def __init__(self, owner: str, plans: Sequence[ParameterPlan], params: Sequence,
                 lr: float, native: str | None = None, checked: bool = True,
                 on_write: Callable[[int, str, Any], None] | None = None):
        self.owner = owner
        self.native = native
        #: called with each write :meth:`check_write` accepted, before it is made: a
        #: framework that must carry it elsewhere (MindSpore's lr Parameter) does so, or
        #: refuses it
        self.on_write = on_write
        self.members = partition_plans(plans)
        self.plans = [plans[indices[0]] for indices in self.members]
        self.group_of = [0] * len(plans)
        for g, indices in enumerate(self.members):
            for i in indices:
                self.group_of[i] = g
        self.exposed = [group_hyperparameters(plan.spec) for plan in self.plans]
        self.groups: list[dict] = []
        for g, (indices, plan) in enumerate(zip(self.members, self.plans)):
            data = {"params": [params[i] for i in indices], "lr": plan.lr(lr),
                    **self.exposed[g]}
            self.groups.append(ParamGroup(data, self._checker(g), self.refresh) if checked
                               else data)
        #: per group, the framework's lr its lr last followed, and the value it held then
        self.native_seen = [lr] * len(self.groups)
        self._lr_seen = [dict.__getitem__(group, "lr") for group in self.groups]
        self._specs: dict[int, tuple[tuple, Any]] = {}
        #: the framework's own lr now (set by a backend whose framework has one:
        #: Paddle's ``get_lr()``, MindSpore's lr of the next step), read by :meth:`refresh`
        self.native_lr: Callable[[], float] | None = None

    def add(self, plans: Sequence[ParameterPlan], params: Sequence, lr: float,
            first_index: int, append: bool = True) -> dict:
        """A group of new parameters (``add_param_group``), their indices in the
        optimizer's list from ``first_index``; its dict, appended to :attr:`groups`
        (``append=False``: the caller appends it, torch's ``add_param_group``)."""
        g = len(self.groups)
        plan = plans[0]
        if any((other.spec, other.lr_scale, other.fixed_lr) != (plan.spec, plan.lr_scale,
                                                                plan.fixed_lr)
               for other in plans[1:]):
            raise ValueError(f"{self.owner}: add_param_group: the spec's name rules give "
                             "these parameters different hyperparameters; add them as one "
                             "group each")
        self.members.append(list(range(first_index, first_index + len(plans))))
        self.plans.append(plan)
        self.group_of.extend([g] * len(plans))
        self.exposed.append(group_hyperparameters(plan.spec))
        data = {"params": list(params), "lr": plan.lr(lr), **self.exposed[g]}
        group = ParamGroup(data, self._checker(g), self.refresh) \
            if isinstance(self.groups[0], ParamGroup) else data
        if append:
            self.groups.append(group)
        self._lr_seen.append(data["lr"])
        self.native_seen.append(lr)
        return group

    def defaults(self, spec) -> dict[str, Any]:
        """``optimizer.defaults``: the spec's lr (a schedule's first value) and
        hyperparameters, as torch's optimizers hold their constructor's."""
        return {"lr": spec.lr_at(0), **group_hyperparameters(spec)}

    def _checker(self, g: int) -> Callable[[str, Any], None]:
        return lambda key, value: self.check_write(g, key, value)

    # -- writes -----------------------------------------------------------------------
    def check_write(self, g: int, key: Any, value: Any) -> None:
        """Refuse a write the step could not honour (see the module), naming it."""
        where = f"param_groups[{g}][{key!r}]"
        if key == "params":
            raise ValueError(f"{self.owner}: {where} cannot be replaced or removed: each "
                             "parameter's state and plan are made when the optimizer is "
                             "built")
        if value is _DELETED:
            if key == "lr" or key in self.exposed[g]:
                raise ValueError(f"{self.owner}: {where} cannot be removed: the step reads it")
            return
        if key == "lr":
            value = v.check_range(self.owner, where, value, low=0.0)
            if self.on_write is not None:
                self.on_write(g, key, value)
            return
        if key in self.exposed[g]:
            if self.native is not None and differs(value, self.exposed[g][key]):
                raise ValueError(self._native_refusal(where, value))
            if self.native is None:
                self._step_spec(g, {**self.written_values(g), key: value})
                if self.on_write is not None and differs(value, self.exposed[g][key]):
                    self.on_write(g, key, value)
            return
        if isinstance(getattr(self.plans[g].spec, key, None), Schedule):
            raise ValueError(f"{self.owner}: {where} = {value!r}: the spec's {key} is a "
                             "schedule, which sets it at every step")
        reason = (f"{type(self.plans[g].spec).__name__} has no {key!r}; its "
                  f"hyperparameters are {sorted(self.exposed[g])}"
                  if key == PADDLE_LR_FACTOR else
                  unread_key(key, self.plans[g].spec, self.exposed[g]))
        if reason is not None:
            raise ValueError(f"{self.owner}: {where} = {value!r} would not be read: {reason}")

    def _native_refusal(self, where: str, value: Any) -> str:
        return (f"{self.owner}: {where} = {value!r}: {self.native} reads its "
                "hyperparameters when it is built, so a value written into param_groups "
                "later would not be used; build the own path, whose step reads every "
                "group value: uo.build(spec, params, path='own')")

    def written_values(self, g: int) -> dict[str, Any]:
        group, exposed = self.groups[g], self.exposed[g]
        return {k: group[k] for k in exposed if k in group and differs(group[k], exposed[k])}

    # -- what a step reads ------------------------------------------------------------
    def check_groups(self) -> None:
        """At the step (plain dicts, e.g. torch's, are checked only here): every group
        still holds its keys, and a native class's hyperparameters are unchanged."""
        if len(self.groups) != len(self.plans):
            raise ValueError(f"{self.owner}: param_groups[{len(self.plans)}] was not made by "
                             "uo.build or the optimizer's add_param_group (a framework "
                             "base class's method called past it?): its parameters have no "
                             "plan or state here")
        for g, group in enumerate(self.groups):
            missing = sorted(k for k in ("params", "lr", *self.exposed[g]) if k not in group)
            if missing:
                raise ValueError(f"{self.owner}: param_groups[{g}] lost {missing}; the step "
                                 "reads them")
            v.check_range(self.owner, f"param_groups[{g}]['lr']", group["lr"], low=0.0)
            for key, value in self.written_values(g).items():
                self.check_write(g, key, value)
            for key in [k for k in group if k not in ("params", "lr", *self.exposed[g])]:
                self.check_write(g, key, group[key])

    def step_spec(self, g: int):
        """The plan spec of group ``g`` with the values written into its dict."""
        return self._step_spec(g, self.written_values(g))

    def _step_spec(self, g: int, written: Mapping[str, Any]):
        base = self.plans[g].spec
        if not written:
            return base
        key = tuple(sorted(written.items(), key=lambda kv: kv[0]))
        cached = self._specs.get(g)
        if cached is not None and cached[0] == key:
            return cached[1]
        spec, before, after = with_writes(base, written,
                                          dict.__getitem__(self.groups[g], "params"),
                                          self.owner, f"param_groups[{g}]")
        if after != before:
            raise ValueError(f"{self.owner}: param_groups[{g}] = {dict(written)!r} changes "
                             f"the state {type(base).__name__} keeps "
                             f"({layout_names(before)} -> {layout_names(after)}); "
                             "build a new optimizer for that")
        self._specs[g] = (key, spec)
        return spec

    def follow_native(self, native_lr: float) -> None:
        """The framework's own lr is now ``native_lr`` because a group's write was
        carried there (not a change of its own)."""
        self.native_seen = [native_lr] * len(self.groups)

    def mark_carried(self, g: int, lr: float) -> None:
        """Group ``g``'s lr write was carried into the framework's lr: the group holds
        the framework's lr again (a later change of either is the one to follow)."""
        self._lr_seen[g] = lr

    def _sync(self, g: int, native_lr: float, refuse: bool) -> None:
        """Group ``g`` follows the framework's lr where it changed and the group's was
        not written since; both: refused (``refuse``) or left to the step."""
        group = self.groups[g]
        if not differs(native_lr, self.native_seen[g]):
            return
        if differs(dict.__getitem__(group, "lr"), self._lr_seen[g]):
            if refuse:
                raise ValueError(
                    f"{self.owner}: param_groups[{g}]['lr'] was set to "
                    f"{dict.__getitem__(group, 'lr')!r} and the optimizer's own lr changed "
                    f"to {native_lr!r} since the last step (its lr scheduler, set_lr, or "
                    "the spec's lr schedule); one of them must drive the lr: a scheduled "
                    "spec lr or a framework scheduler, or writes into param_groups "
                    "(uo.lr_scheduler) with a constant spec lr")
            return
        value = self.plans[g].lr(native_lr)
        dict.__setitem__(group, "lr", value)
        self._lr_seen[g] = value
        self.native_seen[g] = native_lr

    def refresh(self) -> None:
        """Before a group's lr is read: the groups follow a change of the framework's
        own lr (a Paddle scheduler stepped, ``set_lr``) that the next step will take. A
        framework lr that cannot be read now (MindSpore past ``total_steps``) leaves the
        groups as they are: the step says why."""
        if self.native_lr is None:
            return
        try:
            native = self.native_lr()
        except (RuntimeError, ValueError):
            return
        for g in range(len(self.groups)):
            self._sync(g, native, refuse=False)

    def lrs(self, native_lr: float) -> list[float]:
        """Each group's lr for the step about to run, with the framework's own lr now
        ``native_lr`` (before group factors). Where the framework's lr changed since a
        group last followed it, the group follows it (its factor applied; the value is
        written into the group); else the group's value is used. Both changed: a
        ValueError (two writers of one lr), before anything changes."""
        for g in range(len(self.groups)):
            self._sync(g, native_lr, refuse=True)
        self._lr_seen = [dict.__getitem__(group, "lr") for group in self.groups]
        self.native_seen = [native_lr] * len(self.groups)
        return list(self._lr_seen)


def differs(a: Any, b: Any) -> bool:
    """``a != b`` as one bool; values whose comparison has no single truth value (an
    array) differ unless they are the same object."""
    try:
        return bool(a != b)
    except (TypeError, ValueError):     # an array compared elementwise
        return a is not b
