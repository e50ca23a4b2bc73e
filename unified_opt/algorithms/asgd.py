r"""Averaged SGD (Polyak and Juditsky, 1992), in torch's form: SGD with a decaying step
size :math:`\eta_t`, a decay of the parameter by :math:`\lambda\eta_t`, and a running
average :math:`\bar\theta` of the iterates that starts at step :math:`t_0`.

Step :math:`t` (1-based), gradient :math:`g_t` (negated when ``maximize``), the coupled
L2 term :math:`g \leftarrow g + w\,\theta_{t-1}` with :math:`w` = ``weight_decay``,
:math:`\lambda` = ``lambd``, :math:`\alpha` = ``alpha``:

.. math::

    \theta_t &= \theta_{t-1}\,(1 - \lambda\,\eta_t) - \eta_t\, g \\
    \bar\theta_t &= \bar\theta_{t-1} + \mu_t\,(\theta_t - \bar\theta_{t-1})
        \qquad (\bar\theta_t = \theta_t \text{ where } \mu_t = 1) \\
    \eta_{t+1} &= \frac{\gamma_t}{(1 + \lambda\,\gamma_t\, t)^{\alpha}},
        \qquad \eta_1 = \gamma_1 \\
    \mu_t &= \frac{1}{\max(1,\; t - 1 - t_0)} \quad (t > 1), \qquad \mu_1 = 1

with :math:`\gamma_t` the lr of step :math:`t`: the step size of a step is computed at
the end of the step before, from that step's lr, so under a schedule it lags the lr by
one step (as in every framework that ships it). The state holds the average ``ax``
(:math:`\bar\theta`, zeros before the first step) and the 0-d ``eta`` and ``mu`` of the
next step. The average never feeds back into :math:`\theta`: it is the point to
evaluate, read from the state (``ref.state[name]["ax"]``, the native's ``ax``).

Args:
    lambd: :math:`\lambda` >= 0, both the decay of the parameter by
        :math:`\lambda\eta_t` at each step and the rate of the step size's decay
        (torch's and MindSpore's ``lambd``, default 1e-4).
    alpha: :math:`\alpha` >= 0, the power of the step size's decay
        :math:`(1 + \lambda\gamma t)^{-\alpha}` (default 0.75).
    t0: :math:`t_0`, a finite number: the step after which the averaging starts:
        until step :math:`t_0 + 2` the average is the parameter itself, then
        :math:`\mu_t = 1/(t - 1 - t_0)` (default 1e6, averaging off in practice; a
        negative one averages from the first steps, as torch allows).

Differences between frameworks
------------------------------
* ``torch.optim.ASGD`` computes this update (its per-parameter loop and its
  ``foreach`` form both), with ``eta`` and ``mu`` kept as float32 0-d tensors (the
  default dtype) whatever the parameters' dtype: a float64 run of it carries float32
  rounding of the step size. ``capturable=True`` (CUDA) computes the same formula with
  tensor operations (read from torch's source; ``tests/test_torch_optim_db.py`` runs
  torch's capturable configurations where a CUDA device is present).
* ``mindspore.experimental.optim.ASGD``: the same update and defaults, with ``eta`` and
  ``mu`` computed in float32 arithmetic; ``eta`` and ``mu`` are plain Python lists of
  Parameters that checkpoints leave out (a resume from ``save_checkpoint`` differs):
  :func:`unified_opt.save_state` reads them from the live object, and
  :func:`unified_opt.convert_checkpoint` refuses such a checkpoint by name.
* ``mindspore.nn.ASGD``: the same update with ``learning_rate=0.1`` by default, no
  ``maximize``, and the ``nn`` weight-decay filter (every parameter whose name has no
  ``beta`` or ``gamma`` is decayed: ``no_decay_names``).
* ``paddle.optimizer.ASGD`` is another algorithm under the same name: SAG, the
  stochastic average *gradient* (a table of the last ``batch_num`` gradients whose mean
  is the step), not an average of the iterates. No knob of this spec reaches it (its
  state is ``batch_num`` copies of each parameter and its step is not a function of
  :math:`\theta, \bar\theta, \eta, \mu`), so it stays refused, with the reason in
  ``docs/backends.md``; with ``batch_num=1`` it is plain SGD (``uo.SGD``).
"""

from __future__ import annotations

from typing import Any

from .. import _validation as v
from ..ops import Ops
from ..records import CaseSketch, Planted, record
from ..schedules import Cosine, Schedule
from ..spec import Spec, State, Tensor, register, spec_dataclass
from ._decay import check_decay, decay_for_parameter, l2_gradient


@register
@spec_dataclass
class ASGD(Spec):
    __doc__ = __doc__
    name = "asgd"

    lr: float | Schedule = 1e-2
    lambd: float = 1e-4
    alpha: float = 0.75
    t0: float = 1e6
    weight_decay: float = 0.0
    maximize: bool = False
    no_decay_names: tuple[str, ...] = ()

    def _check(self, owner: str) -> dict[str, Any]:
        return {"lambd": v.check_range(owner, "lambd", self.lambd, low=0.0),
                "alpha": v.check_range(owner, "alpha", self.alpha, low=0.0),
                "t0": v.check_range(owner, "t0", self.t0),
                "maximize": v.check_bool(owner, "maximize", self.maximize),
                **check_decay(self, owner)}

    def for_parameter(self, name: str | None) -> Spec:
        return decay_for_parameter(self, name)

    def state_names(self) -> tuple[str, ...]:
        return ("ax", "eta", "mu")

    def init(self, param: Tensor, ops: Ops) -> State:
        return {"ax": ops.zeros_like(param), "eta": ops.scalar_like(param, 0.0),
                "mu": ops.scalar_like(param, 1.0)}

    def update(self, param: Tensor, grad: Tensor, state: State, *, lr: float, step: int,
               ops: Ops) -> tuple[Tensor, State]:
        # three decisions on the step (the MindSpore 'ops' graph form keeps each path)
        first = bool(step == 1)
        g = l2_gradient(self, param, grad)
        # the first step's size is its lr; later ones were computed by the step before
        eta = ops.scalar_like(param, lr) if first else state["eta"]
        param = param * (1.0 - eta * self.lambd) - eta * g
        weight = step - 1 - self.t0            # mu_t = 1 / max(1, weight), 1 at step 1
        if first or weight <= 1.0:
            ax = param
        else:
            ax = state["ax"] + (param - state["ax"]) * (1.0 / weight)
        eta_next = lr / (1.0 + self.lambd * lr * step) ** self.alpha
        return param, {"ax": ax, "eta": ops.scalar_like(param, eta_next),
                       "mu": ops.scalar_like(param, 1.0 / max(1.0, step - self.t0))}


_PLAIN = ASGD(lr=0.05)
_DECAYED = ASGD(lr=0.05, lambd=0.5, alpha=0.6, t0=5.0, weight_decay=0.1)
#: averaging from the second step (t0 < 0, which torch allows): mu_2 = 1/3.5
_EARLY = ASGD(lr=0.05, lambd=0.1, t0=-2.5)
_SCHEDULED = ASGD(lr=Cosine(lr=0.05, T_max=40, eta_min=0.001), lambd=0.3, t0=10.0,
                  weight_decay=0.2, maximize=True, no_decay_names=("*gamma*",))

RECORD = record(
    ASGD,
    samples=(_PLAIN, _DECAYED, _EARLY, _SCHEDULED),
    planted=(Planted(_DECAYED, {"lambd": 0.4}),
             Planted(_DECAYED, {"alpha": 0.75}),
             Planted(_DECAYED, {"t0": 8.0}),
             Planted(_EARLY, {"t0": -1.5}),
             Planted(_SCHEDULED, {"no_decay_names": ()})),
    cases=(CaseSketch("asgd_default", _PLAIN),
           CaseSketch("asgd_decay_averaging", _DECAYED,
                      "a fast step-size decay, L2 decay, the average moving from step 8"),
           CaseSketch("asgd_cosine_maximize", _SCHEDULED,
                      "a cosine lr (the step size lags it by a step), ascending, no decay "
                      "on ln.gamma")),
    case_module="unified_opt.conformance.cases.averaged",
    nonfinite={"lr": 0.05},
)
