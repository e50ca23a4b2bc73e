r"""Adamax (Kingma & Ba, 2015, §7): Adam with the infinity norm.

.. math::

    m_t &= \beta_1 m_{t-1} + (1-\beta_1) g\\
    u_t &= \begin{cases}
        \max(\beta_2 u_{t-1},\ |g| + \epsilon) & \texttt{eps\_placement="on_grad"}\\
        \max(|g|,\ \beta_2 u_{t-1} + \epsilon) & \texttt{"on_decayed_norm"}\\
        \max(\beta_2 u_{t-1},\ |g|) & \texttt{"outside_max"}\end{cases}\\
    \theta_t &= \theta_{t-1} - \frac{\eta}{1-\beta_1^t}\,\frac{m_t}{u_t}
        \quad(\text{``outside_max'': } m_t / (u_t + \epsilon))

with L2 weight decay :math:`g \leftarrow g + \lambda\theta_{t-1}`.

Args:
    eps_placement: where eps enters the infinity norm: ``'on_grad'``
        (:math:`\max(\beta_2 u, |g| + \epsilon)`: torch, MindSpore's experimental
        class), ``'on_decayed_norm'`` (:math:`\max(|g|, \beta_2 u + \epsilon)`:
        Paddle) or ``'outside_max'`` (:math:`m_t / (u_t + \epsilon)`:
        ``mindspore.nn.AdaMax``).

Differences between frameworks
------------------------------
* torch ``Adamax`` and ``mindspore.experimental.optim.Adamax``: ``"on_grad"``.
* ``paddle.optimizer.Adamax``: ``"on_decayed_norm"``; it matches torch only when eps = 0.
* ``mindspore.nn.AdaMax``: ``"outside_max"``.
"""

from __future__ import annotations

from typing import Any

from .. import _validation as v
from ..ops import Ops
from ..records import record
from ..schedules import Schedule
from ..spec import Spec, State, Tensor, register, spec_dataclass
from ._decay import check_decay, decay_for_parameter, l2_gradient

EPS_PLACEMENTS = ("on_grad", "on_decayed_norm", "outside_max")


@register
@spec_dataclass
class Adamax(Spec):
    __doc__ = __doc__
    name = "adamax"

    lr: float | Schedule = 2e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    maximize: bool = False
    eps_placement: str = "on_grad"
    no_decay_names: tuple[str, ...] = ()

    def _check(self, owner: str) -> dict[str, Any]:
        return {"betas": v.check_betas(owner, "betas", self.betas),
                "eps": v.check_range(owner, "eps", self.eps, low=0.0, low_open=True),
                "maximize": v.check_bool(owner, "maximize", self.maximize),
                "eps_placement": v.check_choice(owner, "eps_placement", self.eps_placement,
                                                EPS_PLACEMENTS),
                **check_decay(self, owner)}

    def for_parameter(self, name: str | None) -> Spec:
        return decay_for_parameter(self, name)

    def state_names(self) -> tuple[str, ...]:
        return ("exp_avg", "exp_inf")

    def update(self, param: Tensor, grad: Tensor, state: State, *, lr: float, step: int,
               ops: Ops) -> tuple[Tensor, State]:
        beta1, beta2 = self.betas
        g = l2_gradient(self, param, grad)
        exp_avg = state["exp_avg"] + (g - state["exp_avg"]) * (1.0 - beta1)
        decayed = state["exp_inf"] * beta2
        if self.eps_placement == "on_grad":
            exp_inf = ops.maximum(decayed, ops.abs(g) + self.eps)
            denom = exp_inf
        elif self.eps_placement == "on_decayed_norm":
            exp_inf = ops.maximum(ops.abs(g), decayed + self.eps)
            denom = exp_inf
        else:
            exp_inf = ops.maximum(decayed, ops.abs(g))
            denom = exp_inf + self.eps
        param = param - exp_avg / denom * (lr / (1.0 - ops.power(beta1, step)))
        return param, {"exp_avg": exp_avg, "exp_inf": exp_inf}

    def alternatives(self) -> list[tuple[str, Spec]]:
        return [(f"eps_placement={p!r}", self.replace(eps_placement=p))
                for p in EPS_PLACEMENTS if p != self.eps_placement]


RECORD = record(Adamax, case_module="unified_opt.conformance.cases.adam_family")
