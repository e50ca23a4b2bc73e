r"""Lion (Chen et al., 2023): the sign of an interpolated momentum.

.. math::

    \theta &\leftarrow \theta\,(1 - \eta\lambda)\\
    c_t &= \beta_1 m_{t-1} + (1-\beta_1)\, g\\
    \theta_t &= \theta - \eta\,\mathrm{sign}(c_t) \qquad (\mathrm{sign}(0) = 0)\\
    m_t &= \beta_2 m_{t-1} + (1-\beta_2)\, g

Args:
    betas: :math:`(\beta_1, \beta_2)` in [0, 1): :math:`\beta_1` interpolates the
        step's direction, :math:`\beta_2` decays the stored momentum.
    weight_decay: the decoupled decay :math:`\lambda` >= 0: the parameter is
        multiplied by :math:`1 - \eta\lambda` before the step.

Differences between frameworks
------------------------------
* No framework ships Lion: every backend runs this update (own implementation), with
  :math:`\mathrm{sign}(\mathrm{NaN}) = \mathrm{NaN}` on every binding.
* ``pytorch-optimizer``'s ``Lion`` computes the same on finite gradients (decoupled
  decay times lr). Under non-finite ones it departs where no knob reaches: its
  ``m.lerp(g, 1-beta)`` is ``m + (g - m)(1-beta)``, which turns an infinite moment NaN at
  the next finite gradient (``inf - inf``), and ``torch.sign(NaN)`` is 0, so such an
  element, and one whose gradient was NaN, stops where this update keeps stepping (an
  infinite moment) or goes NaN. The conformance rule leaves a parameter element out once
  its state holds NaN in one trajectory and NaN or Inf in the other
  (:mod:`unified_opt.conformance.compare`), so ``check`` passes it on the non-finite
  stream too.
"""

from __future__ import annotations

from typing import Any

from .. import _validation as v
from ..ops import Ops
from ..records import Planted, record
from ..schedules import Schedule
from ..spec import Spec, State, Tensor, register, spec_dataclass
from ._decay import check_decay, decay_for_parameter


@register
@spec_dataclass
class Lion(Spec):
    __doc__ = __doc__
    name = "lion"

    lr: float | Schedule = 1e-4
    betas: tuple[float, float] = (0.9, 0.99)
    weight_decay: float = 0.0
    maximize: bool = False
    no_decay_names: tuple[str, ...] = ()

    def _check(self, owner: str) -> dict[str, Any]:
        return {"betas": v.check_betas(owner, "betas", self.betas),
                "maximize": v.check_bool(owner, "maximize", self.maximize),
                **check_decay(self, owner)}

    def for_parameter(self, name: str | None) -> Spec:
        return decay_for_parameter(self, name)

    def state_names(self) -> tuple[str, ...]:
        return ("exp_avg",)

    def update(self, param: Tensor, grad: Tensor, state: State, *, lr: float, step: int,
               ops: Ops) -> tuple[Tensor, State]:
        beta1, beta2 = self.betas
        g = -grad if self.maximize else grad
        if self.weight_decay != 0.0:
            param = param * (1.0 - lr * self.weight_decay)
        interpolated = state["exp_avg"] * beta1 + g * (1.0 - beta1)
        param = param - ops.sign(interpolated) * lr
        return param, {"exp_avg": state["exp_avg"] * beta2 + g * (1.0 - beta2)}


_DECAYED = Lion(lr=1e-3, weight_decay=0.1)

RECORD = record(Lion,
                samples=(_DECAYED,
                         Lion(lr=3e-3, betas=(0.95, 0.98))),
                planted=(Planted(_DECAYED, {"betas": (0.9, 0.999)}),
                         Planted(_DECAYED, {"weight_decay": 0.0})),
                case_module="unified_opt.conformance.cases.sign_based",
                nonfinite={"lr": 1e-3},
                benchmark=Lion(lr=1e-4))
