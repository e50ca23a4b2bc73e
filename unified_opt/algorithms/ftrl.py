r"""FTRL-proximal (McMahan et al., 2013, "Ad Click Prediction: a View from the Trenches",
Algorithm 1), in TensorFlow's per-coordinate form with a learning-rate power.

Step :math:`t` with lr :math:`\eta`, gradient :math:`g` (negated when ``maximize``, plus
the L2 term :math:`\lambda\theta_{t-1}` of ``weight_decay``), :math:`p` = ``lr_power``
(<= 0), the accumulator :math:`n` and the linear term :math:`z`:

.. math::

    n_t &= n_{t-1} + g^2 \qquad (n_0 = \texttt{initial_accumulator_value},\ z_0 = 0)\\
    \sigma_t &= \frac{n_t^{-p} - n_{t-1}^{-p}}{\eta}\\
    z_t &= z_{t-1} + g + 2\lambda_s\theta_{t-1} - \sigma_t\,\theta_{t-1}\\
    \theta_t &= \begin{cases}
        \dfrac{s(z_t)\,\lambda_1 - z_t}{(\beta + n_t^{-p})/\eta + 2\lambda_2}
            & |z_t| > \lambda_1\\
        0 & |z_t| \le \lambda_1
    \end{cases}

with :math:`\lambda_1` = ``l1``, :math:`\lambda_2` = ``l2``, :math:`\lambda_s` =
``l2_shrinkage`` (its term enters :math:`z` only, not :math:`n`), :math:`\beta` =
``beta``, and :math:`s(z) = \operatorname{sign}(z)` (``l1_sign='linear'``, the paper's)
or :math:`s(z) = 1` (``l1_sign='positive'``, MindSpore's CPU kernel). With :math:`p =
-1/2`, :math:`n^{-p} = \sqrt{n}`; with :math:`p = 0` the lr is fixed
(:math:`\sigma_t = 0`). The own path's kernels trace these two; another power has no
kernel operation: the own path runs the update eagerly, operation by operation, and
refuses MindSpore's GRAPH_MODE and ``@ms.jit`` saying so (``mindspore.nn.FTRL``, where
it computes the spec, takes any power). The parameter is set, not stepped: it is a
closed form of :math:`z_t` and :math:`n_t`. A NaN in :math:`z` makes the parameter
NaN (the comparison :math:`|z| \le \lambda_1` fails for it).

Args:
    lr: :math:`\eta` > 0 (the update divides by it), a float or a schedule.
    lr_power: :math:`p` <= 0: the accumulator enters as :math:`n^{-p}` (-0.5, the
        paper's square root; 0: a fixed learning rate).
    l1: :math:`\lambda_1` >= 0, the L1 regularization strength: coordinates whose
        :math:`|z|` does not exceed it are set to exactly 0.
    l2: :math:`\lambda_2` >= 0, the online L2 strength in the denominator (twice it
        enters; the paper's :math:`\lambda_2` is ``2 * l2``).
    l2_shrinkage: :math:`\lambda_s` >= 0, TensorFlow's shrinkage-type L2: it adds
        :math:`2\lambda_s\theta` to the linear term only (0: none).
    beta: :math:`\beta` >= 0, the paper's beta added to :math:`n^{-p}` in the
        denominator (Keras' ``beta``; 0: none).
    initial_accumulator_value: :math:`n_0` >= 0, the accumulator's starting value
        (0.1 in TensorFlow and MindSpore).
    l1_sign: the sign given to the L1 term: ``'linear'`` (the paper's, TensorFlow's
        and MindSpore's documented :math:`\operatorname{sign}(z)\lambda_1`) or
        ``'positive'`` (a plain :math:`+\lambda_1`, what MindSpore's CPU kernel
        computes, measured).

Differences between frameworks
------------------------------
* torch and Paddle ship no FTRL: they run this update (own implementation).
* ``mindspore.nn.FTRL`` (deprecated since MindSpore 2.9) documents this update with
  ``l1_sign='linear'``, but its CPU kernel (``ApplyFtrl``, MindSpore 2.10) computes
  :math:`(\lambda_1 - z)/(\ldots)` where :math:`|z| > \lambda_1`: the sign of
  :math:`z` is dropped (measured: float32 rounding away from ``l1_sign='positive'``,
  far from the documented form). ``uo.preset("mindspore.nn.FTRL",
  ...)`` therefore gives ``l1_sign='positive'``; with ``l1=0`` both forms agree. The
  class has no ``l2_shrinkage``, ``beta`` or ``maximize``, refuses a dynamic or a group
  lr and an lr of 0, decays every parameter when not in groups (no beta/gamma name
  rule: ``no_decay_names=()``), adds the decay to the gradient before the
  accumulator (L2, ``weight_decay``) and divides the gradients by ``loss_scale``.
* TensorFlow's ``tf.keras.optimizers.Ftrl`` computes this update with
  ``l1_sign='linear'``: ``learning_rate_power`` is ``lr_power``,
  ``l1_regularization_strength`` ``l1``, ``l2_regularization_strength`` ``l2``,
  ``l2_shrinkage_regularization_strength`` ``l2_shrinkage``.
"""

from __future__ import annotations

from typing import Any

from .. import _validation as v
from ..ops import Ops
from ..records import Planted, record
from ..schedules import Cosine, Schedule
from ..spec import Spec, State, Tensor, register, spec_dataclass
from ._decay import check_decay, decay_for_parameter, l2_gradient

L1_SIGNS = ("linear", "positive")


@register
@spec_dataclass
class FTRL(Spec):
    __doc__ = __doc__
    name = "ftrl"

    lr: float | Schedule = 1e-3
    lr_power: float = -0.5
    l1: float = 0.0
    l2: float = 0.0
    l2_shrinkage: float = 0.0
    beta: float = 0.0
    initial_accumulator_value: float = 0.1
    l1_sign: str = "linear"
    weight_decay: float = 0.0
    maximize: bool = False
    no_decay_names: tuple[str, ...] = ()

    def _check(self, owner: str) -> dict[str, Any]:
        checked: dict[str, Any] = {}
        if not isinstance(self.lr, Schedule):
            checked["lr"] = v.check_range(owner, "lr", self.lr, low=0.0, low_open=True)
        return {**checked,
                "lr_power": v.check_range(owner, "lr_power", self.lr_power, high=0.0),
                "l1": v.check_range(owner, "l1", self.l1, low=0.0),
                "l2": v.check_range(owner, "l2", self.l2, low=0.0),
                "l2_shrinkage": v.check_range(owner, "l2_shrinkage", self.l2_shrinkage,
                                              low=0.0),
                "beta": v.check_range(owner, "beta", self.beta, low=0.0),
                "initial_accumulator_value": v.check_range(
                    owner, "initial_accumulator_value", self.initial_accumulator_value,
                    low=0.0),
                "l1_sign": v.check_choice(owner, "l1_sign", self.l1_sign, L1_SIGNS),
                "maximize": v.check_bool(owner, "maximize", self.maximize),
                **check_decay(self, owner)}

    def for_parameter(self, name: str | None) -> Spec:
        return decay_for_parameter(self, name)

    def canonical(self) -> Spec:
        # without L1 the sign of the L1 term is no computation
        return self.with_defaults(("l1_sign",)) if self.l1 == 0.0 else self

    def state_names(self) -> tuple[str, ...]:
        return ("accumulator", "linear")

    def init(self, param: Tensor, ops: Ops) -> State:
        return {"accumulator": ops.full_like(param, self.initial_accumulator_value),
                "linear": ops.zeros_like(param)}

    def _powered(self, accumulator: Tensor, ops: Ops) -> Tensor:
        """:math:`n^{-p}`."""
        if self.lr_power == -0.5:
            return ops.sqrt(accumulator)
        return accumulator ** (-self.lr_power)

    def update(self, param: Tensor, grad: Tensor, state: State, *, lr: float, step: int,
               ops: Ops) -> tuple[Tensor, State]:
        g = l2_gradient(self, param, grad)
        accumulator = state["accumulator"] + g * g
        linear = state["linear"] + g
        if self.l2_shrinkage != 0.0:
            linear = linear + param * (2.0 * self.l2_shrinkage)
        if self.lr_power == 0.0:
            quadratic = (1.0 + self.beta) / lr + 2.0 * self.l2
        else:
            powered = self._powered(accumulator, ops)
            linear = linear - (powered - self._powered(state["accumulator"], ops)) / lr * param
            quadratic = (powered + self.beta) / lr + 2.0 * self.l2
        if self.l1 == 0.0:
            numerator = -linear
        elif self.l1_sign == "linear":
            numerator = ops.sign(linear) * self.l1 - linear
        else:
            numerator = self.l1 - linear
        inactive = ops.abs(linear) <= self.l1
        param = ops.where(inactive, ops.zeros_like(param), numerator / quadratic)
        return param, {"accumulator": accumulator, "linear": linear}


# The samples keep lr_power in (-1/2, 0), the powers the kernels trace (sqrt, none); the
# suite's cases (conformance/cases/proximal.py) run -0.3 and -0.7 too.
_DOCUMENTED = FTRL(lr=0.1, l1=0.3, l2=0.1)
_MINDSPORE_CPU = FTRL(lr=0.1, l1=0.3, l2=0.05, l1_sign="positive", weight_decay=0.01)
_KERAS = FTRL(lr=Cosine(lr=0.2, T_max=40, eta_min=0.02), lr_power=0.0, l1=0.05,
              l2_shrinkage=0.2, beta=0.5, initial_accumulator_value=0.5, maximize=True)

RECORD = record(
    FTRL,
    samples=(_DOCUMENTED, _MINDSPORE_CPU, _KERAS),
    planted=(Planted(_DOCUMENTED, {"l1_sign": "positive"}),
             Planted(_DOCUMENTED, {"l1": 0.1}),
             Planted(_DOCUMENTED, {"l2": 0.0}),
             Planted(_MINDSPORE_CPU, {"lr_power": -0.3}),
             Planted(_KERAS, {"lr_power": -0.5}),
             Planted(_KERAS, {"l2_shrinkage": 0.0}),
             Planted(_KERAS, {"beta": 0.0})),
    case_module="unified_opt.conformance.cases.proximal",
    nonfinite={"lr": 0.1},
)
