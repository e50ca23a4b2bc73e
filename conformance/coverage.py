"""Does the suite see every knob of every native row? The checks behind the coverage tests.

A native class's lowering mentions spec fields in its conditions and its ``to_native``
(:func:`unified_opt.native.mentioned_fields`). Each such knob must be *visible* in a case
that the row builds: setting the knob to another valid value moves the oracle's
trajectory by more than ``VISIBLE`` times the float32 noise floor (or puts NaN/Inf
elsewhere), so a backend that computed the knob another way would fail the case.
:func:`alternatives` gives the other values a knob is tried with.

A change that leaves the
spec's canonical form alone (:meth:`unified_opt.Spec.canonical`) or is not valid with the
case's other fields is no other computation, and needs no case.

Every case also runs on tensors of every size in :data:`.cases.KERNEL_SIZES` (the vector
blocks, scalar tails and chunking of CPU kernels), and every algorithm has a case with
non-finite gradients.
"""

from __future__ import annotations

from unified_opt.backend import Backend, Context
from unified_opt.groups import plan_parameters
from unified_opt.native import Lowering, NativeClass, mentioned_fields
from unified_opt.schedules import Schedule

from .cases import Case
from .compare import K, compare
from .trajectory import FirstSteps
from .verdict import References

#: steps a change runs first: most changes show there, and only the others run every
#: step (:class:`.trajectory.FirstSteps`)
FIRST_STEPS = 10

#: a knob is visible when another value moves the oracle by more than this many floors
VISIBLE = 10 * K
#: fields every lowering reads that the coverage does not vary: the lr (its schedule is
#: the schedule cases' business) and the name rules (the build lowers them around)
UNVARIED = ("lr", "no_decay_names", "exclude_names")


def decision_context(case: Case, cls: NativeClass) -> Context:
    """The context a build of ``case`` would have, on a device where ``cls`` runs."""
    plans = tuple(plan_parameters(case.spec, list(case.params), case.groups or None,
                                  "coverage"))
    empty = tuple(n for n, shape in case.params.items() if 0 in shape)
    device = getattr(cls, "devices", ("CPU",))[0]
    return Context(plans=plans, dtypes=("float32",), device=device, zero_size=empty,
                   all_zero_size=len(empty) == len(case.params))


def row_cases(backend: Backend, cls: NativeClass, lowering: Lowering,
              cases: list[Case]) -> list[Case]:
    """The cases whose ``auto`` build takes ``cls`` for ``lowering``'s algorithm."""
    out = []
    for case in cases:
        if case.spec.name != lowering.algorithm or "auto" not in case.paths:
            continue
        decision = backend.decide(case.spec, "auto", decision_context(case, cls))
        if decision.native == cls.name and decision.lowering is lowering:
            out.append(case)
    return out


def knobs(lowering: Lowering, cases: list[Case]) -> list[str]:
    """The spec fields the lowering mentions, but the unvaried ones and the algorithm's
    rounding-only knobs (``Spec.rounding_knobs``: no floor can see them)."""
    specs = [c.spec for c in cases]
    if not specs:
        return []
    skipped = set(UNVARIED) | set(type(specs[0]).rounding_knobs)
    return sorted(mentioned_fields(lowering, specs) - skipped)


def _moved(value):
    """Another value of a number: away from 1 for a rate in (0.5, 1), else x1.5 (0.1
    for 0); ints grow by half (at least 1)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + max(1, value // 2)
    if value == 0.0:
        return 0.1
    if 0.5 <= value < 1.0:
        return 1.0 - (1.0 - value) * 1.5
    return value * 1.5


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def alternatives(spec, field: str, seen: list) -> list[tuple[str, object]]:
    """Other values for ``spec.field``, each with the kind of change it stands for:
    ``("flip", not v)`` for a bool, ``("moved", v')`` for a number, ``("moved[i]",
    tuple)`` for each number of a tuple in turn, and ``(repr(v'), v')`` for each other
    choice (or None) ``seen`` in the algorithm's cases."""
    value = getattr(spec, field)
    if isinstance(value, Schedule):
        return []
    if isinstance(value, bool):
        return [("flip", not value)]
    if _number(value):
        return [("moved", _moved(value))]
    if isinstance(value, tuple) and any(_number(v) for v in value):
        return [(f"moved[{i}]", value[:i] + (_moved(v),) + value[i + 1:])
                for i, v in enumerate(value) if _number(v)]
    return [(repr(other), other) for other in seen
            if other != value and not isinstance(other, Schedule)]


#: the answers of :func:`changes` for one other value
SHOWN, HIDDEN, SAME = "shown", "hidden", "same"


def changes(case: Case, field: str, seen: list, references: References,
            skip=()) -> dict:
    """``kind -> (answer, detail)`` for each other value of ``field`` (see
    :func:`alternatives`) in ``case``: :data:`SHOWN` when it moves the oracle by more
    than :data:`VISIBLE` floors (or puts NaN/Inf elsewhere), :data:`HIDDEN` when it moves
    it less, :data:`SAME` when it is no other computation here (not valid with the
    case's other fields, or the same canonical spec: SGD's first-step rule without
    dampening). Kinds in ``skip`` are not tried."""
    oracle = references.get(case, "float64")
    floors = references.floors(case.spec, case)
    first = FirstSteps(case, min(FIRST_STEPS, case.steps))
    first_oracle, first_floors = oracle.first(first.steps), [f.first(first.steps)
                                                             for f in floors]
    canonical = case.spec.canonical()
    out = {}
    for kind, value in alternatives(case.spec, field, seen):
        if kind in skip:
            continue
        try:
            changed = case.spec.replace(**{field: value})
            if changed.canonical() == canonical:
                out[kind] = (SAME, "")
                continue
            if first.steps < case.steps and not compare(
                    references.of(changed, first, "float64"), first_oracle, first_floors,
                    k=VISIBLE).passed:
                out[kind] = (SHOWN, "")        # shown in the first steps already
                continue
            trajectory = references.of(changed, case, "float64")
        except (TypeError, ValueError):
            out[kind] = (SAME, "")
            continue
        result = compare(trajectory, oracle, floors, k=VISIBLE)
        out[kind] = (HIDDEN, f"{field}={value!r} instead of {getattr(case.spec, field)!r} "
                             f"in {case.id} moves the numbers by only "
                             f"{result.worst_ratio:.3g} floors") if result.passed else \
            (SHOWN, "")
    return out


def seen_values(cases: list[Case], algorithm: str, field: str) -> list:
    """The values ``field`` takes in the cases of ``algorithm`` (distinct, in order)."""
    out = []
    for case in cases:
        if case.spec.name == algorithm:
            value = getattr(case.spec, field)
            if value not in out:
                out.append(value)
    return out


def invisible_knobs(backend: Backend, cases: list[Case],
                    references: References | None = None,
                    exempt: dict | None = None) -> dict[str, list[str]]:
    """``"class (algorithm)" -> [why, ...]`` for every native row of ``backend`` with a
    knob change that no case of the row shows (or with no case at all). Each kind of
    change (a bool flipped, a number moved, each other choice) must be shown by some
    case, unless it is :data:`SAME` in every case. ``exempt``: ``{(class name, field):
    reason}`` for knobs that cannot show within a case's steps (the reason says why)."""
    out: dict[str, list[str]] = {}
    references = References() if references is None else references
    exempt = exempt or {}
    for cls, lowering in backend.rows():
        label = f"{cls.name} ({lowering.algorithm})"
        mine = row_cases(backend, cls, lowering, cases)
        if not mine:
            out[label] = ["no case builds this row"]
            continue
        for field in knobs(lowering, mine):
            if (cls.name, field) in exempt:
                continue
            seen = seen_values(cases, lowering.algorithm, field)
            answers: dict[str, list] = {}
            for case in mine:
                shown = {k for k, found in answers.items() if any(a == SHOWN for a, _ in found)}
                for kind, answer in changes(case, field, seen, references, shown).items():
                    answers.setdefault(kind, []).append(answer)
            for kind, found in answers.items():
                if (cls.name, field, kind) in exempt:
                    continue
                states = {a for a, _ in found}
                if SHOWN not in states and HIDDEN in states:
                    detail = next(d for a, d in found if a == HIDDEN)
                    out.setdefault(label, []).append(
                        f"{field} ({kind}) is shown by none of {[c.id for c in mine]}; "
                        f"e.g. {detail}")
    return out


def missing_sizes(case: Case, sizes) -> list[int]:
    """The element counts of ``sizes`` that no parameter of ``case`` has."""
    counts = {int(_count(shape)) for shape in case.params.values()}
    return [n for n in sizes if n not in counts]


def _count(shape) -> int:
    out = 1
    for d in shape:
        out *= d
    return out

