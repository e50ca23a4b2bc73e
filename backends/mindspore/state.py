"""Reading and writing a MindSpore optimizer's state for :mod:`unified_opt.porting.state`.

``uo.build``'s own optimizer (:class:`.optimizer.SpecOptimizer`) keeps the spec's arrays
as Parameters ``<state name>.<parameter name>``, and ``global_step``: the steps taken,
which is also the lr schedule's position (its lr is ``spec.lr_at(global_step)``; a
skipped step advances neither). ``learning_rate`` holds the next step's lr for
``get_lr()``. MindSpore's native classes keep other Parameters (``moment1.<name>``,
``beta1_power``) that are not mapped yet: they are refused by name.
"""

from __future__ import annotations

import numpy as np
from mindspore import Tensor
from mindspore import dtype as mstype

from unified_opt.ops import numpy_ops
from unified_opt.porting.state import Snapshot
from unified_opt.schedules import Schedule


def _dtype(p) -> np.dtype:
    return np.dtype(p.asnumpy().dtype)


def expected_state(spec, p) -> dict:
    init = spec.init(np.zeros(tuple(p.shape), dtype=_dtype(p)), numpy_ops)
    return {k: (np.shape(a), np.asarray(a).dtype) for k, a in init.items()}


def _refuse_native(record, what: str) -> None:
    if record.decision.path != "own":
        raise ValueError(f"{what}: MindSpore's native {record.decision.native} keeps its "
                         "state in Parameters that are not mapped to the spec's names yet; "
                         "build with path='own'")


def snapshot_built(record, optimizer) -> Snapshot:
    _refuse_native(record, "save_state")
    taken = int(optimizer.global_step.asnumpy()[0])
    arrays = {n: {k: v.asnumpy().copy() for k, v in optimizer.spec_state(p).items()}
              for n, p in zip(record.names, record.params)}
    scheduled = isinstance(record.spec.lr, Schedule)
    return Snapshot(record.spec, record.groups, list(record.names),
                    {n: tuple(p.shape) for n, p in zip(record.names, record.params)},
                    taken, taken if scheduled else None, dict.fromkeys(record.names, taken),
                    arrays, "mindspore")


def snapshot_native(reading, optimizer, names) -> Snapshot:
    raise ValueError(f"save_state: MindSpore's native {reading.native_class} keeps its state "
                     "in Parameters that are not mapped to the spec's names yet")


def check_writable(record, optimizer) -> None:
    _refuse_native(record, "load_state")


def write_built(record, optimizer, saved: Snapshot, arrays: dict) -> None:
    # one counter for every parameter and the schedule: they must agree
    counts = set(saved.param_steps.values()) | {saved.steps}
    if saved.position is not None:
        counts.add(saved.position)
    if len(counts) != 1:
        raise ValueError(f"load_state: MindSpore's own optimizer keeps one step counter for "
                         f"every parameter and the lr schedule; the file has steps "
                         f"{saved.steps}, schedule position {saved.position} and per-parameter "
                         f"steps {sorted(set(saved.param_steps.values()))}")
    for name, p in zip(record.names, record.params):
        for key, held in optimizer.spec_state(p).items():
            held.set_data(Tensor(arrays[name][key]))
    optimizer.global_step.set_data(Tensor(np.array([saved.steps], dtype=np.int32)))
    if isinstance(record.spec.lr, Schedule):
        optimizer.learning_rate.set_data(Tensor(record.spec.lr_at(saved.steps), mstype.float32))


def load_checkpoint(optimizer, lr_scheduler, checkpoint, scheduler_checkpoint) -> None:
    raise ValueError(f"convert_checkpoint: reading this framework's checkpoint of "
                     f"{type(optimizer).__name__} is not there yet")
