"""Learning-rate schedules as specs: ``s(step) -> lr`` for the 0-based optimizer step.

A schedule is a frozen keyword-only dataclass with a pure ``value(step)``, a JSON round
trip (``to_dict`` / ``schedule_from_dict``) and validation at construction. Pass one
as ``lr=`` to any algorithm spec; each backend lowers it to the framework's own
mechanism (see the backend lowering modules).

``preset(qualified_name, **native_kwargs)`` reads a framework's own scheduler (torch
``torch.optim.lr_scheduler.*``, ``paddle.optimizer.lr.*``, MindSpore's dynamic-lr
functions, ``LearningRateSchedule`` Cells and ``mindspore.experimental.optim.lr_scheduler.*``)
as the schedule giving the lr that scheduler gives at every step. Torch and MindSpore
experimental schedulers scale the optimizer's lr: their presets take it as ``base_lr=``.

Step conventions, all mapped to the same 0-based ``t``: torch's constructor sets lr(0)
and ``sched.step()`` after ``opt.step()`` sets the next; Paddle's constructor steps once
(``last_epoch`` 0) and ``sched.step()`` follows ``opt.step()``; a MindSpore optimizer's
call number ``t + 1`` reads list entry ``t`` / calls the Cell with ``global_step = t``.
"""

# base first: spec.py (imported by the schedule classes) imports these two names from here.
from .base import Schedule, schedule_from_dict, schedules  # isort: skip
from . import mindspore_presets, paddle_presets, torch_presets  # noqa: F401,E402  (registration)
from ._preset_registry import preset, presets, refusal  # noqa: E402
from .compose import Lambda, LinearWarmup, Multiplicative, PerEpoch, Product, Sequential
from .cyclic import Cosine, CosineWarmRestarts, Cyclic, OneCycle
from .decay import (
    Constant,
    Exponential,
    InverseTime,
    Linear,
    MultiStep,
    NaturalExp,
    Noam,
    Piecewise,
    Polynomial,
    Step,
)
from .plateau import ReduceOnPlateau  # noqa: E402
from .warmup import WarmupConstant, WarmupCosine, WarmupCosineToMin, WarmupLinear  # noqa: E402

__all__ = ["Schedule", "schedule_from_dict", "schedules", "preset", "presets", "refusal",
           "Constant", "Cosine", "CosineWarmRestarts", "Cyclic", "Exponential", "InverseTime",
           "Lambda", "Linear", "LinearWarmup", "MultiStep", "Multiplicative", "NaturalExp",
           "Noam", "OneCycle", "PerEpoch", "ReduceOnPlateau", "Piecewise", "Polynomial",
           "Product", "Sequential", "Step", "WarmupConstant", "WarmupCosine",
           "WarmupCosineToMin", "WarmupLinear"]
