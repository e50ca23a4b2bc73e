r"""Adan (Xie et al., 2022): Nesterov momentum through the gradient's difference.

Step :math:`t` (1-based), gradient :math:`g_t` (negated when ``maximize``), ``betas``
:math:`(\beta_1, \beta_2, \beta_3)`, the difference :math:`d_t = g_t - g_{t-1}` with
:math:`d_1 = g_1 - g_1` (0, NaN where :math:`g_1` is not finite):

.. math::

    m_t &= m_{t-1} + (g_t - m_{t-1})(1-\beta_1) \\
    v_t &= v_{t-1} + (d_t - v_{t-1})(1-\beta_2) \\
    u_t &= \beta_2 d_t + g_t \\
    n_t &= \beta_3 n_{t-1} + (1-\beta_3)\, u_t^2 \\
    D_t &= \frac{\sqrt{n_t}}{\sqrt{1-\beta_3^t}} + \epsilon \\
    \theta' &= \theta_{t-1} - \frac{\eta}{1-\beta_1^t}\,\frac{m_t}{D_t}
        - \frac{\eta\,\beta_2}{1-\beta_2^t}\,\frac{v_t}{D_t}

then the weight decay :math:`\lambda`: ``'proximal'`` (the paper's)
:math:`\theta_t = \theta' / (1 + \eta\lambda)`; ``'decoupled'`` the parameter is
multiplied by :math:`1 - \eta\lambda` before the step (AdamW's form). The moments start
at 0 and :math:`g_{t-1}` is kept as the state ``previous_grad``.

Args:
    lr: :math:`\eta`, a float >= 0 or a schedule.
    betas: :math:`(\beta_1, \beta_2, \beta_3)`, each in [0, 1): the decays of the
        gradient's average, of its difference's average and of the second moment.
    eps: :math:`\epsilon` >= 0, added to the bias-corrected root of :math:`n_t`.
    weight_decay: :math:`\lambda` >= 0, applied as ``weight_decay_form`` says.
    weight_decay_form: ``'proximal'`` (the paper's and pytorch-optimizer's default,
        ``weight_decouple=False``) or ``'decoupled'`` (``weight_decouple=True``).
    maximize: ascend instead of descend.
    no_decay_names: shell-style patterns of parameter names that get no decay.

Differences between frameworks
------------------------------
* No framework ships Adan: every backend runs this update (own implementation).
* ``pytorch_optimizer.Adan`` (4.x) computes this update (its per-parameter loop and its
  ``foreach`` form both: averages by ``lerp``, the differences' step
  :math:`\eta\beta_2/(1-\beta_2^t)`), with three departures no knob reaches:
  ``maximize=True`` keeps the first step's gradient before negating it, so its first
  difference is :math:`-2g_1`, not 0; ``max_grad_norm > 0`` scales every gradient by
  :math:`\min(1, c / (\lVert g\rVert + \epsilon))` over all parameters, which this spec
  does not (its ``grad_clip`` divides by the norm without :math:`\epsilon`); and its
  state ``previous_grad`` holds :math:`-g_{t-1}` (its per-parameter loop also negates
  ``p.grad`` in place). ``tests/test_peers.py`` checks it against this spec.
* The reference implementation (sail-sg/Adan) has the same update, its ``no_prox``
  being ``weight_decay_form="decoupled"``.
"""

from __future__ import annotations

import math
from typing import Any

from .. import _validation as v
from ..ops import Ops
from ..records import CaseSketch, Planted, record
from ..schedules import Cosine, Schedule
from ..spec import Spec, State, Tensor, register, spec_dataclass
from ._decay import check_decay, decay_for_parameter

WEIGHT_DECAY_FORMS = ("proximal", "decoupled")


@register
@spec_dataclass
class Adan(Spec):
    __doc__ = __doc__
    name = "adan"

    lr: float | Schedule = 1e-3
    betas: tuple[float, float, float] = (0.98, 0.92, 0.99)
    eps: float = 1e-8
    weight_decay: float = 0.0
    weight_decay_form: str = "proximal"
    maximize: bool = False
    no_decay_names: tuple[str, ...] = ()

    def _check(self, owner: str) -> dict[str, Any]:
        return {"betas": v.check_betas(owner, "betas", self.betas, 3),
                "eps": v.check_range(owner, "eps", self.eps, low=0.0),
                "weight_decay_form": v.check_choice(owner, "weight_decay_form",
                                                    self.weight_decay_form,
                                                    WEIGHT_DECAY_FORMS),
                "maximize": v.check_bool(owner, "maximize", self.maximize),
                **check_decay(self, owner)}

    def for_parameter(self, name: str | None) -> Spec:
        return decay_for_parameter(self, name)

    def state_names(self) -> tuple[str, ...]:
        return ("exp_avg", "exp_avg_diff", "exp_avg_sq", "previous_grad")

    def update(self, param: Tensor, grad: Tensor, state: State, *, lr: float, step: int,
               ops: Ops) -> tuple[Tensor, State]:
        beta1, beta2, beta3 = self.betas
        g = -grad if self.maximize else grad
        diff = g - (g if step == 1 else state["previous_grad"])
        exp_avg = state["exp_avg"] + (g - state["exp_avg"]) * (1.0 - beta1)
        exp_avg_diff = state["exp_avg_diff"] + (diff - state["exp_avg_diff"]) * (1.0 - beta2)
        corrected = diff * beta2 + g
        exp_avg_sq = state["exp_avg_sq"] * beta3 + corrected * corrected * (1.0 - beta3)
        denominator = ops.sqrt(exp_avg_sq) / math.sqrt(1.0 - beta3 ** step) + self.eps
        decay = lr * self.weight_decay
        if decay != 0.0 and self.weight_decay_form == "decoupled":
            param = param * (1.0 - decay)
        param = param - exp_avg / denominator * (lr / (1.0 - beta1 ** step))
        param = param - exp_avg_diff / denominator * (lr * beta2 / (1.0 - beta2 ** step))
        if decay != 0.0 and self.weight_decay_form == "proximal":
            param = param / (1.0 + decay)
        return param, {"exp_avg": exp_avg, "exp_avg_diff": exp_avg_diff,
                       "exp_avg_sq": exp_avg_sq, "previous_grad": g}


_PLAIN = Adan(lr=0.01, eps=1e-3)
_PROXIMAL = Adan(lr=0.02, weight_decay=0.5)
_DECOUPLED = Adan(lr=Cosine(lr=0.02, T_max=40, eta_min=0.001), betas=(0.9, 0.8, 0.999),
                  weight_decay=0.5, weight_decay_form="decoupled", maximize=True,
                  no_decay_names=("*gamma*",))

RECORD = record(
    Adan,
    samples=(_PLAIN, _PROXIMAL, _DECOUPLED),
    planted=(Planted(_PLAIN, {"betas": (0.98, 0.92, 0.999)}),
             Planted(_PLAIN, {"betas": (0.98, 0.0, 0.99)}),
             Planted(_PROXIMAL, {"weight_decay_form": "decoupled"}),
             Planted(_DECOUPLED, {"no_decay_names": ()})),
    cases=(CaseSketch("adan_default", Adan(lr=0.01)),
           CaseSketch("adan_eps_proximal_decay", Adan(lr=0.02, eps=1e-3, weight_decay=0.5),
                      "the paper's proximal decay, eps large enough to show"),
           CaseSketch("adan_decoupled_maximize_cosine", _DECOUPLED,
                      "AdamW-style decay but on ln.gamma, ascending, a cosine schedule")),
    nonfinite={"lr": 0.01},
)
