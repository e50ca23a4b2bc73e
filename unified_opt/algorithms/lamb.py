r"""LAMB (You et al., ICLR 2020): Adam's direction rescaled per tensor by a trust ratio.

Step :math:`t` (1-based), gradient :math:`g`, decay :math:`\lambda` (0 for parameters
named in ``no_decay_names``):

.. math::

    m_t &= \beta_1 m_{t-1} + (1-\beta_1) g, \qquad v_t = \beta_2 v_{t-1} + (1-\beta_2) g^2 \\
    r_t &= \frac{\hat m_t}{\sqrt{\hat v_t} + \epsilon}, \qquad
        \hat m_t = \frac{m_t}{1-\beta_1^t},\ \hat v_t = \frac{v_t}{1-\beta_2^t}
        \quad(\hat m = m,\ \hat v = v \text{ unless } \texttt{bias\_correction="moments"}) \\
    u_t &= r_t + \lambda\,\theta_{t-1} \\
    \phi &= \min(\lVert\theta_{t-1}\rVert, c)
        \quad (c = \texttt{weight\_norm\_clamp}, \infty \text{ when None}) \\
    \rho_t &= \begin{cases} \phi / (\lVert u_t\rVert + \epsilon_{tr}) &
        \lVert\theta_{t-1}\rVert > 0 \text{ and } \lVert u_t\rVert > 0 \\
        1 & \text{otherwise (the zero-norm rule)} \end{cases}
        \qquad \text{only when } \lambda > 0 \text{ or } \texttt{always\_adapt},
        \text{ else } \rho_t = 1 \\
    \theta_t &= \theta_{t-1} - \eta\, s_t\, \rho_t\, u_t, \qquad
        s_t = \begin{cases}
        \frac{\sqrt{1-\beta_2^t}}{1-\beta_1^t} & \texttt{bias\_correction="step"} \\
        \frac{1}{1-\beta_1^t} & \texttt{bias\_correction="first\_moment\_step"} \\
        1 & \text{otherwise} \end{cases}

Norms are over the whole tensor. :math:`\epsilon_{tr}` is ``trust_eps``. The factor
:math:`s_t` multiplies the step outside the trust ratio, so it does not cancel: only
``"moments"`` corrects inside :math:`r_t`, where a scalar factor of :math:`\hat m_t`
alone would (with :math:`\lambda = 0` and no trust eps) cancel against
:math:`\lVert u_t\rVert`.

Args:
    weight_decay: :math:`\lambda` >= 0, added to the Adam direction
        (:math:`u_t = r_t + \lambda\theta_{t-1}`) before the trust ratio; 0 also turns
        the trust ratio off unless ``always_adapt``.
    bias_correction: ``'moments'`` (both moments corrected inside :math:`r_t`: the
        paper, Paddle, MindSpore), ``'none'``, ``'step'`` (the factor
        :math:`\sqrt{1-\beta_2^t}/(1-\beta_1^t)` outside the trust ratio:
        torch-optimizer's ``debias``) or ``'first_moment_step'`` (:math:`1/(1-\beta_1^t)`
        outside it: pytorch-optimizer).
    weight_norm_clamp: :math:`c` > 0, the parameter norm in the trust ratio is clamped
        at it (10 in torch-optimizer and pytorch-optimizer); ``None``: no clamp.
    trust_eps: :math:`\epsilon_{tr}` >= 0 added to the trust ratio's denominator
        (pytorch-optimizer's); 0: none.

Differences between frameworks
------------------------------
* ``paddle.optimizer.Lamb`` is the paper's Algorithm 2 and this spec's defaults:
  ``bias_correction="moments"``, eps outside :math:`\sqrt{\hat v}`, no clamp, no trust
  eps, and **no trust ratio when** :math:`\lambda = 0` unless ``always_adapt=True``.
  Its ``exclude_from_weight_decay_fn(param)`` sets :math:`\lambda = 0`, hence drops the
  trust ratio too: here ``no_decay_names`` (a callable cannot be serialised, so its
  preset refuses one and points here). Paddle's docstring writes :math:`m_t/\beta_1^t`;
  the kernel divides by :math:`1-\beta_1^t` (measured).
* ``mindspore.nn.Lamb`` (its GPU/Ascend kernel; there is none on CPU): the same formula
  with the trust ratio on every parameter (``always_adapt=True``), eps 1e-6, and no
  decay for names containing ``beta``/``gamma``, which keep the trust ratio.
* ``torch_optimizer.Lamb``: ``bias_correction="none"`` (``"step"`` with ``debias=True``,
  a factor outside the trust ratio), ``weight_norm_clamp=10``, ``always_adapt=True``.
* ``pytorch_optimizer.Lamb`` adds eps to the trust-ratio denominator (``trust_eps``),
  clamps at 10, computes the trust ratio on every parameter (``always_adapt=True``) and
  by default (``adam_debias=False``) divides its step by :math:`1-\beta_1^t` alone,
  outside the trust ratio: ``bias_correction="first_moment_step"`` (10x the paper's
  step at step 1 with :math:`\beta_1 = 0.9`; read from its source,
  ``pytorch_optimizer/optimizer/lamb.py``, 4.1, and checked against it). Its
  ``adam_debias=True`` is ``bias_correction="none"``. By default it also decays
  decoupled, multiplying the parameter by :math:`1-\eta\lambda` before the norms
  (``weight_decouple=True``, with a default ``weight_decay`` of 0): that is not a knob
  here.
"""

from __future__ import annotations

import math
from typing import Any

from .. import _validation as v
from ..ops import Ops
from ..records import Planted, record
from ..schedules import Schedule
from ..spec import Spec, State, Tensor, register, spec_dataclass
from ._alternatives import distinct
from ._decay import canonical_adapt, check_decay, decay_for_parameter

BIAS_CORRECTIONS = ("moments", "none", "step", "first_moment_step")


def trust_ratio(param, update, ops, norm_clamp=None, trust_eps=0.0):
    """:math:`\\phi(\\lVert\\theta\\rVert) / (\\lVert u\\rVert + \\epsilon)`, 1 when
    either norm is 0 (Paddle, MindSpore and both torch peers agree on this rule)."""
    weight_norm = ops.norm(param)
    update_norm = ops.norm(update)
    one = ops.full_like(weight_norm, 1.0)
    phi = weight_norm if norm_clamp is None else \
        ops.minimum(weight_norm, ops.full_like(weight_norm, norm_clamp))
    ratio = phi / (update_norm + trust_eps)
    return ops.where(weight_norm > 0.0, ops.where(update_norm > 0.0, ratio, one), one)


@register
@spec_dataclass
class Lamb(Spec):
    __doc__ = __doc__
    name = "lamb"

    lr: float | Schedule = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-6
    weight_decay: float = 0.01
    bias_correction: str = "moments"
    always_adapt: bool = False
    weight_norm_clamp: float | None = None
    trust_eps: float = 0.0
    no_decay_names: tuple[str, ...] = ()

    def _check(self, owner: str) -> dict[str, Any]:
        clamp = self.weight_norm_clamp
        if clamp is not None:
            clamp = v.check_range(owner, "weight_norm_clamp", clamp, low=0.0, low_open=True)
        return {"betas": v.check_betas(owner, "betas", self.betas),
                "eps": v.check_range(owner, "eps", self.eps, low=0.0),
                "bias_correction": v.check_choice(owner, "bias_correction",
                                                  self.bias_correction, BIAS_CORRECTIONS),
                "always_adapt": v.check_bool(owner, "always_adapt", self.always_adapt),
                "weight_norm_clamp": clamp,
                "trust_eps": v.check_range(owner, "trust_eps", self.trust_eps, low=0.0),
                **check_decay(self, owner)}

    def for_parameter(self, name: str | None) -> Spec:
        return decay_for_parameter(self, name)

    def state_names(self, shape: tuple[int, ...] | None = None) -> tuple[str, ...]:
        return ("exp_avg", "exp_avg_sq")

    def update(self, param: Tensor, grad: Tensor, state: State, *, lr: float, step: int,
               ops: Ops) -> tuple[Tensor, State]:
        beta1, beta2 = self.betas
        exp_avg = state["exp_avg"] * beta1 + grad * (1.0 - beta1)
        exp_avg_sq = state["exp_avg_sq"] * beta2 + grad * grad * (1.0 - beta2)
        if self.bias_correction == "moments":
            direction = (exp_avg / (1.0 - ops.power(beta1, step))) / \
                (ops.sqrt(exp_avg_sq / (1.0 - ops.power(beta2, step))) + self.eps)
        else:
            direction = exp_avg / (ops.sqrt(exp_avg_sq) + self.eps)
        if self.weight_decay != 0.0:
            direction = direction + param * self.weight_decay
        step_size = lr
        if self.bias_correction == "step":
            step_size = (lr * math.sqrt(1.0 - ops.power(beta2, step))
                         / (1.0 - ops.power(beta1, step)))
        elif self.bias_correction == "first_moment_step":
            step_size = lr / (1.0 - ops.power(beta1, step))
        if self.weight_decay > 0.0 or self.always_adapt:
            scale = trust_ratio(param, direction, ops, self.weight_norm_clamp,
                                self.trust_eps) * step_size
        else:
            scale = step_size
        return param - direction * scale, {"exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}

    def canonical(self) -> Spec:
        return canonical_adapt(self)

    def alternatives(self) -> list[tuple[str, Spec]]:
        """Other frameworks' Lamb knobs, but ``always_adapt`` where every parameter
        decays (then it does not act: :meth:`canonical`). ``trust_eps`` shows on a tensor
        whose gradients stay small (``unified-opt check``'s quiet stream: near 1e-12 the
        update's norm is of eps's size, and eps in the ratio's denominator moves it)."""
        out = [(f"bias_correction={other!r}", self.replace(bias_correction=other))
               for other in BIAS_CORRECTIONS if other != self.bias_correction]
        out.append((f"always_adapt={not self.always_adapt}",
                    self.replace(always_adapt=not self.always_adapt)))
        out.append(("weight_norm_clamp=10 (the torch peers' clamp)" if
                    self.weight_norm_clamp is None else "weight_norm_clamp=None",
                    self.replace(weight_norm_clamp=10.0 if self.weight_norm_clamp is None
                                 else None)))
        out.append((f"trust_eps={self.eps if not self.trust_eps else 0.0!r}",
                    self.replace(trust_eps=self.eps if not self.trust_eps else 0.0)))
        return distinct(self, out)


_CLAMPED = Lamb(lr=0.01, weight_decay=0.05, weight_norm_clamp=2.0, always_adapt=True)

RECORD = record(Lamb,
                samples=(_CLAMPED,
                         Lamb(lr=0.01, weight_decay=0.0, bias_correction="step",
                              weight_norm_clamp=2.0, always_adapt=True, trust_eps=0.01)),
                planted=(Planted(_CLAMPED, {"weight_norm_clamp": None}),),
                case_module="unified_opt.conformance.cases.large_batch",
                nonfinite={"lr": 0.01},
                benchmark=Lamb(lr=1e-3, weight_decay=0.01))
