"""The verdict on one run: its trajectory against the float64 oracle of its case, within
the float32 noise floor (:mod:`.compare`), with an explanation when it fails
(:mod:`.explainer`) and, for the HTML report's plots, every quantity's error/floor per
step in one byte per step (:mod:`.series`). A worker judges its own runs as they
finish, so no trajectory has to outlive its case: the references of one case are
computed once for all its paths, then dropped.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

import numpy as np

import unified_opt as uo
from unified_opt.ops import numpy_ops

from .cases import HAND, Case
from .compare import compare, float32_floor, held_to_spec_precision
from .explainer import explain_failure, knob_text
from .series import encode
from .trajectory import (
    Trajectory,
    add_evaluation_points,
    floor_trajectories,
    reference_trajectory,
)


class References:
    """Reference trajectories computed once per (case, spec, dtype): the oracle and the
    float32 floor of each case, and the explainer's variants.

    ``shared``: a folder where the floors (each quantity's float32 error and magnitude
    per step, and whether the case is stable) and the oracle (each case's float64
    reference trajectory) are written once and read by every other worker of the run:
    four reference runs per case that each backend's worker would otherwise compute
    again. The oracle file holds the trajectory's arrays as computed (``.npz``, no
    pickle: float64 read back bit for bit) and its storage map; whichever worker reaches
    a case first writes it (atomically: a reader sees the whole file or none), and two
    that reach it together both compute the same numbers."""

    def __init__(self, shared: Path | None = None) -> None:
        self._cache: dict = {}
        self.shared = shared

    def get(self, case: Case, dtype: str) -> Trajectory:
        return self.of(case.spec, case, dtype)

    def floors(self, spec, case: Case) -> list[Trajectory]:
        """The float32 references whose error against the oracle is the noise floor."""
        return floor_trajectories(spec, case, self.of)

    def floor_values(self, spec, case: Case) -> dict:
        """Each quantity's floor against the oracle of ``spec`` (:func:`compare`'s
        ``floors``: ``name -> (float32 error, magnitude)`` per step), for every quantity
        of the oracle; from the shared folder when another worker wrote it."""
        key = ("floor values", case.id, case.seed, case.rank, case.steps, spec)
        if key not in self._cache:
            file = self._shared_file(spec, case)
            if file is not None and file.exists():
                with np.load(file, allow_pickle=False) as data:
                    loaded = {k: data[k] for k in data.files}
                prefix = "floor32:"
                self._cache[key] = {
                    name[len(prefix):]: (loaded[name],
                                         loaded["magnitude:" + name[len(prefix):]])
                    for name in loaded if name.startswith(prefix)}
                self._cache[("stable", key)] = bool(loaded["stable"])
            else:
                self._cache[key] = self._floor_values(spec, case, key, file)
        return self._cache[key]

    def _floor_values(self, spec, case, key, file) -> dict:
        trajectory = self.of(spec, case, "float64")
        oracle = trajectory.quantities()
        float32 = [t.quantities() for t in self.floors(spec, case)]
        values = {name: float32_floor(expected, [q[name] for q in float32],
                                      trajectory.storage.get(name))
                  for name, expected in oracle.items() if all(name in q for q in float32)}
        stable = spec != case.spec or self._stable(case)
        self._cache[("stable", key)] = stable
        if file is not None:
            arrays = {f"{kind}:{name}": value[i] for name, value in values.items()
                      for i, kind in enumerate(("floor32", "magnitude"))}
            file.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=file.parent, suffix=".npz",
                                             delete=False) as part:
                np.savez(part, stable=np.array(stable), **arrays)
            os.replace(part.name, file)           # whole or not at all for the others
        return values

    def _shared_file(self, spec, case: Case, kind: str = "floors") -> Path | None:
        """The shared file of ``kind`` ("floors", "oracle") for ``spec`` on ``case``
        (None: nothing is shared), named by a hash of everything its numbers depend on."""
        if self.shared is None:
            return None
        try:
            text = json.dumps({"case": case.to_dict(), "rank": case.rank,
                               "spec": spec.to_dict()}, sort_keys=True)
        except (TypeError, ValueError):     # not expressible as JSON: not shared
            return None
        name = hashlib.sha256(text.encode()).hexdigest()[:32]
        return self.shared / (f"{name}.npz" if kind == "floors" else f"{name}.{kind}.npz")

    def of(self, spec, case: Case, dtype: str, ops=numpy_ops) -> Trajectory:
        key = (case.id, case.seed, case.rank, case.steps, spec, dtype, ops.name)
        if key not in self._cache:
            # the oracle of a case is shared with the run's other workers; a planted
            # deviation's, a case cut short's (:class:`.trajectory.FirstSteps`) and the
            # float32 runs stay in this process
            file = (self._shared_file(spec, case, "oracle")
                    if dtype == "float64" and ops is numpy_ops and isinstance(spec, uo.Spec)
                    and isinstance(case, Case) else None)
            if file is not None and file.exists():
                self._cache[key] = _load_oracle(file)
            else:
                self._cache[key] = reference_trajectory(spec, case, dtype, ops)
                if file is not None:
                    _save_oracle(self._cache[key], file)
        return self._cache[key]

    def stable(self, case: Case) -> bool:
        """Does the float32 reference pass against the oracle (else the case is
        unstable)? A case the reference cannot run counts as stable: its results say why."""
        key = ("stable", ("floor values", case.id, case.seed, case.rank, case.steps,
                          case.spec))
        if key in self._cache:
            return self._cache[key]
        return self._stable(case)

    def _stable(self, case: Case) -> bool:
        try:
            float32 = self.get(case, "float32")
            return compare(float32, self.get(case, "float64"), float32).passed
        except (TypeError, ValueError):
            return True


#: the key of an oracle file's storage map (JSON text), beside the quantities
STORAGE_KEY = "storage.json"


def _save_oracle(trajectory: Trajectory, file: Path) -> None:
    """Write an oracle trajectory for the run's other workers (uncompressed: float64
    mantissas hardly compress, and zlib costs more than the reference run saves)."""
    file.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=file.parent, suffix=".npz", delete=False) as part:
        np.savez(part, **trajectory.quantities(),
                 **{STORAGE_KEY: np.array(json.dumps(trajectory.storage))})
    os.replace(part.name, file)                   # whole or not at all for the others


def _load_oracle(file: Path) -> Trajectory:
    """An oracle trajectory :func:`_save_oracle` wrote: the same arrays, bit for bit."""
    with np.load(file, allow_pickle=False) as data:
        quantities = {k: data[k] for k in data.files}
    storage = json.loads(str(quantities.pop(STORAGE_KEY)))
    trajectory = Trajectory.from_quantities(quantities)
    trajectory.storage = storage
    return trajectory


def decision_dict(decision) -> dict | None:
    if decision is None:
        return None
    out = {"path": decision.path, "native": decision.native, "reason": decision.reason,
           "own_class": decision.own_class}
    if decision.native_class is not None and decision.native_class.nonfinite:
        out["nonfinite"] = decision.native_class.nonfinite
    if getattr(decision, "alternative", None) is not None:
        # the exact path not taken (the worker runs "native" where auto took the own
        # path over an exact class: a distributed run's decision arrives as this dict)
        out["alternative"] = decision.alternative
    return out


def verdict(case: Case, backend: str, path: str, trajectory: Trajectory | None, decision,
            error: str | None, references: References, *, state: bool | None = None,
            lr: bool = True, held: dict | None = None) -> dict:
    """The result of one run (``status`` "pass", "fail" or "error"), as the reports hold
    it. A native class that declares how it departs from the spec under non-finite
    gradients, and fails the strict rule in a case that plants them, is compared with
    that tolerance, and the result says so (``known``). A run of a native optimizer built
    by hand (path "hand") is compared on the lr and the parameters: its state is the
    class's own. ``state`` (default: not for "hand") and ``lr`` say what else is
    compared (``unified-opt check``: what could be read from a user's optimizer). A
    result with a comparison (pass or fail) holds its encoded series under "series".
    ``held``: the spec's fields the optimizer holds with other values (a user's check:
    :func:`.explainer.held_hyperparameters`), tried when the spec's variants explain
    nothing."""
    result = {"case": case.id, "algorithm": case.spec.name, "backend": backend, "path": path,
              "status": None, "lowering": decision_dict(decision), "comparison": None,
              "explanation": None, "error": None, "known": None}
    if error is not None:
        return {**result, "status": "error", "error": error}
    # the evaluation points (schedule-free) are worked out here, where a run is judged,
    # from what the run recorded; the references work out their own
    if trajectory is not None:
        trajectory = add_evaluation_points(trajectory, case.spec)
    try:
        oracle = references.get(case, "float64")
        values = references.floor_values(case.spec, case)
    except (TypeError, ValueError) as exc:   # e.g. --steps past a OneCycle's total_steps
        return {**result, "status": "error", "error": f"the reference cannot run this case: "
                                                      f"{type(exc).__name__}: {exc}"}
    if state is None:             # a native optimizer built by hand: lr and parameters
        state = path != HAND
    comparison = compare(trajectory, oracle, [], state=state, lr=lr, floors=values)
    departs = (decision is not None and decision.native_class is not None
               and decision.native_class.nonfinite)
    if not comparison.passed and case.nonfinite_steps and departs:
        tolerant = compare(trajectory, oracle, [], tolerate_finite=True, state=state,
                           lr=lr, floors=values)
        if tolerant.passed:
            comparison = tolerant
            result["known"] = f"{decision.native}: {decision.native_class.nonfinite}"
    comparison = held_to_spec_precision(
        comparison, case.spec,
        lambda full: compare(trajectory, references.of(full, case, "float64"), [],
                             state=state, lr=lr, floors=values))
    result["comparison"] = comparison.to_dict()
    result["series"] = encode(comparison.series)
    if comparison.passed:
        return {**result, "status": "pass"}
    if comparison.failure == "precision":
        knob = case.spec.full_precision()[0]
        return {**result, "status": "fail",
                "explanation": {"matches": [knob], "text": knob_text(knob, case.spec)}}
    # a user's check (path "check") can leave the non-finite stream out
    explanation = explain_failure(trajectory, case, reference=references.of, state=state,
                                  lr=lr, finite_only_hint=path == "check", held=held)
    return {**result, "status": "fail", "explanation": explanation}
