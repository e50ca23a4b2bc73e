r"""Stochastic gradient descent with momentum, dampening and Nesterov.

Gradient :math:`g` (negated when ``maximize``) with L2 decay
:math:`g \leftarrow g + \lambda\theta_{t-1}`. Without momentum
:math:`\theta_t = \theta_{t-1} - \eta g`. With momentum :math:`\mu` and dampening
:math:`d`, ``lr_placement="outside"`` (torch, Paddle, MindSpore):

.. math::

    b_t &= \begin{cases} g & t = 1 \text{ and } \texttt{momentum\_init="grad"} \\
                         \mu b_{t-1} + (1-d)\, g & \text{otherwise } (b_0 = 0)\end{cases}\\
    \theta_t &= \theta_{t-1} - \eta\,(g + \mu b_t \text{ if nesterov else } b_t)

``lr_placement="inside"`` (Sutskever et al., Keras, Paddle LARS) puts the lr in the
buffer: :math:`b_t = \mu b_{t-1} + (1-d)\,\eta_t g` (or :math:`\eta_t g` at the first
step with ``momentum_init="grad"``) and
:math:`\theta_t = \theta_{t-1} - (\eta_t g + \mu b_t \text{ if nesterov else } b_t)`.
The two placements give the same parameters while the lr is constant (up to rounding;
the buffers are :math:`\eta` times apart) and differ once it changes.

Differences between frameworks
------------------------------
* ``torch.optim.SGD`` and ``mindspore.nn.SGD``: the first step sets :math:`b_1 = g`
  (``momentum_init="grad"``), so dampening does not act on it.
* ``paddle.optimizer.Momentum`` and ``mindspore.nn.Momentum`` start the buffer at 0
  and have no dampening: with :math:`d=0` both first-step rules coincide.
* ``mindspore.nn.Momentum(use_nesterov=True)`` runs plain momentum on CPU (measured);
  ``mindspore.nn.SGD(nesterov=True)`` is correct.
* Paddle's Nesterov is :math:`\theta - \eta(g + \mu b_t)`, the same as torch's.
"""

from __future__ import annotations

from typing import Any

from .. import _validation as v
from ..ops import Ops
from ..records import record
from ..schedules import Cosine, Schedule
from ..spec import Spec, State, Tensor, register, spec_dataclass
from ._alternatives import (
    distinct,
    lr_placement_state_alternatives,
    lr_varies,
    other_lr_placement,
)
from ._decay import check_decay, decay_for_parameter, l2_gradient

LR_PLACEMENTS = ("outside", "inside")


def canonical_momentum(spec):
    """``spec`` (SGD-style momentum) with the knobs that do not act at its momentum at
    their defaults: without momentum, the whole momentum form; without dampening, the
    first-step rule (a buffer from 0 or from the gradient then agree)."""
    if spec.varies_per_step():   # a cycled momentum may leave 0
        return spec
    if spec.momentum == 0.0:
        return spec.with_defaults(("dampening", "nesterov", "lr_placement", "momentum_init"))
    if spec.dampening == 0.0:
        return spec.with_defaults(("momentum_init",))
    return spec
MOMENTUM_INITS = ("grad", "zeros")


def check_momentum_fields(spec: Any, owner: str) -> dict[str, Any]:
    """Checks of the momentum knobs (shared with LARS, whose step is SGD's)."""
    out: dict[str, Any] = {
        "momentum": v.check_range(owner, "momentum", spec.momentum, low=0.0),
        "dampening": v.check_range(owner, "dampening", spec.dampening, low=0.0, high=1.0),
        "nesterov": v.check_bool(owner, "nesterov", spec.nesterov),
        "lr_placement": v.check_choice(owner, "lr_placement", spec.lr_placement,
                                       LR_PLACEMENTS),
        "momentum_init": v.check_choice(owner, "momentum_init", spec.momentum_init,
                                        MOMENTUM_INITS)}
    if out["nesterov"] and (out["momentum"] <= 0.0 or out["dampening"] != 0.0):
        raise ValueError(f"{owner}: nesterov=True requires momentum > 0 and dampening = 0, "
                         f"got momentum={spec.momentum!r}, dampening={spec.dampening!r}")
    return out


@register
@spec_dataclass
class SGD(Spec):
    __doc__ = __doc__
    name = "sgd"

    lr: float | Schedule = 1e-3
    momentum: float = 0.0
    dampening: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0
    maximize: bool = False
    lr_placement: str = "outside"
    momentum_init: str = "grad"
    no_decay_names: tuple[str, ...] = ()

    def _check(self, owner: str) -> dict[str, Any]:
        return {"maximize": v.check_bool(owner, "maximize", self.maximize),
                **check_momentum_fields(self, owner), **check_decay(self, owner)}

    def for_parameter(self, name: str | None) -> Spec:
        return decay_for_parameter(self, name)

    def state_names(self) -> tuple[str, ...]:
        return ("momentum_buffer",) if self.momentum != 0.0 else ()

    def update(self, param: Tensor, grad: Tensor, state: State, *, lr: float, step: int,
               ops: Ops) -> tuple[Tensor, State]:
        g = l2_gradient(self, param, grad)
        if self.momentum == 0.0:
            return param - g * lr, {}
        inside = self.lr_placement == "inside"
        scaled = g * lr if inside else g
        if step == 1 and self.momentum_init == "grad":
            buf = scaled
        else:
            buf = state["momentum_buffer"] * self.momentum + scaled * (1.0 - self.dampening)
        direction = scaled + buf * self.momentum if self.nesterov else buf
        new_param = param - direction if inside else param - direction * lr
        return new_param, {"momentum_buffer": buf}

    def canonical(self) -> Spec:
        return canonical_momentum(self)

    def alternatives(self) -> list[tuple[str, Spec]]:
        """The first-step rule (only with dampening: without it both rules agree), the lr
        placement (only under an lr schedule: under a constant lr inside and outside
        the buffer give the same parameters up to rounding, :meth:`state_alternatives`)
        and, without dampening, Nesterov."""
        out = []
        if self.momentum != 0.0:
            other = "zeros" if self.momentum_init == "grad" else "grad"
            out.append((f"momentum_init={other!r} (first-step rule)",
                        self.replace(momentum_init=other)))
            if lr_varies(self):
                out.append(other_lr_placement(self))
            if self.dampening == 0.0:
                out.append((f"nesterov={not self.nesterov}",
                            self.replace(nesterov=not self.nesterov)))
        return distinct(self, out)

    def state_alternatives(self) -> list[tuple[str, Spec]]:
        """The other lr placement under a constant lr other than 1, with momentum: the
        same parameters, a buffer ``lr`` times this spec's
        (:func:`._alternatives.lr_placement_in_state_only`)."""
        return lr_placement_state_alternatives(self)


RECORD = record(SGD,
                samples=(SGD(lr=Cosine(lr=0.05, T_max=30, eta_min=0.001), momentum=0.9,
                             lr_placement="inside"),
                         SGD(lr=0.05, momentum=0.9, dampening=0.5, momentum_init="zeros"),
                         SGD(lr=0.05, momentum=0.9, weight_decay=0.1, no_decay_names=("*gamma*",))),
                case_module="unified_opt.conformance.cases.sgd",
                nonfinite={"lr": 0.05})
