"""``uo.diff(spec_a, spec_b)``: do two optimizer configurations compute the same numbers,
and if not, which knobs differ and by how much the trajectories part.

The configurations are specs, typically two frameworks' presets
(``uo.preset("torch.optim.Adam", lr=1e-3)`` and ``uo.preset("mindspore.nn.Adam",
learning_rate=1e-3)``; spec expressions as ``unified-opt diff`` takes them are read with
:func:`unified_opt.expressions.parse_spec`). Both run through the numpy reference on the
same parameters and the same gradients: the conformance suite's dense parameter set
(1-D to 3-D, 1 to 4225 elements, named ``w``, ``bias``, ``ln.gamma``, ``ln.beta``,
``w3d``, ``scale``, so name rules such as a no-decay filter on biases apply) and
:data:`STREAMS` seeded streams of adversarial magnitudes (zeros, 1e-30, 500, mixed signs,
all-zero rows) of :data:`STEPS` steps each.

*Same* is the conformance suite's rule with A as the oracle: at every step of every
stream, B's float32 run stays within ``K`` times the float32 noise floor of A's float64
run, on the parameters and the lr (what training sees; two algorithms may name their
state differently, so state is not compared). Passing means a float32 run of B cannot
be told from a float32 run of A.

When they differ, the report says how much: the first step where B leaves A's floor,
the worst error/floor ratio, and how far apart the parameters end, as a fraction of how
far A moved them (``||B_T - A_T|| / ||A_T - theta_0||`` over all parameters, both in
float64, so the gap is the configurations' and not float32 rounding). Each knob
whose value differs is then tried alone, A with that one field set to B's value, so the
report says which differences matter (``eps_placement: 'outside' vs 'eps_hat'`` parts the
trajectories from step 1) and which do not (a knob with no effect on this stream). A
knob that cannot be set alone (the combination is not a valid spec) says so.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from unified_opt.diffs import STEPS, STREAMS, Diff, KnobDifference, Parting
from unified_opt.spec import Spec


def _spec(value, argument: str) -> Spec:
    if isinstance(value, str):
        from unified_opt.expressions import parse_spec

        return parse_spec(value)
    if not isinstance(value, Spec):
        raise TypeError(f"diff: {argument} must be a unified_opt spec or a spec expression "
                        f"string (\"torch.optim.Adam(lr=1e-3)\"), got {value!r}")
    return value


def _cases(spec: Spec):
    from .cases import DENSE_PARAMS, Case

    return [Case(id=f"diff_{i}", spec=spec, params=DENSE_PARAMS, steps=STEPS,
                 seed=1000 + i) for i in range(STREAMS)]


def _gap(b, a, case) -> float:
    """``||B_T - A_T|| / ||A_T - theta_0||`` over all parameters at the last step."""
    start = case.initial_params()
    apart = moved = 0.0
    for name, values in a.params.items():
        last_a = values[-1].astype(np.float64)
        last_b = b.params[name][-1].astype(np.float64)
        with np.errstate(invalid="ignore", over="ignore"):
            apart += float(np.sum(np.square(last_b - last_a)))
            moved += float(np.sum(np.square(last_a - start[name].astype(np.float64))))
    if not np.isfinite(apart):
        return float("inf")
    return float(np.sqrt(apart) / np.sqrt(moved)) if moved > 0 else (
        0.0 if apart == 0 else float("inf"))


def parting(spec_a: Spec, spec_b: Spec) -> Parting:
    """How ``spec_b``'s float32 run parts from ``spec_a``'s float64 run (the module's
    rule) over the streams."""
    from .compare import compare
    from .trajectory import floor_trajectories, reference_trajectory

    worst, first, quantity, gap, same = 0.0, None, None, 0.0, True
    for case in _cases(spec_a):
        oracle = reference_trajectory(spec_a, case, "float64")
        b32 = reference_trajectory(spec_b, case, "float32")
        result = compare(b32, oracle, floor_trajectories(spec_a, case), state=False)
        worst = max(worst, result.worst_ratio)
        # the gap in float64: the configurations' difference, without float32 rounding
        gap = max(gap, _gap(reference_trajectory(spec_b, case, "float64"), oracle, case))
        if not result.passed:
            same = False
            step = result.first_failing_step
            if step is not None and (first is None or step < first):
                first, quantity = step, result.failing_quantity
    return Parting(same, worst, first, quantity, gap)


def _differing_fields(a: Spec, b: Spec) -> list[tuple[str, Any, Any]]:
    fields_a = {f.name: getattr(a, f.name) for f in dataclasses.fields(a)}
    fields_b = {f.name: getattr(b, f.name) for f in dataclasses.fields(b)}
    missing = object()
    out = []
    for name in list(fields_a) + [n for n in fields_b if n not in fields_a]:
        va, vb = fields_a.get(name, missing), fields_b.get(name, missing)
        if va != vb:
            out.append((name, "(none)" if va is missing else va,
                        "(none)" if vb is missing else vb))
    return out


def diff(spec_a, spec_b) -> Diff:
    """Do ``spec_a`` and ``spec_b`` compute the same numbers (the module's rule), and
    which knobs differ? Each is a spec or a spec expression string (a native constructor
    call as a user writes it: ``"mindspore.nn.Adam(learning_rate=1e-3)"``)."""
    a, b = _spec(spec_a, "spec_a"), _spec(spec_b, "spec_b")
    overall = parting(a, b)
    knobs = []
    for name, va, vb in _differing_fields(a, b):
        if a.name != b.name:
            knobs.append(KnobDifference(name, va, vb))
            continue
        try:
            alone = a.replace(**{name: vb})
        except (TypeError, ValueError) as error:
            knobs.append(KnobDifference(name, va, vb, why_not=str(error)))
            continue
        knobs.append(KnobDifference(name, va, vb, alone=parting(a, alone)))
    return Diff(a, b, overall, tuple(knobs))
