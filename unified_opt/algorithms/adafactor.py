r"""Adafactor (Shazeer & Stern, 2018): a factored second moment, update clipping.

Step :math:`t` (1-based), gradient :math:`g` (negated when ``maximize``):

.. math::

    \rho_t &= \eta_t, \text{ or with } \texttt{relative\_step}:\ \min(\eta_t, t^{-1/2})
        \ (\min(\eta_t\, t, t^{-1/2}) \text{ with } \texttt{warmup\_init}) \\
    \alpha_t &= \rho_t \max(\epsilon_2, \mathrm{RMS}(\theta_{t-1}))
        \text{ with } \texttt{scale\_parameter}, \text{ else } \rho_t \\
    \hat\beta_{2t} &= 1 - t^{-\texttt{decay\_rate}} \text{ (or the constant } \texttt{beta2}) \\
    G &= g^2 + \epsilon_1 \ (\texttt{eps\_mode="add"}) \text{ or } g^2 \ (\texttt{"clamp"})

For parameters of two or more dimensions, over the last two (rows :math:`i`, columns
:math:`j`), with means taken along one axis:

.. math::

    R_t &= \hat\beta_{2t} R_{t-1} + (1-\hat\beta_{2t})\,\mathrm{mean}_j G, \qquad
    C_t = \hat\beta_{2t} C_{t-1} + (1-\hat\beta_{2t})\,\mathrm{mean}_i G \\
    V_t &= \frac{R_t C_t}{\mathrm{mean}_i R_t}
        \quad\text{("clamp": } V_t = \max\big(
            \tfrac{R_t C_t}{\max(\mathrm{mean}_i R_t,\, \epsilon_1)},\,
        \epsilon_1^2\big))

and for fewer dimensions :math:`V_t = \hat\beta_{2t} V_{t-1} + (1-\hat\beta_{2t}) G`
(``"clamp"``: :math:`\max(V_t, \epsilon_1^2)` in the division). Then

.. math::

    U_t &= \frac{g}{\sqrt{V_t}}, \qquad
    \hat U_t = \alpha_t\,\frac{U_t}{\max(1, \mathrm{RMS}(U_t)/d)} \\
    m_t &= \beta_1 m_{t-1} + (1-\beta_1)\hat U_t \ \text{(only when } \beta_1 \text{ is not None;
        the step is then } m_t) \\
    \theta_t &= (1 - \delta)\,\theta_{t-1} - \hat U_t \text{ (or } m_t),
        \qquad \delta = \lambda\eta_t \ (\texttt{decay\_lr="raw"})
            \text{ or } \lambda\alpha_t \ (\texttt{"scaled"})

:math:`\epsilon_1 = ` ``eps[0]``, :math:`\epsilon_2 = ` ``eps[1]``, :math:`d = `
``clip_threshold``. ``eps[0]=None`` is the machine epsilon of the dtype the update
computes in (``ops.machine_eps``): the parameter's dtype, float32 for a bfloat16 or
float16 parameter (:mod:`unified_opt.storage`): 1.19e-7 for float32, 2.2e-16 for
float64, as torch's ``finfo(param.dtype).eps``. The numpy oracle, which computes in
float64, takes it from the dtype of the run it models (the parameters it is given, or
its ``storage``: :class:`unified_opt.reference.Reference`), so the oracle of a float32
run uses 1.19e-7: against float64's 2.2e-16 every float32 run differs by float32's eps,
and its noise floor hid ``"add"`` against ``"clamp"``.

An :math:`\epsilon_1` whose square is below float32's range (:math:`\epsilon_1 <` about
4e-23, e.g. 1e-30) clamps at 0 in a float32 run with ``"clamp"``: a tensor whose
gradients were all 0 (or, factored, near 1e-20) then gets an infinite :math:`1/\sqrt{V}`
and NaN updates, where the float64 oracle clamps at 1e-60 and stays finite.

Args:
    lr: the step size, or with ``relative_step`` its cap; a float >= 0 or a schedule.
    eps: :math:`(\epsilon_1, \epsilon_2)`: :math:`\epsilon_1` >= 0 regularises the
        second moment (``None``: the machine epsilon of the dtype the update computes
        in), :math:`\epsilon_2` >= 0 floors the parameter's RMS in
        ``scale_parameter``.
    eps_mode: how :math:`\epsilon_1` enters: ``'clamp'`` (a floor on the second
        moment: torch) or ``'add'`` (added to :math:`g^2`: Hugging Face, MindSpore).
    decay_rate: :math:`\hat\beta_{2t} = 1 - t^{-\texttt{decay\_rate}}` (torch's
        ``beta2_decay=-0.8`` is 0.8); ``None`` when ``beta2`` is given (exactly one of
        the two).
    beta2: a constant :math:`\hat\beta_2` in [0, 1) instead of the schedule;
        ``None`` (the default) uses ``decay_rate``.
    beta1: the first moment's decay in [0, 1) (MindSpore's 0.9); ``None``: no first
        moment.
    weight_decay: :math:`\lambda` >= 0, decoupled: the parameter is multiplied by
        :math:`1-\delta` (see ``decay_lr``).
    decay_lr: the lr the decay is multiplied by: ``'raw'`` (:math:`\eta_t`: torch)
        or ``'scaled'`` (:math:`\alpha_t`: Hugging Face, MindSpore).
    scale_parameter: ``True``: the step size is multiplied by
        :math:`\max(\epsilon_2, \mathrm{RMS}(\theta))`; ``False``: not.

Differences between frameworks
------------------------------
* ``torch.optim.Adafactor`` (this spec's defaults): always ``relative_step`` with the lr
  as the cap and ``scale_parameter``; eps ``(None, 1e-3)`` as **clamps**; no first
  moment; decay with the raw lr; ``beta2_decay=-0.8`` is ``decay_rate=0.8``.
* ``mindspore.nn.AdaFactor`` (the Hugging Face form): ``eps_mode="add"`` with
  ``eps=(1e-30, 1e-3)``, first moment ``beta1=0.9`` by default (after the lr scaling),
  decay with the scaled lr ``decay_lr="scaled"`` on every parameter, relative step
  ``min(1e-2, t^-1/2)`` (here ``lr=1e-2``) unless a manual lr is given.
* ``torch_optimizer.Adafactor``: the Hugging Face form, no first moment by default;
  it fails on parameters of three or more dimensions (measured).
* ``pytorch_optimizer.AdaFactor`` caps :math:`\hat\beta_{2t}` at 0.999 and keeps a
  bfloat16 first moment by default: neither is a knob here.
"""

from __future__ import annotations

import math
from typing import Any

from .. import _validation as v
from ..ops import Ops
from ..records import Planted, record
from ..schedules import Schedule
from ..spec import Spec, State, Tensor, register, spec_dataclass
from ._alternatives import VISIBLE_WITHIN
from ._decay import decayed

EPS_MODES = ("clamp", "add")
DECAY_LRS = ("raw", "scaled")


def factored(shape) -> bool:
    """Adafactor and CAME factor the second moment of parameters with >= 2 dims."""
    return len(shape) >= 2


#: the smallest gradient whose factored second moment float32 holds in every order the
#: frameworks compute it: torch's Adafactor forms the product :math:`R_i C_j` (each
#: about :math:`g^2`) before dividing by :math:`\mathrm{mean}_i R`, and :math:`g^4`
#: falls below float32's smallest normal (1.18e-38) under about 3.3e-10: a gradient of
#: 1e-12 gives 1e-48, 0 in float32, an infinite :math:`1/\sqrt{V}` when
#: :math:`\epsilon_1^2` is 0 in float32 too (``eps[0]=1e-30``), then NaN; this spec's
#: order, :math:`R_i / \mathrm{mean}_i R` first, stays finite
FACTORED_FLOAT32_GRADIENT = (2.0 ** -126) ** 0.25      # float32's smallest normal, ** 1/4


def smallest_factored_gradient(shape) -> float:
    """``Spec.smallest_float32_gradient`` of Adafactor and CAME."""
    return FACTORED_FLOAT32_GRADIENT if factored(shape) else 0.0


def rms(x, ops):
    return ops.sqrt(ops.mean(x * x))


def check_optional(owner, name, value, **bounds):
    return None if value is None else v.check_range(owner, name, value, **bounds)


def check_schedule_fields(spec, owner) -> dict:
    """The step-size and beta2 knobs Adafactor and CAME share."""
    out = {"relative_step": v.check_bool(owner, "relative_step", spec.relative_step),
           "warmup_init": v.check_bool(owner, "warmup_init", spec.warmup_init),
           "scale_parameter": v.check_bool(owner, "scale_parameter", spec.scale_parameter),
           "decay_rate": check_optional(owner, "decay_rate", spec.decay_rate, low=0.0),
           "clip_threshold": v.check_range(owner, "clip_threshold", spec.clip_threshold,
                                           low=0.0, low_open=True)}
    if out["warmup_init"] and not out["relative_step"]:
        raise ValueError(f"{owner}: warmup_init=True requires relative_step=True")
    return out


def step_size(spec, lr: float, step: int) -> float:
    """:math:`\\rho_t`: the lr, or the relative step capped by it."""
    if not spec.relative_step:
        return lr
    cap = lr * step if spec.warmup_init else lr
    return min(cap, 1.0 / math.sqrt(step))


def scaled_step_size(spec, rho: float, param, eps_scale: float, ops):
    """:math:`\\alpha_t`: :math:`\\rho_t`, times :math:`\\max(\\epsilon_2, RMS(\\theta))`
    with ``scale_parameter``."""
    if not spec.scale_parameter:
        return rho
    scale = rms(param, ops)
    return ops.maximum(scale, ops.full_like(scale, eps_scale)) * rho


def beta2_at(beta2, decay_rate, step: int) -> float:
    return beta2 if beta2 is not None else 1.0 - step ** (-decay_rate)


def ema(average, value, beta: float):
    return average * beta + value * (1.0 - beta)


def factored_ema(row, col, square, beta: float, ops):
    """New row and column means (keepdims: shapes (..., R, 1) and (..., 1, C))."""
    return (ema(row, ops.mean(square, axis=-1, keepdims=True), beta),
            ema(col, ops.mean(square, axis=-2, keepdims=True), beta))


def factored_inverse_sqrt(row, col, ops, eps1=None):
    """:math:`1/\\sqrt{R C / \\mathrm{mean}_i R}`; ``eps1`` clamps as torch does."""
    row_mean = ops.mean(row, axis=-2, keepdims=True)
    if eps1 is None:
        return 1.0 / ops.sqrt(row / row_mean * col)
    row_mean = ops.maximum(row_mean, ops.full_like(row_mean, eps1))
    variance = row / row_mean * col
    return 1.0 / ops.sqrt(ops.maximum(variance, ops.full_like(variance, eps1 * eps1)))


def clipped(update, threshold: float, ops):
    """:math:`U / \\max(1, \\mathrm{RMS}(U)/d)`."""
    ratio = rms(update, ops) / threshold
    return update / ops.maximum(ratio, ops.full_like(ratio, 1.0))


@register
@spec_dataclass
class Adafactor(Spec):
    __doc__ = __doc__
    name = "adafactor"

    lr: float | Schedule = 1e-2
    eps: tuple[float | None, float] = (None, 1e-3)
    eps_mode: str = "clamp"
    clip_threshold: float = 1.0
    decay_rate: float | None = 0.8
    beta2: float | None = None
    beta1: float | None = None
    weight_decay: float = 0.0
    decay_lr: str = "raw"
    relative_step: bool = True
    warmup_init: bool = False
    scale_parameter: bool = True
    maximize: bool = False

    def _check(self, owner: str) -> dict[str, Any]:
        eps = v.check_sequence(owner, "eps", self.eps, 2)
        eps = (check_optional(owner, "eps[0]", eps[0], low=0.0),
               v.check_range(owner, "eps[1]", eps[1], low=0.0))
        out = {"eps": eps,
               "eps_mode": v.check_choice(owner, "eps_mode", self.eps_mode, EPS_MODES),
               "beta2": check_optional(owner, "beta2", self.beta2, low=0.0, high=1.0,
                                       high_open=True),
               "beta1": check_optional(owner, "beta1", self.beta1, low=0.0, high=1.0,
                                       high_open=True),
               "weight_decay": v.check_range(owner, "weight_decay", self.weight_decay, low=0.0),
               "decay_lr": v.check_choice(owner, "decay_lr", self.decay_lr, DECAY_LRS),
               "maximize": v.check_bool(owner, "maximize", self.maximize),
               **check_schedule_fields(self, owner)}
        if (out["beta2"] is None) == (out["decay_rate"] is None):
            raise ValueError(f"{owner}: give exactly one of beta2 (a constant) and decay_rate "
                             f"(beta2_t = 1 - t^-decay_rate), got beta2={self.beta2!r}, "
                             f"decay_rate={self.decay_rate!r}")
        return out

    def state_names(self, shape: tuple[int, ...] | None = None) -> tuple[str, ...]:
        if shape is None:
            raise ValueError("Adafactor.state_names needs the parameter's shape: the second "
                             "moment is factored for parameters of two or more dimensions")
        second = ("exp_avg_sq_row", "exp_avg_sq_col") if factored(shape) else ("exp_avg_sq",)
        return second + (("exp_avg",) if self.beta1 is not None else ())

    def init(self, param: Tensor, ops: Ops) -> State:
        state = {}
        if factored(param.shape):
            state["exp_avg_sq_row"] = ops.zeros_like(ops.mean(param, axis=-1, keepdims=True))
            state["exp_avg_sq_col"] = ops.zeros_like(ops.mean(param, axis=-2, keepdims=True))
        else:
            state["exp_avg_sq"] = ops.zeros_like(param)
        if self.beta1 is not None:
            state["exp_avg"] = ops.zeros_like(param)
        return state

    def update(self, param: Tensor, grad: Tensor, state: State, *, lr: float, step: int,
               ops: Ops) -> tuple[Tensor, State]:
        g = -grad if self.maximize else grad
        eps1, eps2 = self.eps
        if eps1 is None:
            eps1 = ops.machine_eps(param)
        alpha = scaled_step_size(self, step_size(self, lr, step), param, eps2, ops)
        beta2 = beta2_at(self.beta2, self.decay_rate, step)
        square = g * g + eps1 if self.eps_mode == "add" else g * g
        clamp = eps1 if self.eps_mode == "clamp" else None
        new_state: State = {}
        if factored(param.shape):
            row, col = factored_ema(state["exp_avg_sq_row"], state["exp_avg_sq_col"], square,
                                    beta2, ops)
            new_state.update(exp_avg_sq_row=row, exp_avg_sq_col=col)
            update = g * factored_inverse_sqrt(row, col, ops, clamp)
        else:
            variance = ema(state["exp_avg_sq"], square, beta2)
            new_state["exp_avg_sq"] = variance
            if clamp is not None:
                variance = ops.maximum(variance, ops.full_like(variance, clamp * clamp))
            update = g / ops.sqrt(variance)
        update = clipped(update, self.clip_threshold, ops) * alpha
        if self.beta1 is not None:
            update = ema(state["exp_avg"], update, self.beta1)
            new_state["exp_avg"] = update
        if self.weight_decay != 0.0:
            # torch's form, param * (1 - delta): the float32 reference then rounds the
            # factor as torch does (decayed's docstring); Hugging Face's param - param*delta
            # differs from it by rounding only
            param = decayed(param, self.weight_decay * (lr if self.decay_lr == "raw"
                                                        else alpha))
        return param - update, new_state

    def smallest_float32_gradient(self, shape: tuple[int, ...]) -> float:
        return smallest_factored_gradient(shape)

    def alternatives(self) -> list[tuple[str, Spec]]:
        """The other eps mode, the other relative step (where it moves the step size
        within :data:`VISIBLE_WITHIN` steps: :meth:`_relative_step_shows`), the other
        parameter scaling, decay lr and beta2 form."""
        other_mode = "add" if self.eps_mode == "clamp" else "clamp"
        out = [(f"eps_mode={other_mode!r}", self.replace(eps_mode=other_mode)),
               (f"scale_parameter={not self.scale_parameter}",
                self.replace(scale_parameter=not self.scale_parameter))]
        if self._relative_step_shows():
            out.insert(1, (f"relative_step={not self.relative_step}",
                           self.replace(relative_step=not self.relative_step,
                                        warmup_init=False)))
        if self.weight_decay != 0.0:
            other = "scaled" if self.decay_lr == "raw" else "raw"
            out.append((f"decay_lr={other!r}", self.replace(decay_lr=other)))
        if self.beta2 is None:
            out.append(("constant beta2=0.999", self.replace(beta2=0.999, decay_rate=None)))
        return out

    def _relative_step_shows(self) -> bool:
        r"""Does the relative step :math:`\min(\eta_t, t^{-1/2})` part from the plain lr
        :math:`\eta_t` within :data:`VISIBLE_WITHIN` steps? Only where some
        :math:`\eta_t > t^{-1/2}` (or with ``warmup_init``, whose :math:`\eta_t t` is
        another step size from step 1): with lr=0.01 the two agree for 10^4 steps."""
        if self.warmup_init:
            return True
        return any(self.lr_at(t) > 1.0 / math.sqrt(t + 1) for t in range(VISIBLE_WITHIN))


_CLAMPED = Adafactor(lr=0.3, weight_decay=0.1, eps=(0.05, 1e-3))
_HUGGING_FACE = Adafactor(lr=0.01, eps=(1e-30, 1e-3), eps_mode="add", beta1=0.9, decay_lr="scaled",
                          weight_decay=0.1, relative_step=False, beta2=0.9, decay_rate=None)

RECORD = record(Adafactor,
                samples=(_CLAMPED,
                         _HUGGING_FACE),
                planted=(Planted(_CLAMPED, {"weight_decay": 0.0}),
                         Planted(_HUGGING_FACE, {"beta1": None})),
                case_module="unified_opt.conformance.cases.memory_saving",
                benchmark=Adafactor(lr=1e-3))
