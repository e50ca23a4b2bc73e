"""Reading and writing a MindSpore optimizer's state for :mod:`unified_opt.porting.state`.

``uo.build``'s own optimizer (:class:`.optimizer.SpecOptimizer`) keeps the spec's arrays
as Parameters ``<state name>.<parameter name>``, and ``global_step``: the steps taken,
which is also the lr schedule's position (its lr is ``spec.lr_at(global_step)``; a
skipped step advances neither). A parameter's own count of updates is ``global_step``
less the step it joined at (``add_param_group`` after a step: :mod:`.added_groups`), so
the file's per-parameter steps are those counts, and a file whose counts differ (written
after such an add, or by torch where a parameter had no gradient at some steps) loads
them as joining steps. ``learning_rate`` holds the next step's lr for
``get_lr()``.

MindSpore's native classes (``mindspore.nn`` and ``mindspore.experimental.optim``, made
by ``uo.build`` or by hand and read by ``uo.from_native``) are mapped through their
descriptor's ``state`` (spec state name -> the attribute holding one Parameter per
optimizer parameter, indexed like ``optimizer.parameters``: ``nn.Adam.moment1`` holds
Parameters named ``moment1.<parameter name>``, ``nn.AdamWeightDecay.moments1`` holds
``adam_m.<name>``, ``experimental.optim.AdamW.exp_avg`` holds ``exp_avg.<name>``;
``experimental.optim.NAdam.mu_product`` is a plain list of Parameters
``mu_product_<name>``; ``nn.AdaFactor`` keeps its row/column moments without the reduced
axis: the same elements as the spec's keepdims arrays). Facts relied on (MindSpore 2.10,
measured on CPU):

* **One step counter, exact.** ``nn`` classes count in ``global_step`` (int32, shape
  (1,)), ``experimental.optim`` Adam/AdamW in ``state_step`` and NAdam, RAdam, Adamax,
  Adagrad, Rprop in ``step_t`` (int32 scalars); ``nn.AdaFactor`` also keeps ``step``
  (float32 (1,)). Every parameter steps with it. The spec's step count is read from it
  (several must agree); a class with none (``experimental.optim`` SGD, Adadelta, RMSprop)
  is refused by name: nothing else says how many steps it took.
* **Derived scalars, written as MindSpore computes them.** ``nn.Adam``'s
  ``beta1_power``/``beta2_power`` (and ``nn.AdaMax``'s ``beta1_power``) are products
  multiplied by the float32 beta once per step, which after t steps differ from
  ``float32(beta**t)`` in the last bits (0.9 after 20 steps: 0.12157659 against
  0.12157665): they are checked against, and written as, that product replayed in
  float32. ``nn.SGD``'s ``stat.<name>`` (1 until the first step with momentum, then 0;
  with momentum 0 it stays 1) likewise.
* **Constants.** The ``nn`` ``learning_rate`` Parameter (a constant lr, or a per-step
  list's table) and ``momentum`` are hyperparameters, never written as state; a
  constant ``learning_rate`` changed from outside (``ReduceLROnPlateau``, a write into
  ``param_groups``) is recorded as the groups' live lr by an optimizer ``uo.build``
  made, and refused on saving a hand-built one rather than lost. ``experimental.optim``
  keeps each group's lr in ``optimizer.lrs`` (Parameters ``learning_rate_group_<i>``,
  outside ``parameters_and_names``): written by its lr_scheduler (or ``uo.lr_scheduler``
  through the groups), recorded the same way.
* **The schedule position** of an ``nn`` class is ``global_step`` (its lr Cell, per-step
  list or :class:`.cells.ScheduleCell` is called with it), so it equals the step count;
  an ``experimental.optim`` scheduler's is its ``last_epoch`` (read by ``from_native``).
* Any other Parameter a native optimizer holds (in ``parameters_and_names()`` or a plain
  list attribute) is refused by name, as is a spec state its descriptor does not map,
  before anything is written. Mapped Parameters the configuration never uses (the
  ``max_exp_avg_sq`` of ``experimental.optim.AdamW`` without amsgrad) are left as they
  are, and so is ``experimental.optim.Adam``'s ``max_exp_avg_sq`` (it ignores amsgrad on
  CPU: checked to hold its initial zeros).
* **Memory**: on the CPU ``Parameter.asnumpy()`` is an array sharing the
  Parameter's memory (a write through it is seen by the Parameter), ``Tensor(array)``
  copies and ``Tensor.from_numpy(array)`` shares the array's memory, which ``set_data``
  keeps. ``save_state``'s snapshot holds read-only views of the state (no copy of it),
  and ``load_state`` hands each array it read to one Parameter (no second copy of the
  state). ``benchmarks/results/state_memory.md`` measures both.

``load_checkpoint`` (``uo.convert_checkpoint``) reads a ``.ckpt`` written by
``mindspore.save_checkpoint`` of the optimizer or of a cell holding it (a protobuf:
``mindspore.load_checkpoint`` runs no code), or a dict of Parameters already loaded, and
loads the optimizer's own state Parameters (by ``Parameter.name``; not the trained
weights) with ``mindspore.load_param_into_net`` after checking every name, shape and
dtype.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from mindspore import Parameter, ParameterTuple, Tensor
from mindspore import dtype as mstype

from unified_opt.backend import load
from unified_opt.porting.state import (
    Snapshot,
    changed_outside,
    initial_state,
    refuse_unnamed,
    state_layout,
)
from unified_opt.schedules import Schedule

from .added_groups import set_joined

#: step counters, by attribute (every one a class holds must agree)
COUNTERS = ("global_step", "state_step", "step_t", "step")
#: chained float32 products: attribute -> the beta attribute multiplied in once per step
POWERS = {"beta1_power": "beta1", "beta2_power": "beta2"}
#: hyperparameter Parameters the optimizer never changes
CONSTANTS = ("learning_rate", "momentum")
#: nn.SGD / experimental.optim.SGD first-step flags
FLAGS = "stat"
#: per-parameter Parameters a class holds and never changes (measured on CPU): they keep
#: their initial zeros, which is checked on saving; loading leaves them as built
INERT = {"mindspore.experimental.optim.Adam": ("max_exp_avg_sq",)}   # ignores amsgrad
#: plain list attributes holding lr Parameters (experimental.optim's group lrs, the nn
#: classes' group_lr in parameter groups)
CONSTANT_LISTS = ("lrs", "group_lr")


def _dtype(p) -> np.dtype:
    return np.dtype(p.asnumpy().dtype)


def _numpy(t, dtype=None, shape=None) -> np.ndarray:
    """A state Parameter's values for a snapshot that ``save_state`` writes at once and
    drops: a read-only view of ``t.asnumpy()`` (MindSpore 2.10 on the CPU, measured: the
    array shares the Parameter's memory, no copy), so saving costs no second copy of the
    state; the optimizer does not step while the file is written. Cast to ``dtype`` (a
    copy of this one array where it differs) and reshaped to ``shape`` (a view)."""
    array = t.asnumpy()
    if dtype is not None:
        array = array.astype(dtype, copy=False)
    view = array.reshape(shape if shape is not None else array.shape)
    if view is array:
        view = array.view()
    view.flags.writeable = False
    return view


def _tensor(array: np.ndarray, handed: set) -> Tensor:
    """``array`` as a Tensor for ``Parameter.set_data`` when loading: one that shares the
    memory of a C-contiguous, writeable ``array`` of a numpy number dtype
    (``Tensor.from_numpy``; MindSpore 2.10, measured: ``Tensor(array)`` copies,
    ``from_numpy`` shares and ``set_data`` keeps it), so loading costs no second copy of
    the state. ``load_state`` hands over arrays of its own (read from the file, or copied
    from a transform's result); ``handed`` holds the addresses of the memory already
    handed to a Parameter in this load, so two Parameters never share memory (a copy is
    made instead), and any other array is copied."""
    address = array.__array_interface__["data"][0] if array.nbytes else None
    if (array.flags.c_contiguous and array.flags.writeable and array.dtype.kind in "fiub"
            and address not in handed):
        if address is not None:
            handed.add(address)
        return Tensor.from_numpy(array)
    return Tensor(array)


def expected_state(spec, p) -> dict:
    """The spec's state of ``p``: name -> (shape, numpy dtype)."""
    return state_layout(spec, tuple(p.shape), _dtype(p))


def _initial(spec, p) -> dict:
    return initial_state(spec, tuple(p.shape), _dtype(p),
                         p.asnumpy() if spec.swaps_weights else None)


# -- the layout of a native optimizer --------------------------------------------------------

@dataclass
class Layout:
    """Where a native optimizer keeps what: built by :func:`layout`, which refuses a
    Parameter it cannot place."""

    name: str                                   # the descriptor's qualified name
    optimizer: object
    holders: list                               # the optimizer (and nn.LARS's inner one)
    mapping: dict                               # spec state -> attribute (held ones)
    index: dict = field(default_factory=dict)   # id(parameter) -> position
    counters: dict = field(default_factory=dict)    # attribute -> Parameter
    powers: dict = field(default_factory=dict)      # attribute -> (Parameter, float32 beta)
    flags: object = None                        # nn.SGD's stat ParameterTuple

    def slots(self, attribute):
        for holder in self.holders:
            value = getattr(holder, attribute, None)
            if value is not None:
                return value
        return None

    def steps(self, what: str) -> int:
        if not self.counters:
            raise ValueError(f"{what}: MindSpore's {self.name} keeps no step counter "
                             f"(none of {list(COUNTERS[:3])}), so the steps it took cannot "
                             "be read exactly; build with path='own' (uo.build) or use a "
                             "class that counts its steps")
        counts = {attr: int(np.asarray(p.asnumpy()).reshape(-1)[0])
                  for attr, p in self.counters.items()}
        if len(set(counts.values())) != 1:
            raise ValueError(f"{what}: MindSpore's {self.name} has step counters that "
                             f"disagree: {counts}")
        return counts.popitem()[1]

    def momentum(self) -> float:
        value = self.slots("momentum")
        if isinstance(value, Parameter):
            return float(value.asnumpy())
        return float(value or 0.0)


def _param_ids(value) -> list:
    if isinstance(value, Parameter):
        return [id(value)]
    if isinstance(value, (ParameterTuple, list, tuple)):
        return [id(p) for p in value if isinstance(p, Parameter)]
    return []


def layout(cls_info, optimizer, what: str) -> Layout:
    """``optimizer``'s Parameters placed (see the module docstring); a ValueError naming
    the class and the Parameter for any it cannot place."""
    holders = [optimizer] + ([optimizer.opt] if cls_info.wraps_optimizer else [])
    out = Layout(cls_info.name, optimizer, holders, {})
    out.index = {id(p): i for i, p in enumerate(optimizer.parameters)}
    placed = set(out.index)
    for ours, theirs in cls_info.state.items():
        slots = out.slots(theirs)
        if slots is not None and not callable(slots):
            out.mapping[ours] = theirs
            placed.update(_param_ids(slots))
    for attr in COUNTERS:
        value = out.slots(attr)
        if isinstance(value, Parameter):
            out.counters[attr] = value
            placed.add(id(value))
    for attr, beta in POWERS.items():
        value = out.slots(attr)
        if isinstance(value, Parameter):
            b = out.slots(beta)
            b = b.asnumpy() if hasattr(b, "asnumpy") else b
            out.powers[attr] = (value, np.float32(np.asarray(b, dtype=np.float32).reshape(-1)[0]))
            placed.add(id(value))
    for attr in CONSTANTS:
        for holder in holders:
            value = getattr(holder, attr, None)
            placed.update(_param_ids(value))
            if hasattr(value, "parameters_and_names"):     # a per-step list's Cell
                placed.update(id(p) for _, p in value.parameters_and_names())
    for attr in INERT.get(cls_info.name, ()):
        for p in out.slots(attr) or ():
            if np.count_nonzero(p.asnumpy()):      # (no array of the comparison)
                raise ValueError(f"{what}: MindSpore's {cls_info.name} holds {p.name} "
                                 "with values other than its initial zeros")
            placed.add(id(p))
    flags = out.slots(FLAGS)
    if isinstance(flags, ParameterTuple):
        out.flags = flags
        placed.update(_param_ids(flags))
    for attr in CONSTANT_LISTS:
        for holder in holders:
            placed.update(_param_ids(getattr(holder, attr, None)))
    unplaced = [p.name for _, p in optimizer.parameters_and_names() if id(p) not in placed]
    for holder in holders:
        for attr, value in vars(holder).items():
            if isinstance(value, list) and value and all(isinstance(p, Parameter)
                                                         for p in value):
                unplaced += [p.name for p in value if id(p) not in placed]
    if unplaced:
        raise ValueError(f"{what}: MindSpore's {cls_info.name} keeps state "
                         f"{sorted(set(unplaced))} that is not mapped to the spec's state "
                         "names; build with path='own'")
    return out


def _power(beta: np.float32, steps: int) -> np.float32:
    """``beta`` multiplied into 1 once per step in float32, as MindSpore does."""
    value = np.float32(1.0)
    for _ in range(steps):
        value = np.float32(value * beta)
    return value


def _flag(out: Layout, steps: int) -> np.float32:
    return np.float32(0.0 if steps > 0 and out.momentum() != 0.0 else 1.0)


def _check_derived(out: Layout, steps: int, what: str) -> None:
    """The derived scalars must be what ``steps`` steps make (else the file would not
    resume this run)."""
    for attr, (p, beta) in out.powers.items():
        held = np.asarray(p.asnumpy(), dtype=np.float32).reshape(-1)
        if not np.all(held == _power(beta, steps)):
            raise ValueError(f"{what}: MindSpore's {out.name} holds {attr}={held.tolist()}, "
                             f"not the product of {steps} steps ({_power(beta, steps)!r}): "
                             f"it was changed apart from its step counter")
    if out.flags is not None:
        expected = _flag(out, steps)
        for p in out.flags:
            if p.size and not np.all(p.asnumpy() == expected):
                raise ValueError(f"{what}: MindSpore's {out.name} holds {p.name} that does "
                                 f"not match {steps} steps with its momentum")


def _check_constant_lr(out: Layout, spec, what: str) -> None:
    """A constant lr written from outside the optimizer would be lost: refused."""
    opt = out.optimizer
    lr = getattr(opt, "learning_rate", None)
    if isinstance(spec.lr, Schedule) or not isinstance(lr, Parameter) \
            or getattr(opt, "is_group_lr", False) or getattr(opt, "dynamic_lr", False) \
            or getattr(spec, "relative_step", False):   # nn.AdaFactor's lr is its own
        return
    if lr.asnumpy() != np.float32(spec.lr):
        raise ValueError(f"{what}: MindSpore's {out.name} has learning_rate="
                         f"{float(lr.asnumpy())!r}, not its constant lr {spec.lr!r}: it was "
                         "changed from outside (a ReduceLROnPlateau callback?), which a state "
                         "file cannot carry")


def _check_own_lr(optimizer, spec, taken: int) -> None:
    """A scheduled spec lr: the own optimizer's ``learning_rate`` must hold the
    schedule's lr at the steps taken (one written from outside is not in the file, and
    the resumed run would use the schedule's). A constant lr written from outside (a
    callback, a write into ``param_groups``) is not refused: the file records each
    group's live lr (:func:`unified_opt.porting.saved_groups.group_values_of`)."""
    if not isinstance(spec.lr, Schedule):
        return
    stored = np.float32(np.asarray(optimizer.learning_rate.asnumpy()).reshape(-1)[0])
    lr = spec.lr_at(taken)
    if stored != np.float32(lr):
        raise changed_outside(f"the own optimizer holds learning_rate={float(stored)!r}",
                              f"the spec gives {float(lr)!r} at step {taken} "
                              f"(lr={spec.lr!r})",
                              "a ReduceLROnPlateau callback, a hand edit")


def _read_params(out: Layout, named, plans) -> dict:
    """name -> the spec's arrays, read from the native Parameters (a zero-size parameter
    left out of the optimizer: its initial state, with the class's shared scalars)."""
    arrays = {}
    held = next((p for _, p in named if id(p) in out.index), None)
    for (name, p), plan in zip(named, plans):
        expected = expected_state(plan.spec, p)
        unmapped = sorted(set(expected) - set(out.mapping))
        if unmapped:
            raise ValueError(f"save_state: MindSpore's {out.name} has no state for "
                             f"{unmapped} of {name!r}; build with path='own'")
        got, initial = {}, None
        source = p if id(p) in out.index else held
        for ours, (shape, dtype) in expected.items():
            if source is not p and ours not in getattr(_descriptor(out), "shared_scalars",
                                                       ()):
                # made only here: a parameter's initial arrays are as large as its state
                initial = _initial(plan.spec, p) if initial is None else initial
                got[ours] = initial[ours]
                continue
            native = out.slots(out.mapping[ours])[out.index[id(source)]]
            got[ours] = _numpy(native, dtype, shape)
        arrays[name] = got
    return arrays


def _descriptor(out: Layout):
    return load("mindspore").native_class(out.name)


# -- the hooks -------------------------------------------------------------------------------

def _own(record) -> bool:
    return record.decision.path == "own"


def snapshot_built(record, optimizer) -> Snapshot:
    # an experimental.optim group added after the build
    refuse_unnamed(record, ((f"parameter {p.name}", p)
                            for p in getattr(optimizer, "parameters", ())))
    names = list(record.names)
    shapes = {n: tuple(p.shape) for n, p in zip(names, record.params)}
    scheduled = isinstance(record.spec.lr, Schedule)
    param_steps = None
    if _own(record):
        from .added_groups import check_joined

        taken = int(optimizer.global_step.asnumpy()[0])
        _check_own_lr(optimizer, record.spec, taken)
        arrays = {n: {k: _numpy(v) for k, v in optimizer.spec_state(p).items()}
                  for n, p in zip(names, record.params)}
        # a parameter added after k steps has taken k fewer (.added_groups)
        joined = dict(zip(map(id, optimizer.parameters), check_joined(optimizer, taken)))
        param_steps = {n: taken - int(joined[id(p)]) for n, p in zip(names, record.params)}
    else:
        out = layout(record.decision.native_class, optimizer, "save_state")
        taken = out.steps("save_state")
        _check_derived(out, taken, "save_state")
        # a constant learning_rate written from outside is recorded as the groups' live
        # lr (saved_groups.group_values_of), not refused
        arrays = _read_params(out, list(zip(names, record.params)), record.plans)
    return Snapshot(record.spec, record.groups, names, shapes, taken,
                    taken if scheduled else None,
                    param_steps or dict.fromkeys(names, taken), arrays, "mindspore")


def snapshot_native(reading, optimizer, names) -> Snapshot:
    """A MindSpore optimizer built by hand, read by ``uo.from_native``: its parameters
    named by ``names`` or their own ``Parameter.name``."""
    from unified_opt.groups import plan_parameters
    from unified_opt.porting.live import parameter_names

    given = parameter_names(names)
    params = list(optimizer.parameters)
    if given is not None:
        unnamed = [p.name for p in params if id(p) not in given]
        if unnamed:
            raise ValueError(f"save_state: names does not name the optimizer's parameters "
                             f"{unnamed}")
        named = [(given[id(p)], p) for p in params]
    else:
        named = [(p.name, p) for p in params]
    plans = plan_parameters(reading.spec, [n for n, _ in named], reading.groups or None,
                            "save_state")
    out = layout(_native_class(reading.native_class), optimizer, "save_state")
    taken = out.steps("save_state")
    _check_derived(out, taken, "save_state")
    _check_constant_lr(out, reading.spec, "save_state")
    arrays = _read_params(out, named, plans)
    position = reading.position
    if isinstance(reading.spec.lr, Schedule) and position is None:
        raise ValueError(f"save_state: the schedule position of {reading.native_class} "
                         "could not be read")
    return Snapshot(reading.spec, tuple(reading.groups), [n for n, _ in named],
                    {n: tuple(p.shape) for n, p in named}, taken, position,
                    dict.fromkeys((n for n, _ in named), taken), arrays, "mindspore")


def _native_class(name: str):
    return load("mindspore").native_class(name)


def check_writable(record, optimizer) -> None:
    """A native class must hold a step counter and map every state of the spec, and
    hold nothing else that changes (:func:`layout`)."""
    if _own(record):
        return
    out = layout(record.decision.native_class, optimizer, "load_state")
    out.steps("load_state")
    for name, p, plan in zip(record.names, record.params, record.plans):
        unmapped = sorted(set(expected_state(plan.spec, p)) - set(out.mapping))
        if unmapped:
            raise ValueError(f"load_state: MindSpore's {out.name} has no state for "
                             f"{unmapped} of {name!r}; build with path='own'")


def _one_counter(saved: Snapshot, what: str) -> None:
    counts = set(saved.param_steps.values()) | {saved.steps}
    if saved.position is not None:
        counts.add(saved.position)
    if len(counts) != 1:
        raise ValueError(f"load_state: {what} keeps one step counter for every parameter "
                         f"and the lr schedule; the file has steps {saved.steps}, schedule "
                         f"position {saved.position} and per-parameter steps "
                         f"{sorted(set(saved.param_steps.values()))}")


def _own_joined(record, optimizer, saved: Snapshot) -> list[int]:
    """Each parameter's joining step on the own optimizer for the file's counts
    (:mod:`.added_groups`: its updates are ``global_step`` less that step), in
    ``optimizer.parameters`` order; refused (ValueError, before anything is written) where
    the schedule position is not the steps taken or a count is not between 0 and it."""
    if saved.position is not None and saved.position != saved.steps:
        raise ValueError(f"load_state: MindSpore's own optimizer reads its lr schedule at "
                         f"global_step, the steps taken; the file has steps {saved.steps} "
                         f"and schedule position {saved.position}")
    counts = {id(p): saved.param_steps[name] for name, p in zip(record.names, record.params)}
    wrong = {name: saved.param_steps[name] for name in record.names
             if not 0 <= saved.param_steps[name] <= saved.steps}
    if wrong:
        raise ValueError(f"load_state: the file's per-parameter steps {wrong} are not between "
                         f"0 and its steps taken ({saved.steps})")
    return [saved.steps - counts[id(p)] for p in optimizer.parameters]


def _set(p, value, handed: set) -> None:
    p.set_data(_tensor(np.asarray(value, dtype=_dtype(p)).reshape(tuple(p.shape)), handed))


def write_built(record, optimizer, saved: Snapshot, arrays: dict) -> None:
    """Write ``arrays`` (``load_state``'s own: the Parameters take their memory, see
    :func:`_tensor`) and the step count into ``optimizer``."""
    handed: set = set()
    if _own(record):
        joined = _own_joined(record, optimizer, saved)
        for name, p in zip(record.names, record.params):
            for key, held in optimizer.spec_state(p).items():
                held.set_data(_tensor(arrays[name][key], handed))
        optimizer.global_step.set_data(Tensor(np.array([saved.steps], dtype=np.int32)))
        optimizer.python_global_step = saved.steps
        set_joined(optimizer, joined)
        if isinstance(record.spec.lr, Schedule):
            optimizer.learning_rate.set_data(Tensor(record.spec.lr_at(saved.steps),
                                                    mstype.float32))
        return
    out = layout(record.decision.native_class, optimizer, "load_state")
    _one_counter(saved, f"MindSpore's {out.name}")
    steps = saved.steps
    for name, p in zip(record.names, record.params):
        if id(p) not in out.index:
            continue                    # a zero-size parameter, left out of the class
        for ours, value in arrays[name].items():
            if ours in out.mapping:
                _set(out.slots(out.mapping[ours])[out.index[id(p)]], value, handed)
    for counter in out.counters.values():
        _set(counter, np.full(tuple(counter.shape), steps), handed)
    for p, beta in out.powers.values():
        _set(p, np.full(tuple(p.shape), _power(beta, steps)), handed)
    if out.flags is not None:
        for p in out.flags:
            _set(p, np.full(tuple(p.shape), _flag(out, steps)), handed)


# -- MindSpore's own checkpoint files ----------------------------------------------------------

def _checkpoint_dict(checkpoint) -> tuple[dict, str]:
    """(the Parameters by name, where they came from)."""
    import mindspore as ms

    if isinstance(checkpoint, dict):
        return checkpoint, "the checkpoint dict"
    if not isinstance(checkpoint, (str, bytes)) and not hasattr(checkpoint, "__fspath__"):
        raise TypeError(f"convert_checkpoint: checkpoint must be a .ckpt path or a dict of "
                        f"Parameters (mindspore.load_checkpoint's), got "
                        f"{type(checkpoint).__name__}")
    path = Path(checkpoint.decode() if isinstance(checkpoint, bytes) else checkpoint)
    if not path.is_file():
        raise ValueError(f"convert_checkpoint: {str(path)!r} is not a file")
    try:
        loaded = ms.load_checkpoint(str(path))
    except Exception as error:      # ValueError, RuntimeError (protobuf), OSError
        raise ValueError(f"convert_checkpoint: {str(path)!r} is not a readable MindSpore "
                         f"checkpoint (truncated or not a .ckpt): {error}") from None
    if not isinstance(loaded, dict) or not loaded:
        raise ValueError(f"convert_checkpoint: {str(path)!r} holds no Parameters")
    return loaded, repr(str(path))


def load_checkpoint(optimizer, lr_scheduler, checkpoint, scheduler_checkpoint) -> None:
    """Load MindSpore's own checkpoint of a native optimizer (module docstring)."""
    import mindspore as ms

    cls_info = _native_class(_qualified(optimizer))
    if lr_scheduler is not None or scheduler_checkpoint is not None:
        raise ValueError("convert_checkpoint: an experimental.optim lr_scheduler keeps its "
                         "position (last_epoch) outside the optimizer's Parameters, so no "
                         ".ckpt of the optimizer holds it; save the live optimizer and its "
                         "scheduler with uo.save_state instead (an nn class keeps its "
                         "schedule position in global_step, inside the file)")
    out = layout(cls_info, optimizer, "convert_checkpoint")
    listed = sorted(a for a in out.mapping.values()
                    if not isinstance(out.slots(a), ParameterTuple))
    if listed:
        raise ValueError(f"convert_checkpoint: MindSpore's {cls_info.name} keeps its state "
                         f"{listed} in a plain list of Parameters, which "
                         "mindspore.save_checkpoint leaves out: its checkpoint cannot "
                         "restore the run; save the live optimizer with uo.save_state")
    loaded, where = _checkpoint_dict(checkpoint)
    trained = {id(p) for p in optimizer.parameters}
    wanted = {p.name: p for _, p in optimizer.parameters_and_names() if id(p) not in trained}
    missing = sorted(n for n in wanted if n not in loaded)
    if missing:
        raise ValueError(f"convert_checkpoint: {where} lacks {cls_info.name}'s Parameters "
                         f"{missing} (not a complete checkpoint of this optimizer, or the "
                         "optimizer was built otherwise)")
    values = {}
    for name, p in wanted.items():
        value = loaded[name]
        if not isinstance(value, Tensor):
            raise ValueError(f"convert_checkpoint: {name!r} in {where} is a "
                             f"{type(value).__name__}, not a Parameter")
        if tuple(value.shape) != tuple(p.shape):
            raise ValueError(f"convert_checkpoint: {name!r} has shape {tuple(value.shape)} in "
                             f"{where}, the optimizer's has {tuple(p.shape)}")
        if value.dtype != p.dtype:
            raise ValueError(f"convert_checkpoint: {name!r} is {value.dtype} in {where}, "
                             f"the optimizer's is {p.dtype}")
        values[name] = value if isinstance(value, Parameter) else Parameter(value, name=name)
    # strict: without it, MindSpore loads each Parameter it was not given (the trained
    # ones) from a name ending with its name ("moment1.w" into "w": the weights overwritten)
    not_loaded, _ = ms.load_param_into_net(optimizer, values, strict_load=True)
    not_loaded = [n for n in not_loaded if n in wanted]
    if not_loaded:
        raise ValueError(f"convert_checkpoint: mindspore.load_param_into_net did not load "
                         f"{not_loaded}")


def _qualified(optimizer) -> str:
    from unified_opt.porting.live import native_classes

    # uo.build's native classes are checked_class subclasses, read as the class they wrap
    cls = native_classes("mindspore").get(
        vars(type(optimizer)).get("uo_native_class", type(optimizer)))
    if cls is None or cls.refused:
        raise ValueError(f"convert_checkpoint: {type(optimizer).__qualname__} is not a "
                         "MindSpore optimizer class that unified-opt reads (a subclass is not "
                         "read as its parent)")
    return cls.name
