r"""Adam (Kingma & Ba, 2015) with L2 weight decay in the gradient.

Update at step :math:`t` (1-based), gradient :math:`g_t` (negated when ``maximize``):

.. math::

    g &\leftarrow g_t + \lambda \theta_{t-1} \\
    m_t &= \beta_1 m_{t-1} + (1-\beta_1)\, g \\
    v_t &= \beta_2 v_{t-1} + (1-\beta_2)\, g^2 \\
    \hat v_t &= \max(\hat v_{t-1}, v_t) \text{ if amsgrad else } v_t \\
    c_1 &= 1-\beta_1^t,\quad c_2 = 1-\beta_2^t
        \quad (c_1 = c_2 = 1 \text{ without bias correction}) \\
    n_t &= m_t \text{, or } \beta_1 m_t + (1-\beta_1) g \text{ with (TF/MindSpore) nesterov}

and, by ``eps_placement``:

.. math::

    \text{outside:}\quad \theta_t &= \theta_{t-1} - \frac{\eta}{c_1}\,
        \frac{n_t}{\sqrt{\hat v_t}/\sqrt{c_2} + \epsilon} \\
    \text{eps\_hat:}\quad \theta_t &= \theta_{t-1} - \frac{\eta\sqrt{c_2}}{c_1}\,
        \frac{n_t}{\sqrt{\hat v_t} + \epsilon} \\
    \text{inside:}\quad \theta_t &= \theta_{t-1} - \frac{\eta}{c_1}\,
        \frac{n_t}{\sqrt{\hat v_t / c_2 + \epsilon}}

Args:
    nesterov: ``True``: the TF/MindSpore Nesterov form, the step's numerator
        :math:`\beta_1 m_t + (1-\beta_1) g` (``mindspore.nn.Adam(use_nesterov=True)``;
        not NAdam); ``False``: :math:`m_t`.

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

from typing import Any

from ..ops import Ops
from ..records import record
from ..schedules import Schedule, Step
from ..spec import Spec, State, Tensor, register, spec_class, spec_dataclass
from ._adam_moments import (
    adam_alternatives,
    adam_moments,
    adam_state_names,
    canonical_adam,
    check_adam_fields,
)
from ._decay import decay_for_parameter, l2_gradient


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

    def _check(self, owner: str) -> dict[str, Any]:
        return check_adam_fields(self, owner)

    def for_parameter(self, name: str | None) -> Spec:
        return decay_for_parameter(self, name)

    def state_names(self) -> tuple[str, ...]:
        return adam_state_names(self)

    def update(self, param: Tensor, grad: Tensor, state: State, *, lr: float, step: int,
               ops: Ops) -> tuple[Tensor, State]:
        g = l2_gradient(self, param, grad)
        new_state, step_size, numerator, denom = adam_moments(self, g, state, step, ops)
        return param - numerator / denom * (lr * step_size), new_state

    def canonical(self) -> Spec:
        return canonical_adam(self)

    def alternatives(self) -> list[tuple[str, Spec]]:
        """:func:`adam_alternatives`, and AdamW's decoupled decay where there is a decay
        (with ``weight_decay=0`` both compute the same numbers)."""
        if self.weight_decay == 0.0:
            return adam_alternatives(self)
        decoupled = spec_class("adamw")(**self.hyperparameters())
        return adam_alternatives(self) + [("decoupled weight decay (AdamW)", decoupled)]


RECORD = record(Adam,
                samples=(Adam(lr=1e-2, eps=1e-3, eps_placement="inside", amsgrad=True),
                         Adam(lr=1e-2, bias_correction=False, nesterov=True, weight_decay=0.1),
                         Adam(lr=Step(lr=1e-2, step_size=10, gamma=0.5), eps_placement="eps_hat",
                              eps=1e-3)),
                case_module="unified_opt.conformance.cases.adam_family",
                nonfinite={"lr": 0.01},
                benchmark=Adam(lr=1e-3))
