r"""LARS (You, Gitman & Ginsburg, 2017): momentum SGD on a gradient rescaled per tensor.

Gradient :math:`g`, decay :math:`\lambda`, trust coefficient :math:`\eta_{tc}`:

.. math::

    \rho &= \frac{\eta_{tc}\,\lVert\theta\rVert}
        {\lVert g\rVert + \lambda\lVert\theta\rVert + \epsilon}
        \qquad(\text{with } \texttt{clip}: \rho \leftarrow \min(\max(\rho/\eta_t, 0), 1)) \\
    d &= \rho\,(g + \lambda\theta)

applied when :math:`\lambda > 0` or ``always_adapt`` (else :math:`d = g`). Then the
momentum step of :mod:`unified_opt.algorithms.sgd` on :math:`d` (written once there):
``lr_placement="inside"`` keeps the lr in the buffer, :math:`b_t = \mu b_{t-1} + \eta_t d`,
:math:`\theta_t = \theta_{t-1} - b_t`; ``"outside"`` is :math:`b_t = \mu b_{t-1} + d`,
:math:`\theta_t = \theta_{t-1} - \eta_t b_t`; with dampening, Nesterov and the
first-step rule (``momentum_init``) as in SGD.

``zero_norm_rule`` says what happens when a norm is 0:

* ``"one_if_norm_zero"``: :math:`\rho = 1` when :math:`\lVert\theta\rVert = 0` or
  :math:`\lVert g\rVert = 0` (the decay stays in :math:`d`);
* ``"raw_if_norm_zero"``: :math:`d = g` then (no ratio, no decay);
* ``"one_if_denominator_zero"``: :math:`\rho = 1` when :math:`\lVert\theta\rVert = 0` or the
  denominator is 0;
* ``"none"``: the formula as written (:math:`\lVert\theta\rVert = 0` gives :math:`\rho = 0`).

Which parameters: names matching one of the shell-style patterns ``exclude_names`` (and,
with ``exclude_1d``, every parameter of at most one dimension) take the plain momentum
step on :math:`g`, without ratio or decay. Names matching one of ``no_decay_names`` get
:math:`\lambda = 0` (so also no ratio unless ``always_adapt``).

Args:
    momentum: the momentum factor :math:`\mu` >= 0 of the SGD step on :math:`d`.
    weight_decay: :math:`\lambda` >= 0, added to the rescaled gradient
        (:math:`d = \rho(g + \lambda\theta)`); 0 also turns the ratio off unless
        ``always_adapt``.
    trust_coefficient: :math:`\eta_{tc}` >= 0, the trust ratio's coefficient.
    eps: >= 0, added to the trust ratio's denominator.
    nesterov: ``True``: the Nesterov form of the momentum step (as SGD's).
    zero_norm_rule: what a zero norm gives: ``'one_if_norm_zero'``,
        ``'raw_if_norm_zero'``, ``'one_if_denominator_zero'`` or ``'none'`` (each
        described above).
    clip: ``True``: the ratio is divided by the lr and clipped to [0, 1]
        (``mindspore.nn.LARS(use_clip=True)``); ``False``: not.
    exclude_1d: ``True``: parameters of at most one dimension take the plain
        momentum step (no ratio, no decay); ``False``: not.
    exclude_names: shell-style patterns over whole parameter names; matching
        parameters take the plain momentum step (no ratio, no decay).

Differences between frameworks
------------------------------
* ``paddle.incubate.optimizer.LarsMomentumOptimizer`` (this spec's defaults): lr inside
  the buffer, buffer from 0, eps 0, ``one_if_norm_zero``, no ratio when
  :math:`\lambda = 0`; ``exclude_from_weight_decay`` names get :math:`\lambda = 0`.
* ``mindspore.nn.LARS`` wraps an ``nn`` optimizer (``Momentum``: lr outside the buffer,
  from 0; ``SGD``: torch's first step): the ratio on every parameter except names
  containing ``LayerNorm`` or ``bias`` (``exclude_names=("*LayerNorm*", "*bias*")``; they
  also lose the inner optimizer's decay),
  eps 1e-5, ``zero_norm_rule="none"``, ``clip`` for ``use_clip``. No CPU kernel.
* ``torch_optimizer.LARS``: torch-SGD momentum (first buffer = :math:`d`), eps 1e-8,
  ``raw_if_norm_zero``, no ratio when :math:`\lambda = 0`.
* ``pytorch_optimizer.LARS``: eps 0, ``one_if_denominator_zero``, ``always_adapt``,
  ``exclude_1d`` (1-D parameters: plain momentum, no decay), buffer from 0, lr outside.
"""

from __future__ import annotations

import functools
from typing import Any

from .. import _validation as v
from ..groups import name_matches
from ..ops import Ops
from ..records import Planted, record
from ..schedules import Schedule
from ..spec import Spec, State, Tensor, register, spec_dataclass
from ._alternatives import (
    distinct,
    lr_placement_state_alternatives,
    lr_varies,
    other_lr_placement,
)
from ._decay import canonical_adapt, check_decay, decay_for_parameter
from .sgd import SGD, canonical_momentum, check_momentum_fields

ZERO_NORM_RULES = ("one_if_norm_zero", "raw_if_norm_zero", "one_if_denominator_zero", "none")


@register
@spec_dataclass
class LARS(Spec):
    __doc__ = __doc__
    name = "lars"

    lr: float | Schedule = 1e-3
    momentum: float = 0.9
    weight_decay: float = 5e-4
    trust_coefficient: float = 1e-3
    eps: float = 0.0
    dampening: float = 0.0
    nesterov: bool = False
    lr_placement: str = "inside"
    momentum_init: str = "zeros"
    always_adapt: bool = False
    zero_norm_rule: str = "one_if_norm_zero"
    clip: bool = False
    exclude_1d: bool = False
    exclude_names: tuple[str, ...] = ()
    no_decay_names: tuple[str, ...] = ()

    def _check(self, owner: str) -> dict[str, Any]:
        out = {"trust_coefficient": v.check_range(owner, "trust_coefficient",
                                                  self.trust_coefficient, low=0.0),
               "eps": v.check_range(owner, "eps", self.eps, low=0.0),
               "always_adapt": v.check_bool(owner, "always_adapt", self.always_adapt),
               "zero_norm_rule": v.check_choice(owner, "zero_norm_rule", self.zero_norm_rule,
                                                ZERO_NORM_RULES),
               "clip": v.check_bool(owner, "clip", self.clip),
               "exclude_1d": v.check_bool(owner, "exclude_1d", self.exclude_1d),
               "exclude_names": v.check_names(owner, "exclude_names", self.exclude_names),
               **check_momentum_fields(self, owner), **check_decay(self, owner)}
        return out

    @functools.cached_property
    def _momentum_step(self) -> SGD:
        return SGD(momentum=self.momentum, dampening=self.dampening, nesterov=self.nesterov,
                   lr_placement=self.lr_placement, momentum_init=self.momentum_init)

    def for_parameter(self, name: str | None) -> Spec:
        if self.exclude_names:
            if name is None:
                raise ValueError(f"LARS: exclude_names={self.exclude_names!r} needs parameter "
                                 "names; pass a module or (name, parameter) pairs")
            if name_matches(name, self.exclude_names):
                return self.replace(weight_decay=0.0, always_adapt=False, exclude_names=(),
                                    no_decay_names=())
        return decay_for_parameter(self, name)

    def state_names(self, shape: tuple[int, ...] | None = None) -> tuple[str, ...]:
        return self._momentum_step.state_names()

    def init(self, param: Tensor, ops: Ops) -> State:
        return self._momentum_step.init(param, ops)

    def update(self, param: Tensor, grad: Tensor, state: State, *, lr: float, step: int,
               ops: Ops) -> tuple[Tensor, State]:
        direction = grad
        plain = self.exclude_1d and len(param.shape) <= 1
        if not plain and (self.weight_decay > 0.0 or self.always_adapt):
            direction = self._scaled(param, grad, lr, ops)
        return self._momentum_step.update(param, direction, state, lr=lr, step=step, ops=ops)

    def _scaled(self, param, grad, lr, ops):
        """:math:`\\rho (g + \\lambda\\theta)` with the zero-norm rule."""
        param_norm = ops.norm(param)
        grad_norm = ops.norm(grad)
        decayed = grad + param * self.weight_decay if self.weight_decay != 0.0 else grad
        denominator = grad_norm + param_norm * self.weight_decay + self.eps
        ratio = param_norm * self.trust_coefficient / denominator
        if self.clip:
            ratio = ops.clip(ratio / lr, 0.0, 1.0) if lr > 0.0 else ops.full_like(ratio, 1.0)
        one = ops.full_like(ratio, 1.0)
        rule = self.zero_norm_rule
        if rule == "none":
            return decayed * ratio
        if rule == "one_if_denominator_zero":
            ratio = ops.where(param_norm > 0.0, ops.where(denominator > 0.0, ratio, one), one)
            return decayed * ratio
        if rule == "one_if_norm_zero":
            return decayed * ops.where(param_norm > 0.0,
                                       ops.where(grad_norm > 0.0, ratio, one), one)
        scaled = decayed * ratio                            # raw_if_norm_zero
        return ops.where(param_norm > 0.0, ops.where(grad_norm > 0.0, scaled, grad), grad)

    def canonical(self) -> Spec:
        return canonical_adapt(canonical_momentum(self))

    def alternatives(self) -> list[tuple[str, Spec]]:
        """Other frameworks' LARS knobs, but those that compute the spec's numbers here:
        ``"none"`` and ``"one_if_denominator_zero"`` part only where the denominator
        is 0, which eps > 0 or a decay on every parameter rules out (a parameter tensor
        of norm 0 aside, which no check stream holds); ``always_adapt`` only acts on a
        parameter that does not decay and is not excluded; the lr placement only under
        an lr schedule (else :meth:`state_alternatives`); the first-step rule only with
        dampening."""
        never_zero = self.eps > 0.0 or (self.weight_decay > 0.0 and not self.no_decay_names)
        rules = [rule for rule in ZERO_NORM_RULES if rule != self.zero_norm_rule]
        if never_zero:      # the twins: one of them, and not the spec's twin
            rules.remove("none" if self.zero_norm_rule == "one_if_denominator_zero"
                         else "one_if_denominator_zero")
        out = [(f"zero_norm_rule={rule!r}", self.replace(zero_norm_rule=rule))
               for rule in rules]
        if self.weight_decay == 0.0 or self.no_decay_names:
            out.append((f"always_adapt={not self.always_adapt}",
                        self.replace(always_adapt=not self.always_adapt)))
        if lr_varies(self):
            out.append(other_lr_placement(self))
        if self.momentum != 0.0:
            other = "grad" if self.momentum_init == "zeros" else "zeros"
            out.append((f"momentum_init={other!r}", self.replace(momentum_init=other)))
        out.append((f"exclude_1d={not self.exclude_1d}",
                    self.replace(exclude_1d=not self.exclude_1d)))
        return distinct(self, out)

    def state_alternatives(self) -> list[tuple[str, Spec]]:
        """The other lr placement under a constant lr other than 1, with momentum: the
        same parameters, a buffer ``lr`` times this spec's
        (:func:`._alternatives.lr_placement_in_state_only`; ``pytorch_optimizer.LARS``
        keeps the lr outside, Paddle's ``LarsMomentumOptimizer`` inside)."""
        return lr_placement_state_alternatives(self)


_EXCLUDED = LARS(lr=0.5, weight_decay=0.01, trust_coefficient=0.02, exclude_names=("*bias*",))

RECORD = record(LARS,
                samples=(_EXCLUDED,
                         LARS(lr=0.5, weight_decay=0.01, trust_coefficient=0.02,
                              lr_placement="outside", momentum_init="grad", dampening=0.1,
                              zero_norm_rule="raw_if_norm_zero", clip=True),
                         LARS(lr=0.5, weight_decay=0.01, trust_coefficient=0.02, eps=1e-5,
                              zero_norm_rule="none", always_adapt=True)),
                planted=(Planted(_EXCLUDED, {"exclude_names": ()}),),
                case_module="unified_opt.conformance.cases.large_batch",
                nonfinite={"lr": 0.5},
                benchmark=LARS(lr=0.1, weight_decay=1e-4))
