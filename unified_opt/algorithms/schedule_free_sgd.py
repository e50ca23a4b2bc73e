r"""Schedule-free SGD (Defazio et al., 2024): no lr schedule, an average instead.

Three sequences: the base point :math:`z`, the average :math:`x` (the point to evaluate
the model at) and the training point :math:`y = (1-\beta) z + \beta x`, where the
gradient is taken and which the optimizer holds while training. Step :math:`t`
(1-based), gradient :math:`g` at :math:`y`, :math:`\eta_t = \eta\,\min(1, t/T)` with
``warmup_steps`` :math:`T` (no warm-up when 0):

.. math::

    d &= g + \lambda y \\
    c_t &= \frac{w_t}{\sum_{i \le t} w_i}, \qquad
        w_i = i^{r} \big(\max_{j \le i} \eta_j\big)^{p} \\
    y &\leftarrow y + (z - y)\, c_t + \eta_t\big(\beta (1 - c_t) - 1\big)\, d \\
    z &\leftarrow z - \eta_t\, d

(:math:`c_t = 0` while the sum is 0). :math:`z` starts at the initial parameter. The
running maximum of :math:`\eta_t` and the sum of the weights are state (0-d, per
parameter). ``eval()`` on the optimizer moves the parameter to
:math:`x = y + (z - y)(1 - 1/\beta)`, ``train()`` back to
:math:`y = x + (z - x)(1 - \beta)` (:attr:`~unified_opt.spec.Spec.swaps_weights`).

Args:
    momentum: :math:`\beta` in (0, 1): the interpolation between the base point and the
        average (1 - beta is the weight of z in y).

Differences between frameworks
------------------------------
* No framework ships it: every backend runs this update (own implementation).
* ``schedulefree.SGDScheduleFree`` (1.4) computes this update (its ``foreach`` loop and
  its per-parameter one). It counts the weights' sum and the lr's maximum per parameter
  group and step, in double precision; here they are per parameter, in its dtype, so a
  parameter that misses a step's gradient keeps its own count (the same numbers when
  every parameter has a gradient at every step). It starts in eval mode and refuses a
  step before ``train()``; the optimizers ``uo.build`` makes start in train mode.
"""

from __future__ import annotations

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
class ScheduleFreeSGD(Spec):
    __doc__ = __doc__
    name = "schedule_free_sgd"
    swaps_weights = True

    lr: float | Schedule = 1.0
    momentum: float = 0.9
    weight_decay: float = 0.0
    warmup_steps: int = 0
    r: float = 0.0
    weight_lr_power: float = 2.0
    no_decay_names: tuple[str, ...] = ()

    def _check(self, owner: str) -> dict[str, Any]:
        return {"momentum": v.check_range(owner, "momentum", self.momentum, low=0.0,
                                          high=1.0, low_open=True, high_open=True),
                **sf.check_averaging(self, owner), **check_decay(self, owner)}

    def for_parameter(self, name: str | None) -> Spec:
        return decay_for_parameter(self, name)

    def state_names(self) -> tuple[str, ...]:
        return ("z", "lr_max", "weight_sum")

    def init(self, param: Tensor, ops: Ops) -> State:
        return sf.initial_state(param, ops)

    def update(self, param: Tensor, grad: Tensor, state: State, *, lr: float, step: int,
               ops: Ops) -> tuple[Tensor, State]:
        lr_t = sf.scheduled_lr(self, lr, step)
        ckp1, lr_max, weight_sum = sf.averaging_weight(self, lr_t, state, step, ops)
        direction = grad + param * self.weight_decay if self.weight_decay != 0.0 else grad
        y, z = sf.averaged_step(param, state["z"], direction, ckp1, lr_t, self.momentum)
        return y, {"z": z, "lr_max": lr_max, "weight_sum": weight_sum}

    def evaluation_point(self, param: Tensor, state: State, ops: Ops) -> Tensor:
        return sf.evaluation_point(param, state, self.momentum)

    def training_point(self, param: Tensor, state: State, ops: Ops) -> Tensor:
        return sf.training_point(param, state, self.momentum)


_PLAIN = ScheduleFreeSGD(lr=0.05)
_WARMED = ScheduleFreeSGD(lr=0.1, momentum=0.8, warmup_steps=10, weight_decay=0.05,
                          no_decay_names=("*gamma*",))

RECORD = record(
    ScheduleFreeSGD,
    samples=(_PLAIN, _WARMED, ScheduleFreeSGD(lr=0.05, r=1.0, weight_lr_power=0.0)),
    planted=(Planted(_PLAIN, {"momentum": 0.8}),
             Planted(_WARMED, {"warmup_steps": 5}),
             Planted(_WARMED, {"no_decay_names": ()})),
    cases=(CaseSketch("schedule_free_sgd_default", ScheduleFreeSGD(lr=0.05)),
           CaseSketch("schedule_free_sgd_warmup_decay_r", ScheduleFreeSGD(
               lr=0.1, momentum=0.8, warmup_steps=10, weight_decay=0.05, r=1.0,
               no_decay_names=("*gamma*",)),
               "a linear warm-up, decay but on ln.gamma, a step-weighted average")),
    nonfinite={"lr": 0.05},
)
