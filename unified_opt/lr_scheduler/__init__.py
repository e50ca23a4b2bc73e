"""torch's lr schedulers (``torch.optim.lr_scheduler``: names, arguments, defaults and
numbers) for any optimizer ``uo.build`` returns, on every backend and path, and torch's
own optimizers: each drives ``optimizer.param_groups[i]["lr"]`` (and, for OneCycleLR and
CyclicLR with ``cycle_momentum``, ``"momentum"`` or ``"betas"``), and the optimizer
reads them at its next step.

One schedule definition: each scheduler's lrs are the ``uo.schedules`` presets of its
torch name (``scheduler.schedules``: one schedule per parameter group), the closed forms
of torch's recursive computations, equal within float rounding; ReduceLROnPlateau follows
``uo.schedules.ReduceOnPlateau``. How several schedulers on one optimizer compose, and
what is refused, is in :mod:`unified_opt.lr_scheduler.base`.

Example:
    >>> opt = uo.build(uo.AdamW(lr=1e-3), model)
    >>> sched = uo.lr_scheduler.get_linear_schedule_with_warmup(opt, 100, 10_000)
    >>> for batch in data:
    ...     loss(batch).backward(); opt.step(); sched.step(); opt.zero_grad()
"""

from .base import LRScheduler
from .composite import ChainedScheduler, SequentialLR
from .plateau import ReduceLROnPlateau
from .schedulers import (
    ConstantLR,
    CosineAnnealingLR,
    CosineAnnealingWarmRestarts,
    CyclicLR,
    ExponentialLR,
    LambdaLR,
    LinearLR,
    MultiplicativeLR,
    MultiStepLR,
    OneCycleLR,
    PolynomialLR,
    StepLR,
)
from .warmup import (
    WarmupScheduler,
    get_constant_schedule_with_warmup,
    get_cosine_schedule_with_warmup,
    get_linear_schedule_with_warmup,
)

__all__ = ["LRScheduler", "LambdaLR", "MultiplicativeLR", "StepLR", "MultiStepLR",
           "ExponentialLR", "CosineAnnealingLR", "CosineAnnealingWarmRestarts", "LinearLR",
           "ConstantLR", "PolynomialLR", "OneCycleLR", "CyclicLR", "SequentialLR",
           "ChainedScheduler", "ReduceLROnPlateau", "WarmupScheduler",
           "get_linear_schedule_with_warmup", "get_cosine_schedule_with_warmup",
           "get_constant_schedule_with_warmup"]
