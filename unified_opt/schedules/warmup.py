r"""Warm-up schedules as training scripts write them: Hugging Face ``transformers``'
``get_linear_schedule_with_warmup``, ``get_cosine_schedule_with_warmup`` and
``get_constant_schedule_with_warmup``, and the hand-written warm-up + cosine of
nanoGPT-style scripts (an lr assigned to ``param_group["lr"]`` every iteration).

Each is a frozen, serialisable schedule whose ``value(t)`` is ``lr`` times the factor the
original computes, in the original's operation order: the ``transformers`` helpers
return a ``torch.optim.lr_scheduler.LambdaLR`` whose lr is ``base_lr * factor(t)``, so
these schedules give torch's numbers bit for bit (``tests/test_warmup_schedules.py``).
The existing compositions (``LinearWarmup`` around ``Linear`` or ``Cosine``) give the
same curves but round differently (``lr * t / W`` there, ``lr * (t / W)`` here), so
they are not used for these.

Presets (``uo.schedules.preset``) read the ``transformers`` helpers by their qualified
names with their own arguments, ``base_lr`` being the optimizer lr they scale:
``transformers.get_linear_schedule_with_warmup``, ``..._cosine_...``, ``..._constant_...``.
"""

from __future__ import annotations

import math

from .. import _validation as v
from ._preset_registry import no_resume, schedule_preset
from .base import Schedule, check_lr, schedule_dataclass

NS = "transformers"


def _warmup_factor(step: int, warmup_steps: int) -> float:
    # transformers: float(current_step) / float(max(1, num_warmup_steps))
    return float(step) / float(max(1, warmup_steps))


@schedule_dataclass
class WarmupLinear(Schedule):
    r"""Linear warm-up from 0 over ``warmup_steps``, then linear decay to 0 at
    ``total_steps``, then 0 (``transformers.get_linear_schedule_with_warmup``).

    .. math::
        \mathrm{lr}(t) = \mathrm{lr} \cdot \begin{cases}
        t / \max(1, W) & t < W \\
        \max\left(0, \frac{T - t}{\max(1, T - W)}\right) & t \ge W \end{cases}

    with ``W = warmup_steps``, ``T = total_steps``.
    """

    name = "warmup_linear"
    lr: float
    warmup_steps: int
    total_steps: int

    def _check(self, owner):
        return {"lr": check_lr(owner, "lr", self.lr),
                "warmup_steps": v.check_int(owner, "warmup_steps", self.warmup_steps, low=0),
                "total_steps": v.check_int(owner, "total_steps", self.total_steps, low=0)}

    def value(self, step):
        if step < self.warmup_steps:
            return self.lr * _warmup_factor(step, self.warmup_steps)
        decay = float(self.total_steps - step) / float(max(1, self.total_steps
                                                            - self.warmup_steps))
        return self.lr * max(0.0, decay)


@schedule_dataclass
class WarmupCosine(Schedule):
    r"""Linear warm-up from 0 over ``warmup_steps``, then a cosine with ``num_cycles``
    periods over the remaining ``total_steps - warmup_steps`` steps, never below 0
    (``transformers.get_cosine_schedule_with_warmup``; ``num_cycles=0.5``: one half
    cosine from ``lr`` down to 0).

    .. math::
        \mathrm{lr}(t) = \mathrm{lr} \cdot \begin{cases}
        t / \max(1, W) & t < W \\
        \max\left(0, \tfrac12 \left(1 + \cos(2 \pi c\, p)\right)\right),\;
        p = \frac{t - W}{\max(1, T - W)} & t \ge W \end{cases}

    with ``c = num_cycles``. Past ``T`` the cosine goes on (``p > 1``), as in
    ``transformers``.
    """

    name = "warmup_cosine"
    lr: float
    warmup_steps: int
    total_steps: int
    num_cycles: float = 0.5

    def _check(self, owner):
        return {"lr": check_lr(owner, "lr", self.lr),
                "warmup_steps": v.check_int(owner, "warmup_steps", self.warmup_steps, low=0),
                "total_steps": v.check_int(owner, "total_steps", self.total_steps, low=0),
                "num_cycles": v.check_range(owner, "num_cycles", self.num_cycles, low=0.0)}

    def value(self, step):
        if step < self.warmup_steps:
            return self.lr * _warmup_factor(step, self.warmup_steps)
        progress = float(step - self.warmup_steps) / float(max(1, self.total_steps
                                                                - self.warmup_steps))
        cosine = 0.5 * (1.0 + math.cos(math.pi * float(self.num_cycles) * 2.0 * progress))
        return self.lr * max(0.0, cosine)


@schedule_dataclass
class WarmupConstant(Schedule):
    r"""Linear warm-up from 0 over ``warmup_steps``, then ``lr``
    (``transformers.get_constant_schedule_with_warmup``).

    .. math::
        \mathrm{lr}(t) = \mathrm{lr} \cdot \begin{cases}
        t / \max(1, W) & t < W \\ 1 & t \ge W \end{cases}
    """

    name = "warmup_constant"
    lr: float
    warmup_steps: int

    def _check(self, owner):
        return {"lr": check_lr(owner, "lr", self.lr),
                "warmup_steps": v.check_int(owner, "warmup_steps", self.warmup_steps, low=0)}

    def value(self, step):
        if step < self.warmup_steps:
            # transformers divides by max(1.0, W) here: the same float as max(1, W)
            return self.lr * _warmup_factor(step, self.warmup_steps)
        return self.lr * 1.0


@schedule_dataclass
class WarmupCosineToMin(Schedule):
    r"""The warm-up + cosine of nanoGPT-style training scripts (``get_lr(it)`` assigned
    to every ``param_group["lr"]`` each iteration): a linear warm-up over
    ``warmup_steps``, a half cosine from ``lr`` down to ``min_lr`` at ``decay_steps``,
    then ``min_lr``.

    .. math::
        \mathrm{lr}(t) = \begin{cases}
        \mathrm{lr} (t + o) / (W + o) & t < W \\
        \mathrm{min\_lr} & t > D \\
        \mathrm{min\_lr} + \tfrac12 (1 + \cos(\pi r)) (\mathrm{lr} - \mathrm{min\_lr}),\;
        r = \frac{t - W}{D - W} & \text{otherwise} \end{cases}

    with ``W = warmup_steps``, ``D = decay_steps`` and ``o = warmup_offset``. nanoGPT's
    ``train.py`` warms up as ``learning_rate * (it + 1) / (warmup_iters + 1)`` (``o = 1``,
    the default: the first step already has a non-zero lr); older copies of it, and many
    scripts derived from them, use ``learning_rate * it / warmup_iters`` (``o = 0``).
    ``decay_steps`` must exceed ``warmup_steps`` (the script divides by their difference).
    """

    name = "warmup_cosine_to_min"
    lr: float
    min_lr: float
    warmup_steps: int
    decay_steps: int
    warmup_offset: int = 1

    def _check(self, owner):
        out = {"lr": check_lr(owner, "lr", self.lr),
               "min_lr": check_lr(owner, "min_lr", self.min_lr),
               "warmup_steps": v.check_int(owner, "warmup_steps", self.warmup_steps, low=0),
               "decay_steps": v.check_int(owner, "decay_steps", self.decay_steps, low=1),
               "warmup_offset": v.check_int(owner, "warmup_offset", self.warmup_offset,
                                            low=0)}
        if out["warmup_offset"] > 1:
            raise ValueError(f"{owner}: warmup_offset must be 0 (lr * t / W) or 1 (lr * "
                             f"(t + 1) / (W + 1)), got {self.warmup_offset!r}")
        if out["decay_steps"] <= out["warmup_steps"]:
            raise ValueError(f"{owner}: decay_steps={out['decay_steps']!r} must be greater "
                             f"than warmup_steps={out['warmup_steps']!r} (the cosine runs "
                             "from warmup_steps to decay_steps)")
        return out

    def value(self, step):
        if step < self.warmup_steps:
            return self.lr * (step + self.warmup_offset) / (self.warmup_steps
                                                            + self.warmup_offset)
        if step > self.decay_steps:
            return self.min_lr
        ratio = (step - self.warmup_steps) / (self.decay_steps - self.warmup_steps)
        coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))
        return self.min_lr + coeff * (self.lr - self.min_lr)


# -- presets: transformers' helpers, read with their own arguments ----------------------

@schedule_preset(f"{NS}.get_linear_schedule_with_warmup")
def linear_with_warmup(base_lr, num_warmup_steps, num_training_steps, last_epoch=-1):
    no_resume(f"{NS}.get_linear_schedule_with_warmup", last_epoch)
    return WarmupLinear(lr=base_lr, warmup_steps=num_warmup_steps,
                        total_steps=num_training_steps)


@schedule_preset(f"{NS}.get_cosine_schedule_with_warmup")
def cosine_with_warmup(base_lr, num_warmup_steps, num_training_steps, num_cycles=0.5,
                       last_epoch=-1):
    no_resume(f"{NS}.get_cosine_schedule_with_warmup", last_epoch)
    return WarmupCosine(lr=base_lr, warmup_steps=num_warmup_steps,
                        total_steps=num_training_steps, num_cycles=num_cycles)


@schedule_preset(f"{NS}.get_constant_schedule_with_warmup")
def constant_with_warmup(base_lr, num_warmup_steps, last_epoch=-1):
    no_resume(f"{NS}.get_constant_schedule_with_warmup", last_epoch)
    return WarmupConstant(lr=base_lr, warmup_steps=num_warmup_steps)
