"""Checks of a state dict before :class:`.optimizer.SpecOptimizer` loads it.

Paddle's ``Optimizer.set_state_dict`` restores the LR scheduler first, then sets the
accumulators one after the other, asserting each one's presence, shape and dtype as it
comes to it: a state dict that does not fit is refused with an AssertionError after
part of it was loaded, a negative step count is loaded (and the next bias correction is
NaN), and keys of other parameters or optimizers are dropped without a word. The own
optimizer checks the whole dict first and refuses with a TypeError or ValueError naming
the key and the difference, before anything changes (the torch backend's
``check_loaded_state`` is the same for torch).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import paddle
from paddle.optimizer.lr import LambdaDecay, LRScheduler

from .checkpoint import NAME_TABLE, SCHEDULER

OWNER = "SpecOptimizer.set_state_dict"
#: how many key names a message lists
SHOWN = 5


def _names(keys: list[str]) -> str:
    more = f" and {len(keys) - SHOWN} more" if len(keys) > SHOWN else ""
    return f"{keys[:SHOWN]}{more}"


def _dtype(value) -> str:
    return str(value.dtype).removeprefix("paddle.")


def check_state_dict(optimizer, state_dict, counters: tuple[str, ...],
                     optional: tuple[str, ...]) -> None:
    """``state_dict`` holds exactly ``optimizer``'s accumulators (those named in
    ``optional`` may be left out), each an array of the accumulator's shape and dtype;
    those named in ``counters`` whole counts >= 0; an ``LR_Scheduler`` entry where (and
    only where) the optimizer's learning rate is a scheduler."""
    if not isinstance(state_dict, Mapping):
        raise TypeError(f"{OWNER}: state_dict must be a dict of accumulator name -> array "
                        f"(optimizer.state_dict()), got {type(state_dict).__name__}")
    expected = {var.name: (kind, parameter, var)
                for kind, by_parameter in optimizer._accumulators.items()
                for parameter, var in by_parameter.items()}
    scheduler = optimizer._learning_rate
    scheduled = isinstance(scheduler, LRScheduler)
    if SCHEDULER in state_dict:
        if not scheduled:
            raise ValueError(f"{OWNER}: state_dict holds an {SCHEDULER!r} entry (a scheduler's "
                             f"position), and this optimizer's learning rate is the "
                             f"constant {scheduler!r}: the position would be dropped; build "
                             f"with the scheduled lr the state was saved with")
        if not isinstance(state_dict[SCHEDULER], Mapping):
            raise TypeError(f"{OWNER}: state_dict[{SCHEDULER!r}] must be a scheduler's "
                            f"state_dict(), got {type(state_dict[SCHEDULER]).__name__}")
    elif scheduled and not isinstance(scheduler, LambdaDecay):
        raise ValueError(f"{OWNER}: state_dict has no {SCHEDULER!r} entry, and this "
                         f"optimizer's learning rate is a {type(scheduler).__name__}, whose "
                         f"position it would not restore (a state_dict saved with a "
                         f"constant lr?)")
    extra = sorted(set(state_dict) - expected.keys() - {SCHEDULER, NAME_TABLE})
    if extra:
        raise ValueError(f"{OWNER}: state_dict holds {_names(extra)}, which are no "
                         f"accumulators of this optimizer over its parameters (a state_dict "
                         f"of another model, optimizer or spec?); it keeps "
                         f"{_names(sorted(expected))}")
    missing = sorted(name for name, (kind, _, _) in expected.items()
                     if name not in state_dict and kind not in optional)
    if missing:
        raise ValueError(f"{OWNER}: state_dict lacks {_names(missing)} of the accumulators "
                         f"this optimizer keeps (a state_dict of another model, optimizer or "
                         f"spec?)")
    for name, (kind, parameter, var) in expected.items():
        if name not in state_dict:
            continue
        value = state_dict[name]
        where = f"{OWNER}: {name!r} (the {kind!r} of parameter {parameter})"
        if not isinstance(value, (np.ndarray, paddle.Tensor)):
            raise TypeError(f"{where} must be an array, got {type(value).__name__}")
        shape, keeps = list(value.shape), list(var.shape)
        if shape != keeps:
            raise ValueError(f"{where} is {shape}, it keeps {keeps} (a state_dict of another "
                             f"model?)")
        if kind in counters:
            array = np.asarray(value.numpy() if isinstance(value, paddle.Tensor) else value)
            if _dtype(value) != _dtype(var) or not np.all(array >= 0):
                raise ValueError(f"{where} must be a whole count >= 0 held as "
                                 f"{_dtype(var)}, got {_dtype(value)} {array.tolist()}")
        elif _dtype(value) != _dtype(var):
            raise ValueError(f"{where} is {_dtype(value)}, it keeps {_dtype(var)}")
