r"""AdEMAMix (Pagliardini, Ablin & Grangier, 2024): Adam with a second, slow momentum.

Step :math:`t` (1-based), gradient :math:`g` (negated when ``maximize``), ``betas``
:math:`(\beta_1, \beta_2, \beta_3)`:

.. math::

    m_1 &\leftarrow m_1 + (g - m_1)(1-\beta_1), \qquad
    m_2 \leftarrow m_2 + (g - m_2)(1-\beta_{3,t}), \qquad
    v \leftarrow \beta_2 v + (1-\beta_2)\, g^2 \\
    \theta &\leftarrow \theta - \eta\,
        \frac{m_1 / (1-\beta_1^t) + \alpha_t\, m_2}{\sqrt{v} / \sqrt{1-\beta_2^t} + \epsilon}

The slow momentum :math:`m_2` has no bias correction. Without warm-ups
:math:`\alpha_t = \alpha` and :math:`\beta_{3,t} = \beta_3`; with ``alpha_warmup``
:math:`T_\alpha` and ``beta3_warmup`` :math:`T_\beta` (the paper's schedulers):

.. math::

    \alpha_t = \min\Big(\frac{t\,\alpha}{T_\alpha}, \alpha\Big), \qquad
    \beta_{3,t} = \min\Big(\exp\frac{\ln\beta_1 \ln\beta_3}
        {(1 - t/T_\beta)\ln\beta_3 + (t/T_\beta)\ln\beta_1},\ \beta_3\Big)

Weight decay :math:`\lambda`: with ``decoupled_weight_decay`` the parameter is
multiplied by :math:`1 - \delta` before the step, :math:`\delta = \eta\lambda`
(``decay_times_lr``) or :math:`\lambda`; otherwise :math:`\lambda\theta` is added to the
gradient (L2) before the moments.

Args:
    betas: :math:`(\beta_1, \beta_2, \beta_3)`, each in (0, 1): the fast momentum's, the
        second moment's and the slow momentum's decays (:math:`\beta_1, \beta_3 > 0`:
        the warm-up takes their logarithms).
    alpha: :math:`\alpha` >= 0, the slow momentum's weight.
    alpha_warmup: :math:`T_\alpha`, the steps over which :math:`\alpha_t` rises
        linearly to :math:`\alpha` (an int >= 1), or ``None``: no warm-up.
    beta3_warmup: :math:`T_\beta`, the steps over which :math:`\beta_{3,t}` rises from
        :math:`\beta_1` to :math:`\beta_3` (an int >= 1), or ``None``: no warm-up.
    decoupled_weight_decay: ``True``: the parameter is multiplied by
        :math:`1-\delta` (the paper's AdamW form); ``False``: L2 in the gradient.
    decay_times_lr: ``True``: :math:`\delta = \eta\lambda`; ``False``:
        :math:`\delta = \lambda` (pytorch-optimizer's ``fixed_decay=True``).

Differences between frameworks
------------------------------
* No framework ships AdEMAMix: every backend runs this update (own implementation).
* ``pytorch_optimizer.AdEMAMix`` (4.x, both of its loops) computes this update with one
  warm-up length for both schedulers (``t_alpha_beta3`` is ``alpha_warmup`` and
  ``beta3_warmup`` at once) and L2 decay by default (``weight_decouple=False`` is
  ``decoupled_weight_decay=False``; ``fixed_decay=True`` is ``decay_times_lr=False``).
  Its ``cautious`` and ``stable_adamw`` options are not knobs here.
* The authors' code (apple/ml-ademamix) warms :math:`\beta_3` up by interpolating
  half-lives, :math:`f^{-1}((1-a) f(\beta_1) + a f(\beta_3))` with
  :math:`f(\beta) = \ln 0.5 / \ln(\beta + 10^{-8}) - 1`, which gives other values than
  the paper's formula above during the warm-up; after it the two agree.
"""

from __future__ import annotations

import math
from typing import Any

from .. import _validation as v
from ..ops import Ops
from ..records import CaseSketch, Planted, record
from ..schedules import Schedule
from ..spec import Spec, State, Tensor, register, spec_dataclass
from ._decay import check_decay, decay_for_parameter, decayed


def slow_beta(beta1: float, beta3: float, warmup: int | None, step: int) -> float:
    """:math:`\\beta_{3,t}`, the paper's warm-up (see the module)."""
    if warmup is None:
        return beta3
    fraction = step / warmup
    log1, log3 = math.log(beta1), math.log(beta3)
    return min(math.exp(log1 * log3 / ((1.0 - fraction) * log3 + fraction * log1)), beta3)


def _check_warmup(owner: str, name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{owner}: {name} must be an int >= 1 or None, got {value!r}")
    if value < 1:
        raise ValueError(f"{owner}: {name} must be >= 1 or None, got {value!r}")
    return value


@register
@spec_dataclass
class AdEMAMix(Spec):
    __doc__ = __doc__
    name = "ademamix"

    lr: float | Schedule = 1e-3
    betas: tuple[float, float, float] = (0.9, 0.999, 0.9999)
    alpha: float = 5.0
    alpha_warmup: int | None = None
    beta3_warmup: int | None = None
    eps: float = 1e-8
    weight_decay: float = 0.0
    decoupled_weight_decay: bool = True
    decay_times_lr: bool = True
    maximize: bool = False
    no_decay_names: tuple[str, ...] = ()

    def _check(self, owner: str) -> dict[str, Any]:
        betas = v.check_betas(owner, "betas", self.betas, 3)
        for i in (0, 2):
            if betas[i] == 0.0:
                raise ValueError(f"{owner}: betas[{i}] must be > 0 (the warm-up takes its "
                                 f"logarithm), got {self.betas!r}")
        return {"betas": betas,
                "alpha": v.check_range(owner, "alpha", self.alpha, low=0.0),
                "alpha_warmup": _check_warmup(owner, "alpha_warmup", self.alpha_warmup),
                "beta3_warmup": _check_warmup(owner, "beta3_warmup", self.beta3_warmup),
                "eps": v.check_range(owner, "eps", self.eps, low=0.0),
                "decoupled_weight_decay": v.check_bool(owner, "decoupled_weight_decay",
                                                       self.decoupled_weight_decay),
                "decay_times_lr": v.check_bool(owner, "decay_times_lr", self.decay_times_lr),
                "maximize": v.check_bool(owner, "maximize", self.maximize),
                **check_decay(self, owner)}

    def for_parameter(self, name: str | None) -> Spec:
        return decay_for_parameter(self, name)

    def state_names(self) -> tuple[str, ...]:
        return ("exp_avg", "exp_avg_sq", "exp_avg_slow")

    def update(self, param: Tensor, grad: Tensor, state: State, *, lr: float, step: int,
               ops: Ops) -> tuple[Tensor, State]:
        beta1, beta2, beta3 = self.betas
        g = -grad if self.maximize else grad
        if self.weight_decay != 0.0:
            if self.decoupled_weight_decay:
                param = decayed(param, self.weight_decay * (lr if self.decay_times_lr else 1.0))
            else:
                g = g + param * self.weight_decay
        alpha = self.alpha if self.alpha_warmup is None else \
            min(step * self.alpha / self.alpha_warmup, self.alpha)
        beta3_t = slow_beta(beta1, beta3, self.beta3_warmup, step)
        exp_avg = state["exp_avg"] + (g - state["exp_avg"]) * (1.0 - beta1)
        exp_avg_sq = state["exp_avg_sq"] * beta2 + g * g * (1.0 - beta2)
        exp_avg_slow = state["exp_avg_slow"] + (g - state["exp_avg_slow"]) * (1.0 - beta3_t)
        denominator = ops.sqrt(exp_avg_sq) / math.sqrt(1.0 - beta2 ** step) + self.eps
        direction = exp_avg / (1.0 - beta1 ** step) + exp_avg_slow * alpha
        param = param - direction / denominator * lr
        return param, {"exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq,
                       "exp_avg_slow": exp_avg_slow}


_PLAIN = AdEMAMix(lr=0.01, eps=1e-3)
_WARMED = AdEMAMix(lr=0.01, betas=(0.9, 0.99, 0.999), alpha=8.0, alpha_warmup=30,
                   beta3_warmup=20, weight_decay=0.5, no_decay_names=("*gamma*",))
_COUPLED = AdEMAMix(lr=0.01, weight_decay=0.3, decoupled_weight_decay=False, maximize=True)

RECORD = record(
    AdEMAMix,
    samples=(_PLAIN, _WARMED, _COUPLED,
             AdEMAMix(lr=0.01, weight_decay=0.3, decay_times_lr=False, alpha=2.0)),
    planted=(Planted(_PLAIN, {"alpha": 4.0}),
             Planted(_WARMED, {"alpha_warmup": 20}),
             Planted(_WARMED, {"beta3_warmup": None}),
             Planted(_COUPLED, {"decoupled_weight_decay": True})),
    cases=(CaseSketch("ademamix_default", AdEMAMix(lr=0.01)),
           CaseSketch("ademamix_warmups_decoupled_decay", _WARMED,
                      "alpha and beta3 warm-ups of other lengths, AdamW-style decay but "
                      "on ln.gamma"),
           CaseSketch("ademamix_l2_maximize", _COUPLED, "L2 decay in the gradient, ascending")),
    nonfinite={"lr": 0.01},
)
