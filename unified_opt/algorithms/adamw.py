r"""AdamW (Loshchilov & Hutter, 2019): Adam with decoupled weight decay.

The moments, bias correction and eps placement are Adam's
(:mod:`unified_opt.algorithms.adam`, written once there); the gradient carries no
L2 term. With :math:`\delta = \eta\lambda` (``decay_times_lr=True``) or
:math:`\delta = \lambda`, and :math:`u_t` Adam's step
(:math:`\theta_t = \theta_{t-1} - u_t`):

.. math::

    \text{before\_update:}\quad \theta_t &= (1-\delta)\,\theta_{t-1} - u_t(\theta)
        \quad\text{(the decay is applied first, as torch/Paddle do)}\\
    \text{in\_update:}\quad \theta_t &= \theta_{t-1} - (u_t + \delta\,\theta_{t-1})

The two forms agree in exact arithmetic and differ only by rounding.

Args:
    weight_decay: the decoupled decay coefficient :math:`\lambda` >= 0 (a float or a
        schedule), applied to the parameter, never added to the gradient.
    nesterov: ``True``: the TF/MindSpore Nesterov form of Adam's numerator
        (:math:`\beta_1 m_t + (1-\beta_1) g`); ``False``: :math:`m_t`.
    decay_form: ``'before_update'`` (the parameter is multiplied by
        :math:`1-\delta` first: torch, Paddle, MindSpore's experimental AdamW) or
        ``'in_update'`` (:math:`\delta\theta` is added to the step:
        ``mindspore.nn.AdamWeightDecay``). Equal in exact arithmetic.
    decay_times_lr: ``True``: :math:`\delta = \eta\lambda` (every framework);
        ``False``: :math:`\delta = \lambda` (TF-Addons).

Differences between frameworks
------------------------------
* ``torch.optim.AdamW``, ``paddle.optimizer.AdamW`` and
  ``mindspore.experimental.optim.AdamW``: ``before_update``, ``decay_times_lr``,
  bias correction, eps outside :math:`\sqrt{\hat v}`. Paddle decays only parameters
  for which ``apply_decay_param_fun(name)`` is true.
* ``mindspore.nn.AdamWeightDecay``: **no bias correction** (``bias_correction=False``),
  eps 1e-6, decay inside the lr-scaled update (``in_update``), and no decay for
  parameters named ``*beta*`` / ``*gamma*``.
* Some libraries (TF-Addons) do not multiply the decay by the lr:
  ``decay_times_lr=False``.
"""

from __future__ import annotations

from typing import Any

from .. import _validation as v
from ..ops import Ops
from ..records import record
from ..schedules import Schedule
from ..spec import Spec, State, Tensor, register, spec_class, spec_dataclass
from ._adam_moments import (
    adam_alternatives,
    adam_moments,
    adam_state_names,
    canonical_adam,
    check_adam_fields,
)
from ._decay import decay_for_parameter

DECAY_FORMS = ("before_update", "in_update")


@register
@spec_dataclass
class AdamW(Spec):
    __doc__ = __doc__
    name = "adamw"
    rounding_knobs = ("decay_form",)

    lr: float | Schedule = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 1e-2
    amsgrad: bool = False
    maximize: bool = False
    eps_placement: str = "outside"
    bias_correction: bool = True
    nesterov: bool = False
    decay_form: str = "before_update"
    decay_times_lr: bool = True
    no_decay_names: tuple[str, ...] = ()

    def _check(self, owner: str) -> dict[str, Any]:
        return {**check_adam_fields(self, owner),
                "decay_form": v.check_choice(owner, "decay_form", self.decay_form,
                                             DECAY_FORMS),
                "decay_times_lr": v.check_bool(owner, "decay_times_lr", self.decay_times_lr)}

    def for_parameter(self, name: str | None) -> Spec:
        return decay_for_parameter(self, name)

    def state_names(self) -> tuple[str, ...]:
        return adam_state_names(self)

    def update(self, param: Tensor, grad: Tensor, state: State, *, lr: float, step: int,
               ops: Ops) -> tuple[Tensor, State]:
        g = -grad if self.maximize else grad
        decay = self.weight_decay * (lr if self.decay_times_lr else 1.0)
        if self.decay_form == "before_update" and decay != 0.0:
            param = param * (1.0 - decay)
        new_state, step_size, numerator, denom = adam_moments(self, g, state, step, ops)
        change = numerator / denom * (lr * step_size)
        if self.decay_form == "in_update" and decay != 0.0:
            change = change + param * decay
        return param - change, new_state

    def canonical(self) -> Spec:
        return canonical_adam(self)

    def alternatives(self) -> list[tuple[str, Spec]]:
        """:func:`adam_alternatives`, and where there is a decay (with ``weight_decay=0``
        they compute the spec's numbers) Adam's coupled decay and the other
        ``decay_times_lr``."""
        if self.weight_decay == 0.0:
            return adam_alternatives(self)
        fields = {k: val for k, val in self.hyperparameters().items()
                  if k not in ("decay_form", "decay_times_lr")}
        return adam_alternatives(self) + [
            ("coupled L2 weight decay (Adam)", spec_class("adam")(**fields)),
            (f"decay_times_lr={not self.decay_times_lr}",
             self.replace(decay_times_lr=not self.decay_times_lr))]


RECORD = record(AdamW,
                samples=(AdamW(lr=1e-2, decay_form="in_update", bias_correction=False, eps=1e-6,
                               weight_decay=0.1, no_decay_names=("*gamma*",)),
                         AdamW(lr=1e-2, decay_times_lr=False, weight_decay=1e-3)),
                case_module="unified_opt.conformance.cases.adam_family",
                nonfinite={"lr": 0.01},
                benchmark=AdamW(lr=1e-3, weight_decay=0.01))
