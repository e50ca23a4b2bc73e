"""Reading and writing a Paddle optimizer's state for :mod:`unified_opt.porting.state`.

``uo.build``'s own optimizer (:class:`.optimizer.SpecOptimizer`) keeps the spec's arrays
and ``step`` (int64 [1]) in Paddle accumulators, created at construction; its scheduled
lr is a :class:`.optimizer.ScheduleLR` whose lr at ``last_epoch`` is
``schedule(last_epoch - skipped_steps)``: the position is that difference. Paddle's
native classes keep other accumulators (``moment1_0``, the beta-power accumulators) that
are not mapped yet: they are refused by name.
"""

from __future__ import annotations

import numpy as np
import paddle

from unified_opt.ops import numpy_ops
from unified_opt.porting.state import Snapshot

from .optimizer import STEP, ScheduleLR


def _dtype(p) -> np.dtype:
    return np.dtype(paddle.zeros([0], dtype=p.dtype).numpy().dtype)


def expected_state(spec, p) -> dict:
    init = spec.init(np.zeros(tuple(p.shape), dtype=_dtype(p)), numpy_ops)
    return {k: (np.shape(a), np.asarray(a).dtype) for k, a in init.items()}


def _refuse_native(record, what: str) -> None:
    if record.decision.path != "own":
        raise ValueError(f"{what}: Paddle's native {record.decision.native} keeps its state "
                         "in accumulators that are not mapped to the spec's names yet; build "
                         "with path='own'")


def _position(scheduler) -> int | None:
    if scheduler is None:
        return None
    if not isinstance(scheduler, ScheduleLR):
        raise ValueError(f"save_state: the lr scheduler is {type(scheduler).__name__}, not "
                         "the one uo.build makes")
    return int(scheduler.last_epoch - scheduler.skipped_steps)


def snapshot_built(record, optimizer) -> Snapshot:
    _refuse_native(record, "save_state")
    if None in record.names:
        raise ValueError("save_state: every parameter needs a name; build with (name, "
                         "parameter) pairs or a Layer")
    arrays, steps = {}, {}
    for name, p in zip(record.names, record.params):
        arrays[name] = {k: t.numpy().copy() for k, t in optimizer.spec_state(p).items()}
        steps[name] = int(optimizer._get_accumulator(STEP, p).item())
    return Snapshot(record.spec, record.groups, list(record.names),
                    {n: tuple(p.shape) for n, p in zip(record.names, record.params)},
                    max(steps.values()), _position(record.lr_scheduler), steps, arrays,
                    "paddle")


def snapshot_native(reading, optimizer, names) -> Snapshot:
    raise ValueError(f"save_state: Paddle's native {reading.native_class} keeps its state in "
                     "accumulators that are not mapped to the spec's names yet")


def check_writable(record, optimizer) -> None:
    _refuse_native(record, "load_state")
    if record.lr_scheduler is not None:
        _position(record.lr_scheduler)


def write_built(record, optimizer, saved: Snapshot, arrays: dict) -> None:
    for name, p in zip(record.names, record.params):
        for key, held in optimizer.spec_state(p).items():
            held.set_value(arrays[name][key])
        optimizer._get_accumulator(STEP, p).set_value(
            np.array([saved.param_steps[name]], dtype=np.int64))
    scheduler = record.lr_scheduler
    if scheduler is not None and saved.position is not None:
        scheduler.skipped_steps = 0
        scheduler.last_epoch = saved.position
        scheduler.last_lr = scheduler.get_lr()


def load_checkpoint(optimizer, lr_scheduler, checkpoint, scheduler_checkpoint) -> None:
    raise ValueError(f"convert_checkpoint: reading this framework's checkpoint of "
                     f"{type(optimizer).__name__} is not there yet")
