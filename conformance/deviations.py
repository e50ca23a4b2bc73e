"""Planted deviations that no spec field describes: wrong ways a backend may run the
training loop around a correct update. The explainer tries them; the power tests plant
them.

A :class:`Deviation` stands where a spec stands in :func:`.trajectory.reference_trajectory`
and makes its trajectory from the numpy reference, changing only what goes in:

* ``decay_before_clip``: the coupled L2 decay added to the gradient *before* the
  clipping (the spec's order is clip, then decay: Paddle's, and the usual torch loop's);
* ``schedule_counts_skipped``: a step skipped for non-finite gradients still advanced
  the lr schedule (torch's and Paddle's ``scheduler.step()`` after a skipped step);
* ``without_groups``: the parameter groups ignored;
* ``momentum_before_decay``: SGD's momentum run on the bare gradient and the coupled
  decay added to its output, ``p -= lr * (buf(g) + wd * p)``, where the spec (torch's
  ``SGD``, Paddle's ``Momentum``) puts the decay into the gradient the momentum
  accumulates (:func:`momentum_before_decay_applies` says where it is a candidate).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

import unified_opt as uo
from unified_opt.groups import plan_parameters
from unified_opt.ops import numpy_ops
from unified_opt.reference import with_float32_hyperparameters
from unified_opt.schedules import Schedule

from .trajectory import run

KINDS = ("decay_before_clip", "schedule_counts_skipped", "without_groups",
         "momentum_before_decay")


@dataclass(frozen=True, kw_only=True)
class CountingSkipped(Schedule):
    """``base`` indexed by optimizer *calls*, skipped ones included: taken step ``k``
    runs ``base(c)`` with ``c`` the call of that step. Built only here (not registered)."""

    name = "counting_skipped"
    base: Schedule
    skipped: tuple[int, ...]

    def call_of(self, taken: int) -> int:
        call = taken
        for s in self.skipped:          # sorted: each skipped call at or before it moves it
            if s <= call:
                call += 1
        return call

    def value(self, step):
        return self.base(self.call_of(step))

    def momentum(self, step):
        return self.base.momentum(self.call_of(step))


@dataclass(frozen=True)
class Deviation:
    spec: uo.Spec
    kind: str
    skipped: tuple[int, ...] = ()     # schedule_counts_skipped: the calls that skip

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"Deviation: kind must be one of {KINDS}, got {self.kind!r}")

    def float32_held(self) -> "Deviation":
        return dataclasses.replace(self, spec=with_float32_hyperparameters(self.spec))

    def trajectory(self, case, dtype: str):
        return getattr(self, f"_{self.kind}")(case, dtype)

    # -- the runs ------------------------------------------------------------------
    def _without_groups(self, case, dtype):
        ref = uo.reference(self.spec, case.initial_params(), dtype=dtype)
        return _run(ref, case, self.spec)

    def _schedule_counts_skipped(self, case, dtype):
        spec = self.spec
        counting = spec.replace(lr=CountingSkipped(base=spec.lr, skipped=self.skipped))
        ref = uo.reference(counting, case.initial_params(), dtype=dtype,
                           groups=case.groups or None)
        calls = iter(range(case.steps))

        def step(grads):
            ref.step(grads)
            return spec.lr_at(next(calls))      # the lr a call-counting backend reports
        return _run(ref, case, spec, step)

    def _decay_before_clip(self, case, dtype):
        """The reference without decay, on gradients that carry the decay already."""
        spec, names = self.spec, list(case.params)
        sign = coupled_decay_sign(spec)
        if sign is None:
            raise ValueError(f"Deviation: decay_before_clip needs coupled L2 weight decay; "
                             f"{type(spec).__name__} does not decay that way")
        plans = plan_parameters(spec, names, case.groups or None, "conformance")
        bare = [dataclasses.replace(g, weight_decay=None, exclude_from=tuple(
            e for e in g.exclude_from if e != "weight_decay")) for g in case.groups]
        ref = uo.reference(spec.replace(weight_decay=0.0), case.initial_params(),
                           dtype=dtype, groups=bare or None)

        def step(grads):
            k = ref.step_count
            # the decay in the loss-scaled units the gradients arrive in
            moved = {n: None if grads[n] is None else   # no gradient: no decay either
                     np.asarray(grads[n], dtype=np.float64) + sign * spec.loss_scale
                     * plan.spec.at_step(k).weight_decay * ref.params[n]
                     for n, plan in zip(names, plans)}
            return ref.step(moved)
        return _run(ref, case, spec, step)


    def _momentum_before_decay(self, case, dtype):
        """The reference without decay, then ``lr * wd * p`` (``p`` before the step)."""
        spec = self.spec
        if not momentum_before_decay_applies(spec, case):
            raise ValueError("Deviation: momentum_before_decay needs an SGD spec with "
                             "momentum, a constant coupled weight decay, no maximize, no "
                             f"no_decay_names and no groups, got {spec}")
        ref = uo.reference(spec.replace(weight_decay=0.0), case.initial_params(), dtype=dtype)

        def step(grads):
            # a parameter without a gradient is not updated, so not decayed either
            before = {n: p.copy() for n, p in ref.params.items() if grads[n] is not None}
            lr = ref.step(grads)
            with np.errstate(invalid="ignore", over="ignore"):   # non-finite gradients
                for n, p in before.items():
                    ref.params[n] = (ref.params[n] - lr * spec.weight_decay * p
                                     ).astype(p.dtype)
            return lr
        return _run(ref, case, spec, step)


def momentum_before_decay_applies(spec, case=None) -> bool:
    """Is :class:`Deviation` ``momentum_before_decay`` a candidate for ``spec`` (and
    ``case``): an SGD with momentum and a constant coupled decay on every parameter."""
    decay = getattr(spec, "weight_decay", None)
    return (isinstance(spec, uo.Spec) and spec.name == "sgd" and spec.momentum != 0.0
            and isinstance(decay, float) and decay > 0.0 and not spec.maximize
            and not spec.no_decay_names and (case is None or not case.groups))


def _run(ref, case, spec, step=None):
    return run(step or ref.step, lambda: (ref.params, ref.state), case,
               (lambda: ref.skipped[-1]) if spec.skip_nonfinite else None)


def coupled_decay_sign(spec) -> int | None:
    """+1 when ``spec``'s weight decay is coupled L2 (its update with decay ``wd`` on
    gradient ``g`` equals its update without decay on ``g + wd * param``), -1 for
    ``g - wd * param`` (``maximize``), None otherwise (decoupled, inside a trust ratio,
    ...). Probed on two numpy steps of the spec's own update."""
    decay = getattr(spec, "weight_decay", None)
    if decay is None or (not isinstance(decay, Schedule) and decay == 0.0):
        return None
    try:
        probe = spec.replace(weight_decay=0.5, lr=0.1, grad_clip=None, loss_scale=1.0,
                             skip_nonfinite=False, grad_centralization=False,
                             **({"no_decay_names": ()} if hasattr(spec, "no_decay_names")
                                else {}))
    except (TypeError, ValueError):
        return None
    bare = probe.replace(weight_decay=0.0)
    rng = np.random.default_rng(0)
    grads = rng.standard_normal((2, 5))
    for sign in (1, -1):
        a_param = b_param = rng.standard_normal(5)
        a_state, b_state = probe.init(a_param, numpy_ops), bare.init(b_param, numpy_ops)
        same = True
        for t, g in enumerate(grads, start=1):
            a_param, a_state = probe.update(a_param, g, a_state, lr=0.1, step=t, ops=numpy_ops)
            b_param, b_state = bare.update(b_param, g + sign * 0.5 * b_param, b_state,
                                           lr=0.1, step=t, ops=numpy_ops)
            same = same and np.allclose(a_param, b_param, rtol=1e-12, atol=1e-12)
        if same:
            return sign
    return None

