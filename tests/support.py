"""Shared test support: runs through the conformance machinery, judged by its one rule.

* Parameters and gradients are a conformance :class:`Case`'s (``case.initial_params()``,
  ``case.gradients(t)``: :mod:`unified_opt.conformance.gradients`), over
  :data:`PARAMS` / :data:`DENSE_PARAMS` or a subset of them named here.
* In this process (one framework per test), :func:`follow` runs a case through the
  conformance driver of a backend (:func:`unified_opt.conformance.worker.run_case`) and
  judges it with :func:`unified_opt.conformance.verdict.verdict`: the float64 oracle,
  the float32 floors, :func:`unified_opt.conformance.compare.compare`.
* Across frameworks, :func:`worker_runs` hands cases to the conformance runner (one
  worker process per backend, :mod:`unified_opt.conformance.runner`); the session starts
  it once for every collected module's ``WORKER_CASES`` (see ``conftest.py``).
"""

from __future__ import annotations

import importlib.util
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from unified_opt import SGD
from unified_opt.backend import BACKENDS
from unified_opt.conformance.cases import DENSE_PARAMS, PARAMS, Case
from unified_opt.conformance.compare import Comparison, compare, held_to_spec_precision
from unified_opt.conformance.trajectory import (
    Recorder,
    Trajectory,
    add_evaluation_points,
    floor_trajectories,
    reference_trajectory,
)
from unified_opt.conformance.verdict import References, verdict

__all__ = ["DENSE_PARAMS", "FLAT_PARAMS", "LOOP_PARAMS", "PARAMS", "SMALL_PARAMS", "Run",
           "Replay", "assert_passes", "assert_planted_deviation_fails", "case_of", "follow",
           "installed_frameworks", "judge", "record", "reference_steps", "worker_runs"]

#: the conformance parameters of at most two dimensions (a peer library that fails on
#: 3-D tensors)
FLAT_PARAMS = {name: shape for name, shape in DENSE_PARAMS.items() if len(shape) < 3}
#: the dense parameters without the 4225-element matrix, for bit-for-bit comparisons of
#: two optimizers: the first torch step of a process computed the second half of that
#: matrix differently, now and then (measured: elements from 2113 on, 4 ulps; a thread
#: split), which no spec or lowering explains
SMALL_PARAMS = {name: shape for name, shape in DENSE_PARAMS.items() if name != "w"}
#: the training-loop tests' parameters where every operation counts (MindSpore): a
#: matrix, a vector, a name-rule target, a 3-D tensor and a 0-size one
LOOP_PARAMS = {name: PARAMS[name] for name in ("w", "bias", "ln.gamma", "w3d", "empty")}


def installed_frameworks() -> list[str]:
    return [f for f in BACKENDS if importlib.util.find_spec(f) is not None]


def case_of(id: str, spec, params=PARAMS, **fields) -> Case:
    """A conformance case for a test (ids are free: the seed comes from the id)."""
    return Case(id=id, spec=spec, params=params, **fields)


# -- in this process --------------------------------------------------------------------

@dataclass
class Run:
    """One run of a case on a backend path, its driver and its verdict."""

    case: Case
    backend: str
    path: str
    trajectory: Trajectory
    decision: object
    result: dict
    driver: object = None

    @property
    def passed(self) -> bool:
        return self.result["status"] == "pass"

    @property
    def ratio(self) -> float:
        return self.result["comparison"]["worst_ratio"]


_REFERENCES: dict = {}     # the References of the last case judged (its oracle and floors)


def _references(case: Case) -> References:
    key = (case.id, case.seed, case.steps, case.spec, case.groups, case.nonfinite_steps,
           tuple(case.params.items()))
    if key not in _REFERENCES:
        _REFERENCES.clear()
        _REFERENCES[key] = References()
    return _REFERENCES[key]


def follow(backend: str, case: Case, path: str = "auto", *, spec=None) -> Run:
    """Run ``case`` on ``backend`` in this process, through the conformance driver as the
    worker does (with ``spec`` in place of the case's, a planted deviation), and judge
    it against the case's oracle. Runs of the same case in a row share its references;
    an exception propagates."""
    from unified_opt.conformance.worker import drive, driver_class, start

    driver = start(driver_class(backend), case, path, spec)
    trajectory = drive(driver, case)
    result = verdict(case, backend, path, trajectory, driver.decision, None,
                     _references(case))
    return Run(case, backend, path, trajectory, driver.decision, result, driver)


def assert_passes(run: Run) -> Run:
    """The run follows its oracle (the conformance rule); the message says why not."""
    result = run.result
    if result["status"] != "pass":
        detail = (result.get("error") or (result["comparison"] or {}).get("detail", "")
                  + " -- " + ((result.get("explanation") or {}).get("text") or ""))
        raise AssertionError(f"{run.case.id} on {run.backend} ({run.path}, "
                             f"{(result['lowering'] or {}).get('native') or 'own'}): "
                             f"{result['status']}: {detail}")
    return run


def judge(trajectory: Trajectory, case, spec=None, *, state: bool = True,
          lr: bool = True) -> Comparison:
    """``trajectory`` against the oracle of ``spec`` (default the case's) on ``case`` (a
    :class:`Case` or a :class:`Replay`), with the conformance floors: :func:`compare` as
    the suite applies it (``lr=False``: a loop that cannot read its lr back), and for a
    spec with a low-precision part its precision rule (:func:`held_to_precision`: a run
    nearer the same spec in full precision fails "precision")."""
    spec = case.spec if spec is None else spec
    # the run's evaluation points (schedule-free) worked out where it is judged, as the
    # suite's verdict does
    trajectory = add_evaluation_points(trajectory, case.spec)
    floors = floor_trajectories(spec, case)
    return held_to_spec_precision(
        compare(trajectory, reference_trajectory(spec, case), floors, state=state, lr=lr),
        spec,
        lambda full: compare(trajectory, reference_trajectory(full, case), floors,
                             state=state, lr=lr))


@dataclass(frozen=True)
class Replay:
    """Inputs recorded from a run that has no case (a network's own gradients, a stream
    made by hand), judged like a case: :func:`judge` replays them through the float64
    oracle and the float32 floors. ``params``: name -> the values before the first step;
    ``grads``: name -> array, one dict per step (any number of steps)."""

    spec: object
    params: dict
    grads: tuple
    groups: tuple = ()
    workers: int = 1

    @property
    def steps(self) -> int:
        return len(self.grads)

    def initial_params(self) -> dict:
        return {n: np.array(a, dtype=np.float32) for n, a in self.params.items()}

    def gradients(self, step: int) -> dict:
        return {n: np.array(g, dtype=np.float32) for n, g in self.grads[step].items()}


def reference_steps(spec, params, grads, steps=1):
    """The float64 oracle of ``spec`` from ``params`` after ``steps`` steps of the same
    ``grads`` (name -> nested lists or arrays): for updates worked out by hand."""
    import unified_opt as uo

    ref = uo.reference(spec, {k: np.asarray(v, dtype=float) for k, v in params.items()})
    for _ in range(steps):
        ref.step({k: np.asarray(v, dtype=float) for k, v in grads.items()})
    return ref


def assert_planted_deviation_fails(cases, case_id: str, planted: str) -> None:
    """In the case ``case_id`` of ``cases``, the float32 reference passes and the spec's
    alternative whose description starts with ``planted`` (a knob turned,
    ``Spec.alternatives``) fails: the case tells that knob apart."""
    case = next(c for c in cases if c.id == case_id)
    wrong = next(alt for desc, alt in case.spec.alternatives() if desc.startswith(planted))
    oracle = reference_trajectory(case.spec, case)
    floors = floor_trajectories(case.spec, case)
    assert compare(floors[0], oracle, floors).passed
    assert not compare(reference_trajectory(wrong, case), oracle, floors).passed


def record(step, read, case: Case, steps: int | None = None) -> Trajectory:
    """A trajectory of a loop driven by hand: ``step(grads) -> lr`` takes the case's
    gradients of each step, ``read() -> (params, state)`` reads back after it (numpy,
    spec state names; ``{}`` for state where the loop has none)."""
    recorder = Recorder()
    for t in range(case.steps if steps is None else steps):
        lr = step(case.gradients(t))
        params, state = read()
        recorder.add(lr, params, state)
    return recorder.trajectory()


def assert_bit_identical(a: dict, b: dict, what: str = "", *, strict: bool = False) -> None:
    """Two dicts of arrays (or of dicts of arrays) hold the same bits (``strict``: and
    the same shapes and dtypes)."""
    assert a.keys() == b.keys(), (what, sorted(a), sorted(b))
    for name in a:
        if isinstance(a[name], dict):
            assert_bit_identical(a[name], b[name], f"{what} {name}", strict=strict)
        else:
            np.testing.assert_array_equal(np.asarray(a[name]), np.asarray(b[name]),
                                          err_msg=f"{what} {name}", strict=strict)


# -- across frameworks: the conformance runner ---------------------------------------------

class WorkerRuns:
    """The report of a conformance run with kept trajectories."""

    def __init__(self, report: dict, out: Path):
        self.report = report
        self.out = Path(out)
        self._results = {(r["case"], r["backend"], r["path"]): r for r in report["results"]}

    def result(self, case_id: str, backend: str, path: str) -> dict:
        try:
            return self._results[(case_id, backend, path)]
        except KeyError:
            raise AssertionError(f"no result for {case_id} on {backend} ({path}); the "
                                 f"worker said: {self.report['backends'][backend]}") from None

    def trajectory(self, case_id: str, backend: str, path: str) -> Trajectory:
        result = self.result(case_id, backend, path)
        assert result["trajectory"], result
        return Trajectory.load(self.out / result["trajectory"])

    def assert_passes(self, case_id: str, backend: str, path: str) -> dict:
        result = self.result(case_id, backend, path)
        if result["status"] != "pass":
            detail = (result.get("error") or (result["comparison"] or {}).get("detail", "")
                      + " -- " + ((result.get("explanation") or {}).get("text") or ""))
            raise AssertionError(f"{case_id} on {backend} ({path}): {result['status']}: "
                                 f"{detail}")
        return result

    def assert_cases_pass_or_are_refused(self, cases) -> None:
        """Each of ``cases`` passes on every installed backend ("auto", and "own" where
        "auto" built a native class), or, where the case refuses that backend
        (:meth:`Case.refused_on`), is listed there as not run on each path with that
        reason and has no result."""
        for case in cases:
            for backend in installed_frameworks():
                reason = case.refused_on(backend)
                if reason is not None:
                    left_out = [e for e in self.report["backends"][backend]["not_run"]
                                if e["case"] == case.id]
                    assert [e["path"] for e in left_out] == list(case.paths)
                    assert all(e["reason"] == reason for e in left_out)
                    assert not [r for r in self.report["results"]
                                if (r["case"], r["backend"]) == (case.id, backend)]
                    continue
                result = self.assert_passes(case.id, backend, "auto")
                if result["lowering"]["path"] == "native":
                    self.assert_passes(case.id, backend, "own")


def worker_runs(cases, out, backends=None) -> WorkerRuns:
    """Run ``cases`` through the conformance runner (one worker process per backend,
    installed backends by default, the slowest first) with every trajectory kept."""
    from unified_opt.conformance import runner

    order = ("mindspore", "paddle", "torch")
    backends = [b for b in order if b in (backends or installed_frameworks())]
    report = runner.run(cases, backends, out, jobs=1, keep_trajectories=True,
                        progress=lambda line: None, timeout=1800)
    return WorkerRuns(report, out)


def with_built_flags(native, built):
    """``native`` (a :class:`Native` built by hand) with the implementation flag
    ``uo.build`` chose for the same class: torch's fused kernel (SGD, Adam, AdamW,
    Adagrad run it by default), so that bit-identity compares like with like."""
    import dataclasses

    if getattr(built.optimizer, "defaults", {}).get("fused") and "fused" not in native.kwargs:
        return dataclasses.replace(native, kwargs={**native.kwargs, "fused": True})
    return native


class UntraceableSGD(SGD):
    """SGD whose Python reads a tensor's value (the gradient's norm): the kernel VM
    cannot trace it, so it runs eagerly (or ``compile=True`` refuses it)."""

    def update(self, param, grad, state, *, lr, step, ops):
        if ops.norm(grad) > 0.0:
            return param - grad * lr, state
        return param, state


class PerRankSGD(SGD):
    """SGD whose step scalar follows the parameter's rank (as LARS's ``exclude_1d`` does):
    a trace that reads ``ndim`` serves its own rank only."""

    def update(self, param, grad, state, *, lr, step, ops):
        return param - grad * (lr * (0.5 if param.ndim > 1 else 1.0)), state


def held_state(optimizer, named, spec) -> dict:
    """name -> the spec's state tensors, as the optimizer ``uo.build`` made holds them
    (the own path's ``spec_state``, or its native class's state under the spec's names);
    ``named``: ``(name, parameter)`` pairs."""
    from unified_opt.backend import load, record_of

    record = record_of(optimizer)
    if record.decision.path == "own":
        return {n: optimizer.spec_state(p) for n, p in named}
    backend = load(record.decision.backend)
    return {n: backend.native_state(record, optimizer, p, spec) for n, p in named}


def compiled_driver(folder: Path, source: str, native: bool = False) -> Path:
    """A small C++ program (``source``) that includes the kernels' headers, compiled in
    ``folder`` with the kernels' exactness flags (``-ffp-contract=off``); ``native``: for
    this CPU (``-march=native``: its vector paths), as the kernels are."""
    from unified_opt.kernels import build

    path, out = folder / "driver.cc", folder / "driver"
    path.write_text(source)
    done = subprocess.run([*build._compiler(), "-O2", "-std=c++17", "-ffp-contract=off",
                           *([f"-march={build.MARCH}"] if native else []),
                           f"-I{Path(build.HEADER).parent}", "-o", str(out), str(path),
                           "-lpthread"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return out
