r"""Rprop (Riedmiller & Braun, 1993), the variant without weight backtracking.

Per element, with :math:`s = g_t\, g_{t-1}` (the previous *stored* gradient):

.. math::

    \eta_t &= \mathrm{clip}\big(\eta_{t-1}\cdot(\eta^+ \text{ if } s>0,\ \eta^- \text{ if }
        s<0,\ 1 \text{ otherwise}),\ \eta_{\min},\ \eta_{\max}\big), \quad \eta_0 = \text{lr}\\
    g_t &\leftarrow 0 \text{ where } s < 0\\
    \theta_t &= \theta_{t-1} - \mathrm{sign}(g_t)\,\eta_t

The lr only seeds the per-element step sizes at the first step; a schedule after that
has no effect.

Args:
    lr: the initial per-element step size :math:`\eta_0` > 0; used only at the first
        step (a schedule after that has no effect).
    etas: :math:`(\eta^-, \eta^+)` with :math:`0 < \eta^- < 1 < \eta^+`: the
        factors a step size shrinks by when the gradient's sign flips and grows by when
        it holds.
    step_sizes: :math:`(\eta_{\min}, \eta_{\max})`, 0 <= min <= max: the range the
        step sizes are clipped to.

Differences between frameworks
------------------------------
* torch ``Rprop``, ``paddle.optimizer.Rprop``, ``mindspore.nn.Rprop`` and
  ``mindspore.experimental.optim.Rprop`` compute the same update.
* Only ``mindspore.nn.Rprop`` has weight decay (L2 in the gradient, skipping
  ``*beta*``/``*gamma*`` parameters); torch and Paddle have none.
* The default step-size range differs: torch and MindSpore (1e-6, 50), Paddle (1e-5, 50).
  Paddle requires lr_min <= lr <= lr_max and takes no schedule.
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
class Rprop(Spec):
    __doc__ = __doc__
    name = "rprop"

    lr: float | Schedule = 1e-2
    etas: tuple[float, float] = (0.5, 1.2)
    step_sizes: tuple[float, float] = (1e-6, 50.0)
    weight_decay: float = 0.0
    maximize: bool = False
    no_decay_names: tuple[str, ...] = ()

    def _check(self, owner: str) -> dict[str, Any]:
        etas = tuple(v.check_range(owner, f"etas[{i}]", e, low=0.0, low_open=True)
                     for i, e in enumerate(v.check_sequence(owner, "etas", self.etas, 2)))
        if not etas[0] < 1.0 < etas[1]:
            raise ValueError(f"{owner}: etas must satisfy 0 < etaminus < 1 < etaplus, "
                             f"got {self.etas!r}")
        sizes = tuple(v.check_range(owner, f"step_sizes[{i}]", s, low=0.0)
                      for i, s in enumerate(v.check_sequence(owner, "step_sizes",
                                                             self.step_sizes, 2)))
        if sizes[0] > sizes[1]:
            raise ValueError(f"{owner}: step_sizes must be (min, max) with min <= max, "
                             f"got {self.step_sizes!r}")
        return {"etas": etas, "step_sizes": sizes,
                "maximize": v.check_bool(owner, "maximize", self.maximize),
                **check_decay(self, owner)}

    def for_parameter(self, name: str | None) -> Spec:
        return decay_for_parameter(self, name)

    def state_names(self) -> tuple[str, ...]:
        return ("prev", "step_size")

    def update(self, param: Tensor, grad: Tensor, state: State, *, lr: float, step: int,
               ops: Ops) -> tuple[Tensor, State]:
        g = l2_gradient(self, param, grad)
        etaminus, etaplus = self.etas
        step_size = ops.full_like(param, lr) if step == 1 else state["step_size"]
        product = g * state["prev"]
        factor = ops.where(product > 0, ops.full_like(param, etaplus),
                           ops.where(product < 0, ops.full_like(param, etaminus),
                                     ops.full_like(param, 1.0)))
        step_size = ops.clip(step_size * factor, *self.step_sizes)
        g = ops.where(product < 0, ops.zeros_like(g), g)
        return param - ops.sign(g) * step_size, {"prev": g, "step_size": step_size}


_RANGED = Rprop(lr=1e-2, step_sizes=(1e-4, 0.05))

RECORD = record(Rprop,
                samples=(_RANGED,
                         Rprop(lr=Cosine(lr=0.05, T_max=30, eta_min=0.001)),
                         Rprop(lr=1e-2, step_sizes=(0.02, 50.0))),
                planted=(Planted(_RANGED, {"step_sizes": (1e-4, 0.04)}),),
                case_module="unified_opt.conformance.cases.sign_based",
                nonfinite={"step_sizes": (1e-6, 0.005)})
