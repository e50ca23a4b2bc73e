r"""Schedule-free AdamW (Defazio et al., 2024): AdamW's normalisation, no lr schedule.

The sequences, weights and warm-up of schedule-free SGD
(:class:`~unified_opt.algorithms.schedule_free_sgd.ScheduleFreeSGD`), with :math:`\beta_1`
the interpolation and the direction normalised by a second moment. Step :math:`t`
(1-based), gradient :math:`g` at the training point :math:`y`:

.. math::

    v &\leftarrow \beta_2 v + (1-\beta_2)\, g^2 \\
    d &= \frac{g}{\sqrt{v / (1-\beta_2^t)} + \epsilon} + \lambda y \\
    c_t &= \frac{w_t}{\sum_{i \le t} w_i}, \qquad
        w_i = i^{r} \big(\max_{j \le i} \eta_j\big)^{p} \\
    y &\leftarrow y + (z - y)\, c_t + \eta_t\big(\beta_1 (1 - c_t) - 1\big)\, d \\
    z &\leftarrow z - \eta_t\, d

with :math:`\eta_t = \eta\,\min(1, t/T)` (``warmup_steps`` :math:`T`). ``eval()``
moves the parameter to :math:`x = y + (z - y)(1 - 1/\beta_1)`, ``train()`` back.

Args:
    betas: :math:`(\beta_1, \beta_2)`: :math:`\beta_1` in (0, 1) interpolates between
        the base point and the average, :math:`\beta_2` in [0, 1) decays the second
        moment.
    eps: :math:`\epsilon` >= 0, added to the bias-corrected root of the second moment.
    weight_decay: :math:`\lambda` >= 0, added to the normalised direction at :math:`y`.

Differences between frameworks
------------------------------
* No framework ships it: every backend runs this update (own implementation).
* ``schedulefree.AdamWScheduleFree`` (1.4) computes this update (both of its loops),
  with the bias correction under the root as here (earlier releases multiplied the lr
  by it). Its weights' sum and lr maximum are per group and step in double precision,
  here per parameter in its dtype (the same numbers when every parameter has a
  gradient at every step). It starts in eval mode and refuses a step before
  ``train()``; the optimizers ``uo.build`` makes start in train mode.
"""

from __future__ import annotations

import math
from typing import Any

from .. import _validation as v
from ..ops import Ops
from ..records import CaseSketch, Planted, record
from ..schedules import Schedule
from ..spec import Spec, State, Tensor, register, spec_dataclass
from . import _schedule_free as sf
from ._decay import check_decay, decay_for_parameter


@register
@spec_dataclass
class ScheduleFreeAdamW(Spec):
    __doc__ = __doc__
    name = "schedule_free_adamw"
    swaps_weights = True

    lr: float | Schedule = 0.0025
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    warmup_steps: int = 0
    r: float = 0.0
    weight_lr_power: float = 2.0
    no_decay_names: tuple[str, ...] = ()

    def _check(self, owner: str) -> dict[str, Any]:
        betas = v.check_betas(owner, "betas", self.betas)
        if betas[0] == 0.0:
            raise ValueError(f"{owner}: betas[0] must be > 0 (the point to evaluate at "
                             f"divides by it), got {self.betas!r}")
        return {"betas": betas, "eps": v.check_range(owner, "eps", self.eps, low=0.0),
                **sf.check_averaging(self, owner), **check_decay(self, owner)}

    def for_parameter(self, name: str | None) -> Spec:
        return decay_for_parameter(self, name)

    def state_names(self) -> tuple[str, ...]:
        return ("z", "exp_avg_sq", "lr_max", "weight_sum")

    def init(self, param: Tensor, ops: Ops) -> State:
        return {**sf.initial_state(param, ops), "exp_avg_sq": ops.zeros_like(param)}

    def update(self, param: Tensor, grad: Tensor, state: State, *, lr: float, step: int,
               ops: Ops) -> tuple[Tensor, State]:
        beta1, beta2 = self.betas
        lr_t = sf.scheduled_lr(self, lr, step)
        ckp1, lr_max, weight_sum = sf.averaging_weight(self, lr_t, state, step, ops)
        exp_avg_sq = state["exp_avg_sq"] * beta2 + grad * grad * (1.0 - beta2)
        denominator = ops.sqrt(exp_avg_sq / (1.0 - math.pow(beta2, step))) + self.eps
        direction = grad / denominator
        if self.weight_decay != 0.0:
            direction = direction + param * self.weight_decay
        y, z = sf.averaged_step(param, state["z"], direction, ckp1, lr_t, beta1)
        return y, {"z": z, "exp_avg_sq": exp_avg_sq, "lr_max": lr_max,
                   "weight_sum": weight_sum}

    def evaluation_point(self, param: Tensor, state: State, ops: Ops) -> Tensor:
        return sf.evaluation_point(param, state, self.betas[0])

    def training_point(self, param: Tensor, state: State, ops: Ops) -> Tensor:
        return sf.training_point(param, state, self.betas[0])


_PLAIN = ScheduleFreeAdamW(lr=0.01, eps=1e-3)
_WARMED = ScheduleFreeAdamW(lr=0.02, betas=(0.8, 0.99), warmup_steps=10, weight_decay=0.1,
                            no_decay_names=("*gamma*",))

RECORD = record(
    ScheduleFreeAdamW,
    samples=(_PLAIN, _WARMED, ScheduleFreeAdamW(lr=0.01, r=1.0, weight_lr_power=1.0)),
    planted=(Planted(_PLAIN, {"betas": (0.8, 0.999)}),
             Planted(_WARMED, {"warmup_steps": 5}),
             Planted(_WARMED, {"no_decay_names": ()})),
    cases=(CaseSketch("schedule_free_adamw_default", ScheduleFreeAdamW(lr=0.01)),
           CaseSketch("schedule_free_adamw_warmup_decay_r", ScheduleFreeAdamW(
               lr=0.02, betas=(0.8, 0.99), eps=1e-3, warmup_steps=10, weight_decay=0.1,
               r=1.0, no_decay_names=("*gamma*",)),
               "a linear warm-up, decay but on ln.gamma, a step-weighted average")),
    nonfinite={"lr": 0.01},
)
