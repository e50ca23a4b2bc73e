"""Why a trajectory fails: re-run the reference with the spec's known alternatives
(``spec.alternatives()``: other frameworks' conventions) and with the lr schedule
shifted by one step either way, and name the variants the trajectory passes against.

Single variants are tried first; only when none matches, pairs of them (e.g. no bias
correction *and* no lr in the decay). The comparison rule is the suite's own
(:func:`compare.compare`), with the floor measured on the variant's float32 references.
"""

from __future__ import annotations

from dataclasses import dataclass

from unified_opt.schedules import Schedule

from .compare import K, ULPS, compare
from .trajectory import Trajectory, floor_trajectories, reference_trajectory


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


def shifted(spec, shift: int):
    """``spec`` with its lr schedule shifted by ``shift`` steps (a constant lr: None)."""
    if not isinstance(spec.lr, Schedule):
        return None
    return spec.replace(lr=ShiftedSchedule(base=spec.lr, shift=shift))


def knob_variants(spec) -> list[tuple[str, object]]:
    """``spec``'s alternatives (other frameworks' knob values) and shifted schedules."""
    try:
        out = list(spec.alternatives())
    except (TypeError, ValueError):   # a variant that is not a valid spec is not a candidate
        out = []
    for shift in (+1, -1):
        moved = shifted(spec, shift)
        if moved is not None:
            out.append((f"lr schedule shifted by {shift:+d} step", moved))
    return out


def variants(spec) -> list[tuple[str, object]]:
    """Every one-step variant the explainer tries."""
    return knob_variants(spec)


def _pairs(spec) -> list[tuple[str, object]]:
    out, seen = [], set()
    for first, one in variants(spec):
        for second, two in variants(one):
            key = frozenset((first, second))
            if first == second or key in seen or two == spec:
                continue
            seen.add(key)
            out.append((f"{first} and {second}", two))
    return out


def matching(trajectory: Trajectory, case, candidates, *, k: float = K, ulps: float = ULPS,
             reference=reference_trajectory) -> list[str]:
    """Descriptions of the candidate specs whose reference ``trajectory`` passes against.
    ``reference(spec, case, dtype)`` makes (or looks up) a reference trajectory."""
    found = []
    for description, spec in candidates:
        oracle = reference(spec, case, "float64")
        floors = floor_trajectories(spec, case, reference)
        if compare(trajectory, oracle, floors, k=k, ulps=ulps).passed:
            found.append(description)
    return found


def explain_failure(trajectory: Trajectory, case, spec=None, *, k: float = K,
                    ulps: float = ULPS, reference=reference_trajectory) -> dict:
    """``{"matches": [...], "text": "..."}`` for a trajectory that failed ``spec``
    (default ``case.spec``)."""
    spec = case.spec if spec is None else spec
    if trajectory.steps != case.steps:
        return {"matches": [], "text": "incomplete trajectory: nothing to explain"}
    found = matching(trajectory, case, variants(spec), k=k, ulps=ulps, reference=reference)
    if not found:
        found = matching(trajectory, case, _pairs(spec), k=k, ulps=ulps, reference=reference)
    if found:
        text = "matches with " + "; or with ".join(found)
    else:
        text = "matches no known variant of the spec"
    return {"matches": found, "text": text}

