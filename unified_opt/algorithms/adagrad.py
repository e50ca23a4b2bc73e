r"""Adagrad (Duchi et al., 2011).

.. math::

    g &\leftarrow g + \lambda\theta_{t-1}\\
    s_t &= s_{t-1} + g^2 \qquad (s_0 = \texttt{initial_accumulator_value})\\
    \theta_t &= \theta_{t-1} - \frac{\eta}{1 + (t-1)\,\delta}\,\frac{g}{\sqrt{s_t} + \epsilon}

with :math:`\delta` = ``lr_decay``.

Args:
    lr_decay: :math:`\delta` >= 0: the lr of step :math:`t` is
        :math:`\eta / (1 + (t-1)\delta)` (torch's; 0: constant).
    initial_accumulator_value: :math:`s_0` >= 0, the sum of squares' starting value
        (0 in torch and Paddle, 0.1 in ``mindspore.nn.Adagrad``).

Differences between frameworks
------------------------------
* torch ``Adagrad`` and ``mindspore.experimental.optim.Adagrad``: eps 1e-10, ``lr_decay``,
  :math:`s_0 = 0`. MindSpore's experimental class does nothing on float64 parameters.
* ``paddle.optimizer.Adagrad``: eps 1e-6, no ``lr_decay``, no default lr.
* ``mindspore.nn.Adagrad``: **no eps** (``eps=0``) and :math:`s_0 = 0.1`.
"""

from __future__ import annotations

from typing import Any

from .. import _validation as v
from ..ops import Ops
from ..records import Planted, record
from ..schedules import Cosine, Schedule
from ..spec import Spec, State, Tensor, register, spec_dataclass
from ._decay import check_decay, decay_for_parameter, l2_gradient


@register
@spec_dataclass
class Adagrad(Spec):
    __doc__ = __doc__
    name = "adagrad"

    lr: float | Schedule = 1e-2
    lr_decay: float = 0.0
    weight_decay: float = 0.0
    initial_accumulator_value: float = 0.0
    eps: float = 1e-10
    maximize: bool = False
    no_decay_names: tuple[str, ...] = ()

    def _check(self, owner: str) -> dict[str, Any]:
        return {"lr_decay": v.check_range(owner, "lr_decay", self.lr_decay, low=0.0),
                "initial_accumulator_value": v.check_range(
                    owner, "initial_accumulator_value", self.initial_accumulator_value, low=0.0),
                # eps = 0 is MindSpore nn.Adagrad's form (it starts the sum at 0.1)
                "eps": v.check_range(owner, "eps", self.eps, low=0.0),
                "maximize": v.check_bool(owner, "maximize", self.maximize),
                **check_decay(self, owner)}

    def for_parameter(self, name: str | None) -> Spec:
        return decay_for_parameter(self, name)

    def state_names(self) -> tuple[str, ...]:
        return ("sum",)

    def init(self, param: Tensor, ops: Ops) -> State:
        return {"sum": ops.full_like(param, self.initial_accumulator_value)}

    def update(self, param: Tensor, grad: Tensor, state: State, *, lr: float, step: int,
               ops: Ops) -> tuple[Tensor, State]:
        g = l2_gradient(self, param, grad)
        total = state["sum"] + g * g
        clr = lr / (1.0 + (step - 1) * self.lr_decay)
        return param - g / (ops.sqrt(total) + self.eps) * clr, {"sum": total}


_NO_EPS = Adagrad(lr=0.01, eps=0.0, initial_accumulator_value=0.1)
_DECAYED = Adagrad(lr=1e-2, eps=1e-6, lr_decay=0.01)

RECORD = record(Adagrad,
                samples=(_DECAYED,
                         _NO_EPS,
                         Adagrad(lr=Cosine(lr=0.05, T_max=30, eta_min=0.001))),
                planted=(Planted(_NO_EPS, {"eps": 1e-3}),
                         Planted(_DECAYED, {"lr_decay": 1e-3})),
                case_module="unified_opt.conformance.cases.adaptive")
