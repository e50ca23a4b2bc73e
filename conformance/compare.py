"""Comparing a backend's trajectory with the float64 oracle, against the float32 noise floor.

Per step and per quantity (the lr, each parameter, each spec state array):

* ``error`` = max |backend - oracle| over the elements finite in both;
* ``floor`` = max(error of the numpy float32 references against the oracle, ``ULPS``
  float32 ulps of the quantity's magnitude (the largest |oracle| up to that step:
  rounding errors made while the values were large remain after they shrink), ``TINY``). The
  float32 references are the plain one and the one whose float hyperparameters are
  held in float32 (:func:`unified_opt.reference.with_float32_hyperparameters`): kernels
  that take betas as float32 attributes (Paddle's and MindSpore's Adam family) compute
  ``1 - float32(0.999)``, 1.3e-5 away from ``float32(1 - 0.999)``, and that storage
  rounding is float32 noise, not a divergence (the full list, with the one for an update
  computed partly in bfloat16: :func:`.trajectory.floor_trajectories`);
* ``ratio`` = error / floor; the step passes when ``ratio <= K``.

NaN/Inf must sit at exactly the oracle's positions: an element finite in one and not in
the other fails, and so does an Inf of the other sign; nothing is ``nan_to_num``-ed.
NaN against Inf passes: which of the two an element holds once a gradient was infinite
depends on the order of IEEE operations (``beta*m + (1-beta)*g`` keeps an infinite
``m`` infinite, torch's ``m + (g - m)*(1-beta)`` makes it ``inf - inf = NaN``), which
the frameworks do not share and no spec knob describes. With ``tolerate_finite`` (a
native class that declares, in its descriptor's ``nonfinite``, how it departs from the
spec under a non-finite gradient) an element the oracle holds non-finite may stay finite.

What a parameter makes of a NaN in its state is an IEEE convention too, and no knob
describes it either: Lion's ``sign(m + (g - m)*(1-beta))`` is ``sign(NaN) = 0`` in torch
and MindSpore (the element stops: once torch's ``m`` went from Inf to NaN, and where a
NaN gradient made ``m`` NaN in both) where numpy's ``sign`` keeps the NaN or, for the
oracle's ``m`` still Inf, steps by the lr: differences no floor covers. So from the first
step at which an element of a parameter's state holds NaN in one trajectory and NaN or
Inf in the other (a state array of the parameter's shape, or one that broadcasts to it,
as a factored row or column does), that element of the parameter is left out of the
comparison, and the result says so where that changed its outcome (``excused``: the
parameter -> how many elements from which step, and the state arrays that held the
NaN). The state itself keeps the rule
above: a state element finite in one trajectory and not in the other still fails (a
gradient zeroed where it is NaN keeps the state finite), and so does every element whose
state is finite or Inf in both. It needs the backend's state: with ``state=False``
nothing is excused.
A missing quantity or a wrong shape fails. With ``state=False`` (a native optimizer
built by hand, whose state the run does not read) the spec state is not compared: the
lr and the parameters are.

A quantity kept in a low-precision dtype (bfloat16 parameters, a ``state_dtype``: the
oracle trajectory's ``storage``) is rounded at every step, and a correct backend whose
float32 arithmetic differs from the oracle's by one float32 ulp lands on the other side
of a rounding boundary now and then: one storage ulp, 65536 float32 ulps for bfloat16,
at an element where the float32 references may well have agreed. Such a quantity is
judged in its storage dtype's ulps, element by element (the spacing at the larger of
the two values): ``error`` = the largest difference in storage ulps, ``floor`` = the
float32 references' largest, but at least 1, and the step passes when ``error <= K *
floor``. Every value must also be one the storage dtype holds (else failure
"storage": a backend that kept the values in float32 does not keep what the spec says).

A spec whose update computes a part in a low-precision dtype (Muon's bfloat16 iteration,
``Spec.low_precision_update``) has a fourth float32 reference, with every low-precision
result a bfloat16 ulp nearer zero (:func:`.trajectory.floor_trajectories`). That floor
is wide enough to hold the same update computed in float32 throughout: on the default
suite's ``muon_bfloat16`` case such a run sits at 5.8 floors, within K. So a passing run
of such a spec is also compared with the oracle of the spec computed in full precision
(``Spec.full_precision``), on the same floors, and fails ("precision") where it is
nearer that trajectory than its own by more than :data:`PRECISION_MARGIN` floors
(:func:`held_to_precision`). A correct run, within a floor of its oracle, never is: it
would have to sit less than no floors from the other. Where the two oracles lie nearer
each other than about two floors the floors cannot tell the two computations apart, and
the rule says nothing: on torch's own ``optim_db`` parameters
``torch.optim.Muon(ns_steps=6)`` (bfloat16) sat 1.06 floors from its oracle and 1.0 from
the float32 one, which nearer-by-any-amount failed.

K and ULPS come from measurements over the default suite: correct runs stay well below
K, and the knobs of every native row move the numbers by more than 10 K in a case that
row builds (``tests/test_descriptors.py``). The figures of the last measurement are in
``docs/conformance.md`` ("Measured"), the one place that quotes them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

import numpy as np

from unified_opt.storage import round_to, spacing

from .trajectory import Trajectory

K = 8.0
ULPS = 2.0
#: how many floors nearer the oracle of the same spec in full precision a run must be
#: than its own to fail "precision" (see the module)
PRECISION_MARGIN = 1.0
TINY = float(np.finfo(np.float32).tiny)   # below it, flush-to-zero differences do not count


@dataclass
class Comparison:
    passed: bool
    worst_ratio: float = 0.0
    worst_quantity: str | None = None
    worst_step: int | None = None               # 1-based
    first_failing_step: int | None = None       # 1-based
    failing_quantity: str | None = None
    # "ratio", "nonfinite", "storage", "missing", "shape", "steps", "precision"
    failure: str | None = None
    detail: str = ""
    per_quantity: dict[str, float] = field(default_factory=dict)   # worst ratio per quantity
    #: parameter quantity -> what was left out of it after a NaN in its state, where that
    #: changed the outcome (module doc)
    excused: dict[str, str] = field(default_factory=dict)
    #: per quantity, error/floor at every step (inf where non-finite positions differ);
    #: for plots, not part of :meth:`to_dict`
    series: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    def to_dict(self) -> dict:
        out = asdict(self)
        out.pop("series")
        return out


def _nonfinite_mismatch(b: np.ndarray, o: np.ndarray, tolerate_finite: bool = False
                        ) -> np.ndarray:
    """Per step: do the non-finite positions of ``b`` and ``o`` differ (see the module)?"""
    finite_b, finite_o = np.isfinite(b), np.isfinite(o)
    differ = finite_b != finite_o
    if tolerate_finite:
        differ &= ~finite_b                      # only the backend non-finite counts
    opposite = np.isinf(b) & np.isinf(o) & (np.sign(b) != np.sign(o))
    return (differ | opposite).any(axis=1)


def nan_in_state(b: np.ndarray, o: np.ndarray) -> np.ndarray:
    """Where ``b`` and ``o`` are both non-finite and at least one is NaN (elementwise)."""
    return ~np.isfinite(b) & ~np.isfinite(o) & (np.isnan(b) | np.isnan(o))


def excused_elements(got: dict, expected: dict) -> dict[str, tuple[np.ndarray, str]]:
    """Per parameter name: ``(mask, text)``, ``mask`` (steps, *shape) True from the first
    step at which one of its state elements (a state array of its shape, or one that
    broadcasts to it) holds NaN in ``got`` or ``expected`` and is non-finite in both, on
    (see the module); ``text`` names the state arrays. Parameters without such an
    element are absent."""
    out: dict[str, tuple[np.ndarray, str]] = {}
    for name, oracle_values in expected.items():
        if not name.startswith("state:") or name not in got:
            continue
        parameter = name[len("state:"):].rpartition(":")[0]
        shape = expected.get(f"param:{parameter}", np.empty(0)).shape
        backend_values = np.asarray(got[name])
        if not shape or backend_values.shape != oracle_values.shape or \
                oracle_values.shape[0] != shape[0] or np.isfinite(backend_values).all():
            continue
        pairs = nan_in_state(backend_values, np.asarray(oracle_values))
        if not pairs.any():
            continue
        # per step, the state's shape aligned to the parameter's from the last axis, as
        # numpy broadcasts (a 0-d state per step covers the whole parameter)
        extra = len(shape) - pairs.ndim
        if extra < 0:
            continue
        pairs = pairs.reshape(pairs.shape[:1] + (1,) * extra + pairs.shape[1:])
        try:
            pairs = np.broadcast_to(pairs, shape)
        except ValueError:          # a state that is not elementwise: nothing to map
            continue
        mask, sources = out.get(parameter, (np.zeros(shape, dtype=bool), ""))
        out[parameter] = (np.logical_or.accumulate(mask | pairs, axis=0),
                          f"{sources}, {name}" if sources else name)
    return out


def _max_abs(diff: np.ndarray, mask: np.ndarray) -> np.ndarray:
    return np.where(mask, np.abs(diff), 0.0).max(axis=1, initial=0.0)


def _in_ulps(values: np.ndarray, o: np.ndarray, storage: str | None) -> np.ndarray:
    """|values - o| per element, in ``storage``'s ulps at the larger of the two (as is,
    without a storage dtype)."""
    difference = np.subtract(values, o)
    np.abs(difference, out=difference)        # in place: one array of the run's size less
    if storage is None:
        return difference
    return difference / spacing(np.maximum(np.abs(values), np.abs(o)), storage)


def float32_floor(oracle: np.ndarray, float32, storage: str | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """``(floor32, magnitude)`` per step of one quantity: the float32 references' largest
    error against the oracle (in ``storage``'s ulps for a quantity kept in it), and the
    largest |oracle| (finite elements) so far: rounding errors made while the values
    were large remain after they shrink."""
    steps = oracle.shape[0]
    o = np.asarray(oracle, dtype=np.float64).reshape(steps, -1)
    finite_o: np.ndarray | None = None        # computed where a value is not finite
    floor32 = np.zeros(steps)
    with np.errstate(invalid="ignore", over="ignore"):
        for reference32 in (float32 if isinstance(float32, list) else [float32]):
            r = np.asarray(reference32, dtype=np.float64).reshape(steps, -1)
            difference = _in_ulps(r, o, storage)
            error = difference.max(axis=1, initial=0.0)
            # every difference finite: both finite everywhere (inf - x, NaN - x are not),
            # so the masks below would keep every element: the same maximum
            if not np.isfinite(error).all():
                finite_o = np.isfinite(o) if finite_o is None else finite_o
                error = _max_abs(difference, finite_o & np.isfinite(r))
            floor32 = np.maximum(floor32, error)
        magnitude = np.abs(o).max(axis=1, initial=0.0)
    if not np.isfinite(magnitude).all():
        finite_o = np.isfinite(o) if finite_o is None else finite_o
        magnitude = np.where(finite_o, np.abs(o), 0.0).max(axis=1, initial=0.0)
    return floor32, np.maximum.accumulate(magnitude) if steps else magnitude


def step_ratios(backend: np.ndarray, oracle: np.ndarray, float32, *, ulps: float = ULPS,
                tolerate_finite: bool = False, floor32=None, storage: str | None = None,
                excused: np.ndarray | None = None):
    """``(ratio, nonfinite_mismatch, error, floor)`` per step for one quantity;
    ``float32`` is one float32 reference trajectory or a list of them (``floor32``:
    their :func:`float32_floor`, when already known); ``storage``: the dtype the
    quantity is kept in, whose ulps error and floor are then counted in; ``excused``:
    a bool mask of the quantity's shape per step, elements left out (the module)."""
    steps = oracle.shape[0]
    b = np.asarray(backend, dtype=np.float64).reshape(steps, -1)
    o = np.asarray(oracle, dtype=np.float64).reshape(steps, -1)
    if excused is not None:
        # an excused element counts as the oracle's own value: no error, same position
        b = np.where(excused.reshape(steps, -1), o, b)
    with np.errstate(invalid="ignore", over="ignore"):
        difference = _in_ulps(b, o, storage)
        error = difference.max(axis=1, initial=0.0)
        # every difference finite: both finite everywhere (inf - x is not), so nothing
        # is left out and no non-finite position can differ
        everywhere = bool(np.isfinite(error).all())
        if not everywhere:
            error = _max_abs(difference, np.isfinite(o) & np.isfinite(b))
    floor32, magnitude = float32_floor(oracle, float32, storage) if floor32 is None \
        else floor32
    if storage is not None:
        floor = np.maximum(floor32, 1.0)          # in storage ulps (see the module)
    else:
        ulp = np.spacing(np.minimum(magnitude, np.finfo(np.float32).max).astype(np.float32))
        floor = np.maximum(np.maximum(floor32, ulps * ulp.astype(np.float64)), TINY)
    mismatch = np.zeros(steps, dtype=bool) if everywhere else \
        _nonfinite_mismatch(b, o, tolerate_finite)
    return error / floor, mismatch, error, floor


def compare(backend: Trajectory, oracle: Trajectory, float32, *,
            k: float = K, ulps: float = ULPS, tolerate_finite: bool = False,
            state: bool = True, lr: bool = True, floors: dict | None = None) -> Comparison:
    """Does ``backend`` follow ``oracle`` within ``k`` times the float32 noise floor?
    ``float32``: the float32 reference trajectory, or a list of them (see the module);
    ``state=False``: the lr and the parameters only; ``lr=False``: not the lr (an
    optimizer whose lr cannot be read: its effect shows in the parameters). ``floors``:
    a dict kept with ``oracle`` and ``float32`` across comparisons with them, where each
    quantity's :func:`float32_floor` is computed once."""
    if backend.steps != oracle.steps:
        return Comparison(False, float("inf"), failure="steps", first_failing_step=
                          backend.steps + 1 if backend.steps < oracle.steps else None,
                          detail=f"{backend.steps} steps recorded, {oracle.steps} expected")
    got = backend.quantities()
    references32 = [t.quantities() for t in (float32 if isinstance(float32, list)
                                               else [float32])]
    out = Comparison(True)
    first = (np.inf, "", "", "")               # (step, quantity, failure, detail)
    excusals = excused_elements(got, oracle.quantities()) if state else {}
    for name, expected in oracle.quantities().items():
        if (not state and name.startswith(("state:", "eval:"))) or (not lr and name == "lr"):
            continue
        if name not in got:
            first = min(first, (1, name, "missing", f"{name} not reported by the backend"))
            continue
        if got[name].shape != expected.shape:
            first = min(first, (1, name, "shape", f"{name} has shape {got[name].shape[1:]}, "
                                                  f"expected {expected.shape[1:]}"))
            continue
        if expected.shape[0] == 0:
            continue
        float32_of = [r[name] for r in references32]
        stored = oracle.storage.get(name)
        if floors is not None and name not in floors:
            floors[name] = float32_floor(expected, float32_of, stored)
        if stored is not None:
            values = np.asarray(got[name]).reshape(expected.shape[0], -1)
            with np.errstate(invalid="ignore"):
                off = np.isfinite(values) & (round_to(values, stored) != values)
            if off.any():
                s = int(np.flatnonzero(off.any(axis=1))[0])
                first = min(first, (s + 1, name, "storage",
                                    f"{name} at step {s + 1}: {int(off[s].sum())} values "
                                    f"are not {stored} values (the spec keeps it in "
                                    f"{stored})"))
        excused = _excused_in(name, expected.shape, excusals)
        ratio, nonfinite, error, floor = step_ratios(
            got[name], expected, float32_of, ulps=ulps, tolerate_finite=tolerate_finite,
            floor32=None if floors is None else floors[name], storage=stored,
            excused=excused)
        if excused is not None:
            # said only where it changed the outcome (a correct run whose parameter went
            # NaN with its state has the same elements excused, and nothing to say)
            strict_ratio, strict_nonfinite, _, _ = step_ratios(
                got[name], expected, float32_of, ulps=ulps, tolerate_finite=tolerate_finite,
                floor32=None if floors is None else floors[name], storage=stored)
            if (strict_ratio > k).any() or strict_nonfinite.any():
                s = int(np.argmax(excused.reshape(excused.shape[0], -1).any(axis=1)))
                out.excused[name] = (f"{int(excused[-1].sum())} of {excused[-1].size} "
                                     f"elements from step {s + 1} on (NaN in "
                                     f"{excusals[name[len('param:'):]][1]})")
        worst = int(np.argmax(ratio))
        out.per_quantity[name] = float(ratio[worst])
        out.series[name] = np.where(nonfinite, np.inf, ratio)
        if ratio[worst] > out.worst_ratio or out.worst_quantity is None:
            out.worst_ratio, out.worst_quantity, out.worst_step = (float(ratio[worst]), name,
                                                                   worst + 1)
        bad_ratio = np.flatnonzero(ratio > k)
        if bad_ratio.size:
            s = int(bad_ratio[0])
            unit = f" {stored} ulps" if stored is not None else ""
            first = min(first, (s + 1, name, "ratio",
                                f"{name} at step {s + 1}: error {error[s]:.3g}{unit} = "
                                f"{ratio[s]:.3g} x floor {floor[s]:.3g}{unit}"))
        bad_nonfinite = np.flatnonzero(nonfinite)
        if bad_nonfinite.size:
            s = int(bad_nonfinite[0])
            first = min(first, (s + 1, name, "nonfinite",
                                f"{name} at step {s + 1}: non-finite positions differ "
                                "from the oracle's"))
    if first[0] != np.inf:
        out.passed = False
        out.first_failing_step, out.failing_quantity, out.failure, out.detail = (
            int(first[0]), first[1], first[2], first[3])
    return out


def held_to_precision(comparison: Comparison, full: Comparison, description: str,
                      dtype: str) -> Comparison:
    """``comparison``, or where it passed but the same run follows the spec computed in
    full precision more closely by more than :data:`PRECISION_MARGIN` floors (``full``:
    the run against that spec's oracle, on the same floors; ``description``: that spec's
    knob, ``dtype``: the low-precision dtype the spec says), the failure "precision"
    (see the module)."""
    if (not comparison.passed
            or not full.worst_ratio + PRECISION_MARGIN < comparison.worst_ratio):
        return comparison
    return replace(comparison, passed=False, failure="precision",
                   first_failing_step=comparison.worst_step,
                   failing_quantity=comparison.worst_quantity,
                   detail=(f"the run follows {description} (worst {full.worst_ratio:.3g} x "
                           f"floor) more closely than the spec (worst "
                           f"{comparison.worst_ratio:.3g} x floor): it computes in full "
                           f"precision where the spec computes in {dtype}"))


def held_to_spec_precision(comparison: Comparison, spec, against) -> Comparison:
    """:func:`held_to_precision` for a run of ``spec``: where ``spec`` has a
    full-precision form (``Spec.full_precision``) and ``comparison`` passed, the run is
    compared with that form's oracle (``against(full_spec)``: the run against its
    oracle, on the floors ``comparison`` used) and held to the precision rule. What the
    suite's verdict and the tests' judge both apply."""
    full = getattr(spec, "full_precision", lambda: None)()
    if not comparison.passed or full is None:
        return comparison
    return held_to_precision(comparison, against(full[1]), full[0],
                             spec.low_precision_update)


def _excused_in(quantity: str, shape: tuple, excusals: dict) -> np.ndarray | None:
    """The excused mask of ``quantity`` (a parameter's only: the module)."""
    if not quantity.startswith("param:"):
        return None
    parameter = quantity[len("param:"):]
    if parameter not in excusals:
        return None
    mask = excusals[parameter][0]
    return mask if mask.shape == tuple(shape) and mask.any() else None
