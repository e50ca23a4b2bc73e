"""How a scheduled lr or weight decay reaches a ``mindspore.nn`` optimizer (imports mindspore).

MindSpore's ``nn`` classes step their own lr and weight decay: each step they call a
Cell with their ``global_step`` (int32, shape (1,): the 0-based step being taken). Two
forms are built here, chosen by the device (``SCHEDULE_CELL_DEVICES`` in the backend):

* :class:`ScheduleCell` (CPU): Python computes ``float32(scale * s(t))`` at every step,
  with no step limit;
* MindSpore's per-step list ``[s(0), ..., s(N-1)]`` for the lr and :class:`PerStepTable`
  for the weight decay (other devices, where the Python call is not available), with
  :func:`step_limited` making a call past step N our error rather than MindSpore's.
"""

from __future__ import annotations

import numpy as np
from mindspore import Tensor, nn, ops
from mindspore import dtype as mstype
from mindspore.nn.learning_rate_schedule import LearningRateSchedule


def past_total_steps(owner: str, total_steps: int, step0: int) -> RuntimeError:
    """The error for step ``step0 + 1`` of an optimizer built for ``total_steps`` steps."""
    return RuntimeError(f"unified_opt: {owner} was built with options={{'total_steps': "
                        f"{total_steps}}}: step {step0 + 1} is past it; build with a larger "
                        "total_steps to train longer")


class ScheduleCell(LearningRateSchedule):
    """``float32(scale * s(t))`` at step ``t``, computed by Python at every step, as a
    MindSpore dynamic lr (``learning_rate=``, a group's ``"lr"``) or dynamic weight decay
    (``weight_decay=``, which the optimizer wraps and multiplies by its ``loss_scale``).

    ``construct`` hands ``global_step`` to one ``ops.Custom(..., func_type="pyfunc")`` op,
    which calls the Python function ``value(global_step) -> numpy.float32`` when the step
    runs, also where the optimizer is compiled: the ``@jit`` construct of the ``nn``
    classes, GRAPH_MODE, a compiled ``nn.TrainOneStepCell`` or ``ms.Model.train``, an
    ``@ms.jit`` train step. The schedule runs in double precision, once per step, and
    MindSpore's compiler never parses it (Python it parses becomes float32 graph ops:
    inexact on about half the steps of a cosine).

    The value is the per-step list's: ``scale * s(t)`` in Python float, rounded once to
    float32 as MindSpore rounds the list. So an optimizer is bit-identical to the same
    class given ``[scale * s(0), ..., scale * s(N-1)]`` for N steps and goes on exactly
    past them. Measured on MindSpore 2.10, CPU: parameters and state bit-identical, and
    ``get_lr()`` equal to ``float32(scale * s(t))`` for twice as many steps past the
    list, for nn.Momentum, Adam, Rprop, AdamWeightDecay and Adadelta with a group lr
    (``scale`` 0.5) and a group weight-decay schedule, in PyNative and GRAPH_MODE,
    through ``opt(grads)`` and ``nn.TrainOneStepCell`` (tests/test_schedules_mindspore.py
    runs such cases); an earlier study found the same for all 10 ``nn`` classes, also
    with ``ms.Model.train`` (``dataset_sink_mode=True`` too) and an ``@ms.jit`` step.

    With ``total_steps`` a step ``t >= total_steps`` raises :func:`past_total_steps` from
    inside the op (an exception of the schedule's own comes out the same way). The step
    then changes no parameter, state or ``global_step`` (measured for the 9 CPU ``nn``
    classes in both modes). In PyNative, MindSpore runs asynchronously and may report the
    error at the next read of a tensor rather than in the optimizer call (nn.AdamWeightDecay).

    Limits: MindSpore runs a pyfunc op on CPU only (the ``ops.Custom`` documentation); a
    graph holding one cannot be exported to MindIR; MindSpore keeps each op's Python
    function in a global registry, so each Cell's schedule lives as long as the process.
    Nothing in ``construct`` branches on the step (a run-time raise or ``ops.Assert``
    there makes MindSpore miscompile nn.Rprop with two or more parameters, measured),
    and it returns the op's output, never a Parameter (nn.Rprop stops advancing its
    ``global_step`` on a Cell that returns one, measured).
    """

    def __init__(self, schedule, scale: float = 1.0, total_steps: int | None = None,
                 owner: str = "the optimizer"):
        super().__init__()
        self.schedule, self.scale, self.total_steps = schedule, float(scale), total_steps
        self.value = _evaluator(schedule, self.scale, total_steps, owner)
        self.host = ops.Custom(self.value, out_shape=(), out_dtype=mstype.float32,
                               func_type="pyfunc")

    def construct(self, global_step):
        return self.host(global_step)


def _evaluator(schedule, scale: float, total_steps: int | None, owner: str):
    """The Python function of a :class:`ScheduleCell`'s op (not a method: MindSpore's
    registry keeps it, and with it only the schedule, not the Cell)."""
    def value(global_step) -> np.float32:
        t = int(np.asarray(global_step).reshape(-1)[0])
        if total_steps is not None and t >= total_steps:
            raise past_total_steps(owner, total_steps, t)
        x = schedule(t)
        return np.float32(x if scale == 1.0 else scale * x)
    return value


class PerStepTable(nn.Cell):
    """Dynamic weight decay read from a table (devices other than CPU): the optimizer
    calls it with its ``global_step`` and decays by ``values[step]``, held in float32 like
    every MindSpore hyperparameter. Past the end of the table MindSpore raises its Gather
    range error, as for a per-step lr list; :func:`step_limited` raises ours first where
    Python calls the optimizer."""

    def __init__(self, values):
        super().__init__()
        self.table = Tensor(np.asarray(values, dtype=np.float32))
        self.gather = ops.Gather()

    def construct(self, global_step):
        return self.gather(self.table, global_step, 0).reshape(())


class _StepLimit:
    """Refuses a call past ``uo_total_steps`` before MindSpore runs the step (a mixin
    in front of an ``nn`` optimizer class: ``__call__``, since the classes' ``@jit``
    construct cannot be overridden: compiling it recurses)."""

    uo_total_steps: int = 0
    uo_owner: str = ""

    def __call__(self, *args, **kwargs):
        step0 = int(self.global_step.asnumpy().reshape(-1)[0])
        if step0 >= self.uo_total_steps:
            raise past_total_steps(self.uo_owner, self.uo_total_steps, step0)
        return super().__call__(*args, **kwargs)


def step_limited(cls, total_steps: int, owner: str):
    """``cls`` (an ``nn`` optimizer class) refusing a call past ``total_steps`` with our
    error, where a per-step list or :class:`PerStepTable` would end in MindSpore's Gather
    error. Same name, constructor and Parameters; ``isinstance(opt, cls)`` holds.

    Python sees each call when it calls the optimizer: PyNative (``opt(grads)``,
    ``nn.TrainOneStepCell``, ``ms.Model``) and ``opt(grads)`` in GRAPH_MODE. Compiled into
    an outer graph (a GRAPH_MODE train step, ``@ms.jit``), the step runs without this
    check and ends with MindSpore's Gather error. Measured on CPU with the list forced
    (no other device was available): our error, nothing changed, in PyNative
    ``opt(grads)`` and ``nn.TrainOneStepCell`` and GRAPH_MODE ``opt(grads)``; the Gather
    error in a GRAPH_MODE ``nn.TrainOneStepCell``."""
    return type(cls.__name__, (_StepLimit, cls),
                {"__module__": __name__, "__qualname__": cls.__qualname__,
                 "uo_total_steps": total_steps, "uo_owner": owner})
