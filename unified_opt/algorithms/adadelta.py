r"""Adadelta (Zeiler, 2012).

.. math::

    g &\leftarrow g + \lambda\theta_{t-1}\\
    v_t &= \rho v_{t-1} + (1-\rho) g^2\\
    \Delta_t &= \frac{\sqrt{u_{t-1} + \epsilon}}{\sqrt{v_t + \epsilon}}\, g\\
    u_t &= \rho u_{t-1} + (1-\rho)\Delta_t^2\\
    \theta_t &= \theta_{t-1} - \eta\,\Delta_t

Args:
    lr: the learning rate scaling :math:`\Delta_t`, a float >= 0 or a schedule (1.0
        in torch and MindSpore: the paper has none).
    rho: :math:`\rho` in [0, 1], the decay of both running averages.

Differences between frameworks
------------------------------
* torch, Paddle and MindSpore (``nn`` and ``experimental``) compute the same update.
* Defaults differ: torch and MindSpore lr 1.0, rho 0.9, eps 1e-6; Paddle lr 1e-3,
  rho 0.95, eps 1e-6.
"""

from __future__ import annotations

from typing import Any

from .. import _validation as v
from ..ops import Ops
from ..records import Planted, record
from ..schedules import Schedule
from ..spec import Spec, State, Tensor, register, spec_dataclass
from ._decay import check_decay, decay_for_parameter, l2_gradient


@register
@spec_dataclass
class Adadelta(Spec):
    __doc__ = __doc__
    name = "adadelta"

    lr: float | Schedule = 1.0
    rho: float = 0.9
    eps: float = 1e-6
    weight_decay: float = 0.0
    maximize: bool = False
    no_decay_names: tuple[str, ...] = ()

    def _check(self, owner: str) -> dict[str, Any]:
        return {"rho": v.check_range(owner, "rho", self.rho, low=0.0, high=1.0),
                "eps": v.check_range(owner, "eps", self.eps, low=0.0, low_open=True),
                "maximize": v.check_bool(owner, "maximize", self.maximize),
                **check_decay(self, owner)}

    def for_parameter(self, name: str | None) -> Spec:
        return decay_for_parameter(self, name)

    def state_names(self) -> tuple[str, ...]:
        return ("square_avg", "acc_delta")

    def update(self, param: Tensor, grad: Tensor, state: State, *, lr: float, step: int,
               ops: Ops) -> tuple[Tensor, State]:
        g = l2_gradient(self, param, grad)
        rho = self.rho
        square_avg = state["square_avg"] * rho + g * g * (1.0 - rho)
        delta = ops.sqrt(state["acc_delta"] + self.eps) / ops.sqrt(square_avg + self.eps) * g
        acc_delta = state["acc_delta"] * rho + delta * delta * (1.0 - rho)
        return param - delta * lr, {"square_avg": square_avg, "acc_delta": acc_delta}


_PLAIN = Adadelta(lr=0.5)

RECORD = record(Adadelta,
                samples=(_PLAIN,),
                planted=(Planted(_PLAIN, {"rho": 0.91}),),
                case_module="unified_opt.conformance.cases.adaptive")
