r"""Proximal Adagrad: an Adagrad step followed by the proximal step of L1 and L2
regularization (forward-backward splitting, Duchi & Singer, 2009, with Adagrad's
per-coordinate step sizes, Duchi et al., 2011).

Step :math:`t` with lr :math:`\eta`, gradient :math:`g` (negated when ``maximize``, plus
the L2 term :math:`\lambda\theta_{t-1}` of ``weight_decay``):

.. math::

    s_t &= s_{t-1} + g^2 \qquad (s_0 = \texttt{initial_accumulator_value})\\
    \alpha_t &= \eta / \sqrt{s_t}\\
    x &= \theta_{t-1} - \alpha_t\, g\\
    \theta_t &= \frac{\operatorname{sign}(x)}{1 + \gamma\lambda_2}\,
        \max\big(|x| - \gamma\lambda_1,\ 0\big)

with :math:`\lambda_1` = ``l1``, :math:`\lambda_2` = ``l2`` and the step :math:`\gamma`
of the proximal operator: :math:`\gamma = \alpha_t`, the step just taken
(``shrinkage_lr='adaptive'``: the proximal step of the adaptive step, the paper's
form), or :math:`\gamma = \eta` (``shrinkage_lr='constant'``, the formula MindSpore
and TensorFlow document). With :math:`\lambda_1 = 0` the shrink is
:math:`\theta_t = x / (1 + \gamma\lambda_2)`.

Args:
    l1: :math:`\lambda_1` >= 0, the L1 regularization strength: the proximal step
        moves each coordinate :math:`\gamma\lambda_1` towards 0 and stops at 0.
    l2: :math:`\lambda_2` >= 0, the L2 regularization strength: the proximal step
        divides by :math:`1 + \gamma\lambda_2`.
    initial_accumulator_value: :math:`s_0` >= 0, the sum of squares' starting value
        (0.1 in MindSpore and TensorFlow).
    shrinkage_lr: the step of the proximal operator: ``'adaptive'``
        (:math:`\eta/\sqrt{s_t}`, the step the gradient took; what the CPU kernels of
        MindSpore and TensorFlow compute) or ``'constant'`` (:math:`\eta`, the
        formula their documentation writes).

Differences between frameworks
------------------------------
* torch and Paddle ship no proximal Adagrad: they run this update (own
  implementation).
* ``mindspore.nn.ProximalAdagrad`` (deprecated since MindSpore 2.9) documents
  ``shrinkage_lr='constant'``, but its CPU kernel (``ApplyProximalAdagrad``,
  MindSpore 2.10) shrinks with the adaptive step (measured with ``l1`` and with
  ``l2``: float32 rounding away from ``'adaptive'``, far from ``'constant'``).
  ``uo.preset("mindspore.nn.ProximalAdagrad", ...)`` therefore gives
  ``shrinkage_lr='adaptive'``; with ``l1 = l2 = 0`` both forms agree. The class has no
  ``maximize``, adds the decay to the gradient (L2, ``weight_decay``, sparing
  parameters named ``*beta*``/``*gamma*`` when not in groups), divides the gradients by
  ``loss_scale``, and takes a dynamic and a group lr.
* TensorFlow's ``ApplyProximalAdagrad`` kernel (``tf.compat.v1.train.
  ProximalAdagradOptimizer``) computes ``shrinkage_lr='adaptive'`` too, while its
  documentation writes the constant lr.
"""

from __future__ import annotations

from typing import Any

from .. import _validation as v
from ..ops import Ops
from ..records import Planted, record
from ..schedules import Cosine, Schedule
from ..spec import Spec, State, Tensor, register, spec_dataclass
from ._decay import check_decay, decay_for_parameter, l2_gradient

SHRINKAGE_LRS = ("adaptive", "constant")


@register
@spec_dataclass
class ProximalAdagrad(Spec):
    __doc__ = __doc__
    name = "proximal_adagrad"

    lr: float | Schedule = 1e-3
    l1: float = 0.0
    l2: float = 0.0
    initial_accumulator_value: float = 0.1
    shrinkage_lr: str = "adaptive"
    weight_decay: float = 0.0
    maximize: bool = False
    no_decay_names: tuple[str, ...] = ()

    def _check(self, owner: str) -> dict[str, Any]:
        return {"l1": v.check_range(owner, "l1", self.l1, low=0.0),
                "l2": v.check_range(owner, "l2", self.l2, low=0.0),
                "initial_accumulator_value": v.check_range(
                    owner, "initial_accumulator_value", self.initial_accumulator_value,
                    low=0.0),
                "shrinkage_lr": v.check_choice(owner, "shrinkage_lr", self.shrinkage_lr,
                                               SHRINKAGE_LRS),
                "maximize": v.check_bool(owner, "maximize", self.maximize),
                **check_decay(self, owner)}

    def for_parameter(self, name: str | None) -> Spec:
        return decay_for_parameter(self, name)

    def canonical(self) -> Spec:
        # without L1 and L2 there is no proximal step to take with either lr
        return self.with_defaults(("shrinkage_lr",)) if self.l1 == self.l2 == 0.0 else self

    def state_names(self) -> tuple[str, ...]:
        return ("sum",)

    def init(self, param: Tensor, ops: Ops) -> State:
        return {"sum": ops.full_like(param, self.initial_accumulator_value)}

    def update(self, param: Tensor, grad: Tensor, state: State, *, lr: float, step: int,
               ops: Ops) -> tuple[Tensor, State]:
        g = l2_gradient(self, param, grad)
        total = state["sum"] + g * g
        adaptive = lr / ops.sqrt(total)
        x = param - adaptive * g
        gamma = adaptive if self.shrinkage_lr == "adaptive" else lr
        if self.l1 != 0.0:
            x = ops.sign(x) * ops.maximum(ops.abs(x) - gamma * self.l1, ops.zeros_like(x))
        if self.l2 != 0.0:
            x = x / (gamma * self.l2 + 1.0)
        return x, {"sum": total}


_ADAPTIVE = ProximalAdagrad(lr=0.1, l1=0.05, l2=0.3)
_CONSTANT = ProximalAdagrad(lr=0.1, l1=0.05, l2=0.3, shrinkage_lr="constant")
_SCHEDULED = ProximalAdagrad(lr=Cosine(lr=0.3, T_max=40, eta_min=0.01), l1=0.02,
                             initial_accumulator_value=0.5, weight_decay=0.05,
                             maximize=True, no_decay_names=("*gamma*",))

RECORD = record(
    ProximalAdagrad,
    samples=(_ADAPTIVE, _CONSTANT, _SCHEDULED),
    planted=(Planted(_ADAPTIVE, {"shrinkage_lr": "constant"}),
             Planted(_ADAPTIVE, {"l1": 0.0}),
             Planted(_CONSTANT, {"l2": 0.0}),
             Planted(_SCHEDULED, {"no_decay_names": ()})),
    case_module="unified_opt.conformance.cases.proximal",
    nonfinite={"lr": 0.1},
)
