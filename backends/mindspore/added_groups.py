"""``add_param_group`` on the own MindSpore optimizer (:class:`.optimizer.SpecOptimizer`)
after ``uo.build``, and the step counts of parameters that joined it later.

Facts relied on (MindSpore 2.10, PyNative):

* an optimizer Cell's ``parameters`` and ``spec_state_parameters`` are ParameterTuple
  attributes; assigning a longer ParameterTuple registers its new Parameters in the Cell
  (``parameters_and_names``, ``ms.save_checkpoint``, ``Cell.state_dict``), the old ones
  kept. Parameter names must be unique in the Cell: the state Parameters are named
  ``<state name>.<parameter name>``, so a new parameter's ``Parameter.name`` must be
  new here;
* a train step made before the add (``nn.TrainOneStepCell``, ``ms.Model``, a gradient
  function over ``optimizer.parameters``) captured the ParameterTuple of that moment and
  computes gradients of those parameters only: the step refuses a gradient tuple of the
  old length (:func:`length_refusal`), as no parameter's gradient can be told apart;
* a step compiled into a graph before the add (``@ms.jit``, GRAPH_MODE) keeps the
  Parameters it was compiled with and runs without Python, so it would go on stepping
  the old parameters unseen: once ``global_step`` moved without a step Python ran or a
  load (``SpecOptimizer.stepped_in_graph``), the add is refused; the add itself is
  refused in GRAPH_MODE.

Step counts: MindSpore's gradient tuple holds a gradient for every parameter at every
step, so a parameter's count of updates is the optimizer's ``global_step`` minus the
``global_step`` when it joined (torch's own path counts each parameter's updates: a
parameter added after k steps takes ``step = 1`` at its first update, as here). Those
joining steps live in the Parameter :data:`ADDED_AT` (int32, one per parameter, 0 for a
parameter held since the build), made only where one is not 0 (a group added after a
step, or a state file whose parameters took different numbers of steps): an optimizer
without it is laid out as before, and a group added before the first step is the build
with that group. ``ms.save_checkpoint`` and ``Cell.state_dict`` hold it;
``Cell.load_state_dict`` checks it and makes it where the optimizer has none, while
``mindspore.load_param_into_net`` copies only Parameters the optimizer holds (one it
lacks is listed in its second return value, not loaded): load such a checkpoint with
``Cell.load_state_dict`` or save with ``uo.save_state``. The graph forms
(GRAPH_MODE, ``@ms.jit``) read one ``global_step`` for every parameter, so an optimizer
holding it refuses to compile into a graph, naming why.
"""

from __future__ import annotations

import mindspore as ms
import numpy as np
from mindspore import Parameter, ParameterTuple, Tensor
from mindspore import dtype as mstype

from unified_opt.ops import numpy_ops
from unified_opt.storage import refuse_rounding

from .kernels import host_view, numpy_dtype

#: the Parameter holding each parameter's joining ``global_step`` (see the module)
ADDED_AT = "added_at_step"

OWNER = "SpecOptimizer.add_param_group"


def graph_refusal(optimizer) -> str:
    """Why an optimizer whose parameters joined at different steps cannot compile into a
    graph ("" when they all count ``global_step``)."""
    if getattr(optimizer, ADDED_AT, None) is None:
        return ""
    return (f"{type(optimizer).__name__} ({optimizer.spec.name}): its parameters joined at "
            "different steps (add_param_group after a step, or a state file whose "
            "parameters took different numbers of steps), so each counts its own updates; "
            "the graph forms read one global_step for every parameter: run the step in "
            "PyNative (or add the group before the first step)")


def joined_at(optimizer) -> np.ndarray:
    """Each parameter's joining ``global_step`` (int64; zeros without :data:`ADDED_AT`)."""
    held = getattr(optimizer, ADDED_AT, None)
    if held is None:
        return np.zeros(len(optimizer._parameters), dtype=np.int64)
    view = host_view(held)
    values = held.asnumpy() if view is None else view
    return np.asarray(values, dtype=np.int64).reshape(-1)


def check_joined(optimizer, step0: int) -> np.ndarray:
    """:func:`joined_at`, each between 0 and ``step0`` (the steps taken); else a
    ValueError (a checkpoint of another optimizer, a hand edit), before the step changes
    anything."""
    joined = joined_at(optimizer)
    if getattr(optimizer, ADDED_AT, None) is None or \
            (joined.min(initial=0) >= 0 and joined.max(initial=0) <= step0):
        return joined
    bad = [(p.name, int(j)) for p, j in zip(optimizer._parameters, joined)
           if not 0 <= j <= step0]
    if bad:
        raise ValueError(f"SpecOptimizer: {ADDED_AT} says parameters {bad} joined at those "
                         f"steps, but global_step is {step0}: each must be between 0 and "
                         "the steps taken (loaded from a checkpoint that does not fit, or "
                         "assigned from outside?)")
    return joined


def set_joined(optimizer, joined) -> None:
    """Each parameter's joining step set to ``joined`` (ints, one per parameter):
    :data:`ADDED_AT` made where one is not 0, written where it exists."""
    values = np.asarray(joined, dtype=np.int32).reshape(-1)
    held = getattr(optimizer, ADDED_AT, None)
    if held is None and not values.any():
        return
    if held is None or tuple(held.shape) != values.shape:
        if held is None:
            _name_is_free(optimizer, ADDED_AT, "the Parameter of the parameters' joining "
                          "steps")
        setattr(optimizer, ADDED_AT, Parameter(Tensor(values), name=ADDED_AT,
                                               requires_grad=False))
        _refuse_graph(optimizer)
        return
    held.set_data(Tensor(values))


def _refuse_graph(optimizer) -> None:
    why = graph_refusal(optimizer)
    optimizer._graph_refusal = why
    optimizer._n = 0
    optimizer.graph_form, optimizer.graph_why = "", f"in a graph it is refused: {why}"
    _explained(optimizer)


def _explained(optimizer) -> None:
    """``uo.explain(optimizer)`` names the graph form it has now."""
    import dataclasses

    from unified_opt.backend import record_of

    try:
        record = record_of(optimizer)
    except ValueError:                   # built by hand, not by uo.build
        return
    reason = record.decision.reason.split("; in GRAPH_MODE")[0]
    record.decision = dataclasses.replace(
        record.decision, reason=f"{reason}; in GRAPH_MODE and @ms.jit: {optimizer.graph_why}")


def length_refusal(optimizer, given: int) -> str:
    """The message for ``given`` gradients (see the module)."""
    n = len(optimizer._parameters)
    text = f"SpecOptimizer: got {given} gradients for {n} parameters"
    if given in optimizer.lengths_before_adds:
        text += (f"; the optimizer held {given} parameters before add_param_group, and a "
                 "train step made then (nn.TrainOneStepCell, ms.Model, a gradient function "
                 "over optimizer.parameters) computes gradients of those only: make it "
                 "again after add_param_group, over optimizer.parameters. Nothing was "
                 "changed")
    return text


def _name_is_free(optimizer, name: str, what: str) -> None:
    held = {n for n, _ in optimizer.parameters_and_names()}
    if name in held or hasattr(type(optimizer), name):
        raise ValueError(f"{OWNER}: {what} would be named {name!r}, the name of a "
                         "Parameter or attribute the optimizer Cell holds; MindSpore needs "
                         "unique Parameter names in a Cell (give the parameter another "
                         "Parameter.name)")


def _check_parameters(optimizer, params) -> None:
    """What ``uo.build`` checks of MindSpore parameters, and unique Cell names."""
    held = {n for n, _ in optimizer.parameters_and_names()}
    for k, p in enumerate(params):
        label = f"param_group['params'][{k}] ({p.name})"
        if not isinstance(p, Parameter):
            raise TypeError(f"{OWNER}: {label} must be a mindspore.Parameter, got "
                            f"{type(p).__name__}")
        if p.dtype != mstype.float32:
            raise TypeError(f"{OWNER}: {label} is {p.dtype}; the MindSpore backend takes "
                            "float32 parameters")
        if not p.requires_grad:
            raise ValueError(f"{OWNER}: {label} has requires_grad=False; a MindSpore "
                             "optimizer updates every parameter it holds")
    names = [p.name for p in params]
    taken = sorted({n for n in names if n in held} |
                   {n for n in names if names.count(n) > 1})
    if taken:
        raise ValueError(f"{OWNER}: Parameter names {taken} are already held by the "
                         "optimizer Cell or given twice; MindSpore needs unique Parameter "
                         "names in a Cell (the state is named '<state>.<Parameter.name>'): "
                         "give those parameters other names")


def add_group(optimizer, param_group) -> None:
    """``optimizer.add_param_group(param_group)`` (see the module and
    :meth:`.optimizer.SpecOptimizer.add_param_group`); every refusal is raised before
    anything changes."""
    from unified_opt.backend import record_of
    from unified_opt.param_groups import added_group

    if ms.get_context("mode") != ms.PYNATIVE_MODE:
        raise ValueError(f"{OWNER}: in GRAPH_MODE a train step compiled before the add "
                         "keeps the parameters it was compiled with and would step only "
                         "those, with no Python to say so; add the group in PyNative mode "
                         "(ms.set_context(mode=ms.PYNATIVE_MODE)), then make the train step")
    if optimizer.exchange is not None:
        raise ValueError(f"{OWNER}: a data-parallel optimizer's exchange holds the "
                         "parameters it was built with; build a new one with every "
                         "parameter")
    step0 = int(np.asarray(optimizer.global_step.asnumpy()).reshape(-1)[0])
    if optimizer.stepped_in_graph or step0 != optimizer.python_global_step:
        raise ValueError(f"{OWNER}: global_step is {step0}, and the steps Python ran or "
                         f"loaded left it at {optimizer.python_global_step}: the optimizer "
                         "stepped compiled into a graph (@ms.jit, GRAPH_MODE), and that graph "
                         "keeps the parameters it was compiled with, so it would go on "
                         "stepping only those; build a new optimizer with every parameter "
                         "(or add the group before such a step; a global_step loaded by "
                         "mindspore.load_param_into_net reads the same: load with "
                         "Cell.load_state_dict or uo.load_state)")
    record = record_of(optimizer)
    saved = (record.params, record.names, record.plans, record.dict_groups)
    _, params, plans = added_group(record, param_group, "SpecOptimizer", "mindspore",
                                   lambda p: None)
    try:
        _check_parameters(optimizer, params)
        refuse_rounding(type(optimizer).__name__, "MindSpore", [plan.spec for plan in plans],
                        [(p.name, str(p.dtype).lower()) for p in params])
        if optimizer._kernels is not None:
            optimizer._kernels.require(
                (p.name, plan.spec, tuple(p.shape), str(p.dtype).lower(), "")
                for p, plan in zip(params, plans))
        slots = [_initial_slots(p, plan) for p, plan in zip(params, plans)]
        held = {n for n, _ in optimizer.parameters_and_names()} | {p.name for p in params}
        for p, made in zip(params, slots):
            for slot in made.values():
                if slot.name in held:
                    raise ValueError(f"{OWNER}: the state of {p.name} would be named "
                                     f"{slot.name!r}, the name of a Parameter the optimizer "
                                     "Cell holds or is given; MindSpore needs unique "
                                     "Parameter names in a Cell (give the parameter another "
                                     "Parameter.name)")
        joined = np.concatenate([joined_at(optimizer), np.full(len(params), step0)])
        lr = optimizer.next_lr()
        # last: it checks the group before changing the surface
        optimizer._surface.add(plans, params, lr, len(optimizer._parameters))
    except Exception:
        record.params, record.names, record.plans, record.dict_groups = saved
        raise
    _extend(optimizer, params, plans, slots, joined)


def _initial_slots(p, plan) -> dict:
    """The spec's initial state of ``p`` as Parameters (from numpy and ``p``'s values, as
    the build)."""
    dtype = numpy_dtype(p.dtype)
    initial = plan.spec.init(np.asarray(p.asnumpy(), dtype=dtype), numpy_ops)
    return {key: Parameter(Tensor(np.array(initial[key], dtype=dtype)),
                           name=f"{key}.{p.name}", requires_grad=False)
            for key in initial}


def _extend(optimizer, params, plans, slots, joined) -> None:
    """Every structure of the optimizer takes the new parameters (nothing here raises
    on input: it was all checked)."""
    from . import graph as graph_forms

    first = len(optimizer._parameters)
    optimizer.lengths_before_adds.append(first)
    optimizer.parameters = ParameterTuple(list(optimizer._parameters) + list(params))
    optimizer._parameters = optimizer.parameters
    optimizer.param_length = len(optimizer._parameters)
    optimizer.optim_filter = (True,) * optimizer.param_length
    optimizer.decay_flags = optimizer.decay_flags + tuple(
        "beta" not in p.name and "gamma" not in p.name for p in params)
    optimizer._user_parameters.extend(p.name for p in params)
    optimizer._slots.extend(slots)
    optimizer.spec_state_parameters = ParameterTuple(
        list(optimizer.spec_state_parameters) + [s for made in slots for s in made.values()])
    optimizer._plans.extend(plans)
    optimizer._loop.extend(params, plans)
    # the graph forms, made again over every parameter
    choice = graph_forms.choose(optimizer, optimizer.graph_option, optimizer.total_steps)
    optimizer.set_graph_form(choice)
    _explained(optimizer)
    set_joined(optimizer, joined)
    if getattr(optimizer, ADDED_AT, None) is not None:
        _refuse_graph(optimizer)


def loaded_joined(optimizer, state_dict, prefix: str, holds_state: bool):
    """``Cell.load_state_dict``'s pre-hook part (nothing changed yet): the joining steps
    the load will give the optimizer (:data:`ADDED_AT` of the dict, checked: one whole
    count per parameter, each between 0 and the dict's ``global_step``), zeros where the
    dict holds the spec's state without it (its parameters all counted ``global_step``),
    None where it holds no state (the weights alone)."""
    owner = f"{type(optimizer).__name__}.load_state_dict"
    value = state_dict.get(prefix + ADDED_AT)
    n = len(optimizer._parameters)
    if value is None:
        return np.zeros(n, dtype=np.int64) if holds_state else None
    values = np.asarray(value.asnumpy() if isinstance(value, Tensor) else value,
                        dtype=np.float64).reshape(-1)
    step = state_dict.get(prefix + "global_step")
    steps = np.asarray(step.asnumpy() if isinstance(step, Tensor) else
                       (0 if step is None else step), dtype=np.float64).reshape(-1)
    top = float(steps[0]) if steps.size == 1 else 0.0
    if values.size != n or not np.all(np.isfinite(values)) or \
            np.any(values != np.round(values)) or np.any(values < 0) or np.any(values > top):
        raise ValueError(f"{owner}: {prefix + ADDED_AT!r} must hold one whole step per "
                         f"parameter ({n}), each between 0 and global_step ({top:g}), got "
                         f"{values.tolist()}; nothing was loaded")
    return values.astype(np.int64)


def apply_loaded_joined(optimizer, joined, incompatible_keys, prefix: str) -> None:
    """``Cell.load_state_dict``'s post-hook part: the joining steps
    :func:`loaded_joined` read, set (:data:`ADDED_AT` made where the optimizer had none,
    so MindSpore called the key unexpected: it was loaded)."""
    if joined is None:
        return
    set_joined(optimizer, joined)
    key = prefix + ADDED_AT
    incompatible_keys.unexpected_keys[:] = [k for k in incompatible_keys.unexpected_keys
                                            if k != key]
