r"""RAdam (Liu et al., 2020): Adam with the variance rectification term.

With :math:`\rho_\infty = 2/(1-\beta_2) - 1` and
:math:`\rho_t = \rho_\infty - 2t\beta_2^t/(1-\beta_2^t)`:

.. math::

    m_t &= \beta_1 m_{t-1} + (1-\beta_1) g, \qquad v_t = \beta_2 v_{t-1} + (1-\beta_2) g^2,
    \qquad \hat m_t = m_t / (1-\beta_1^t)\\
    r_t &= \sqrt{\frac{(\rho_t-4)(\rho_t-2)\rho_\infty}{(\rho_\infty-4)(\rho_\infty-2)\rho_t}}\\
    \theta_t &= \theta_{t-1} - \eta\,\hat m_t\, r_t\, \frac{\sqrt{1-\beta_2^t}}{\sqrt{v_t}+\epsilon}
        \quad\text{if } \rho_t > \text{rectify_threshold, else}\quad \theta_{t-1} - \eta\,\hat m_t

With ``unrectified_step="none"`` the steps before rectification leave the parameter as
it is, :math:`\theta_t = \theta_{t-1}`, and take no weight decay either (the moments
still move, on the gradient without the L2 term).

Weight decay is L2 in the gradient, or :math:`\theta \leftarrow (1-\eta\lambda)\theta`
first with ``decoupled_weight_decay`` (torch's RAdamW form).

Args:
    unrectified_step: what a step before rectification does: ``'momentum'`` (the
        un-adapted momentum step :math:`\eta\,\hat m_t` after the decay: torch's,
        Paddle's and MindSpore's) or ``'none'`` (no step, no decay:
        ``pytorch_optimizer.RAdam``'s default ``degenerated_to_sgd=False``).
    rectify_threshold: the rectified step is taken once :math:`\rho_t` exceeds it (5,
        torch's, Paddle's and MindSpore's; the paper's 4); before that, the
        un-adapted momentum step :math:`\eta\,\hat m_t`. A float > 0.

Differences between frameworks
------------------------------
* torch ``RAdam``, ``paddle.optimizer.RAdam`` and ``mindspore.experimental.optim.RAdam``:
  threshold 5 and eps on :math:`\sqrt{v_t}` *before* the bias correction (the "eps-hat"
  placement). With :math:`\beta_2 = 0.999` the rectified branch starts at step 6.
* Other implementations rectify from another threshold (the paper's 4, or 5 with
  ``>=``, which differs only if :math:`\rho_t` hits 5 exactly): ``rectify_threshold``.
* ``pytorch_optimizer.RAdam``: threshold 5 with ``>=``, and by default
  (``degenerated_to_sgd=False``) no step and no decay before rectification:
  ``unrectified_step="none"``; its decay is decoupled by default
  (``weight_decouple=True``: ``decoupled_weight_decay=True``). With
  ``weight_decouple=False`` it decays nothing at all (its per-parameter step hands no
  gradient to the L2 term; measured: ``check`` names ``weight_decay=0``).
"""

from __future__ import annotations

import math
from typing import Any

from .. import _validation as v
from ..ops import Ops
from ..records import record
from ..schedules import Schedule
from ..spec import Spec, State, Tensor, register, spec_dataclass
from ._decay import apply_weight_decay, check_decay, decay_for_parameter

#: what a step before rectification does (``RAdam.unrectified_step``)
UNRECTIFIED_STEPS = ("momentum", "none")


@register
@spec_dataclass
class RAdam(Spec):
    __doc__ = __doc__
    name = "radam"

    lr: float | Schedule = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    decoupled_weight_decay: bool = False
    maximize: bool = False
    rectify_threshold: float = 5.0
    unrectified_step: str = "momentum"
    no_decay_names: tuple[str, ...] = ()

    def _check(self, owner: str) -> dict[str, Any]:
        return {"betas": v.check_betas(owner, "betas", self.betas),
                "eps": v.check_range(owner, "eps", self.eps, low=0.0, low_open=True),
                "decoupled_weight_decay": v.check_bool(owner, "decoupled_weight_decay",
                                                       self.decoupled_weight_decay),
                "maximize": v.check_bool(owner, "maximize", self.maximize),
                "rectify_threshold": v.check_range(owner, "rectify_threshold",
                                                   self.rectify_threshold, low=4.0),
                "unrectified_step": v.check_choice(owner, "unrectified_step",
                                                   self.unrectified_step, UNRECTIFIED_STEPS),
                **check_decay(self, owner)}

    def for_parameter(self, name: str | None) -> Spec:
        return decay_for_parameter(self, name)

    def state_names(self) -> tuple[str, ...]:
        return ("exp_avg", "exp_avg_sq")

    def update(self, param: Tensor, grad: Tensor, state: State, *, lr: float, step: int,
               ops: Ops) -> tuple[Tensor, State]:
        beta1, beta2 = self.betas
        bc1, bc2 = 1.0 - ops.power(beta1, step), 1.0 - ops.power(beta2, step)
        rho_inf = 2.0 / (1.0 - beta2) - 1.0
        rho_t = rho_inf - 2.0 * step * ops.power(beta2, step) / bc2
        rectified = rho_t > self.rectify_threshold
        if rectified or self.unrectified_step == "momentum":
            param, g = apply_weight_decay(self, param, grad, lr)
        else:
            g = -grad if self.maximize else grad     # no step, so no decay
        exp_avg = state["exp_avg"] + (g - state["exp_avg"]) * (1.0 - beta1)
        exp_avg_sq = state["exp_avg_sq"] * beta2 + g * g * (1.0 - beta2)
        corrected = exp_avg / bc1
        if rectified:
            rect = math.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf /
                             ((rho_inf - 4) * (rho_inf - 2) * rho_t))
            adaptive = math.sqrt(bc2) / (ops.sqrt(exp_avg_sq) + self.eps)
            param = param - corrected * adaptive * (lr * rect)
        elif self.unrectified_step == "momentum":
            param = param - corrected * lr
        return param, {"exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}

    def alternatives(self) -> list[tuple[str, Spec]]:
        """The other rectification threshold, the other step before rectification and,
        where there is a decay (with ``weight_decay=0`` both compute the same numbers),
        the other decay coupling."""
        other = 4.0 if self.rectify_threshold != 4.0 else 5.0
        out = [(f"rectify_threshold={other:g}", self.replace(rectify_threshold=other))]
        step = "none" if self.unrectified_step == "momentum" else "momentum"
        out.append((f"unrectified_step={step!r}", self.replace(unrectified_step=step)))
        if self.weight_decay != 0.0:
            out.append((f"decoupled_weight_decay={not self.decoupled_weight_decay}",
                        self.replace(decoupled_weight_decay=not self.decoupled_weight_decay)))
        return out


RECORD = record(RAdam,
                samples=(RAdam(lr=1e-2, rectify_threshold=4.0),
                         RAdam(lr=1e-2, weight_decay=0.1, decoupled_weight_decay=True,
                               unrectified_step="none"),
                         RAdam(lr=1e-2, weight_decay=0.1, decoupled_weight_decay=True)),
                case_module="unified_opt.conformance.cases.adam_family")
