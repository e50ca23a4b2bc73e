r"""RMSProp (Hinton, 2012), optionally centered, with momentum.

.. math::

    g &\leftarrow g + \lambda\theta_{t-1}\\
    s_t &= \alpha s_{t-1} + (1-\alpha) g^2 \qquad (s_0 = \texttt{initial_square_avg})\\
    c_t &= s_t - a_t^2,\ a_t = \alpha a_{t-1} + (1-\alpha) g \text{ if centered, else } c_t = s_t\\
    d_t &= \sqrt{c_t} + \epsilon \ (\texttt{eps_placement="outside"}) \quad\text{or}\quad
        \sqrt{c_t + \epsilon}\ (\texttt{"inside"})

Without momentum :math:`\theta_t = \theta_{t-1} - \eta\, g/d_t`. With momentum
:math:`\mu`: ``lr_placement="outside"``: :math:`b_t = \mu b_{t-1} + g/d_t`,
:math:`\theta_t = \theta_{t-1} - \eta b_t`; ``"inside"``:
:math:`b_t = \mu b_{t-1} + \eta g/d_t`, :math:`\theta_t = \theta_{t-1} - b_t` (the same
parameters while the lr is constant, up to rounding; the buffers :math:`\eta` times apart).

Args:
    alpha: :math:`\alpha` in [0, 1], the decay of the running average of
        :math:`g^2` (torch's ``alpha``, Paddle's ``rho``, MindSpore's ``decay``).
    centered: ``True``: divide by an estimate of the variance
        (:math:`s_t - a_t^2`); ``False``: by the uncentred :math:`s_t`.
    eps_placement: ``'outside'`` (:math:`\sqrt{c_t} + \epsilon`: torch) or
        ``'inside'`` (:math:`\sqrt{c_t + \epsilon}`: Paddle, ``mindspore.nn.RMSProp``).
    initial_square_avg: :math:`s_0` >= 0 (0 in torch and Paddle, 1 in
        ``mindspore.nn.RMSProp``).

Differences between frameworks
------------------------------
* torch ``RMSprop`` and ``mindspore.experimental.optim.RMSprop``: eps outside, lr
  outside, :math:`s_0 = 0`, alpha 0.99, eps 1e-8.
* ``paddle.optimizer.RMSProp``: eps **inside** the sqrt, lr **inside** the buffer,
  rho 0.95, eps 1e-6, no default lr.
* ``mindspore.nn.RMSProp``: eps inside, lr inside, and :math:`s_0 = 1`; lr 0.1,
  decay 0.9, eps 1e-10.
"""

from __future__ import annotations

from typing import Any

from .. import _validation as v
from ..ops import Ops
from ..records import Planted, record
from ..schedules import Schedule
from ..spec import Spec, State, Tensor, register, spec_dataclass
from ._alternatives import (
    VISIBLE_WITHIN,
    lr_placement_state_alternatives,
    lr_varies,
    other_lr_placement,
)
from ._decay import check_decay, decay_for_parameter, l2_gradient

PLACEMENTS = ("outside", "inside")


@register
@spec_dataclass
class RMSprop(Spec):
    __doc__ = __doc__
    name = "rmsprop"

    lr: float | Schedule = 1e-2
    alpha: float = 0.99
    eps: float = 1e-8
    weight_decay: float = 0.0
    momentum: float = 0.0
    centered: bool = False
    maximize: bool = False
    eps_placement: str = "outside"
    lr_placement: str = "outside"
    initial_square_avg: float = 0.0
    no_decay_names: tuple[str, ...] = ()

    def _check(self, owner: str) -> dict[str, Any]:
        return {"alpha": v.check_range(owner, "alpha", self.alpha, low=0.0, high=1.0),
                "eps": v.check_range(owner, "eps", self.eps, low=0.0, low_open=True),
                "momentum": v.check_range(owner, "momentum", self.momentum, low=0.0),
                "centered": v.check_bool(owner, "centered", self.centered),
                "maximize": v.check_bool(owner, "maximize", self.maximize),
                "eps_placement": v.check_choice(owner, "eps_placement", self.eps_placement,
                                                PLACEMENTS),
                "lr_placement": v.check_choice(owner, "lr_placement", self.lr_placement,
                                               PLACEMENTS),
                "initial_square_avg": v.check_range(owner, "initial_square_avg",
                                                    self.initial_square_avg, low=0.0),
                **check_decay(self, owner)}

    def for_parameter(self, name: str | None) -> Spec:
        return decay_for_parameter(self, name)

    def state_names(self) -> tuple[str, ...]:
        return (("square_avg",) + (("momentum_buffer",) if self.momentum else ()) +
                (("grad_avg",) if self.centered else ()))

    def init(self, param: Tensor, ops: Ops) -> State:
        state = {k: ops.zeros_like(param) for k in self.state_names()}
        state["square_avg"] = ops.full_like(param, self.initial_square_avg)
        return state

    def update(self, param: Tensor, grad: Tensor, state: State, *, lr: float, step: int,
               ops: Ops) -> tuple[Tensor, State]:
        g = l2_gradient(self, param, grad)
        alpha = self.alpha
        square_avg = state["square_avg"] * alpha + g * g * (1.0 - alpha)
        new_state = {"square_avg": square_avg}
        second = square_avg
        if self.centered:
            grad_avg = state["grad_avg"] + (g - state["grad_avg"]) * (1.0 - alpha)
            new_state["grad_avg"] = grad_avg
            second = square_avg - grad_avg * grad_avg
        if self.eps_placement == "outside":
            denom = ops.sqrt(second) + self.eps
        else:
            denom = ops.sqrt(second + self.eps)
        if not self.momentum:
            return param - g / denom * lr, new_state
        if self.lr_placement == "outside":
            buf = state["momentum_buffer"] * self.momentum + g / denom
            param = param - buf * lr
        else:
            buf = state["momentum_buffer"] * self.momentum + g / denom * lr
            param = param - buf
        new_state["momentum_buffer"] = buf
        return param, new_state

    def canonical(self) -> Spec:
        # without momentum the lr is not in a buffer (a cycled momentum may leave 0)
        if self.momentum == 0.0 and not self.varies_per_step():
            return self.with_defaults(("lr_placement",))
        return self

    def alternatives(self) -> list[tuple[str, Spec]]:
        """The other eps placement (but where it moves no number within
        :data:`VISIBLE_WITHIN` steps: :meth:`_eps_placement_shows`), the other lr
        placement (with momentum and an lr schedule only: under a constant lr inside and
        outside the buffer give the same parameters up to rounding:
        :meth:`state_alternatives`) and the other initial square average."""
        out = []
        if self._eps_placement_shows():
            other = "inside" if self.eps_placement == "outside" else "outside"
            out.append((f"eps_placement={other!r}", self.replace(eps_placement=other)))
        if self.momentum and lr_varies(self):
            out.append(other_lr_placement(self))
        square_avg = 1.0 if self.initial_square_avg == 0.0 else 0.0
        out.append((f"initial_square_avg={square_avg}",
                    self.replace(initial_square_avg=square_avg)))
        return out

    def state_alternatives(self) -> list[tuple[str, Spec]]:
        """The other lr placement under a constant lr other than 1, with momentum: the
        same parameters, a buffer ``lr`` times this spec's
        (:func:`._alternatives.lr_placement_in_state_only`; ``torch.optim.RMSprop``
        keeps the lr outside, ``paddle.optimizer.RMSProp`` inside)."""
        return lr_placement_state_alternatives(self)

    def _eps_placement_shows(self) -> bool:
        """Can eps inside the sqrt and eps outside it part by a float32 ulp within
        :data:`VISIBLE_WITHIN` steps? With ``initial_square_avg`` :math:`s_0 > 0` the
        (centered too) square average stays above :math:`v = s_0 \\alpha^t` whatever the
        gradients, and the two denominators differ relatively by at most
        :math:`\\epsilon/(2v) + \\epsilon/\\sqrt{v}`: below half a float32 ulp (2^-24)
        they compute the same float32 numbers (Paddle's eps=1e-10 with a square average
        from 1 is one)."""
        if self.initial_square_avg == 0.0:
            return True
        lowest = self.initial_square_avg * self.alpha ** VISIBLE_WITHIN
        return self.eps * (0.5 / lowest + lowest ** -0.5) >= 2.0 ** -24


_INSIDE = RMSprop(lr=1e-2, eps=0.1, eps_placement="inside", lr_placement="inside")
_OUTSIDE = RMSprop(lr=1e-2, eps=0.1)

RECORD = record(RMSprop,
                samples=(_INSIDE,
                         _OUTSIDE),
                planted=(Planted(_INSIDE, {"eps_placement": "outside"}),
                         Planted(_OUTSIDE, {"eps_placement": "inside"})),
                case_module="unified_opt.conformance.cases.adaptive")
