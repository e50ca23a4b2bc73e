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

import copy
import dataclasses
from dataclasses import dataclass

import numpy as np

import unified_opt as uo
from unified_opt.groups import plan_parameters
from unified_opt.ops import NumpyOps, numpy_ops
from unified_opt.reference import Reference, with_float32_hyperparameters
from unified_opt.schedules import Schedule

from .trajectory import run

KINDS = ("decay_before_clip", "schedule_counts_skipped", "without_groups",
         "momentum_before_decay", "coupled_decay", "decay_first", "eps_inside",
         "global_trust_ratio", "trust_ratio_clip", "stale_gradients", "step_ahead",
         "first_step_lr_zero", "root_eps")

#: the common implementation slips (:func:`slips`): what the optimizer computes, said
#: against what the spec computes
SLIPS = {
    "coupled_decay": "the weight decay coupled into the gradient: this optimizer computes "
                     "the moments of g + wd * p; the spec decays outside the moments",
    "decay_first": "the weight decay applied before the update: this optimizer computes "
                   "p * (1 - lr * wd) first and the update without decay; the spec puts "
                   "wd * p into the update",
    "eps_inside": "eps inside the square root: this optimizer computes sqrt(v + eps); the "
                  "spec computes sqrt(v) + eps",
    "global_trust_ratio": "one trust ratio over all parameters: this optimizer computes "
                          "||all parameters|| / ||all updates||; the spec computes one "
                          "per parameter tensor (per layer)",
    "trust_ratio_clip": "the trust ratio clipped at 10: this optimizer computes "
                        "min(ratio, 10); the spec does not clip the ratio",
    "stale_gradients": "the update applied one step late: this optimizer steps on the "
                       "previous step's gradients (none at step 1); the spec on the "
                       "current step's",
    "step_ahead": "the step counter one ahead: this optimizer computes step t with t + 1 "
                  "(the next step's bias corrections); the spec with t",
    "first_step_lr_zero": "lr 0 at step 1: this optimizer moves nothing at the first step "
                          "(a warmup from 0) while it reports the lr; the spec uses the lr "
                          "from step 1",
    "momentum_before_decay": "the moments updated before the weight decay: this optimizer "
                             "adds wd * p to the update; the spec adds it to the gradient "
                             "the moments accumulate",
    "root_eps": "1e-15 under the square root: this optimizer computes sqrt(v + 1e-15) "
                "(pytorch-optimizer's exp_avg_sq_eps, in its AdaBelief, DiffGrad, LaProp, "
                "ScheduleFreeAdamW, ...); the spec computes sqrt(v)",
}
#: what pytorch-optimizer adds under the root of its second moment (``apply_ams_bound``'s
#: ``exp_avg_sq_eps``): it shows where v is below ~1e-13, on the check's quiet stream
ROOT_EPS = 1e-15
#: the ratio ``trust_ratio_clip`` caps (NVIDIA's and several hand-written LAMBs)
TRUST_RATIO_CAP = 10.0


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


    def _coupled_decay(self, case, dtype):
        """The reference without decay on ``g + wd * p`` (a trust ratio kept running)."""
        spec = self.spec
        bare = spec.replace(weight_decay=0.0, **({"always_adapt": True} if _adapts(spec)
                                                 else {}))
        ref = uo.reference(bare, case.initial_params(), dtype=dtype)

        def step(grads):
            moved = {n: None if g is None else np.asarray(g, dtype=ref.dtype)
                     + spec.weight_decay * ref.params[n] for n, g in grads.items()}
            return ref.step(moved)
        return _run(ref, case, spec, step)

    def _decay_first(self, case, dtype):
        """``p *= 1 - lr * wd``, then the reference's update without decay."""
        spec = self.spec
        ref = uo.reference(spec.replace(weight_decay=0.0, always_adapt=True),
                           case.initial_params(), dtype=dtype)

        def step(grads):
            lr = spec.lr_at(ref.step_count)
            with np.errstate(all="ignore"):
                for n, g in grads.items():
                    if g is not None:
                        p = ref.params[n]
                        ref.params[n] = (p - p * (lr * spec.weight_decay)).astype(p.dtype)
            return ref.step(grads)
        return _run(ref, case, spec, step)

    def _eps_inside(self, case, dtype):
        spec = self.spec
        ref = Reference(spec, case.initial_params(), dtype, ops=_EpsInside(spec.eps))
        return _run(ref, case, spec)

    def _root_eps(self, case, dtype):
        spec = self.spec
        ref = Reference(spec, case.initial_params(), dtype, ops=_UnderRoot(ROOT_EPS))
        return _run(ref, case, spec)

    def _global_trust_ratio(self, case, dtype):
        """Each step twice: once on a copy recording every tensor's two norms, then with
        the norms of all tensors together in their place."""
        spec = self.spec
        ref = Reference(spec, case.initial_params(), dtype)

        def step(grads):
            probe = copy.deepcopy(ref)
            probe.ops = recorder = _Norms()
            probe.step(grads)
            norms = np.asarray(recorder.calls, dtype=ref.dtype).reshape(-1, 2)
            with np.errstate(all="ignore"):
                total = np.sqrt(np.sum(norms * norms, axis=0))
            ref.ops = _Norms(replace=tuple(total))
            return ref.step(grads)
        return _run(ref, case, spec, step)

    def _trust_ratio_clip(self, case, dtype):
        spec = self.spec
        # Lamb has a weight-norm clamp and a trust eps; LARS has neither knob
        ops = _Norms(cap=TRUST_RATIO_CAP, clamp=getattr(spec, "weight_norm_clamp", None),
                     trust_eps=getattr(spec, "trust_eps", 0.0))
        ref = Reference(spec, case.initial_params(), dtype, ops=ops)
        return _run(ref, case, spec)

    def _stale_gradients(self, case, dtype):
        spec = self.spec
        ref = uo.reference(spec, case.initial_params(), dtype=dtype)
        held = {"grads": {n: None for n in case.params}}

        def step(grads):
            previous, held["grads"] = held["grads"], grads
            return ref.step(previous)
        return _run(ref, case, spec, step)

    def _step_ahead(self, case, dtype):
        spec = self.spec
        ref = uo.reference(spec, case.initial_params(), dtype=dtype)
        ref.param_steps = {n: 1 for n in ref.param_steps}     # every count one ahead
        return _run(ref, case, spec)

    def _first_step_lr_zero(self, case, dtype):
        """lr 0 at step 1 while the optimizer reports the spec's lr."""
        spec = self.spec
        ref = uo.reference(spec.replace(lr=FirstStepZero(base=spec.lr)),
                           case.initial_params(), dtype=dtype)
        calls = iter(range(case.steps))

        def step(grads):
            ref.step(grads)
            return spec.lr_at(next(calls))
        return _run(ref, case, spec, step)

    def _momentum_before_decay(self, case, dtype):
        """The reference without decay, then ``lr * wd * p`` (``p`` before the step)."""
        spec = self.spec
        if not momentum_before_decay_applies(spec, case):
            raise ValueError("Deviation: momentum_before_decay needs an SGD spec with "
                             "momentum (or another with coupled L2 decay into its moments), "
                             "a constant weight decay, no maximize, no no_decay_names and "
                             f"no groups, got {spec}")
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
    ``case``): an SGD with momentum, or another spec whose decay is coupled L2 into the
    gradient its moments accumulate (Adam), with a constant decay on every parameter."""
    decay = getattr(spec, "weight_decay", None)
    if not (isinstance(spec, uo.Spec) and isinstance(decay, float) and decay > 0.0
            and not getattr(spec, "maximize", False)
            and not getattr(spec, "no_decay_names", ()) and (case is None or not case.groups)):
        return False
    if spec.name == "sgd":
        return spec.momentum != 0.0
    return _has_state(spec) and coupled_decay_sign(spec) == 1


# -- the common implementation slips -------------------------------------------------

class _Counting(NumpyOps):
    """numpy ops counting the square roots and norms an update takes."""

    def __init__(self):
        self.sqrts = self.norms = 0

    def sqrt(self, x):
        self.sqrts += 1
        return super().sqrt(x)

    def norm(self, x):
        self.norms += 1
        return super().norm(x)


def _probe(spec, *, step: int = 1, ops=None, param=None, grad=None):
    """One update of ``spec`` on a fixed small parameter (its result and the ops)."""
    ops = _Counting() if ops is None else ops
    rng = np.random.default_rng(0)
    param = rng.standard_normal(5) if param is None else param
    grad = rng.standard_normal(5) if grad is None else grad
    state = spec.init(param, ops)
    with np.errstate(all="ignore"):
        out, _ = spec.update(param, grad, state, lr=0.1, step=step, ops=ops)
    return out, ops


def _has_state(spec) -> bool:
    """Does ``spec`` keep state (moments) across steps?"""
    return bool(spec.init(np.zeros(3), numpy_ops))


def _plain(spec) -> bool:
    """A spec these slips are tried on: one constant lr or schedule, nothing run before
    the update (no clip, loss scale, skipping, centralisation), a float decay."""
    return (isinstance(spec, uo.Spec) and spec.grad_clip is None and spec.loss_scale == 1.0
            and not spec.skip_nonfinite and not spec.grad_centralization
            and not isinstance(getattr(spec, "weight_decay", 0.0), Schedule))


def _adapts(spec) -> bool:
    """A trust-ratio spec whose ratio runs (decay > 0 or ``always_adapt``)."""
    return hasattr(spec, "always_adapt") and (spec.always_adapt or spec.weight_decay > 0.0)


def has_trust_ratio(spec) -> bool:
    """Does ``spec``'s update scale by a trust ratio (two norms, LAMB's or LARS's) that
    runs with these hyperparameters?"""
    try:
        return _adapts(spec) and _probe(spec)[1].norms == 2
    except Exception:      # a spec this probe cannot run
        return False


def slips(spec, case=None) -> list[str]:
    """The :data:`SLIPS` kinds that are candidates for ``spec`` (and ``case``): each
    only where the spec has no knob saying it and the slip changes its numbers."""
    if not _plain(spec) or (case is not None and (case.groups or case.workers > 1)):
        return []
    try:
        _, counted = _probe(spec)
        moved = _has_state(spec)
    except Exception:        # a spec this probe cannot run (needs 2-D parameters, ...)
        return []
    out = []
    decay = getattr(spec, "weight_decay", 0.0)
    no_decay = getattr(spec, "no_decay_names", ())
    if isinstance(decay, float) and decay > 0.0 and not no_decay and moved \
            and coupled_decay_sign(spec) is None:
        out.append("coupled_decay")
        if _adapts(spec):
            out.append("decay_first")
    eps = getattr(spec, "eps", None)
    if isinstance(eps, float) and eps > 0.0 and not hasattr(spec, "eps_placement") \
            and counted.sqrts == 1:
        out.append("eps_inside")
    if isinstance(eps, float) and counted.sqrts == 1:
        out.append("root_eps")
    if counted.norms == 2 and _adapts(spec):
        out += ["global_trust_ratio", "trust_ratio_clip"]
    out.append("stale_gradients")
    first, _ = _probe(spec, step=1)
    second, _ = _probe(spec, step=2)
    if not np.allclose(first, second, rtol=1e-12, atol=0.0):
        out.append("step_ahead")
    if not (isinstance(spec.lr, (int, float)) and spec.lr == 0.0):
        out.append("first_step_lr_zero")
    return out


def slip_variants(spec, case=None) -> list[tuple[str, "Deviation"]]:
    """``(description, Deviation)`` of every slip :func:`slips` finds for ``spec``."""
    return [(SLIPS[kind], Deviation(spec, kind)) for kind in slips(spec, case)]


@dataclass(frozen=True, kw_only=True)
class FirstStepZero(Schedule):
    """``base`` (a schedule or a constant lr) with lr 0 at step 0: a warmup that starts
    at 0. Built only by the explainer (not registered, never serialised)."""

    name = "first_step_zero"
    base: object

    def value(self, step):
        if step == 0:
            return 0.0
        return self.base(step) if isinstance(self.base, Schedule) else self.base

    def momentum(self, step):
        return self.base.momentum(step) if isinstance(self.base, Schedule) else None


class _EpsInside(NumpyOps):
    """``sqrt(x)`` as ``sqrt(x + eps) - eps``: the spec then adds its eps back, so eps
    sits inside the root. (Running the spec with eps 0 instead is refused by specs whose
    eps must be > 0.)"""

    def __init__(self, eps: float):
        self.eps = eps

    def sqrt(self, x):
        return np.sqrt(x + self.eps) - self.eps


class _UnderRoot(NumpyOps):
    """``sqrt(x)`` as ``sqrt(x + tiny)``: a constant under the root, before any eps the
    spec adds outside it."""

    def __init__(self, tiny: float):
        self.tiny = tiny

    def sqrt(self, x):
        return np.sqrt(x + self.tiny)


class _Norms(NumpyOps):
    """The two norms of a trust ratio, taken in order (the parameter's, then the
    update's): recorded (``replace`` None), replaced by the global ones, or the update's
    raised so that the ratio stays <= ``cap``."""

    def __init__(self, *, replace=None, cap=None, clamp=None, trust_eps=0.0):
        self.calls: list = []
        self.replace, self.cap, self.clamp, self.trust_eps = replace, cap, clamp, trust_eps
        self.index = 0

    def norm(self, x):
        value = super().norm(x)
        first = self.index % 2 == 0
        self.index += 1
        if self.replace is not None:
            return np.asarray(self.replace[0 if first else 1], dtype=value.dtype)
        if self.cap is not None:
            if first:
                self.phi = value if self.clamp is None else np.minimum(value, self.clamp)
                return value
            # phi / (u + trust_eps) <= cap, a zero norm keeps its rule
            floor = self.phi / self.cap - self.trust_eps
            return np.where(value > 0.0, np.maximum(value, floor), value).astype(value.dtype)
        self.calls.append(value)
        return value


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
        try:
            a_state, b_state = probe.init(a_param, numpy_ops), bare.init(b_param, numpy_ops)
            same = True
            for t, g in enumerate(grads, start=1):
                a_param, a_state = probe.update(a_param, g, a_state, lr=0.1, step=t,
                                                ops=numpy_ops)
                b_param, b_state = bare.update(b_param, g + sign * 0.5 * b_param, b_state,
                                               lr=0.1, step=t, ops=numpy_ops)
                same = same and np.allclose(a_param, b_param, rtol=1e-12, atol=1e-12)
        except (TypeError, ValueError):
            # an update that cannot run alone (DGC's needs its exchange's world size)
            return None
        if same:
            return sign
    return None

