r"""Adam (Kingma & Ba, 2015) with L2 weight decay in the gradient.

Update at step :math:`t` (1-based), gradient :math:`g_t` (negated when ``maximize``):

.. math::

    g &\leftarrow g_t + \lambda \theta_{t-1} \\
    m_t &= \beta_1 m_{t-1} + (1-\beta_1)\, g \\
    v_t &= \beta_2 v_{t-1} + (1-\beta_2)\, g^2 \\
    \hat v_t &= \max(\hat v_{t-1}, v_t) \text{ if amsgrad else } v_t \\
    c_1 &= 1-\beta_1^t,\quad c_2 = 1-\beta_2^t \quad (c_1 = c_2 = 1 \text{ without bias correction}) \\
    n_t &= m_t \text{, or } \beta_1 m_t + (1-\beta_1) g \text{ with (TF/MindSpore) nesterov}

and, by ``eps_placement``:

.. math::

    \text{outside:}\quad \theta_t &= \theta_{t-1} - \frac{\eta}{c_1}\,
        \frac{n_t}{\sqrt{\hat v_t}/\sqrt{c_2} + \epsilon} \\
    \text{eps\_hat:}\quad \theta_t &= \theta_{t-1} - \frac{\eta\sqrt{c_2}}{c_1}\,
        \frac{n_t}{\sqrt{\hat v_t} + \epsilon} \\
    \text{inside:}\quad \theta_t &= \theta_{t-1} - \frac{\eta}{c_1}\,
        \frac{n_t}{\sqrt{\hat v_t / c_2 + \epsilon}}

Differences between frameworks
------------------------------
* ``torch.optim.Adam`` and ``paddle.optimizer.Adam``: ``eps_placement="outside"``
  (Paddle writes it as :math:`\epsilon\sqrt{c_2}` in the denominator with the bias
  correction folded into the lr; algebraically the same). Paddle accumulates
  :math:`\beta^t` by repeated float32 multiplication, torch uses ``beta ** step``.
* ``mindspore.nn.Adam`` and ``mindspore.experimental.optim.Adam``: ``eps_placement=
  "eps_hat"`` (TF/Keras form): the effective epsilon is :math:`\epsilon/\sqrt{c_2}`,
  large in early steps. ``nn.Adam(use_nesterov=True)`` is the ``nesterov`` knob here
  (not NAdam). ``experimental.optim.Adam(amsgrad=True)`` silently ignores amsgrad on
  CPU; ``nn.Adam(use_amsgrad=True)`` applies it.
* MindSpore ``nn`` optimizers skip weight decay for parameters whose name contains
  ``"beta"`` or ``"gamma"`` (``no_decay_names``); torch and Paddle decay everything.
* For decoupled decay see :mod:`unified_opt.algorithms.adamw`.
"""

from __future__ import annotations

import math

from .. import _validation as v
from ..schedules import Schedule
from ..spec import Spec, register, spec_dataclass
from ._decay import check_decay, decay_for_parameter, l2_gradient

EPS_PLACEMENTS = ("outside", "eps_hat", "inside")


def check_adam_fields(spec, owner: str) -> dict:
    """Checks shared by Adam and AdamW."""
    return {"betas": v.check_betas(owner, "betas", spec.betas),
            "eps": v.check_range(owner, "eps", spec.eps, low=0.0, low_open=True),
            "amsgrad": v.check_bool(owner, "amsgrad", spec.amsgrad),
            "maximize": v.check_bool(owner, "maximize", spec.maximize),
            "eps_placement": v.check_choice(owner, "eps_placement", spec.eps_placement,
                                            EPS_PLACEMENTS),
            "bias_correction": v.check_bool(owner, "bias_correction", spec.bias_correction),
            "nesterov": v.check_bool(owner, "nesterov", spec.nesterov),
            **check_decay(spec, owner)}


def adam_state_names(spec) -> tuple[str, ...]:
    return ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if spec.amsgrad else ())


def adam_moments(spec, g, state, step, ops):
    """New moments and the pieces of the step: ``(state, step_size, numerator, denom)``
    with ``param -= step_size * numerator / denom``."""
    beta1, beta2 = spec.betas
    exp_avg = state["exp_avg"] + (g - state["exp_avg"]) * (1.0 - beta1)
    exp_avg_sq = state["exp_avg_sq"] * beta2 + g * g * (1.0 - beta2)
    new_state = {"exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}
    second = exp_avg_sq
    if spec.amsgrad:
        second = ops.maximum(state["max_exp_avg_sq"], exp_avg_sq)
        new_state["max_exp_avg_sq"] = second
    if spec.bias_correction:
        bc1, bc2 = 1.0 - beta1 ** step, 1.0 - beta2 ** step
    else:
        bc1 = bc2 = 1.0
    numerator = exp_avg * beta1 + g * (1.0 - beta1) if spec.nesterov else exp_avg
    if spec.eps_placement == "outside":
        step_size, denom = 1.0 / bc1, ops.sqrt(second) / math.sqrt(bc2) + spec.eps
    elif spec.eps_placement == "eps_hat":
        step_size, denom = math.sqrt(bc2) / bc1, ops.sqrt(second) + spec.eps
    else:
        step_size, denom = 1.0 / bc1, ops.sqrt(second / bc2 + spec.eps)
    return new_state, step_size, numerator, denom


def adam_alternatives(spec) -> list:
    """Variants that other frameworks' Adams compute, for the failure explainer."""
    out = []
    for placement in EPS_PLACEMENTS:
        if placement != spec.eps_placement:
            out.append((f"eps_placement={placement!r}", spec.replace(eps_placement=placement)))
    out.append((f"bias_correction={not spec.bias_correction}",
                spec.replace(bias_correction=not spec.bias_correction)))
    out.append((f"amsgrad={not spec.amsgrad}", spec.replace(amsgrad=not spec.amsgrad)))
    out.append((f"nesterov={not spec.nesterov}", spec.replace(nesterov=not spec.nesterov)))
    return out


@register
@spec_dataclass
class Adam(Spec):
    __doc__ = __doc__
    name = "adam"

    lr: float | Schedule = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    amsgrad: bool = False
    maximize: bool = False
    eps_placement: str = "outside"
    bias_correction: bool = True
    nesterov: bool = False
    no_decay_names: tuple[str, ...] = ()

    def _check(self, owner):
        return check_adam_fields(self, owner)

    def for_parameter(self, name):
        return decay_for_parameter(self, name)

    def state_names(self):
        return adam_state_names(self)

    def update(self, param, grad, state, *, lr, step, ops):
        g = l2_gradient(self, param, grad)
        new_state, step_size, numerator, denom = adam_moments(self, g, state, step, ops)
        return param - numerator / denom * (lr * step_size), new_state

    def alternatives(self):
        from .adamw import AdamW

        decoupled = AdamW(**{k: val for k, val in self.hyperparameters().items()})
        return adam_alternatives(self) + [("decoupled weight decay (AdamW)", decoupled)]
