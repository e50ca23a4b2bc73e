r"""CAME (Luo et al., ACL 2023): Adafactor's factored second moment plus a
confidence-guided first moment. Arguments follow the authors' ``came-pytorch``.

Step :math:`t` (1-based), gradient :math:`g`, ``betas`` :math:`(\beta_1, \beta_2, \beta_3)`,
``eps`` :math:`(\epsilon_1, \epsilon_2)`, clip threshold :math:`d`; no bias correction.
For parameters of two or more dimensions (over the last two, rows :math:`i`, columns
:math:`j`; means along one axis):

.. math::

    G &= g^2 + \epsilon_1, \quad
    R_t = \beta_2 R_{t-1} + (1-\beta_2)\,\mathrm{mean}_j G, \quad
    C_t = \beta_2 C_{t-1} + (1-\beta_2)\,\mathrm{mean}_i G \\
    U_t &= g \Big/ \sqrt{R_t C_t / \mathrm{mean}_i R_t}, \qquad
    \hat U_t = U_t / \max(1, \mathrm{RMS}(U_t)/d) \\
    m_t &= \beta_1 m_{t-1} + (1-\beta_1)\hat U_t \\
    S &= (\hat U_t - m_t)^2 + \epsilon_2, \quad
    R'_t = \beta_3 R'_{t-1} + (1-\beta_3)\,\mathrm{mean}_j S, \quad
    C'_t = \beta_3 C'_{t-1} + (1-\beta_3)\,\mathrm{mean}_i S \\
    \theta_t &= \theta_{t-1} - \alpha_t\lambda\,\theta_{t-1}
        - \alpha_t\, m_t \Big/ \sqrt{R'_t C'_t / \mathrm{mean}_i R'_t}

Parameters of fewer dimensions keep an unfactored :math:`V_t = \beta_2 V_{t-1} +
(1-\beta_2) G`, :math:`U_t = g/\sqrt{V_t}`, and step by :math:`m_t` alone (no confidence
term). :math:`\alpha_t = \eta_t` by default (``relative_step``, ``warmup_init`` and
``scale_parameter`` as in :mod:`~unified_opt.algorithms.adafactor`, the parameter
scale floored at ``eps_scale``); ``decay_rate`` replaces the constant :math:`\beta_2`
by :math:`1 - t^{-\texttt{decay\_rate}}` (then ``betas[1]`` must be None).

Args:
    betas: :math:`(\beta_1, \beta_2, \beta_3)`, each in [0, 1]: the first moment's,
        the factored second moment's and the confidence's decay rates;
        :math:`\beta_2` is ``None`` when ``decay_rate`` gives its schedule.
    eps: :math:`(\epsilon_1, \epsilon_2)` >= 0, added to :math:`g^2` and to the
        instability :math:`S`.
    weight_decay: :math:`\lambda` >= 0, decoupled:
        :math:`\theta \leftarrow \theta - \alpha_t\lambda\theta`.
    decay_rate: :math:`\beta_{2t} = 1 - t^{-\texttt{decay\_rate}}`
        (MindFormers' 0.8); ``None`` (the default): the constant ``betas[1]``.
    scale_parameter: ``True``: the step size is multiplied by the parameter's RMS
        floored at ``eps_scale``; ``False``: not.
    eps_scale: >= 0, the floor of the parameter's RMS under ``scale_parameter``
        (MindFormers' ``eps[1]``).

Differences between frameworks
------------------------------
* ``came_pytorch.CAME`` (the authors' code) and ``pytorch_optimizer.CAME``: this spec's
  defaults, ``betas=(0.9, 0.999, 0.9999)``, ``eps=(1e-30, 1e-16)``; came-pytorch has
  no default lr (here 2e-4, pytorch-optimizer's). pytorch-optimizer decays as
  :math:`\theta(1-\alpha\lambda)` (rounding apart, the same).
* ``mindformers.core.Came``: :math:`\beta_2` is the ``1 - t^-0.8`` schedule
  (``decay_rate``), ``beta3=0.99``, the eps triple ``(1e-30, 1e-3, 1e-16)`` is
  ``eps=(eps[0], eps[2])`` with ``eps_scale=eps[1]`` (used by ``scale_parameter``), and
  the decay reaches every parameter. Its CPU default path crashes and its
  ``relative_step`` and ``beta1=0`` never move the parameters (measured); the preset
  follows the documentation.
"""

from __future__ import annotations

from typing import Any

from .. import _validation as v
from ..ops import Ops
from ..records import Planted, record
from ..schedules import Schedule
from ..spec import Spec, State, Tensor, register, spec_dataclass
from .adafactor import (
    beta2_at,
    check_optional,
    check_schedule_fields,
    clipped,
    ema,
    factored,
    factored_ema,
    factored_inverse_sqrt,
    scaled_step_size,
    smallest_factored_gradient,
    step_size,
)


@register
@spec_dataclass
class CAME(Spec):
    __doc__ = __doc__
    name = "came"

    lr: float | Schedule = 2e-4
    betas: tuple[float, float | None, float] = (0.9, 0.999, 0.9999)
    eps: tuple[float, float] = (1e-30, 1e-16)
    clip_threshold: float = 1.0
    weight_decay: float = 0.0
    decay_rate: float | None = None
    relative_step: bool = False
    warmup_init: bool = False
    scale_parameter: bool = False
    eps_scale: float = 1e-3

    def _check(self, owner: str) -> dict[str, Any]:
        betas = v.check_sequence(owner, "betas", self.betas, 3)
        bounds: dict[str, Any] = {"low": 0.0, "high": 1.0}
        betas = (v.check_range(owner, "betas[0]", betas[0], **bounds),
                 check_optional(owner, "betas[1]", betas[1], **bounds),
                 v.check_range(owner, "betas[2]", betas[2], **bounds))
        eps = v.check_sequence(owner, "eps", self.eps, 2)
        out = {"betas": betas,
               "eps": tuple(v.check_range(owner, f"eps[{i}]", e, low=0.0)
                            for i, e in enumerate(eps)),
               "weight_decay": v.check_range(owner, "weight_decay", self.weight_decay, low=0.0),
               "eps_scale": v.check_range(owner, "eps_scale", self.eps_scale, low=0.0),
               **check_schedule_fields(self, owner)}
        if (betas[1] is None) == (out["decay_rate"] is None):
            raise ValueError(f"{owner}: give exactly one of betas[1] (a constant beta2) and "
                             f"decay_rate (beta2_t = 1 - t^-decay_rate), got betas="
                             f"{self.betas!r}, decay_rate={self.decay_rate!r}")
        return out

    def state_names(self, shape: tuple[int, ...] | None = None) -> tuple[str, ...]:
        if shape is None:
            raise ValueError("CAME.state_names needs the parameter's shape: the moments are "
                             "factored for parameters of two or more dimensions")
        if factored(shape):
            return ("exp_avg", "exp_avg_sq_row", "exp_avg_sq_col", "exp_avg_res_row",
                    "exp_avg_res_col")
        return ("exp_avg", "exp_avg_sq")

    def init(self, param: Tensor, ops: Ops) -> State:
        state = {"exp_avg": ops.zeros_like(param)}
        if factored(param.shape):
            row = ops.zeros_like(ops.mean(param, axis=-1, keepdims=True))
            col = ops.zeros_like(ops.mean(param, axis=-2, keepdims=True))
            state.update(exp_avg_sq_row=row, exp_avg_sq_col=col,
                         exp_avg_res_row=ops.zeros_like(row), exp_avg_res_col=ops.zeros_like(col))
        else:
            state["exp_avg_sq"] = ops.zeros_like(param)
        return state

    def update(self, param: Tensor, grad: Tensor, state: State, *, lr: float, step: int,
               ops: Ops) -> tuple[Tensor, State]:
        beta1, beta2, beta3 = self.betas
        beta2 = beta2_at(beta2, self.decay_rate, step)
        alpha = scaled_step_size(self, step_size(self, lr, step), param, self.eps_scale, ops)
        square = grad * grad + self.eps[0]
        new_state: State = {}
        if factored(param.shape):
            row, col = factored_ema(state["exp_avg_sq_row"], state["exp_avg_sq_col"], square,
                                    beta2, ops)
            new_state.update(exp_avg_sq_row=row, exp_avg_sq_col=col)
            update = grad * factored_inverse_sqrt(row, col, ops)
        else:
            variance = ema(state["exp_avg_sq"], square, beta2)
            new_state["exp_avg_sq"] = variance
            update = grad / ops.sqrt(variance)
        update = clipped(update, self.clip_threshold, ops)
        exp_avg = ema(state["exp_avg"], update, beta1)
        new_state["exp_avg"] = exp_avg
        if factored(param.shape):
            # the confidence term: how far the update strays from its running mean
            instability = (update - exp_avg) * (update - exp_avg) + self.eps[1]
            res_row, res_col = factored_ema(state["exp_avg_res_row"], state["exp_avg_res_col"],
                                            instability, beta3, ops)
            new_state.update(exp_avg_res_row=res_row, exp_avg_res_col=res_col)
            direction = exp_avg * factored_inverse_sqrt(res_row, res_col, ops)
        else:
            direction = exp_avg
        if self.weight_decay != 0.0:
            param = param - param * (alpha * self.weight_decay)
        return param - direction * alpha, new_state

    def smallest_float32_gradient(self, shape: tuple[int, ...]) -> float:
        return smallest_factored_gradient(shape)

    def alternatives(self) -> list[tuple[str, Spec]]:
        out = []
        if self.decay_rate is None:
            out.append(("beta2 as the 1 - t^-0.8 schedule (MindFormers)",
                        self.replace(betas=(self.betas[0], None, self.betas[2]),
                                     decay_rate=0.8)))
        else:
            out.append(("constant beta2=0.999 (came-pytorch)",
                        self.replace(betas=(self.betas[0], 0.999, self.betas[2]),
                                     decay_rate=None)))
        out.append((f"scale_parameter={not self.scale_parameter}",
                    self.replace(scale_parameter=not self.scale_parameter)))
        return out


_PLAIN = CAME(lr=0.01, weight_decay=0.1, betas=(0.9, 0.999, 0.99))

RECORD = record(CAME,
                samples=(_PLAIN,
                         CAME(lr=0.05, betas=(0.9, None, 0.99), decay_rate=0.8,
                              scale_parameter=True, relative_step=True)),
                planted=(Planted(_PLAIN, {"betas": (0.9, 0.999, 0.9999)}),),
                case_module="unified_opt.conformance.cases.memory_saving",
                nonfinite={"lr": 0.01},
                benchmark=CAME(lr=1e-4))
