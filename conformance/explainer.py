"""Why a trajectory fails: re-run the reference with the spec's known alternatives
(``spec.alternatives()``: other frameworks' conventions) and with the lr schedule
shifted by one step either way, and name the variants the trajectory passes against.

It also tries the hyperparameters as a float32 kernel attribute holds them (the
betas of Paddle's and MindSpore's Adam kernels). Single variants are tried first;
only when none matches, pairs of them (e.g. no bias correction *and* no lr in the
decay). The comparison rule is the suite's own (:func:`compare.compare`),
with the floor measured on the variant's float32 reference.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from unified_opt.schedules import Schedule

from .compare import K, ULPS, compare
from .trajectory import Trajectory, reference_trajectory


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


def _float32(value):
    """``value`` (a float or a tuple of floats) as float32 holds it; other values: None."""
    if isinstance(value, float):
        return float(np.float32(value))
    if isinstance(value, tuple) and value and all(isinstance(x, float) for x in value):
        return tuple(float(np.float32(x)) for x in value)
    return None


def float32_variants(spec) -> list[tuple[str, object]]:
    """``spec`` with hyperparameters as a float32 kernel attribute holds them: each field
    alone, then all together (Paddle's and MindSpore's kernels take betas as float32)."""
    rounded = {}
    for key, value in spec.hyperparameters().items():
        held = _float32(value)
        if held is not None and held != value:
            rounded[key] = held
    out = []
    for key, held in rounded.items():
        try:
            out.append((f"{key} rounded to float32 ({held})", spec.replace(**{key: held})))
        except (TypeError, ValueError):
            pass
    if len(rounded) > 1:
        try:
            out.append(("every float hyperparameter rounded to float32",
                        spec.replace(**rounded)))
        except (TypeError, ValueError):
            pass
    return out


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
    """Every one-step variant the explainer tries: knobs, then float32-held values."""
    return knob_variants(spec) + float32_variants(spec)


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
        float32 = reference(spec, case, "float32")
        if compare(trajectory, oracle, float32, k=k, ulps=ulps).passed:
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

