r"""NAdam (Dozat, 2016) with torch's momentum schedule.

With :math:`\psi` = ``momentum_decay``, :math:`\mu_t = \beta_1(1 - \tfrac12\, 0.96^{t\psi})`
and :math:`\Pi_t = \prod_{i\le t}\mu_i` (state ``mu_product``):

.. math::

    g &\leftarrow g + \lambda\theta_{t-1} \quad\text{(or } \theta \leftarrow
        (1-\eta\lambda)\theta \text{ with decoupled_weight_decay)}\\
    m_t &= \beta_1 m_{t-1} + (1-\beta_1) g, \qquad v_t = \beta_2 v_{t-1} + (1-\beta_2) g^2\\
    d_t &= \sqrt{v_t / (1-\beta_2^t)} + \epsilon\\
    \theta_t &= \theta_{t-1} - \eta\,\frac{1-\mu_t}{1-\Pi_t}\,\frac{g}{d_t}
        - \eta\,\frac{\mu_{t+1}}{1-\Pi_t\mu_{t+1}}\,\frac{m_t}{d_t}

Args:
    momentum_decay: :math:`\psi` >= 0 in the momentum schedule
        :math:`\mu_t = \beta_1(1 - \tfrac12\, 0.96^{t\psi})` (torch's default 4e-3).

Differences between frameworks
------------------------------
* torch ``NAdam``, ``paddle.optimizer.NAdam`` and ``mindspore.experimental.optim.NAdam``
  share this schedule (Paddle keeps :math:`0.96^t` as a running product; torch keeps
  ``mu_product`` as a float32 tensor). MindSpore's experimental class keeps
  ``mu_product`` in an unregistered Python list, so checkpoints lose it.
* Keras/TF NAdam use ``0.96 ** t`` without :math:`\psi` and eps 1e-7; optax has no
  schedule at all: different algorithms, not knobs here.
* ``decoupled_weight_decay=True`` is torch's NAdamW form.
"""

from __future__ import annotations

from typing import Any

from .. import _validation as v
from ..ops import Ops
from ..records import record
from ..schedules import Cosine, Schedule
from ..spec import Spec, State, Tensor, register, spec_dataclass
from ._decay import apply_weight_decay, check_decay, decay_for_parameter


def _mu(beta1: float, psi: float, t: int) -> float:
    return beta1 * (1.0 - 0.5 * 0.96 ** (t * psi))


@register
@spec_dataclass
class NAdam(Spec):
    __doc__ = __doc__
    name = "nadam"

    lr: float | Schedule = 2e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    momentum_decay: float = 4e-3
    decoupled_weight_decay: bool = False
    maximize: bool = False
    no_decay_names: tuple[str, ...] = ()

    def _check(self, owner: str) -> dict[str, Any]:
        return {"betas": v.check_betas(owner, "betas", self.betas),
                "eps": v.check_range(owner, "eps", self.eps, low=0.0, low_open=True),
                "momentum_decay": v.check_range(owner, "momentum_decay", self.momentum_decay,
                                                low=0.0),
                "decoupled_weight_decay": v.check_bool(owner, "decoupled_weight_decay",
                                                       self.decoupled_weight_decay),
                "maximize": v.check_bool(owner, "maximize", self.maximize),
                **check_decay(self, owner)}

    def for_parameter(self, name: str | None) -> Spec:
        return decay_for_parameter(self, name)

    def state_names(self) -> tuple[str, ...]:
        return ("exp_avg", "exp_avg_sq", "mu_product")

    def init(self, param: Tensor, ops: Ops) -> State:
        return {"exp_avg": ops.zeros_like(param), "exp_avg_sq": ops.zeros_like(param),
                "mu_product": ops.scalar_like(param, 1.0)}

    def update(self, param: Tensor, grad: Tensor, state: State, *, lr: float, step: int,
               ops: Ops) -> tuple[Tensor, State]:
        beta1, beta2 = self.betas
        param, g = apply_weight_decay(self, param, grad, lr)
        mu = _mu(beta1, self.momentum_decay, step)
        mu_next = _mu(beta1, self.momentum_decay, step + 1)
        mu_product = state["mu_product"] * mu
        exp_avg = state["exp_avg"] + (g - state["exp_avg"]) * (1.0 - beta1)
        exp_avg_sq = state["exp_avg_sq"] * beta2 + g * g * (1.0 - beta2)
        denom = ops.sqrt(exp_avg_sq / (1.0 - ops.power(beta2, step))) + self.eps
        param = param - g / denom * (lr * (1.0 - mu) / (1.0 - mu_product))
        param = param - exp_avg / denom * (lr * mu_next / (1.0 - mu_product * mu_next))
        return param, {"exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq, "mu_product": mu_product}

    def alternatives(self) -> list[tuple[str, Spec]]:
        """The other decay coupling, where there is a decay (with ``weight_decay=0`` both
        compute the same numbers)."""
        if self.weight_decay == 0.0:
            return []
        return [(f"decoupled_weight_decay={not self.decoupled_weight_decay}",
                 self.replace(decoupled_weight_decay=not self.decoupled_weight_decay))]


RECORD = record(NAdam,
                samples=(NAdam(lr=Cosine(lr=0.05, T_max=30, eta_min=0.001)),
                         NAdam(lr=1e-2, weight_decay=0.01, decoupled_weight_decay=True)),
                case_module="unified_opt.conformance.cases.adam_family")
