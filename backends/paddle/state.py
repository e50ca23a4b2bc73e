"""Reading and writing a Paddle optimizer's state for :mod:`unified_opt.porting.state`.

Facts relied on (Paddle 3.3.1, measured; ``tests/test_state_native_paddle.py`` checks
them):

* ``uo.build``'s own optimizer (:class:`.optimizer.SpecOptimizer`) keeps the spec's
  arrays and ``step`` (int64 [1]: the parameter's updates) in Paddle accumulators,
  created at construction, and the optimizer's steps taken in ``steps_taken`` (int64
  [1], on its first parameter: the file's ``steps``); its
  scheduled lr is a :class:`.optimizer.ScheduleLR` whose lr at ``last_epoch`` is
  ``schedule(last_epoch - skipped_steps)``: the position is that difference.
* A native class keeps its state in ``optimizer._accumulators[<name>][param.name]``
  (``<name>`` prefixed ``<optimizer name>_`` when built with ``name=``), created lazily
  at the first step (``uo.build`` creates them at build with
  ``_create_accumulators(default_main_program().global_block(), params)``; a state
  dict loaded before the first step waits in ``_accumulators_holder`` until then).
  The descriptor's ``state`` map (spec name -> accumulator name, e.g. ``exp_avg`` ->
  ``moment1``) names the arrays; an accumulator it maps to a state the spec does not
  have for its configuration (RMSProp's ``momentum`` with momentum=0, ``mean_grad``
  uncentered) is one the kernel multiplies by 0 or does not read: it is not saved and
  is written back as zeros, as Paddle creates it.
* Adam, AdamW and Lamb keep ``beta1_pow_acc`` and ``beta2_pow_acc``, Adamax
  ``beta1_pow_acc``: one [1] accumulator per parameter, in the accumulator's dtype,
  created holding beta and multiplied by beta at every step, so after ``t`` steps it
  holds the running product beta^(t+1) rounded step by step. The multiplier is beta in
  that dtype, except Lamb's float64 kernel, which multiplies by float32(beta). The
  step count of each parameter is read from these products (the ``t`` whose product
  equals the held value exactly; where it underflowed and stopped changing, only a
  scheduler position inside the possible range decides), and they are written back as
  exactly that product, so a resumed native run is bit-identical.
* The other native classes keep no step count: their steps are the lr scheduler's
  position (``uo.build``'s ``ScheduleLR``, or the LRScheduler a hand-built optimizer
  holds as ``learning_rate``: its ``last_epoch``), else the updates the class
  ``uo.build`` makes counts per parameter (``native._CheckedGradients``, ``_uo_steps``;
  written back by ``load_state``, unknown once Paddle's own form was loaded); without
  either, saving is refused naming what is missing. A hand-built optimizer that holds
  no accumulator yet has taken no step.
* RAdam (``beta1_pow``, ``beta2_pow``, ``rho``: parameter-shaped) and NAdam
  (``momentum_decay_pow``, ``beta2_pow``) keep step-derived state that is not mapped:
  refused by name, as is any accumulator a class holds that is not named here.
* ``paddle.save(optimizer.state_dict())`` keys each accumulator by its variable name,
  ``<param.name>_<accumulator>_<n>`` (``n`` counts the optimizers over that parameter
  in the saving process, so a rebuilt optimizer in the same process has another);
  ``"LR_Scheduler"`` holds the scheduler's ``state_dict()``. ``load_checkpoint`` reads
  the file with :mod:`.checkpoint` (no code runs), creates the accumulators of an
  optimizer that has none yet (what its first step would create), matches each to its
  entry (the exact name, else the one differing only in ``n``; shapes checked) and then
  calls ``optimizer.set_state_dict``, which restores the scheduler too.
* Memory: ``Tensor.numpy()`` copies a CPU tensor, ``np.from_dlpack(tensor)``
  is a read-only view of its memory (float16/32/64, int32/64; DLPack refuses bfloat16).
  ``save_state``'s snapshot holds such views of the state (no copy of it; bfloat16 and
  non-CPU tensors are copied, and those copies are held until the file is written), and
  ``load_state`` copies each array read into its accumulator (``set_value``: no second
  copy of the state). ``benchmarks/results/state_memory.md`` measures both.
"""

from __future__ import annotations

import numpy as np
import paddle

from unified_opt.backend import load
from unified_opt.porting.state import (
    Snapshot,
    changed_outside,
    initial_state,
    refuse_unnamed,
    state_layout,
)

from .optimizer import STEP, STEPS_TAKEN, ScheduleLR

#: the beta-power accumulators, by class, and the optimizer attribute holding each beta
POWERS = {"paddle.optimizer.Adam": ("beta1_pow_acc", "beta2_pow_acc"),
          "paddle.optimizer.AdamW": ("beta1_pow_acc", "beta2_pow_acc"),
          "paddle.optimizer.Lamb": ("beta1_pow_acc", "beta2_pow_acc"),
          "paddle.optimizer.Adamax": ("beta1_pow_acc",)}
BETAS = {"beta1_pow_acc": "_beta1", "beta2_pow_acc": "_beta2"}
#: classes whose float64 kernel multiplies the power by float32(beta) (measured)
FLOAT32_BETA = frozenset({"paddle.optimizer.Lamb"})
#: accumulators not mapped to the spec, by class: those classes are refused
UNMAPPED = {"paddle.optimizer.RAdam": ("beta1_pow", "beta2_pow", "rho"),
            "paddle.optimizer.NAdam": ("momentum_decay_pow", "beta2_pow")}
#: classes that take no LRScheduler (no position to count their steps)
CONSTANT_LR_ONLY = frozenset({"paddle.optimizer.Rprop"})
CHUNK = 1 << 16


def _dtype(p) -> np.dtype:
    return np.dtype(paddle.zeros([0], dtype=p.dtype).numpy().dtype)


#: dtypes whose CPU tensors numpy reads through DLPack (Paddle 3.3.1 refuses bfloat16:
#: "Unsupported dtype in DLTensor")
_DLPACK_DTYPES = frozenset({paddle.float16, paddle.float32, paddle.float64, paddle.int32,
                            paddle.int64})


def _numpy(t) -> np.ndarray:
    """A state tensor's values for a snapshot that ``save_state`` writes at once and
    drops. A CPU tensor: a read-only numpy view of its memory through DLPack (Paddle
    3.3.1, measured: ``Tensor.numpy()`` copies, ``np.from_dlpack`` shares, and the view
    keeps the memory alive), so saving costs no second copy of the state; the optimizer
    does not step while the file is written. Otherwise (another device, bfloat16):
    ``Tensor.numpy()``, a copy of this one tensor."""
    t = t.detach()
    if t.place.is_cpu_place() and t.dtype in _DLPACK_DTYPES:
        view = np.from_dlpack(t)
        view.flags.writeable = False
        return view
    return t.numpy()


def expected_state(spec, p) -> dict:
    """The spec's state of ``p``: name -> (shape, numpy dtype)."""
    return state_layout(spec, tuple(p.shape), _dtype(p))


def _initial(spec, p) -> dict:
    return initial_state(spec, tuple(p.shape), _dtype(p),
                         p.numpy() if spec.swaps_weights else None)


def _position(scheduler) -> int | None:
    if scheduler is None:
        return None
    if not isinstance(scheduler, ScheduleLR):
        raise ValueError(f"save_state: the lr scheduler is {type(scheduler).__name__}, not "
                         "the one uo.build makes")
    return int(scheduler.last_epoch - scheduler.skipped_steps)


# -- native accumulators ------------------------------------------------------------------

def _held(optimizer) -> dict:
    """``{accumulator name without the optimizer's name prefix: {param.name: tensor}}``."""
    prefix = "" if optimizer._name is None else f"{optimizer._name}_"
    return {k.removeprefix(prefix): v for k, v in optimizer._accumulators.items()}


def _parameters(optimizer) -> list:
    from .native import _parameters as listed

    return listed(optimizer)


def _create_pending(optimizer) -> None:
    """A state dict loaded before the first step waits in ``_accumulators_holder``; Paddle
    creates the accumulators from it at the first step: do that now."""
    if not optimizer._accumulators and optimizer._accumulators_holder:
        block = paddle.static.default_main_program().global_block()
        try:
            optimizer._create_accumulators(
                block, [p for p in _parameters(optimizer) if not p.stop_gradient])
        except AssertionError as error:
            raise ValueError(f"save_state: the state dict loaded into {type(optimizer).__name__} "
                             f"does not name its accumulators: {error}") from None


def _check_class(cls, optimizer, plans_and_params, what: str) -> None:
    """Refuse (ValueError naming the class and the state) what cannot be mapped."""
    if cls.name in UNMAPPED:
        raise ValueError(f"{what}: {cls.name} keeps {list(UNMAPPED[cls.name])} (derived from "
                         "the step in float32 by its kernel), which are not mapped to the "
                         "spec's state; build with path='own'")
    known = set(cls.state.values()) | set(POWERS.get(cls.name, ()))
    unknown = sorted(set(_held(optimizer)) - known)
    if unknown:
        raise ValueError(f"{what}: {cls.name} holds the accumulators {unknown}, which are not "
                         "mapped to the spec's state; build with path='own'")
    for spec, p in plans_and_params:
        lacking = sorted(set(expected_state(spec, p)) - set(cls.state))
        if lacking:
            raise ValueError(f"{what}: {cls.name} keeps no state for the spec's {lacking}; "
                             "build with path='own'")


def _power_sequence(init, multiplier, dtype, start_value=None, length=CHUNK) -> np.ndarray:
    seq = np.full(length, multiplier, dtype=dtype)
    seq[0] = init if start_value is None else start_value
    return np.multiply.accumulate(seq)


def _beta(cls_name: str, optimizer, power: str, dtype: np.dtype):
    beta = float(getattr(optimizer, BETAS[power]))
    multiplier = np.float32(beta) if cls_name in FLOAT32_BETA else beta
    return dtype.type(beta), dtype.type(multiplier)


def power_after(cls_name: str, optimizer, power: str, dtype, steps: int):
    """What Paddle's ``power`` accumulator holds after ``steps`` steps."""
    dtype = np.dtype(dtype)
    init, multiplier = _beta(cls_name, optimizer, power, dtype)
    return _power_sequence(init, multiplier, dtype, length=steps + 1)[-1]


def _step_range(cls_name: str, optimizer, power: str, value) -> tuple[int, int | None] | None:
    """The steps after which ``power`` holds ``value``: (first, last), last None where the
    product stopped changing there (underflow); None where no step gives it."""
    dtype = np.dtype(value.dtype)
    init, multiplier = _beta(cls_name, optimizer, power, dtype)
    start, first, seq = 0, None, None
    while True:
        seq = _power_sequence(init, multiplier, dtype,
                              None if seq is None else seq[-1] * multiplier)
        hits = np.flatnonzero(seq == value)
        if first is None and hits.size:
            first = start + int(hits[0])
        stuck = seq[-1] == seq[-2]
        if first is not None:
            if seq[-1] != value:
                return first, start + (int(hits[-1]) if hits.size else -1)
            if stuck:
                return first, None
        elif stuck or (multiplier <= 1 and seq[-1] < value):
            return None
        start += CHUNK


def _steps_of(cls, optimizer, p, name: str, position: int | None, what: str) -> int:
    """The exact step count of parameter ``p`` (see the module docstring)."""
    powers = POWERS.get(cls.name, ())
    if not powers:
        counted = optimizer.__dict__.get("_uo_steps")
        if position is None and counted is not None:     # uo.build's class counts them
            return counted.get(p.name, 0)
        if position is None:
            raise ValueError(
                f"{what}: {cls.name} keeps no step count (its state is "
                f"{sorted(cls.state.values()) or 'empty'}) and its lr is constant, so the "
                "number of steps taken cannot be read exactly; "
                + ("build with path='own' (it takes no LRScheduler)"
                   if cls.name in CONSTANT_LR_ONLY else
                   "give it a paddle.optimizer.lr scheduler stepped once per optimizer step "
                   "(uo.build: a uo.schedules lr) or build with path='own'"))
        return position
    held = _held(optimizer)
    low, high = 0, None
    for power in powers:
        value = held[power][p.name].numpy().reshape(-1)[0]
        found = _step_range(cls.name, optimizer, power, value)
        if found is None:
            raise ValueError(f"{what}: {power} of parameter {name!r} holds {value!r}, which is "
                             f"no power of {BETAS[power][1:]}="
                             f"{getattr(optimizer, BETAS[power])} that {cls.name} reaches: "
                             "the accumulators are not this optimizer's")
        low = max(low, found[0])
        high = found[1] if high is None else (high if found[1] is None else
                                              min(high, found[1]))
    if high is not None and low > high:
        raise ValueError(f"{what}: the beta powers of parameter {name!r} disagree on the "
                         f"number of steps taken ({list(powers)})")
    if high == low:
        return low
    if position is not None and low <= position and (high is None or position <= high):
        return position
    raise ValueError(f"{what}: the beta powers of parameter {name!r} stopped changing "
                     f"(underflow) after {low} steps, so the steps taken cannot be read "
                     "from them; give the optimizer a paddle.optimizer.lr scheduler stepped "
                     "once per optimizer step (its position decides)")


def _native_snapshot(cls, optimizer, named, plans, position, what: str) -> tuple:
    _create_pending(optimizer)
    _check_class(cls, optimizer, [(plan.spec, p) for (_, p), plan in zip(named, plans)],
                 what)
    stepped = bool(optimizer._accumulators)
    arrays, steps = {}, {}
    for (name, p), plan in zip(named, plans):
        if not stepped:            # accumulators are created at the first step
            arrays[name], steps[name] = _initial(plan.spec, p), 0
            continue
        from .native import native_state

        state = native_state(cls, optimizer, p, plan.spec)
        if not state and p.stop_gradient:
            # Paddle creates no accumulator for a parameter that takes no gradient (a
            # BatchNorm's _mean and _variance, a frozen weight): it has not stepped
            arrays[name], steps[name] = _initial(plan.spec, p), 0
            continue
        missing = sorted(set(expected_state(plan.spec, p)) - set(state))
        if missing:
            raise ValueError(f"{what}: {cls.name} holds no {missing} for parameter {name!r}")
        arrays[name] = {k: _numpy(t) for k, t in state.items()}
        steps[name] = _steps_of(cls, optimizer, p, name, position, what)
    return arrays, steps


# -- the save_state / load_state hooks ----------------------------------------------------

def _check_lr(record, optimizer) -> None:
    """A scheduled spec lr must be driven by the scheduler ``uo.build`` made, and a
    constant one must not be replaced by another ``LRScheduler``: its lr at each later
    step is that scheduler's (its position is in its own ``state_dict``), which a state
    file cannot carry, and a run resumed from the file would silently lose it. A
    constant lr changed with ``set_lr`` or written into ``param_groups`` is not refused:
    the file records each group's live lr
    (:func:`unified_opt.porting.saved_groups.group_values_of`)."""
    held = optimizer._learning_rate
    if record.lr_scheduler is not None:
        if held is not record.lr_scheduler:
            raise ValueError(f"save_state: the optimizer's learning_rate is "
                             f"{type(held).__name__} {held!r}, not the scheduler uo.build "
                             f"made for the spec's lr {record.spec.lr!r}: a state file "
                             "cannot carry it; give the schedule to the spec instead")
        return
    if isinstance(held, paddle.optimizer.lr.LRScheduler):
        raise changed_outside(f"the optimizer's lr is a {type(held).__name__}",
                              f"the spec gives the constant lr {record.spec.lr!r}",
                              "set_lr_scheduler, a hand edit; a resumed run would not "
                              "have that scheduler's later lrs. Drive the groups with "
                              "uo.lr_scheduler instead (the file keeps the lr it wrote)")


def snapshot_built(record, optimizer) -> Snapshot:
    # a dict-grouped optimizer steps _param_groups, which _add_param_group extends
    # without touching _parameter_list
    grouped = [p for group in getattr(optimizer, "_param_groups", None) or []
               if isinstance(group, dict) for p in group["params"]]
    refuse_unnamed(record, ((f"parameter {p.name}", p)
                            for p in _parameters(optimizer) + grouped))
    if None in record.names:
        raise ValueError("save_state: every parameter needs a name; build with (name, "
                         "parameter) pairs or a Layer")
    _check_lr(record, optimizer)
    position = _position(record.lr_scheduler)
    if record.decision.path == "own":
        arrays, steps = {}, {}
        for name, p in zip(record.names, record.params):
            arrays[name] = {k: _numpy(t) for k, t in optimizer.spec_state(p).items()}
            steps[name] = int(optimizer._get_accumulator(STEP, p).item())
        taken = optimizer.steps_taken()
    else:
        arrays, steps = _native_snapshot(record.decision.native_class, optimizer,
                                         list(zip(record.names, record.params)),
                                         record.plans, position, "save_state")
        taken = max(steps.values())
    return Snapshot(record.spec, record.groups, list(record.names),
                    {n: tuple(p.shape) for n, p in zip(record.names, record.params)},
                    taken, position, steps, arrays, "paddle")


def snapshot_native(reading, optimizer, names) -> Snapshot:
    """A ``paddle.optimizer`` optimizer not built by uo, read by ``uo.from_native``;
    ``names`` (a Layer or pairs) names its parameters, else their Paddle names."""
    from unified_opt.groups import plan_parameters
    from unified_opt.porting.live import parameter_names

    given = parameter_names(names)
    params = _parameters(optimizer)
    if given is not None:
        unnamed = [p.name for p in params if id(p) not in given]
        if unnamed:
            raise ValueError(f"save_state: names must name every parameter of the "
                             f"optimizer; {unnamed} have none there")
    named = [(given[id(p)] if given is not None else p.name, p) for p in params]
    plans = plan_parameters(reading.spec, [n for n, _ in named], reading.groups or None,
                            "save_state")
    cls = load("paddle").native_class(reading.native_class)
    arrays, steps = _native_snapshot(cls, optimizer, named, plans, reading.position,
                                     "save_state")
    return Snapshot(reading.spec, tuple(reading.groups), [n for n, _ in named],
                    {n: tuple(p.shape) for n, p in named}, max(steps.values()),
                    reading.position, steps, arrays, "paddle")


def check_writable(record, optimizer) -> None:
    if record.lr_scheduler is not None:
        _position(record.lr_scheduler)
    if record.decision.path == "own":
        return
    _check_class(record.decision.native_class, optimizer,
                 [(plan.spec, p) for plan, p in zip(record.plans, record.params)],
                 "load_state")


def _native_values(record, optimizer, saved: Snapshot, arrays: dict) -> list:
    """[(accumulator, value)] for every accumulator of a native optimizer."""
    cls = record.decision.native_class
    held = _held(optimizer)
    if not held:
        block = paddle.static.default_main_program().global_block()
        optimizer._create_accumulators(block, [p for p in record.params
                                               if not p.stop_gradient])
        held = _held(optimizer)
    out = []
    for name, p, plan in zip(record.names, record.params, record.plans):
        count = saved.param_steps[name]
        if p.stop_gradient and not any(p.name in by_param for by_param in held.values()):
            _check_unstepped(name, count, arrays[name], _initial(plan.spec, p))
            continue
        for ours, theirs in cls.state.items():
            accumulator = held.get(theirs, {}).get(p.name)
            if accumulator is None:
                continue
            dtype = _dtype(accumulator)     # (numpy() would copy the accumulator)
            if ours in arrays[name]:
                value = np.asarray(arrays[name][ours])
                if ours in cls.parameter_shaped_scalars:
                    value = np.full(tuple(accumulator.shape), value, dtype=dtype)
            else:   # mapped to a state the spec lacks here: dead under the lowering
                value = np.zeros(tuple(accumulator.shape), dtype=dtype)
            out.append((accumulator, value))
        for power in POWERS.get(cls.name, ()):
            accumulator = held[power][p.name]
            dtype = accumulator.numpy().dtype
            out.append((accumulator, np.array(
                [power_after(cls.name, optimizer, power, dtype, count)], dtype=dtype)))
    return out


def _check_unstepped(name: str, count: int, saved: dict, initial: dict) -> None:
    """A parameter without accumulators (``stop_gradient``: Paddle creates none for it)
    takes the file's state only where that state is the initial one (save_state writes
    that for it); anything else would be dropped: refused."""
    if count or set(saved) != set(initial) or not all(
            np.array_equal(np.asarray(saved[k]), np.asarray(initial[k])) for k in initial):
        raise ValueError(f"load_state: parameter {name!r} takes no gradient (stop_gradient), "
                         "so the Paddle optimizer keeps no accumulators for it, and the file "
                         f"holds a stepped state for it ({count} steps): set stop_gradient="
                         "False before load_state, or build with path='own'")


def write_built(record, optimizer, saved: Snapshot, arrays: dict) -> None:
    if record.decision.path == "own":
        for name, p in zip(record.names, record.params):
            for key, held in optimizer.spec_state(p).items():
                held.set_value(arrays[name][key])
            optimizer._get_accumulator(STEP, p).set_value(
                np.array([saved.param_steps[name]], dtype=np.int64))
        optimizer._get_accumulator(STEPS_TAKEN, optimizer._params[0]).set_value(
            np.array([saved.steps], dtype=np.int64))
    else:
        for accumulator, value in _native_values(record, optimizer, saved, arrays):
            accumulator.set_value(value)
        if "_uo_steps" in optimizer.__dict__:
            optimizer._uo_steps = {p.name: saved.param_steps[name]
                                   for name, p in zip(record.names, record.params)}
    scheduler = record.lr_scheduler
    if scheduler is not None and saved.position is not None:
        scheduler.skipped_steps = 0
        scheduler.last_epoch = saved.position
        scheduler.last_lr = scheduler.get_lr()


# -- Paddle's own checkpoint files --------------------------------------------------------

def _matched(optimizer, state: dict, where: str) -> dict:
    """``state`` keyed by the optimizer's own accumulator names. A key is
    ``<param.name>_<accumulator>_<n>``, ``n`` counting the optimizers over that parameter
    in the process that saved it: the exact name first, else the one key differing only
    in ``n``."""
    import re

    out, used = {}, set()
    for name, per_param in optimizer._accumulators.items():
        for param_name, accumulator in per_param.items():
            if accumulator.name in state:
                key = accumulator.name
            else:
                pattern = re.compile(re.escape(f"{param_name}_{name}_") + r"\d+")
                keys = [k for k in state if pattern.fullmatch(k)]
                if len(keys) != 1:
                    raise ValueError(f"convert_checkpoint: {where} has "
                                     f"{'no' if not keys else 'several'} entries for the "
                                     f"accumulator {name} of parameter {param_name} "
                                     f"({accumulator.name}{': ' + str(keys) if keys else ''})")
                key = keys[0]
            value = state[key]
            shape = tuple(value.shape)
            if shape != tuple(accumulator.shape):
                raise ValueError(f"convert_checkpoint: {where}'s {key} has shape {shape}, "
                                 f"the optimizer's {accumulator.name} "
                                 f"{tuple(accumulator.shape)}")
            out[accumulator.name] = value
            used.add(key)
    extra = sorted(set(state) - used - {"LR_Scheduler"})
    if extra:
        raise ValueError(f"convert_checkpoint: {where} holds {extra}, which are no "
                         f"accumulators of this {type(optimizer).__name__} over its "
                         "parameters")
    return out


def load_checkpoint(optimizer, lr_scheduler, checkpoint, scheduler_checkpoint) -> None:
    """Load a ``.pdopt`` file (``paddle.save(optimizer.state_dict(), path)``), read by
    :func:`.checkpoint.read_pdopt` (no code runs), or that dict, into the native
    ``optimizer`` with ``set_state_dict``; its ``LR_Scheduler`` entry restores the
    scheduler the optimizer holds as its ``learning_rate``."""
    from paddle.optimizer.lr import LRScheduler

    from .checkpoint import checked_state, read_pdopt

    # the scheduler the optimizer holds is accepted (a script passes what it has)
    if (lr_scheduler is not None and lr_scheduler is not optimizer._learning_rate) or \
            scheduler_checkpoint is not None:
        raise ValueError("convert_checkpoint: a Paddle optimizer holds its scheduler as its "
                         "learning_rate and saves its position in its own state dict "
                         "(LR_Scheduler); pass no scheduler_checkpoint, and as lr_scheduler "
                         "only the scheduler the optimizer holds (or None)")
    if isinstance(checkpoint, dict):
        where = "the checkpoint dict"
        state = checked_state(checkpoint, where)
    elif isinstance(checkpoint, (str, bytes)) or hasattr(checkpoint, "__fspath__"):
        where = repr(str(checkpoint))
        state = read_pdopt(checkpoint)
    else:
        raise TypeError(f"convert_checkpoint: checkpoint must be a path or a state dict, got "
                        f"{type(checkpoint).__name__}")
    scheduled = isinstance(optimizer._learning_rate, LRScheduler)
    if scheduled != ("LR_Scheduler" in state):
        raise ValueError(f"convert_checkpoint: {where} "
                         f"{'holds no' if scheduled else 'holds an'} LR_Scheduler entry, and "
                         f"the optimizer's learning_rate is "
                         f"{type(optimizer._learning_rate).__name__}")
    if not optimizer._accumulators:
        block = paddle.static.default_main_program().global_block()
        optimizer._create_accumulators(
            block, [p for p in _parameters(optimizer) if not p.stop_gradient])
    matched = _matched(optimizer, state, where)
    if "LR_Scheduler" in state:
        matched["LR_Scheduler"] = state["LR_Scheduler"]
    optimizer.set_state_dict(matched)
