"""Why a trajectory fails: re-run the reference with the spec's known alternatives
(``spec.alternatives()``: other frameworks' conventions), with the lr schedule
shifted by one step either way, and with the training-loop alternatives every spec has
(:func:`loop_variants`: the clip's norm, eps and grouping, clip vs decay order, no
weight decay, no unscaling, no centralisation, no skipping, a schedule advanced by skipped steps,
groups ignored), and name the variants the trajectory passes against.

Where the optimizer's state was read, the spec's state alternatives too
(``spec.state_alternatives()``: knobs that move the state alone, as the lr inside or outside
a momentum buffer under a constant lr).

Single variants are tried first; only when none matches, pairs of them (e.g. no bias
correction *and* no lr in the decay); only when no pair matches, triples of the spec's
own knobs (:func:`_knob_triples`: ``pytorch_optimizer.LARS`` is ``uo.LARS`` with three
knobs turned). The comparison rule is the suite's own (:func:`compare.compare`), with the
floor measured on the variant's float32 references.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

import unified_opt as uo
from unified_opt.clipping import ClipByGlobalNorm, ClipByNorm
from unified_opt.schedules import Schedule

from .compare import ULPS, K, compare
from .deviations import (
    SLIPS,
    Deviation,
    FirstStepZero,
    coupled_decay_sign,
    momentum_before_decay_applies,
    slip_variants,
)
from .trajectory import FirstSteps, Trajectory, floor_trajectories, reference_trajectory


@dataclass(frozen=True, kw_only=True)
class ShiftedSchedule(Schedule):
    """``base`` read ``shift`` steps off: step ``t`` uses ``base(max(t + shift, 0))``.

    +1 is a scheduler stepped before the optimizer step; -1 one stepped a step late.
    Built only by the explainer (not registered, never serialised).
    """

    name = "shifted"
    base: Schedule
    shift: int

    def value(self, step):
        return self.base(max(step + self.shift, 0))

    def momentum(self, step):
        return self.base.momentum(max(step + self.shift, 0))


def shifted(spec, shift: int):
    """``spec`` with its lr schedule shifted by ``shift`` steps (a constant lr: None)."""
    if not isinstance(spec.lr, Schedule):
        return None
    return spec.replace(lr=ShiftedSchedule(base=spec.lr, shift=shift))


def _clip_variants(spec) -> list[tuple[str, object]]:
    clip, out = spec.grad_clip, []
    if isinstance(clip, ClipByGlobalNorm):
        out.append((f"grad_clip per_group={not clip.per_group}",
                    dataclasses.replace(clip, per_group=not clip.per_group)))
        out.append(("grad_clip=ClipByNorm (per-tensor norm)",
                    ClipByNorm(max_norm=clip.max_norm, eps=clip.eps)))
    if isinstance(clip, ClipByNorm):
        out.append(("grad_clip=ClipByGlobalNorm (one global norm)",
                    ClipByGlobalNorm(max_norm=clip.max_norm, eps=clip.eps)))
    if isinstance(clip, (ClipByGlobalNorm, ClipByNorm)):
        eps = 1e-6 if clip.eps == 0.0 else 0.0
        out.append((f"grad_clip eps={eps:g}", dataclasses.replace(clip, eps=eps)))
    return [(text, spec.replace(grad_clip=c)) for text, c in out]


def loop_variants(spec, case=None) -> list[tuple[str, object]]:
    """The training-loop alternatives of ``spec`` (given ``case``: also those that need
    its gradients or groups). Each is a spec, or a :class:`.deviations.Deviation`."""
    out = _clip_variants(spec)
    decay = getattr(spec, "weight_decay", 0.0)
    if spec.grad_clip is not None and coupled_decay_sign(spec) is not None:
        out.append(("weight decay before the clipping (clip, then decay expected)",
                    Deviation(spec, "decay_before_clip")))
    if momentum_before_decay_applies(spec, case):
        out.append(("the momentum applied before the weight decay (decay added to the "
                    "momentum's output, not to the gradient)" if spec.name == "sgd" else
                    SLIPS["momentum_before_decay"],
                    Deviation(spec, "momentum_before_decay")))
    if spec.loss_scale != 1.0:
        out.append(("loss_scale=1 (gradients not unscaled)", spec.replace(loss_scale=1.0)))
        if isinstance(decay, float) and decay > 0.0:
            out.append((f"weight_decay={decay / spec.loss_scale:g} (weight decay not scaled "
                        "with loss_scale)", spec.replace(weight_decay=decay / spec.loss_scale)))
    if isinstance(decay, float) and decay > 0.0:
        # a ported optimizer left at its framework's default decay: MindSpore's
        # nn.AdamWeightDecay and Paddle's Lamb decay 0.0 by default, torch's AdamW 0.01
        out.append(("weight_decay=0 (the optimizer does not decay the parameters)",
                    spec.replace(weight_decay=0.0)))
    if spec.grad_centralization:
        out.append(("grad_centralization=False", spec.replace(grad_centralization=False)))
    if spec.skip_nonfinite:
        out.append(("skip_nonfinite=False", spec.replace(skip_nonfinite=False)))
    if case is not None and spec.skip_nonfinite and isinstance(spec.lr, Schedule):
        skipped = tuple(t for t in range(case.steps) if not all(
            g is None or np.isfinite(g).all() for g in case.gradients(t).values()))
        if skipped:
            out.append(("skipped steps advancing the lr schedule",
                        Deviation(spec, "schedule_counts_skipped", skipped)))
    if case is not None and case.groups:
        out.append(("the parameter groups ignored", Deviation(spec, "without_groups")))
    # the slips a hand-written optimizer makes, whether or not the spec has a knob for
    # them (Lamb has none for eps placement or decay coupling)
    return out + slip_variants(spec, case)


def spec_knobs(spec, state: bool = True) -> list[tuple[str, object]]:
    """``spec``'s alternatives (other frameworks' knob values), and where the state is
    compared (``state``) its state alternatives."""
    if isinstance(spec, Deviation):
        return []      # deviations do not compose
    try:
        out = list(spec.alternatives())
        if state:
            out += spec.state_alternatives()
    except (TypeError, ValueError):   # a variant that is not a valid spec is not a candidate
        out = []
    return out


def knob_variants(spec, case=None, state: bool = True) -> list[tuple[str, object]]:
    """``spec``'s knobs (:func:`spec_knobs`), shifted schedules and training-loop
    alternatives (:func:`loop_variants`)."""
    if isinstance(spec, Deviation):
        return []      # deviations do not compose
    out = spec_knobs(spec, state)
    for shift in (+1, -1):
        moved = shifted(spec, shift)
        if moved is not None:
            out.append((f"lr schedule shifted by {shift:+d} step", moved))
    fixed_group_lr = case is not None and any(g.lr is not None for g in case.groups or ())
    if not (isinstance(spec.lr, (int, float)) and spec.lr == 0.0) and not fixed_group_lr:
        # the lr the optimizer reports shows the 0 (a scheduler's warmup from 0); a group
        # with a fixed lr of its own cannot follow a schedule (uo refuses the pair)
        out.append(("lr 0 at step 1: this optimizer's lr is 0 at the first step (a warmup "
                    "from 0), then the spec's; the spec's lr is "
                    f"{_lr_text(spec.lr)} from step 1",
                    spec.replace(lr=FirstStepZero(base=spec.lr))))
    return out + loop_variants(spec, case)


def _lr_text(lr) -> str:
    return f"{lr!r}" if isinstance(lr, (int, float)) else "its schedule"


def variants(spec, case=None, state: bool = True) -> list[tuple[str, object]]:
    """Every one-step variant the explainer tries (``state``: the state is compared)."""
    return knob_variants(spec, case, state)


def _pairs(spec, case=None, state: bool = True) -> list[tuple[str, object]]:
    out, seen = [], set()
    for first, one in variants(spec, case, state):
        for second, two in variants(one, case, state):
            key = frozenset((first, second))
            if first == second or key in seen or two == spec:
                continue
            seen.add(key)
            out.append((f"{first} and {second}", two))
    return out


def _knob(description: str) -> str:
    """The field a knob's description turns (``"exclude_1d=True"``: ``exclude_1d``)."""
    return description.partition("=")[0].strip()


def _knob_triples(spec, state: bool = True) -> list[tuple[str, object]]:
    """Three of the spec's own knobs turned at once, each a different field (the knobs
    of a spec with one turned are that spec's: a rule that parts only where another knob
    acts shows up there). Only the knobs: the loop variants and slips would make the
    triples too many to try."""
    out, seen = [], set()
    for first, one in spec_knobs(spec, state):
        for second, two in spec_knobs(one, state):
            for third, three in spec_knobs(two, state):
                fields = {_knob(first), _knob(second), _knob(third)}
                key = frozenset((first, second, third))
                if len(fields) < 3 or key in seen or three == spec:
                    continue
                seen.add(key)
                out.append((f"{first} and {second} and {third}", three))
    return out


#: how far past the rule a trajectory may be from a variant, on the claimed spec's
#: floor, and still have the variant's own floors measured (a variant's float32 noise is
#: of the claimed spec's size; 1000 times leaves no doubt)
PREFILTER = 1000.0
#: steps past the trajectory's first failure against the claimed spec that a candidate
#: is first judged on (:func:`matching`): a variant that is no match almost always parts
#: from the trajectory at that failure or within a few steps of it
FIRST_MARGIN = 5


def matching(trajectory: Trajectory, case, candidates, *, k: float = K, ulps: float = ULPS,
             reference=reference_trajectory, state: bool = True, lr: bool = True,
             floor_values: dict | None = None, first_steps: int | None = None,
             claimed=None) -> list[str]:
    """Descriptions of the candidate specs whose reference ``trajectory`` passes against.
    ``reference(spec, case, dtype)`` makes (or looks up) a reference trajectory;
    ``state=False``: compared on the lr and the parameters, ``lr=False``: not on the lr
    (:func:`.compare.compare`). ``floor_values``: the claimed spec's floor per quantity
    (:func:`.compare.compare`'s ``floors``): a candidate the trajectory misses by
    :data:`PREFILTER` times the rule on them is not a match, without measuring its own
    floors (three float32 runs each).

    ``first_steps``: each candidate is judged on the case's first ``first_steps`` steps
    first (:class:`.trajectory.FirstSteps`), and run whole only when it passes there: a
    step's ratio and floor read the steps up to it only, so a candidate that fails on the
    first steps fails on the whole run, and the matches are the same as without it.

    Candidates that compute the same numbers are tried once: a spec whose canonical form
    (:meth:`unified_opt.Spec.canonical`) is ``claimed``'s (the trajectory failed it) or an
    earlier candidate's is skipped, and a match whose float64 trajectory is bit for bit
    an earlier match's is not listed again (a knob and a slip that say one computation
    in other words: AdamW's "coupled L2 weight decay (Adam)" and the coupled-decay slip)."""
    found, matched = [], []
    tried = _Seen()
    if claimed is not None:
        tried.add(_canonical(claimed))
    first = None
    if first_steps is not None and first_steps < case.steps:
        first = FirstSteps(case, first_steps)
        first_trajectory = trajectory.first(first.steps)
        first_values = None if floor_values is None else {
            name: tuple(values[:first.steps] for values in pair)
            for name, pair in floor_values.items()}
    for description, spec in candidates:
        canonical = _canonical(spec)
        if canonical is not None:
            if canonical in tried:
                continue
            tried.add(canonical)
        try:
            if first is not None and not _passes(first_trajectory, spec, first, k, ulps,
                                                 reference, state, lr, first_values):
                continue
            oracle = reference(spec, case, "float64")
        except (TypeError, ValueError):     # a variant this case cannot run is no candidate
            continue
        if _passes(trajectory, spec, case, k, ulps, reference, state, lr, floor_values,
                   oracle) and not any(_same_numbers(oracle, m) for m in matched):
            found.append(description)
            matched.append(oracle)
    return found


def _passes(trajectory, spec, case, k, ulps, reference, state, lr, floor_values,
            oracle=None) -> bool:
    """Does ``trajectory`` pass against candidate ``spec`` on ``case`` (prefiltered on the
    claimed spec's ``floor_values``, then on the candidate's own floors)?"""
    oracle = _reported(reference(spec, case, "float64") if oracle is None else oracle,
                       trajectory)
    # a copy: a quantity the claimed spec lacks gets this candidate's own floor. The
    # prefilter reads the parameters and the lr only: a candidate's state may sit on
    # another scale than the claimed spec's, whose floors it would be judged on (a
    # momentum buffer with the lr outside is 1/lr times the one with it inside: 1000x
    # at lr=1e-3); the candidate's own floors judge the state below
    if floor_values is not None and not compare(
            trajectory, oracle, [], k=k * PREFILTER, ulps=ulps * PREFILTER, state=False,
            lr=lr, floors=dict(floor_values)).passed:
        return False
    floors = floor_trajectories(spec, case, reference)
    return compare(trajectory, oracle, floors, k=k, ulps=ulps, state=state, lr=lr).passed


def _reported(oracle: Trajectory, trajectory: Trajectory) -> Trajectory:
    """``oracle`` without the state ``trajectory`` does not report: the run read the
    claimed spec's state, so a candidate's own (centered RMSprop's ``grad_avg`` where the
    spec is not centered) is not there to compare; its parameters and the state both
    have still are."""
    state = {name: {key: values for key, values in arrays.items()
                    if key in trajectory.state.get(name, {})}
             for name, arrays in oracle.state.items()}
    return dataclasses.replace(oracle, state=state)


def _canonical(spec):
    """``spec``'s canonical form (None for a deviation: no spec, no canonical form)."""
    if not isinstance(spec, uo.Spec):
        return None
    try:
        return spec.canonical()
    except (TypeError, ValueError):
        return None


class _Seen:
    """Canonical specs seen so far (by hash where they have one, else by equality)."""

    def __init__(self) -> None:
        self._hashed: set = set()
        self._others: list = []

    def add(self, spec) -> None:
        if spec is None:
            return
        try:
            self._hashed.add(spec)
        except TypeError:
            self._others.append(spec)

    def __contains__(self, spec) -> bool:
        try:
            return spec in self._hashed
        except TypeError:
            return any(spec == other for other in self._others)


def _same_numbers(a: Trajectory, b: Trajectory) -> bool:
    """Are two reference trajectories the same numbers, bit for bit (NaN where NaN)?"""
    qa, qb = a.quantities(), b.quantities()
    return qa.keys() == qb.keys() and all(
        qa[n].shape == qb[n].shape and np.array_equal(qa[n], qb[n], equal_nan=True)
        for n in qa)


def knob_text(description: str, spec) -> str:
    """``description`` of a matching variant said against ``spec``: a knob written as
    ``field=value`` gets the spec's own value, "eps_placement='inside' follows this
    optimizer; the spec has 'outside'"; a pair or triple of knobs each one's,
    "exclude_1d=True and zero_norm_rule='none' follow this optimizer; the spec has
    exclude_1d=False, zero_norm_rule='one_if_norm_zero'"."""
    if description.startswith(HELD):          # the values it holds, then any knobs
        _, with_, knobs = description.partition(", with ")
        knobs, turned_back, _ = knobs.partition(HOLDS)
        fields = ([_field_of(part, spec) for part in knobs.split(" and ")]
                  if with_ and not turned_back else [])
        if fields and all(fields):
            values = ", ".join(f"{f}={getattr(spec, f)!r}" for f in fields)
            description = f"{description} (the spec has {values})"
        return f"{description}: these compute this optimizer's numbers"
    if "this optimizer" in description:      # a slip says both sides itself
        return description
    fields = [_field_of(part, spec) for part in description.split(" and ")]
    if len(fields) > 1 and all(fields):       # a pair or triple of knobs: each one's value
        values = ", ".join(f"{f}={getattr(spec, f)!r}" for f in fields)
        return f"{description} follow this optimizer; the spec has {values}"
    if fields[0] and len(fields) == 1:
        return (f"{description} follows this optimizer; the spec has "
                f"{getattr(spec, fields[0])!r}")
    return f"{description} follows this optimizer"


def _field_of(part: str, spec) -> str | None:
    """The spec field a ``field=value`` description turns, or None."""
    field, sep, _ = part.partition("=")
    field = field.strip()
    known = isinstance(spec, uo.Spec) and field in {f.name for f in dataclasses.fields(spec)}
    return field if sep and field.isidentifier() and known else None


#: how :func:`explain_failure` points a user's check at its finite streams alone
FINITE_ONLY = ("to check the finite streams alone: unified-opt check --finite-only "
               "(uo.conformance.check(..., nonfinite=False))")


def whole_tensor_nan(trajectory: Trajectory, oracle: Trajectory, case, comparison
                     ) -> str | None:
    """The text for a failure that is a whole tensor turned NaN by a non-finite gradient
    element, or None. The pattern: the first failure is a non-finite one, at a step at
    which every element of the failing quantity (more than one) is NaN in ``trajectory``
    where the oracle keeps finite elements, after a gradient with a non-finite element.
    An implementation that scales a tensor by a factor made from a norm over it (a trust
    ratio, an RMS, a clipping norm) gets a NaN factor from one NaN or Inf element and
    spreads it to every element; the spec says what its rule makes of a NaN norm (Lamb's
    and LARS's trust ratio is 1 then), which keeps the other elements finite."""
    if comparison is None or comparison.passed or comparison.failure != "nonfinite":
        return None
    name, step = comparison.failing_quantity, comparison.first_failing_step
    got, expected = trajectory.quantities(), oracle.quantities()
    if name == "lr" or name not in got or name not in expected:
        return None
    values = np.asarray(got[name][step - 1], dtype=np.float64).ravel()
    wanted = np.asarray(expected[name][step - 1], dtype=np.float64).ravel()
    finite = int(np.isfinite(wanted).sum())
    if values.size < 2 or not np.isnan(values).all() or finite == 0:
        return None
    parameter = name.partition(":")[2].rpartition(":")[0] if name.startswith("state:") \
        else name.partition(":")[2]
    own, other = None, None
    for t in range(step):
        for grad_name, grad in case.gradients(t).items():
            if grad is not None and not np.isfinite(grad).all():
                if grad_name == parameter and own is None:
                    own = t + 1
                elif grad_name != parameter and other is None:
                    other = (grad_name, t + 1)
    if own is not None:
        cause = (f"a non-finite element of {parameter}'s gradient (step {own}) made a norm "
                 "over the tensor NaN")
    elif other is not None:
        cause = (f"a non-finite element of {other[0]}'s gradient (step {other[1]}) made a "
                 "norm over several tensors NaN (a global norm)")
    else:
        return None
    return (f"{cause}, so the whole tensor became NaN: {name} at step {step} is NaN in "
            f"all {values.size} elements where the spec keeps {finite} finite (a NaN "
            "norm scaled every element; the spec's rule for a NaN norm keeps the others)")


def held_hyperparameters(group: dict, spec) -> dict:
    """The fields of ``spec`` that an optimizer's hyperparameters (``group``: a torch
    param group, or the fields of the spec ``uo.from_native`` reads off the optimizer)
    hold under the same name with another value: numbers, bools and tuples of
    numbers, and name patterns where the spec's field is a tuple of them (MindSpore
    ``nn``'s decay spares ``*beta*``/``*gamma*``: ``no_decay_names``), the lr aside (a
    stream of its own), only where ``spec`` takes the values (a field of the same name
    that means another thing fails the spec's checks, or its run, and is no candidate).
    A ported optimizer left at its library's defaults (``torch_optimizer.LARS``:
    momentum 0, trust_coefficient 0.01, eps 1e-8) differs so."""
    if not isinstance(spec, uo.Spec) or not isinstance(group, dict):
        return {}
    out = {}
    for field in dataclasses.fields(spec):
        name = field.name
        if name == "lr" or name not in group:
            continue
        mine, theirs = getattr(spec, name), _plain_value(group[name])
        patterns = _patterns(mine, group[name])
        if patterns is not None:
            if patterns != mine and _takes(spec, name, patterns):
                out[name] = patterns
            continue
        if theirs is None or isinstance(mine, bool) != isinstance(theirs, bool):
            continue
        if isinstance(mine, tuple) != isinstance(theirs, tuple) or (
                not isinstance(mine, (int, float, tuple))):
            continue
        if isinstance(mine, tuple) and len(mine) != len(theirs):
            continue
        if isinstance(mine, int) and not isinstance(mine, bool):
            if not float(theirs).is_integer():
                continue
            theirs = int(theirs)
        if theirs != mine and _takes(spec, name, theirs):
            out[name] = theirs
    return out if out and _takes(spec, None, out) else {}


def _patterns(mine, value) -> tuple[str, ...] | None:
    """``value`` as a tuple of name patterns where the spec's field ``mine`` is one (an
    empty tuple included), else None."""
    if not isinstance(mine, tuple) or not all(isinstance(m, str) for m in mine):
        return None
    if not isinstance(value, (tuple, list)) or not all(isinstance(v, str) for v in value):
        return None
    return tuple(value)


def spec_fields(spec) -> dict:
    """``spec``'s fields by name, as :func:`held_hyperparameters` reads a param group."""
    return {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)}


def _takes(spec, name: str | None, value) -> bool:
    """Does ``spec`` take ``value`` for field ``name`` (``name`` None: the fields and
    values of the dict ``value``)?"""
    try:
        spec.replace(**(value if name is None else {name: value}))
    except (TypeError, ValueError):
        return False
    return True


def _plain_value(value):
    """``value`` as a Python number, bool or tuple of numbers (None for anything else; a
    one-element tensor is its number)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, (tuple, list)):
        items = [_plain_value(v) for v in value]
        return None if any(i is None or isinstance(i, bool) for i in items) else tuple(items)
    item = getattr(value, "item", None)
    if callable(item) and getattr(value, "numel", lambda: 0)() == 1:
        return _plain_value(item())
    return None


#: how a match on the optimizer's own hyperparameters starts (:func:`explain_failure`)
HELD = "this optimizer's own hyperparameters"
#: where such a match turns one of those values back (:func:`_held_candidates`)
HOLDS = " although it holds "


def observed_lr(trajectory: Trajectory, spec) -> float | None:
    """The one lr a run reported at every step, where the spec's lr is another constant
    (a plain lr slip, ``Adam(lr=2e-3)`` checked as ``adam(lr=1e-3)``; or an lr the
    optimizer shows and never uses, which the spec need not share): a held value the
    explanation tries like the others. A float32 value reads as its shortest decimal
    (the number the user wrote). None where the lrs vary, are not finite, or the spec's
    lr is a schedule."""
    if isinstance(spec.lr, Schedule) or not trajectory.steps:
        return None
    lrs = np.asarray(trajectory.lrs, dtype=np.float64)
    if not np.isfinite(lrs).all() or (lrs != lrs[0]).any() or lrs[0] < 0:
        return None
    value = float(lrs[0])
    if np.float32(value) == value:
        value = float(np.format_float_positional(np.float32(value), unique=True, trim="-"))
    return None if value == spec.lr else value


def _held_candidates(spec, held: dict, case, state: bool):
    """Levels of candidates on the spec with the ``held`` values, each made when the one
    before matched nothing: the spec so, then with one variant, with a pair, with three
    of its knobs. A variant that turns a held value back says so ("with nesterov=False
    although it holds nesterov=True": MindSpore's CPU Momentum kernel ignores its
    ``use_nesterov``); one that turns every held value back is no held candidate."""
    base = spec.replace(**held)

    def head(names):
        said = ", ".join(f"{name}={held[name]!r} (the spec has {getattr(spec, name)!r})"
                         for name in names)
        return f"{HELD}, {said}"

    yield [(head(held), base)]
    for more in (lambda: variants(base, case, state), lambda: _pairs(base, case, state),
                 lambda: _knob_triples(base, state)):
        level = []
        for d, s in more():
            turned = [name for name in held if getattr(s, name, held[name]) != held[name]]
            if len(turned) == len(held):
                continue
            kept = [name for name in held if name not in turned]
            holds = ", ".join(f"{name}={held[name]!r}" for name in turned)
            level.append((f"{head(kept)}, with {d}"
                          + (f"{HOLDS}{holds}" if turned else ""), s))
        yield level


def explain_failure(trajectory: Trajectory, case, spec=None, *, k: float = K,
                    ulps: float = ULPS, reference=reference_trajectory,
                    state: bool = True, lr: bool = True, finite_only_hint: bool = False,
                    held: dict | None = None) -> dict:
    """``{"matches": [...], "text": "..."}`` for a trajectory that failed ``spec``
    (default ``case.spec``); ``state=False`` for a run that recorded no state,
    ``lr=False`` for one whose lr could not be read. A whole tensor turned NaN by a
    non-finite gradient element is named as such (:func:`whole_tensor_nan`, ``"nonfinite":
    "whole_tensor_nan"``) without trying variants (each makes the same NaN);
    ``finite_only_hint``: the text then says how a user's check leaves that stream out
    (:data:`FINITE_ONLY`)."""
    spec = case.spec if spec is None else spec
    if trajectory.steps != case.steps:
        return {"matches": [], "text": "incomplete trajectory: nothing to explain"}
    # the claimed spec's floor per quantity, for matching's prefilter
    values: dict = {}
    first_steps = None
    try:
        oracle = reference(spec, case, "float64")
        claimed = compare(trajectory, oracle,
                          floor_trajectories(spec, case, reference), k=k, ulps=ulps,
                          state=state, lr=lr, floors=values)
        if claimed.first_failing_step is not None:
            first_steps = claimed.first_failing_step + FIRST_MARGIN
    except (TypeError, ValueError):
        values, claimed = None, None
    whole = None if claimed is None else whole_tensor_nan(trajectory, oracle, case, claimed)
    if whole is not None:
        return {"matches": [], "nonfinite": "whole_tensor_nan",
                "text": f"{whole}; {FINITE_ONLY}" if finite_only_hint else whole}
    options = dict(k=k, ulps=ulps, reference=reference, state=state, lr=lr,
                   floor_values=values, first_steps=first_steps, claimed=spec)
    found = matching(trajectory, case, variants(spec, case, state), **options)
    if not found:
        found = matching(trajectory, case, _pairs(spec, case, state), **options)
    if not found:
        found = matching(trajectory, case, _knob_triples(spec, state), **options)
    observed = observed_lr(trajectory, spec) if lr else None
    if observed is not None:
        held = {**(held or {}), "lr": observed}
    for level in _held_candidates(spec, held, case, state) if held and not found else ():
        found = matching(trajectory, case, level, **options)
        if found:
            break
    if found:
        text = "; or ".join(knob_text(d, spec) for d in found)
    else:
        text = "matches no known variant of the spec"
    return {"matches": found, "text": text}

