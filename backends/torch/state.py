"""Reading and writing a torch optimizer's state for :mod:`unified_opt.porting.state`.

``uo.build``'s own optimizer keeps, per parameter, ``step`` (a float tensor) and the
spec's arrays under the spec's names, and the steps taken in ``param_groups[0]
["steps_taken"]`` (a native class with uo's step hooks too: its per-step momentum or
decay follows that count); a native class keeps its own names (its descriptor's ``state``
mapping, spec name -> torch name) and ``step``, like every ``torch.optim`` class but
``SGD`` (only ``momentum_buffer``: its count comes from uo's own count or the lr
scheduler's position, and a constant-lr ``SGD`` built by hand is refused). The
scheduler ``uo.build`` makes for a scheduled lr is a ``LambdaLR`` whose ``last_epoch``
is the schedule's position.
"""

from __future__ import annotations

import numpy as np
import torch

from unified_opt.backend import load
from unified_opt.porting.state import (
    BFLOAT16,
    Snapshot,
    changed_outside,
    initial_state,
    refuse_unnamed,
    state_layout,
    storage_dtype,
)
from unified_opt.storage import state_storage

from .ops import is_dtensor
from .optimizer import STEP, SpecOptimizer
from .steps import STEPS_TAKEN

#: classes whose per-parameter state holds no ``step`` (torch 2.13, measured)
UNCOUNTED = frozenset({"torch.optim.SGD"})


def _numpy(t) -> np.ndarray:
    """A state tensor as numpy, exactly: bfloat16 as its bits (:data:`BFLOAT16`). A CPU
    tensor's array shares its memory (no copy: a snapshot is written by ``save_state``
    at once and never kept, so the state file costs no second copy of the state)."""
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(BFLOAT16)
    return t.numpy()


def _tensor(array: np.ndarray, device) -> torch.Tensor:
    """``array`` as a contiguous tensor on ``device``, sharing the memory of a
    contiguous ``array`` on the CPU: ``load_state`` hands over arrays of its own (read
    from the file, or copied from a transform's result), so loading costs no second
    copy of the state."""
    if not (array.flags.c_contiguous and array.flags.writeable):
        array = array.copy(order="C")
    if array.dtype == BFLOAT16:
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16).to(device)
    return torch.from_numpy(array).to(device)


def _dtype(spec, p) -> np.dtype:
    """The numpy dtype ``p``'s state is kept in: the spec's ``state_dtype``, else the
    parameter's (:func:`unified_opt.storage.state_storage`)."""
    return storage_dtype(state_storage(spec, str(p.dtype).removeprefix("torch.")))


def expected_state(spec, p) -> dict:
    """The spec's state of ``p``: name -> (shape, numpy dtype)."""
    return state_layout(spec, tuple(p.shape), _dtype(spec, p))


def _initial(spec, p) -> dict:
    return initial_state(spec, tuple(p.shape), _dtype(spec, p),
                         p.detach().float().cpu().numpy() if spec.swaps_weights else None)


def _uncounted(name: str, known: int | None) -> int:
    """The steps of a parameter whose state holds no count (``torch.optim.SGD`` keeps only
    ``momentum_buffer``): the optimizer's own count or the scheduler's position, never a
    guess."""
    if known is None:
        raise ValueError(f"save_state: {name} keeps no step count and nothing else here "
                         "counts its steps; save it with its lr_scheduler (its position "
                         "is the count), or build it with uo.build")
    return int(known)


def _named(names, params) -> list:
    missing = [i for i, n in enumerate(names) if n is None]
    if missing:
        raise ValueError(f"save_state: parameters {missing} have no name; pass "
                         "names=<module> (or (name, parameter) pairs), or build with a "
                         "module")
    return list(zip(names, params))


def _refuse_sharded(caller: str, named) -> None:
    """A state file holds each parameter's whole arrays; a DTensor's state is one rank's
    shard (``.numpy()`` of it raises, and a whole array written back would replace it)."""
    sharded = [name for name, p in named if is_dtensor(p)]
    if sharded:
        raise ValueError(f"{caller}: parameters {sharded} are DTensors (FSDP2 fully_shard or "
                         "tensor parallel): a uo state file holds whole arrays; save and "
                         "load a sharded optimizer with torch.distributed.checkpoint "
                         "(get_optimizer_state_dict / set_optimizer_state_dict)")


def _plain(value):
    """A group value as plain Python (a tensor's number, a sequence as a tuple)."""
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    return value


def check_group_values(record, optimizer) -> None:
    """Refuse (ValueError) a param group whose hyperparameters are not what the spec and
    its ``uo.Group`` rules give, or whose lr is not what a scheduled spec lr gives at the
    scheduler's position: such a value changed outside uo (a hand edit, or a torch
    scheduler over a ``uo.schedules`` lr) is not in the file, and the resumed run would
    use the spec's. An lr written over a constant spec lr (a torch or uo scheduler, a
    hand loop) is not refused: the file records each group's live lr
    (:func:`unified_opt.porting.saved_groups.group_values_of`); nor is a spec
    hyperparameter written into a native class's group under its own name and value
    (the ``betas`` or ``momentum`` a ``OneCycleLR`` or ``CyclicLR`` cycles: torch reads
    them from the group at every step), which the file records too
    (:func:`unified_opt.porting.saved_groups.written_hyperparameters`, which refuses one
    that changes the state's layout)."""
    from unified_opt.porting.saved_groups import written_hyperparameters
    from unified_opt.schedules import Schedule

    own = isinstance(optimizer, SpecOptimizer)
    index = {id(p): i for i, p in enumerate(record.params)}
    scheduler = record.lr_scheduler
    scheduled = isinstance(record.spec.lr, Schedule)
    taken = int(optimizer.param_groups[0].get(STEPS_TAKEN, 0))
    written = [{}] * len(optimizer.param_groups) if own else \
        written_hyperparameters(record, optimizer)
    for g, group in enumerate(optimizer.param_groups):
        members = [index[id(p)] for p in group["params"] if id(p) in index]
        if not members:
            continue
        plan = record.plans[members[0]]
        names = [record.names[i] for i in members]
        expected = {}
        if scheduled:
            position = scheduler.last_epoch
            lr = plan.lr(1.0) * scheduler.lr_lambdas[g](position)
            expected["lr"] = (lr, f"the spec's schedule {record.spec.lr!r} at position "
                              f"{position}" + ("" if plan.lr_scale == 1.0
                                               else f" times lr_scale {plan.lr_scale}"))
        if not own:
            step = max(taken - 1, 0)    # the step hooks write at_step(t) before step t
            values = record.decision.lowering.to_native(plan.spec.at_step(step))
            for key, value in values.items():
                if key != "lr" and key not in written[g]:
                    expected.setdefault(key, (value, f"the spec (at step {step})"))
        for key, (value, where) in expected.items():
            if key in group and _plain(group[key]) != _plain(value):
                raise changed_outside(
                    f"param_groups[{g}] (parameters {names}) holds {key}="
                    f"{_plain(group[key])!r}", f"{where} gives {_plain(value)!r}",
                    "a torch lr scheduler, a plateau scheduler or a hand edit")


def snapshot_built(record, optimizer) -> Snapshot:
    own = isinstance(optimizer, SpecOptimizer)
    refuse_unnamed(record, (
        (f"param_groups[{g}]['params'][{k}]", p)
        for g, group in enumerate(optimizer.param_groups)
        for k, p in enumerate(group["params"])))
    named = _named(record.names, record.params)
    _refuse_sharded("save_state", named)
    check_group_values(record, optimizer)
    scheduler = record.lr_scheduler
    known = optimizer.param_groups[0].get(
        STEPS_TAKEN, None if scheduler is None else scheduler.last_epoch)
    arrays, steps = {}, {}
    for (name, p), plan in zip(named, record.plans):
        held = optimizer.state.get(p, {})
        if own:
            state = optimizer.spec_state(p)
        else:
            state = load("torch").native_state(record, optimizer, p, plan.spec)
        arrays[name] = ({k: _numpy(t) for k, t in state.items()} if held
                        else _initial(plan.spec, p))
        steps[name] = (int(held[STEP]) if STEP in held else
                       _uncounted(record.decision.native, known) if held else 0)
    # the own optimizer and the native one with step hooks count the steps taken (the
    # per-step hyperparameters follow that count); a plain native one only per parameter
    taken = optimizer.param_groups[0].get(STEPS_TAKEN, max(steps.values()))
    return Snapshot(record.spec, record.groups, [n for n, _ in named],
                    {n: tuple(p.shape) for n, p in named}, int(taken),
                    None if scheduler is None else int(scheduler.last_epoch), steps, arrays,
                    "torch")


def snapshot_native(reading, optimizer, names) -> Snapshot:
    """A ``torch.optim`` optimizer not built by uo, read by ``uo.from_native``."""
    from unified_opt.groups import plan_parameters
    from unified_opt.porting.live import parameter_names

    given = parameter_names(names) or {}
    params = [p for group in optimizer.param_groups for p in group["params"]]
    unnamed = [i for i, p in enumerate(params) if id(p) not in given]
    if unnamed:
        raise ValueError(f"save_state: names must name every parameter of the optimizer; "
                         f"parameters {unnamed} (in param-group order) have none")
    named = [(given[id(p)], p) for p in params]
    _refuse_sharded("save_state", named)
    plans = plan_parameters(reading.spec, [n for n, _ in named], reading.groups or None,
                            "save_state")
    mapping = load("torch").native_class(reading.native_class).state
    arrays, steps = {}, {}
    for (name, p), plan in zip(named, plans):
        held = optimizer.state.get(p, {})
        arrays[name] = ({ours: _numpy(held[theirs]) for ours, theirs in mapping.items()
                         if ours in expected_state(plan.spec, p)} if held
                        else _initial(plan.spec, p))
        steps[name] = (int(held[STEP]) if STEP in held else
                       _uncounted(reading.native_class, reading.position) if held else 0)
    return Snapshot(reading.spec, tuple(reading.groups), [n for n, _ in named],
                    {n: tuple(p.shape) for n, p in named}, max(steps.values()),
                    reading.position, steps, arrays, "torch")


def check_writable(record, optimizer) -> None:
    """A native class must name every state array of the spec (its descriptor's map)."""
    if isinstance(optimizer, SpecOptimizer):
        return
    mapping = record.decision.native_class.state
    for p, plan in zip(record.params, record.plans):
        unmapped = sorted(set(expected_state(plan.spec, p)) - set(mapping))
        if unmapped:
            raise ValueError(f"load_state: {record.decision.native} has no state for "
                             f"{unmapped}; build with path='own'")


#: the largest step count torch's float32 ``step`` holds exactly (every integer up to it)
EXACT_STEPS = 2 ** 24


def write_built(record, optimizer, saved: Snapshot, arrays: dict) -> None:
    _refuse_sharded("load_state", list(zip(record.names, record.params)))
    for name, count in saved.param_steps.items():
        if count > EXACT_STEPS:
            raise ValueError(f"load_state: parameter {name!r} took {count} steps in the "
                             f"file, more than torch's float32 step holds exactly "
                             f"({EXACT_STEPS})")
    own = isinstance(optimizer, SpecOptimizer)
    mapping = None if own else record.decision.native_class.state
    for name, p in zip(record.names, record.params):
        count = saved.param_steps[name]
        if count == 0:
            optimizer.state.pop(p, None)          # as built: state made at the first step
            continue
        tensors = {k: _tensor(a, p.device) for k, a in arrays[name].items()}
        if not own:
            tensors = {mapping[k]: t for k, t in tensors.items()}
        counted = own or record.decision.native not in UNCOUNTED
        optimizer.state[p] = {**({STEP: torch.tensor(float(count))} if counted else {}),
                              **tensors}
    if own or STEPS_TAKEN in optimizer.param_groups[0]:
        optimizer.param_groups[0][STEPS_TAKEN] = saved.steps
    scheduler = record.lr_scheduler
    if scheduler is not None and saved.position is not None:
        scheduler.last_epoch = saved.position
        for group, base, factor in zip(optimizer.param_groups, scheduler.base_lrs,
                                       scheduler.lr_lambdas):
            group["lr"] = base * factor(saved.position)
        scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]


def _torch_file(what: str, source) -> dict:
    """A state dict given as a mapping or read from a file with ``weights_only=True``
    (tensors, numbers, strings and containers only: no code runs)."""
    if isinstance(source, dict):
        return source
    if not isinstance(source, (str, bytes)) and not hasattr(source, "__fspath__"):
        raise TypeError(f"convert_checkpoint: {what} must be a path or a state dict, got "
                        f"{type(source).__name__}")
    try:
        loaded = torch.load(source, map_location="cpu", weights_only=True)
    except Exception as error:     # UnpicklingError, RuntimeError (zip), OSError, EOFError
        raise ValueError(f"convert_checkpoint: {what} {str(source)!r} is not a torch "
                         f"state dict readable with weights_only=True: {error}") from None
    if not isinstance(loaded, dict):
        raise ValueError(f"convert_checkpoint: {what} {str(source)!r} holds a "
                         f"{type(loaded).__name__}, not a state dict")
    return loaded


def load_checkpoint(optimizer, lr_scheduler, checkpoint, scheduler_checkpoint) -> None:
    """Load torch's own checkpoint files into the native ``optimizer`` and scheduler."""
    state = _torch_file("checkpoint", checkpoint)
    if set(state) != {"state", "param_groups"}:
        raise ValueError(f"convert_checkpoint: checkpoint has keys {sorted(state)}, not an "
                         "optimizer's state_dict() ('state', 'param_groups'); pass "
                         "checkpoint['optimizer'] for a file holding more")
    if (scheduler_checkpoint is None) != (lr_scheduler is None):
        raise ValueError("convert_checkpoint: torch keeps the scheduler's position in its "
                         "own state dict: give lr_scheduler and scheduler_checkpoint "
                         "together")
    optimizer.load_state_dict(state)
    if lr_scheduler is not None:
        lr_scheduler.load_state_dict(_torch_file("scheduler_checkpoint",
                                                 scheduler_checkpoint))
