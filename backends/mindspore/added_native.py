"""``add_param_group`` on the native MindSpore classes ``uo.build`` returns.

* ``mindspore.experimental.optim`` classes (torch's form: ``param_groups``, each group a
  run of consecutive parameters, ``group_start_id``): MindSpore 2.10's own
  ``Optimizer.add_param_group`` extends ``parameters``, ``param_groups``, ``lrs`` and
  ``group_start_id``, but makes no per-parameter state (``exp_avg``, ``accum``,
  ``stat``, ``mu_product``, ...): those are made by each class's ``__init__``
  (``parameters.clone(prefix=..., init=...)``). :func:`add_experimental` therefore
  makes them with the class itself, a new instance over the group's parameters with
  the group's native arguments, and appends each of its per-parameter state
  ParameterTuples (and plain lists) to the optimizer's, so every new parameter starts
  from the state the class gives a parameter it is built with, as torch's classes do.
  Their step counters (``state_step``, ``step_t``) are one per optimizer, read by every
  parameter's bias correction: a parameter added after a step would take step k+1 where
  torch's per-parameter count takes 1, so a class holding a counter takes a group only
  before its first step; one without (SGD, Adadelta, RMSprop) takes it at any step, in
  PyNative (GRAPH_MODE is refused). A train step made before the add passes the old
  parameters' gradients, which the call's check refuses naming the fix; but an
  ``@ms.jit`` step compiled before the add runs the graph it compiled, which no Python
  sees, and these classes keep no step count to tell that it ran: make such a step
  again after the add (the own path refuses the add once a compiled graph stepped it).
* ``mindspore.nn`` classes have no ``add_param_group``: their groups (``group_lr``,
  ``decay_flags``, ``order_params``), state ParameterTuples and kernels are fixed when
  they are built, and their bias-correction state (``beta1_power``, ``global_step``) is
  one per optimizer, so no added parameter could count its own steps;
  :func:`refuse_nn` refuses, naming the own path, whose ``add_param_group`` takes it.
"""

from __future__ import annotations

import mindspore as ms
import numpy as np
from mindspore import Parameter, ParameterTuple

#: the per-optimizer step counters of the experimental classes (see the module)
COUNTERS = ("state_step", "step_t")


def refuse_nn(optimizer, native: str):
    """An ``add_param_group`` for a ``mindspore.nn`` class that refuses (see the
    module)."""
    def add_param_group(param_group) -> None:
        raise ValueError(
            f"{type(optimizer).__name__}.add_param_group: {native} fixes its parameter "
            "groups, state Parameters and kernels when it is built, and its step count "
            "(global_step, and the beta powers of the classes that keep them) is one per "
            "optimizer, so a parameter added later could not count its own steps as "
            "torch's optimizers do; build the "
            "own path, whose add_param_group takes the group: uo.build(spec, params, "
            "path='own'), or build with every parameter up front (uo.Group rules)")
    return add_param_group


def add_experimental(optimizer, param_group) -> None:
    """``optimizer.add_param_group(param_group)`` on an experimental class ``uo.build``
    made (see the module); refusals raised before anything changes."""
    from unified_opt.backend import record_of
    from unified_opt.param_groups import added_group

    from .native import arguments_of

    record = record_of(optimizer)
    owner = f"{type(optimizer).__name__}.add_param_group"
    native = record.decision.native
    if ms.get_context("mode") != ms.PYNATIVE_MODE:
        raise ValueError(f"{owner}: in GRAPH_MODE a train step compiled before the add "
                         "keeps the parameters it was compiled with and would step only "
                         "those, with no Python to say so; add the group in PyNative mode "
                         "(ms.set_context(mode=ms.PYNATIVE_MODE)), then make the train step")
    for attr in COUNTERS:
        counter = getattr(optimizer, attr, None)
        if isinstance(counter, Parameter) and np.any(counter.asnumpy() != 0):
            raise ValueError(
                f"{owner}: {native} counts steps in one {attr} for every parameter "
                f"({int(np.asarray(counter.asnumpy()).reshape(-1)[0])} taken), which its "
                "bias corrections read: a parameter added now would start at that step "
                "where torch's optimizers start it at 1; add the group before the first "
                "step, or build the own path, whose add_param_group counts each "
                "parameter's steps: uo.build(spec, params, path='own')")
    saved = (record.params, record.names, record.plans, record.dict_groups)
    _, params, plans = added_group(record, param_group, type(optimizer).__name__,
                                   "mindspore", lambda p: None)
    from mindspore.experimental.optim import Optimizer

    n_before = len(optimizer.parameters)
    try:
        fresh, group = _made_by_the_class(optimizer, record, params, plans, owner,
                                          arguments_of)
        per_parameter = _per_parameter_state(optimizer, fresh, n_before, len(params))
        Optimizer.add_param_group(optimizer, group)     # (it checks the group first)
    except Exception:
        record.params, record.names, record.plans, record.dict_groups = saved
        raise
    lengths = list(getattr(optimizer, "lengths_before_adds", ())) + [n_before]
    optimizer.parameters = ParameterTuple(optimizer.parameters)
    for attr, (held, made) in per_parameter.items():
        joined = list(held) + list(made)
        setattr(optimizer, attr, ParameterTuple(joined) if isinstance(held, ParameterTuple)
                else joined)
    #: the parameter counts before each add (:func:`.native.check_call` names the fix)
    optimizer.lengths_before_adds = lengths


def _made_by_the_class(optimizer, record, params, plans, owner, arguments_of):
    """A new instance of the optimizer's class over ``params`` (their state made by
    MindSpore), and MindSpore's group dict for them; every refusal first."""
    lowering = record.decision.lowering
    for p, plan in zip(params, plans):
        if not isinstance(p, Parameter) or str(p.dtype) != "Float32":
            raise TypeError(f"{owner}: {p!r} must be a float32 mindspore.Parameter (the "
                            "MindSpore backend takes float32 parameters)")
        if p.size == 0:
            raise ValueError(f"{owner}: {p.name} has no elements, which {record.decision.native} "
                             "cannot hold; build the own path: uo.build(spec, params, "
                             "path='own')")
        unmet = lowering.unmet(plan.spec)
        if unmet:
            raise ValueError(f"{owner}: {record.decision.native} cannot compute the "
                             f"group's hyperparameters exactly ({'; '.join(unmet)}); build "
                             "the own path: uo.build(spec, params, path='own')")
    first = plans[0]
    if any((plan.spec, plan.lr_scale, plan.fixed_lr) !=
           (first.spec, first.lr_scale, first.fixed_lr) for plan in plans[1:]):
        raise ValueError(f"{owner}: the spec's name rules give these parameters different "
                         "hyperparameters; add them as one group each")
    held = {p.name for _, p in optimizer.parameters_and_names()}
    names = [p.name for p in params]
    clash = sorted({n for n in names if n in held or names.count(n) > 1})
    if clash:
        raise ValueError(f"{owner}: Parameter names {clash} are already held by the "
                         "optimizer Cell or given twice; MindSpore needs unique Parameter "
                         "names in a Cell (its state is named '<state>.<Parameter.name>')")
    if record.lr_scheduler is not None or not isinstance(record.spec.lr, (int, float)):
        raise ValueError(f"{owner}: the spec's lr is a schedule, and the scheduler uo.build "
                         "made drives the groups it was made with; build with every "
                         "parameter")
    arguments = arguments_of(lowering, first.spec)
    lr = first.lr(float(record.spec.lr))
    fresh = type(optimizer)(list(params), lr=lr, **arguments)
    group = {"params": list(params), "lr": lr, **arguments}
    return fresh, group


def _per_parameter_state(optimizer, fresh, n_before: int, n_added: int) -> dict:
    """attribute -> (the optimizer's, the new instance's): each ParameterTuple or plain
    list of Parameters the class holds one per parameter (not ``parameters``)."""
    found = {}
    for attr in _state_attributes(fresh):
        made = getattr(fresh, attr)
        held = getattr(optimizer, attr, None)
        if held is None or len(made) != n_added or len(held) != n_before:
            continue
        found[attr] = (held, made)
    return found


def _state_attributes(cell) -> list[str]:
    """The instance attributes holding one Parameter per parameter: ParameterTuples and
    plain lists of Parameters (MindSpore keeps both in the instance's ``__dict__``), but
    ``parameters`` and the group lrs."""
    return [attr for attr, value in vars(cell).items()
            if attr not in ("parameters", "_parameters", "lrs")
            and isinstance(value, (ParameterTuple, list)) and value
            and all(isinstance(p, Parameter) for p in value)]
