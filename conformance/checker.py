"""Check *your* optimizer against a spec: ``uo.conformance.check`` and ``unified-opt check``.

``check(factory, spec)`` calls ``factory(params)`` with a list of the framework's
parameters (torch ``nn.Parameter``, Paddle and MindSpore ``Parameter``: the suite's
dense parameter set, 1 to 4225 elements, 1-D to 3-D, named ``w``, ``bias``,
``ln.gamma``, ``ln.beta``, ``w3d``, ``scale``, and a conv weight ``conv`` of shape
(8, 3, 3, 3): :data:`CHECK_PARAMS`) and drives what it returns, an optimizer
or an ``(optimizer, lr_scheduler)`` pair, the framework's usual way (torch:
``p.grad``, ``step()``, ``zero_grad()``, ``scheduler.step()``; Paddle: ``p.grad``,
``step()``, ``clear_grad()``, ``scheduler.step()``; MindSpore: ``opt(grads)``) through
the spec's gradient streams: :data:`STREAMS` seeded streams, of adversarial magnitudes
(zeros, 1e-30, 500, mixed, zero rows; :mod:`.gradients`; on torch and Paddle one of
them from a real backward, zeroed in place between steps: :data:`ZEROED_IN_PLACE`) and
quiet ones where some
tensors' whole history is small (near 1e-8, 1e-12 or 1e-20; one zero for 20 steps),
and one with a NaN and infinities, each of ``steps`` >= 50 steps. After every step it
compares, under the suite's rule (:mod:`.compare`), the parameters, the lr where the
optimizer exposes it (torch ``param_groups``, Paddle and MindSpore ``get_lr()``) and the
state where it can be mapped: a native class's through its descriptor, a torch
optimizer's where ``optimizer.state[p]`` holds the spec's own state names (``exp_avg``,
``exp_avg_sq``, ...), a factor kept without its keepdims axis read reshaped and keys the
spec has no state of ignored (:func:`.drivers.base.map_state`: came-pytorch's CAME keeps
a (4, 3) parameter's row factor as (4,) beside ``step`` and ``RMS``). The answer says
what was compared and what was not, and why (:class:`CheckResult`). A failure names the
first failing step and quantity, and the spec knob whose other value the trajectory
follows (:mod:`.explainer`); with ``out``, the failing streams' trajectories are written
as a suite run writes them.

The optimizer runs in this process, on the framework it is written for: ``backend``
names it, or the one framework this process has imported.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import platform
import sys
import threading
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Tuple

import numpy as np

import unified_opt as uo
from unified_opt._validation import check_int
from unified_opt.backend import BACKENDS
from unified_opt.records import records

from .cases import DENSE_PARAMS, MIN_STEPS, Case
from .cases.functions import encode_spec, named_for_this_process
from .deviations import has_trust_ratio
from .device import Device, parse_device, place
from .drivers.base import Driver, spec_state_shapes
from .explainer import held_hyperparameters, spec_fields
from .gradients import quiet_gradients_at
from .report import build_report, write_reports
from .runner import TRAJECTORIES
from .trajectory import Recorder, Trajectory
from .verdict import References, verdict
from .worker import (
    FAILING_TRAJECTORY_BUDGET,
    FRAMEWORK_MODULES,
    TrajectoryKeeper,
    drive,
    driver_class,
    framework_version,
    result_stem,
)

#: the parameters of a check's streams: the suite's dense set and a conv weight (out, in,
#: kh, kw), last, so that the others keep their gradients: an optimizer may treat 4-D
#: tensors its own way (gradient centralization of conv weights only, a factored moment
#: over the kernel reshaped to a matrix rather than over its last two axes)
CHECK_PARAMS = {**DENSE_PARAMS, "conv": (8, 3, 3, 3)}
#: seeded streams of adversarial magnitudes per check (:func:`.gradients.kind_at`)
ADVERSARIAL_STREAMS = 3
#: seeded quiet streams per check (:func:`.gradients.quiet_kind_at`): a knob that matters
#: only for a tensor whose gradients were never normal-sized (Lamb's ``trust_eps``,
#: Adafactor's ``eps_mode``) shows there only
QUIET_STREAMS = 1
#: seeded gradient streams per check, besides the one with non-finite elements (and, for
#: a trust-ratio spec, the one of large weights)
STREAMS = ADVERSARIAL_STREAMS + QUIET_STREAMS
#: backend -> (``Case.backward`` mode, the call) of the adversarial stream whose
#: gradients come from a real backward and are zeroed in place (:func:`check_cases`)
ZEROED_IN_PLACE = {"torch": ("set_to_zero", "zero_grad(set_to_none=False)"),
                   "paddle": ("set_to_zero", "clear_grad(set_to_zero=True)")}
#: the steps (0-based) of the non-finite stream that get a NaN or an Inf
NONFINITE_STEPS = (5, 17, 29)
PATH = "check"


@dataclass
class CheckResult:
    """What :func:`check` found: ``passed``; ``worst_ratio`` (error/floor over every
    step, quantity and stream); ``explanation`` (empty when it passed: the first failing
    stream, step and quantity, and the knob the trajectory follows); ``report`` (the
    conformance report, as ``report.json`` holds it); ``compared`` (what every stream
    compared: ``params``, ``lr``, ``state <name>`` per spec state name) and
    ``not_compared`` (what was not, each with the reason), as the first line says;
    ``state_reshaped`` (spec state names read from arrays kept without their keepdims
    axes), ``state_ignored`` (keys of the optimizer's state the spec has no state of) and
    ``state_negated`` (spec state names a known class keeps negated, read so:
    :data:`.drivers.base.HELD_NEGATED`);
    ``trajectories`` (case id -> :class:`.trajectory.Trajectory` of each stream that did
    not pass)."""

    passed: bool
    worst_ratio: float
    explanation: str
    report: dict
    # typing.Tuple: the docs' parser reads the builtin tuple[str, ...] of a dataclass
    # field as two names
    compared: Tuple[str, ...] = ()
    not_compared: Tuple[str, ...] = ()
    state_reshaped: Tuple[str, ...] = ()
    state_ignored: Tuple[str, ...] = ()
    state_negated: Tuple[str, ...] = ()
    trajectories: dict = field(default_factory=dict, repr=False)

    def __bool__(self) -> bool:
        return self.passed

    def __str__(self) -> str:
        s = self.report["summary"]
        what = f"compared: {', '.join(_grouped(self.compared)) or 'nothing'}"
        if self.not_compared:
            what += f"; not compared: {'; '.join(self.not_compared)}"
        head = (f"{'PASS' if self.passed else 'FAIL'}: {s['pass']} of {s['total']} streams "
                f"pass, worst error/floor {self.worst_ratio:.3g} ({what})")
        lines = [head]
        if self.state_reshaped or self.state_ignored or self.state_negated:
            mapped = []
            if self.state_negated:
                mapped.append(f"{', '.join(self.state_negated)} read negated (the class "
                              "keeps it so)")
            if self.state_reshaped:
                mapped.append(f"{', '.join(self.state_reshaped)} read from arrays kept "
                              "without their keepdims axes")
            if self.state_ignored:
                mapped.append(f"ignored: {', '.join(self.state_ignored)} (no state of the "
                              "spec)")
            lines.append(f"state mapped onto the spec's names: {'; '.join(mapped)}")
        if self.explanation:
            lines.append(self.explanation)
        return "\n".join(lines)


def _grouped(compared) -> list[str]:
    """``["params", "lr", "state a", "state b"]`` -> ``["params", "lr", "state a, b"]``."""
    plain = [c for c in compared if not c.startswith("state ")]
    state = [c[len("state "):] for c in compared if c.startswith("state ")]
    return plain + ([f"state {', '.join(state)}"] if state else [])


#: how much larger the parameters of the trust-ratio stream start
TRUST_SCALE = 100.0


@dataclass(frozen=True)
class ScaledCase(Case):
    """A check stream whose parameters start ``scale`` times the usual ones (checks run
    in this process: the case never travels as JSON)."""

    scale: float = 1.0

    def initial_params(self):
        return {n: (a * np.float32(self.scale)).astype(np.float32)
                for n, a in super().initial_params().items()}


@dataclass(frozen=True)
class QuietCase(Case):
    """A check stream where some tensors' gradients are small from step 0 on
    (:func:`.gradients.quiet_gradients_at` with ``rotation``); checks run in this
    process: the case never travels as JSON."""

    rotation: int = 0

    def gradients(self, step: int) -> dict:
        if self.nonfinite_steps or self.missing_gradients or self.storage is not None \
                or self.rank:
            raise ValueError(f"QuietCase {self.id!r}: a quiet stream has no non-finite "
                             "steps, missing gradients, storage dtype or rank")
        return quiet_gradients_at(self.seed, step, self.params, self.rotation,
                                  self.smallest())

    def smallest(self) -> dict:
        """name -> the smallest magnitude its gradients may take
        (``Spec.smallest_float32_gradient``: a factored moment's, whose float32
        product of row and column means underflows below it)."""
        return {name: self.spec.smallest_float32_gradient(tuple(shape))
                for name, shape in self.params.items()}


def check_cases(spec: uo.Spec, steps: int | None = None, nonfinite: bool = True,
                backend: str | None = None) -> list[Case]:
    """The cases a check runs: :data:`ADVERSARIAL_STREAMS` seeded streams of adversarial
    magnitudes (on a ``backend`` whose loops keep gradients on the parameters, torch's
    and Paddle's, the last of them takes its gradients from a real backward and zeroes
    them in place between steps, ``zero_grad(set_to_none=False)`` /
    ``clear_grad(set_to_zero=True)``: an optimizer that keeps the gradient tensor itself
    as its state passes with fresh gradients and fails there, as in a user's loop that
    zeroes so), :data:`QUIET_STREAMS` quiet ones (tensors whose whole history is near
    1e-8, 1e-12 or 1e-20, beside tensors of the normal cycle and one zero for 20 steps
    after its first), for a spec with a trust ratio one more whose parameters start
    :data:`TRUST_SCALE` times larger (its ratios are ~100 from step 1, so a clipped ratio
    or a clamp shows at once; on the others a ratio reaches 10 only when small gradients
    have shrunk the update), and with ``nonfinite`` one with non-finite elements."""
    steps = MIN_STEPS if steps is None else steps
    params = check_params(spec)
    zeroed = ADVERSARIAL_STREAMS - 1 if backend in ZEROED_IN_PLACE else None
    cases = [Case(id=f"check_{spec.name}_{i}" + ("_zeroed" if i == zeroed else ""),
                  spec=spec, params=params, steps=steps,
                  backward=ZEROED_IN_PLACE[backend][0] if i == zeroed else None,
                  description=f"gradient stream {i} of adversarial magnitudes" + (
                      f", from a real backward, zeroed in place between steps "
                      f"({ZEROED_IN_PLACE[backend][1]})" if i == zeroed else ""))
             for i in range(ADVERSARIAL_STREAMS)]
    if has_trust_ratio(spec):
        cases.append(ScaledCase(
            id=f"check_{spec.name}_large_weights", spec=spec, params=params,
            steps=steps, scale=TRUST_SCALE,
            description=f"parameters {TRUST_SCALE:g} times larger: trust ratios above 10 "
                        "from step 1"))
    # after the stream of large weights: of two streams failing at one step the
    # explanation names the first, and a clipped trust ratio is that stream's finding
    cases += [QuietCase(id=f"check_{spec.name}_quiet_{i}", spec=spec, params=params,
                        steps=steps, rotation=i,
                        description=f"quiet gradient stream {i}: tensors near 1e-8, 1e-12 "
                                    "or 1e-20 from step 0 (no smaller than float32 holds "
                                    "the spec at: 1e-8 for a factored moment's), one zero "
                                    "for 20 steps")
              for i in range(QUIET_STREAMS)]
    if nonfinite:
        cases.append(Case(id=f"check_{spec.name}_nonfinite", spec=spec, params=params,
                          steps=steps, nonfinite_steps=NONFINITE_STEPS,
                          description="a stream with +inf, NaN and -inf elements"))
    return cases


def check_params(spec: uo.Spec) -> dict[str, tuple[int, ...]]:
    """The parameters a check's streams hold: :data:`CHECK_PARAMS`, or, for a spec whose
    update refuses some of its shapes (``Spec.updates_shape``: Muon's matrices-only
    form, as ``torch.optim.Muon``), the dense shapes its record gives its cases."""
    if all(spec.updates_shape(shape) for shape in CHECK_PARAMS.values()):
        return CHECK_PARAMS
    entry = records().get(spec.name)
    return (entry.dense_params() if entry is not None else None) or DENSE_PARAMS


def _spec_of(spec) -> uo.Spec:
    if isinstance(spec, str):
        from unified_opt.expressions import parse_spec

        return parse_spec(spec)
    if not isinstance(spec, uo.Spec):
        raise TypeError(f"check: spec must be a unified_opt spec (uo.Adam(...)) or a spec "
                        f"expression string, got {spec!r}")
    if spec.skip_nonfinite:
        raise ValueError("check: skip_nonfinite=True cannot be checked on a user's "
                         "optimizer: nothing reports which steps it skipped; check the spec "
                         "without it")
    return spec


class FactoryError(ValueError):
    """The factory failed or returned no optimizer of the backend: a usage error (the
    command line's exit 2), not a conformance failure."""


def _installed(backend: str) -> str:
    if importlib.util.find_spec(FRAMEWORK_MODULES.get(backend, backend)) is None:
        raise ValueError(f"check: backend {backend!r} is not installed in this Python "
                         f"({sys.executable}); pip install 'unified-opt[{backend}]'")
    return backend


def _backend_of(backend: str | None) -> str:
    if backend is not None:
        if not isinstance(backend, str):
            raise TypeError(f"check: backend must be a str, got {backend!r}")
        if backend not in BACKENDS:
            raise ValueError(f"check: backend must be one of {BACKENDS}, got {backend!r}")
        return _installed(backend)
    imported = [b for b in BACKENDS if b in sys.modules]
    if len(imported) != 1:
        raise ValueError(f"check: backend=None needs exactly one framework imported in this "
                         f"process, found {imported or 'none'}; give backend= one of "
                         f"{BACKENDS}")
    return imported[0]


def check(factory: Callable, spec, backend: str | None = None, steps: int | None = None, *,
          out: str | Path | None = None, nonfinite: bool = True,
          device: str = "cpu") -> CheckResult:
    """Run ``factory``'s optimizer through ``spec``'s conformance streams (module doc).

    ``steps``: per stream (default and minimum 50); ``out``: a directory to write the
    reports into (report.json, report.md, junit.xml and the others of
    :func:`.report.write_reports`); ``nonfinite=False`` leaves out the stream with NaN
    and Inf elements (for an optimizer that treats them its own way by design: the spec
    defines where they go, e.g. Lamb's trust ratio is 1 when a norm is NaN).

    ``device``: where the parameters the factory gets live: ``"cpu"`` (default),
    ``"cuda"`` / ``"gpu"`` (``"cuda:1"``), ``"npu"`` (:mod:`.device`); a device the
    backend cannot use is a :class:`.device.DeviceUnavailable` (a ValueError) before any
    stream runs. Paddle's default device is set for the check and put back after it;
    MindSpore's ``device_target`` is one per process, so a check on another device sets
    it for the rest of the process (refused once MindSpore has started on another).

    The reference trajectories of each stream (the float64 oracle, the float32 floors,
    the explainer's variants) are kept for the next check of an equal spec in this
    process, the last :data:`KEPT_SPECS` specs' (:func:`_references_of`)."""
    if not callable(factory):
        raise TypeError(f"check: factory must be callable (params -> optimizer), got "
                        f"{factory!r}")
    spec = _spec_of(spec)
    backend = _backend_of(backend)
    if steps is not None:     # a numpy integer (a count read from a config) is one too
        steps = check_int("check", "steps", steps, low=MIN_STEPS)
    if not isinstance(nonfinite, bool):
        raise TypeError(f"check: nonfinite must be a bool, got {nonfinite!r}")
    device = parse_device(device, "check: device")
    with named_for_this_process(spec):     # a LambdaLR's function: the cases stay here
        return _checked(factory, spec, backend, steps, out, nonfinite, device)


def _checked(factory: Callable, spec: uo.Spec, backend: str, steps: int | None,
             out: str | Path | None, nonfinite: bool, device) -> CheckResult:
    """:func:`check` over checked arguments."""
    cases = check_cases(spec, steps, nonfinite, backend)
    driver_cls = driver_class(backend)
    called = _Called(factory, backend)
    references = _references_of(spec)
    with _placed(backend, device) as placement, _one_intra_op_thread(backend):
        started = time.perf_counter()
        runs = [_run(driver_cls, backend, case, called, placement, references)
                for case in cases]
    results = [result for result, _ in runs]
    failing = {r["case"]: t for r, t in runs if r["status"] != "pass" and t.steps}
    worker = {"exit_code": 0, "seconds": round(time.perf_counter() - started, 2),
              "framework_version": framework_version(backend), "error": None,
              "python": sys.version.split()[0], "platform": platform.platform(),
              "device": placement.device, "framework_device": placement.framework_device,
              "device_name": placement.name, "not_run": [], "trajectories_dropped": []}
    what = what_was_compared(results)
    if out is not None:
        Path(out).mkdir(parents=True, exist_ok=True)
        worker["trajectories_dropped"] = _keep_trajectories(Path(out), backend, cases,
                                                            results, failing)
    report = build_report(cases, [backend], {backend: worker}, results)
    report["unexercised_lowering_rows"] = {backend: []}   # no uo.build lowering ran
    report["checked"] = {"factory": _name(factory),
                         "spec": json.dumps(encode_spec(spec), sort_keys=True), **what}
    if out is not None:
        write_reports(report, out)
    # a stream failing on where the non-finite elements are has no finite ratio: its
    # finite elements' (1 when they agree) would read as a pass in the headline
    ratios = [None if r["comparison"].get("failure") == "nonfinite"
              else r["comparison"]["worst_ratio"] for r in results if r["comparison"]]
    worst = max((float("inf") if x is None else x for x in ratios), default=float("inf"))
    passed = all(r["status"] == "pass" for r in results)
    return CheckResult(passed, worst, "" if passed else explanation(results), report,
                       **{k: tuple(v) for k, v in what.items()}, trajectories=failing)


def _keep_trajectories(out: Path, backend: str, cases, results: list[dict],
                       failing: dict) -> list[str]:
    """Write the trajectory of each stream that did not pass into
    ``out/trajectories/<backend>/<case>__check.npz`` (as a suite run does: compressed,
    atomically, :meth:`.trajectory.Trajectory.save`; up to
    :data:`.worker.FAILING_TRAJECTORY_BUDGET` bytes), name it in its result
    (``trajectory``, relative to ``out``), and remove what an earlier check of these
    streams left there. Returns the stems left out for the budget."""
    folder = out / TRAJECTORIES / backend
    for case in cases:                      # an earlier check's file is not this one's
        (folder / f"{result_stem(case.id, PATH)}.npz").unlink(missing_ok=True)
    if not failing:
        for empty in (folder, folder.parent):    # no empty folders left (as the runner)
            with contextlib.suppress(OSError):   # absent, or holding other files
                empty.rmdir()
        return []
    keeper = TrajectoryKeeper(folder, False, FAILING_TRAJECTORY_BUDGET)
    dropped = []
    for result in results:
        if result["case"] not in failing:
            continue
        stem = result_stem(result["case"], PATH)
        kept = keeper.keep(stem, failing[result["case"]], result["status"])
        if kept is None:
            dropped.append(stem)
        result["trajectory"] = None if kept is None else f"{TRAJECTORIES}/{backend}/{kept}"
    return dropped


def what_was_compared(results: list[dict]) -> dict:
    """``{"compared", "not_compared", "state_reshaped", "state_ignored",
    "state_negated"}`` over the
    streams that ran: a quantity is compared when every stream that did not raise
    compared it; each reason a stream gave for leaving one out is listed once. When every
    stream raised, nothing was compared."""
    ran = [r for r in results if r["status"] != "error"]
    if not ran:
        return {"compared": [], "not_compared": ["anything (every stream raised)"],
                "state_reshaped": [], "state_ignored": [], "state_negated": []}
    compared = ["params"]
    if all("lr" in r["compared"] for r in ran):
        compared.append("lr")
    if all("state" in r["compared"] for r in ran):
        names = [n for r in ran for n in r.get("compared_state", [])]
        compared += [f"state {n}" for n in dict.fromkeys(names)]
    listed = {key: list(dict.fromkeys(x for r in ran for x in r.get(key, [])))
              for key in ("not_compared", "state_reshaped", "state_ignored", "state_negated")}
    return {"compared": compared, **listed}


#: torch's intra-op threads while a check runs, and how many checks are running
_threads = {"before": None, "checks": 0}
_threads_lock = threading.Lock()


@contextlib.contextmanager
def _one_intra_op_thread(backend: str):
    """torch on one intra-op thread while checks run (``torch.set_num_threads(1)``, the
    number before put back when the last check ends). The check's tensors have at most
    4225 elements, below torch's grain for splitting an op over threads, so the numbers
    are the same; but on a loaded machine (CI's two cores running tests beside it) each
    op's hand-off to the thread pool waits for a core: 250 AdamW steps of the check's
    parameters took 4.7-12.9 s on two threads and 0.24-0.33 s on one, under a load of
    about 10 on two cores. Paddle already runs on one (its import sets
    OMP_NUM_THREADS=1); MindSpore keeps its own pool."""
    if backend != "torch":
        yield
        return
    import torch

    with _threads_lock:
        if _threads["checks"] == 0:
            _threads["before"] = torch.get_num_threads()
            torch.set_num_threads(1)
        _threads["checks"] += 1
    try:
        yield
    finally:
        with _threads_lock:
            _threads["checks"] -= 1
            if _threads["checks"] == 0:
                torch.set_num_threads(_threads["before"])


@contextlib.contextmanager
def _placed(backend: str, device: Device):
    """The :class:`.device.Placement` of ``device`` on ``backend`` for a check; Paddle's
    process-wide default device is put back afterwards."""
    previous = None
    if backend == "paddle":
        import paddle

        previous = paddle.device.get_device()
    try:
        yield place(backend, device)
    finally:
        if previous is not None:
            import paddle

            paddle.set_device(previous)


#: how many specs' reference trajectories a process keeps (:func:`_references_of`)
KEPT_SPECS = 4
_kept: dict = {}
_kept_lock = threading.Lock()            # checks may run in several threads


def _references_of(spec) -> References:
    """The reference trajectories of ``spec``'s streams, kept for the next check of an
    equal spec: the float64 oracle, the float32 floors and the explainer's variants of
    each stream depend on the spec and the stream only, not on the optimizer checked,
    so checking several optimizers (or one optimizer again) against a spec computes them
    once. The last :data:`KEPT_SPECS` specs are kept (a check of a failing Lamb makes
    about 300 of them, each 50 steps)."""
    with _kept_lock:
        try:
            references = _kept.pop(spec)
        except TypeError:                    # a spec that cannot be a key: not kept
            return References()
        except KeyError:
            references = References()
        _kept[spec] = references             # the most recent last
        while len(_kept) > KEPT_SPECS:
            del _kept[next(iter(_kept))]
        return references


def _run(driver_cls, backend: str, case: Case, factory, placement,
         references: References) -> tuple[dict, Trajectory]:
    """One stream's result and trajectory; the result says what was compared
    (``compared``: ``params``, ``lr``, ``state``; ``compared_state``: the spec state
    names; ``state_reshaped``, ``state_ignored``, ``not_compared``: see
    :class:`CheckResult`)."""
    started = time.perf_counter()
    recorder, decision, error, error_at, trajectory = Recorder(), None, None, "", None
    built = False       # an error after this is one of a step's
    try:
        driver = driver_cls(case.spec, case.initial_params(), total_steps=case.steps,
                            factory=factory, device=placement, backward=case.backward)
        decision = driver.decision
        built = True
        trajectory = drive(driver, case, recorder)
    except FactoryError:
        raise
    except Exception as raised:  # the result carries the text; the next stream runs
        error = traceback.format_exc()
        error_at = _raised_in(traceback.extract_tb(raised.__traceback__))
    if trajectory is None:       # the steps before the error
        trajectory = recorder.trajectory()
    compared = {"lr": False, "state": False}
    reading: dict = {}
    if error is None:
        compared["lr"] = bool(trajectory.steps) and not any(
            lr != lr for lr in trajectory.lrs.tolist())
        reading = _state_read(driver, case, backend)
        compared["state"] = not reading["not_compared"]
        if not compared["lr"]:
            reading["not_compared"].insert(0, "lr (the optimizer exposes none: torch "
                                              "param_groups, Paddle and MindSpore get_lr())")
    held = _held(driver, case) if error is None else None
    result = verdict(case, backend, PATH, trajectory, decision, error, references,
                     state=compared["state"], lr=compared["lr"], held=held)
    if (result["status"] == "fail" and compared["lr"]
            and (result["comparison"] or {}).get("failing_quantity") == "lr"):
        result, compared["lr"] = _judged_without_an_unused_lr(
            result, case, backend, trajectory, decision, references, compared["state"],
            reading, held)
    if error is not None:
        result.update(error_step=trajectory.steps + 1 if built else None, error_at=error_at)
    result.update(seconds=round(time.perf_counter() - started, 4),
                  steps_done=trajectory.steps, trajectory=None,
                  compared=["params"] + [k for k, v in compared.items() if v], **reading)
    return result, trajectory


def _held(driver, case: Case) -> dict:
    """The spec's fields the optimizer holds with other values
    (:func:`.explainer.held_hyperparameters`): where ``uo.from_native`` reads the live
    optimizer (a native class of torch, Paddle or MindSpore), the fields of the spec it
    reads (torch.optim.Adafactor's ``beta2_decay=-0.5`` is ``decay_rate=0.5``, Paddle's
    ``_epsilon`` is ``eps``, MindSpore ``nn``'s float32 ``eps`` its shortest decimals);
    else a torch-style optimizer's first param group under the spec's names (a
    third-party class). Each value offered is verified against the run before the
    explanation names it."""
    optimizer = getattr(driver, "optimizer", None)
    if optimizer is None:
        return {}
    try:
        with warnings.catch_warnings():
            # a preset's notes to a porting user (foreach=True is no part of the math)
            warnings.simplefilter("ignore")
            native_spec, _ = uo.from_native(optimizer, constant_lr=True)
    except Exception:   # noqa: BLE001 - the reading calls the user's functions
        # (apply_decay_param_fun, ...): whatever it raises only withholds these values
        # from the explanation; pass or fail does not depend on them
        native_spec = None
    if native_spec is not None:
        return held_hyperparameters(spec_fields(native_spec), case.spec)
    groups = getattr(optimizer, "param_groups", None)
    if isinstance(groups, list) and groups and isinstance(groups[0], dict):
        return held_hyperparameters(groups[0], case.spec)
    return {}


def _judged_without_an_unused_lr(result: dict, case: Case, backend: str,
                                 trajectory: Trajectory, decision, references: References,
                                 state: bool, reading: dict,
                                 held: dict | None) -> tuple[dict, bool]:
    """A stream that failed on the lr it exposes, judged again without it (and whether
    the lr is still compared). An optimizer may step with an lr of its own and leave the
    group's unused: ``pytorch_optimizer.AdaFactor(relative_step=True)`` steps with
    ``min(1e-2, 1 / sqrt(t))`` whatever ``lr`` it was given.

    * Its parameters and state follow the spec: the passing result, the lr left out and
      named in ``reading["not_compared"]`` with both values (failing it on the lr was a
      false alarm; the note keeps the fact in sight: a scheduler that writes the
      group's lr moves nothing).
    * They do not, and no candidate explained the lr, but one explains them: that
      failing result, the lr left out and named likewise (the knob that makes the
      parameters this optimizer's, ``eps_mode='add'``, is what a user needs; a
      candidate made to match an lr that moves nothing would miss it).
    * Else the result as it was."""
    without = verdict(case, backend, PATH, trajectory, decision, None, references,
                      state=state, lr=False, held=held)
    passed = without["status"] == "pass"
    if not passed and (not (without.get("explanation") or {}).get("matches")
                       or (result.get("explanation") or {}).get("matches")):
        return result, True
    oracle = references.get(case, "float64").lrs
    got = trajectory.lrs
    step = int(np.flatnonzero(got != oracle)[0]) if (got != oracle).any() else 0
    said = (f"lr (the optimizer's exposed lr is {got[step]:.6g} at step {step + 1}, the "
            f"spec's {oracle[step]:.6g}")
    reading["not_compared"].insert(
        0, said + (", but its parameters and state follow the spec: it steps with an lr "
                   "of its own, and writing the exposed one moves nothing)" if passed else
                   ", which no candidate gives: judged on its parameters and state)"))
    return without, False


#: what a factory's optimizer must have, per framework: the calls the driver makes
_CALLS = {"torch": ("step", "zero_grad"), "paddle": ("step", "clear_grad"),
          "mindspore": ("__call__",)}
_BASES = {"torch": ("torch.nn", "Module"), "paddle": ("paddle.nn", "Layer"),
          "mindspore": ("mindspore.nn", "Cell")}


class _Called:
    """``factory`` as the drivers call it: what it raises or returns that is not an
    optimizer of ``backend`` is a :class:`FactoryError` naming the factory."""

    def __init__(self, factory, backend: str):
        self.factory, self.backend = factory, backend
        self.__qualname__ = getattr(factory, "__qualname__", repr(factory))
        self.name = getattr(factory, "__name__", self.__qualname__)

    def __call__(self, params):
        try:
            made = self.factory(params)
        except Exception as error:
            text = " ".join(str(error).split())
            raise FactoryError(
                f"check: {self.name} raised {type(error).__name__}: {text} (called with a "
                f"list of {len(params)} {self.backend} parameters; --backend / backend= "
                "names the framework the factory is written for)") from error
        optimizer = made[0] if isinstance(made, tuple) and len(made) == 2 else made
        problem = self._problem(optimizer, made)
        if problem:
            raise FactoryError(f"check: {self.name} returned {problem}, not a "
                               f"{self.backend} optimizer (or an (optimizer, "
                               "lr_scheduler) pair)")
        return made

    def _problem(self, optimizer, made) -> str | None:
        shown = f"{type(made).__name__} {made!r}"[:120]
        if isinstance(made, tuple) and len(made) != 2:
            return f"a tuple of {len(made)} items"
        if isinstance(made, tuple) and made[1] is not None and not callable(
                getattr(made[1], "step", None)):
            # the drivers step the pair's scheduler after each optimizer step
            return (f"a pair whose second item, {type(made[1]).__name__} "
                    f"{made[1]!r}"[:120] + ", is no lr scheduler (it has no step())")
        if optimizer is None or isinstance(optimizer, (list, dict, set, str, bytes, int,
                                                       float, bool)):
            return "None" if made is None else f"a {shown}"
        root = (type(optimizer).__module__ or "").split(".")[0]
        framework = {"mindformers": "mindspore"}.get(root, root)
        if framework in BACKENDS and framework != self.backend:
            return f"a {framework} object ({type(optimizer).__qualname__})"
        module, base = _BASES[self.backend]
        container = getattr(sys.modules.get(module), base, None)
        if self.backend != "mindspore" and container is not None and isinstance(
                optimizer, container):
            return f"a {module}.{base} ({type(optimizer).__qualname__}), a model"
        if self.backend == "mindspore" and container is not None and isinstance(
                optimizer, container) and not isinstance(optimizer, _mindspore_optimizers()):
            return f"a {module}.{base} ({type(optimizer).__qualname__}) that is no optimizer"
        missing = [c for c in _CALLS[self.backend] if not callable(getattr(optimizer, c,
                                                                            None))]
        if missing:
            return (f"a {type(optimizer).__qualname__} without "
                    f"{', '.join(m + '()' for m in missing)}")
        return None


def _mindspore_optimizers() -> tuple:
    """MindSpore's optimizer base classes: ``nn.Optimizer`` and ``experimental.optim``'s
    (a Cell of its own, the torch-like classes ``uo.presets()`` lists)."""
    from mindspore.experimental.optim import Optimizer as Experimental

    return sys.modules["mindspore.nn"].Optimizer, Experimental


def _state_read(driver, case: Case, backend: str) -> dict:
    """What of the state was read: ``compared_state`` (the spec's state names, when every
    parameter's state was read), ``state_reshaped``, ``state_ignored`` (from the
    driver's :class:`.drivers.base.StateMap` of each parameter) and ``not_compared``
    (the state, with the first parameter's reason, when some was not read)."""
    names, reshaped, ignored, negated, missing = [], [], [], [], []
    # Paddle's and MindSpore's drivers read no optimizer's own state: the reason is that,
    # not what a map over nothing says ("holds nothing")
    descriptor_only = type(driver).optimizer_state is Driver.optimizer_state
    for name in driver.names:
        wanted = spec_state_shapes(case.spec, case.params[name])
        names += wanted
        state_map = driver.state_maps.get(name)
        if state_map is not None and not descriptor_only:
            reshaped += state_map.reshaped
            ignored += state_map.ignored
            negated += state_map.negated
            if state_map.unmapped and not missing:
                missing.append(f"state ({name}: {state_map.unmapped})")
        if wanted and set(driver.spec_state(name)) != set(wanted) and not missing:
            missing.append(f"state (a {backend} optimizer's state is read through a native "
                           "class's descriptor only)" if descriptor_only
                           else f"state ({name}: not read)")
    return {"compared_state": [] if missing else list(dict.fromkeys(names)),
            "state_reshaped": list(dict.fromkeys(reshaped)),
            "state_ignored": list(dict.fromkeys(ignored)),
            "state_negated": list(dict.fromkeys(negated)), "not_compared": missing}


def explanation(results: list[dict]) -> str:
    """The failing result that fails first said in one line: stream, step, quantity,
    knob (an error before any failure)."""
    def first(r):
        step = (r.get("comparison") or {}).get("first_failing_step")
        return (r["status"] != "error", step if step is not None else float("inf"))

    bad = min((r for r in results if r["status"] != "pass"), key=first)
    if bad["status"] == "error":
        lines = (bad["error"] or "").strip().splitlines()
        step = bad.get("error_step")
        at = " building the optimizer" if step is None else f" at step {step}"
        return (f"{bad['case']}: error{at}{bad.get('error_at', '')}: "
                f"{lines[-1] if lines else 'unknown'}")
    c = bad["comparison"]
    step = c["first_failing_step"]
    # the detail names the step too ("param:w at step 1: ..."): say it once
    detail = (c["detail"] or "").replace(f" at step {step}:", ":", 1)
    text = f"{bad['case']}: first failure at step {step}: {detail}"
    if bad.get("explanation"):
        text += f"; {bad['explanation']['text']}"
        # every stream tries the same candidates: one whose matches hold none of these
        # is a stream they do not give (a knob of one stream is no fix of the optimizer)
        named = set(bad["explanation"].get("matches") or ())
        others = [r["case"] for r in results if r is not bad and r["status"] == "fail"
                  and not named & set((r.get("explanation") or {}).get("matches") or ())]
        if named and others:
            text += f" (this stream only: not {', '.join(others)})"
    return text


#: installed packages whose frames a raising optimizer's location looks past: the error
#: surfaced in the framework, the line that called it is the reader's
FRAMEWORK_PACKAGES = frozenset({"torch", "paddle", "mindspore", "numpy"})


def _raised_in(frames: traceback.StackSummary) -> str:
    """Where the optimizer raised, `` in torch_optimizer/adafactor.py:116
    (_approx_sq_grad)`` (the folder and file): the innermost frame outside the frameworks'
    own installed code (:data:`FRAMEWORK_PACKAGES`; ``torch.einsum`` raising inside
    torch/functional.py is said at the line calling it), else the innermost; "" without
    a frame."""
    def framework(parts) -> bool:
        return any(a == "site-packages" and b in FRAMEWORK_PACKAGES
                   for a, b in zip(parts, parts[1:]))

    if not frames:
        return ""
    frame = next((f for f in reversed(frames) if not framework(Path(f.filename).parts)),
                 frames[-1])
    return f" in {'/'.join(Path(frame.filename).parts[-2:])}:{frame.lineno} ({frame.name})"


def _name(factory) -> str:
    module = getattr(factory, "__module__", None)
    name = getattr(factory, "__qualname__", None)
    return f"{module}:{name}" if module and name else repr(factory)


def load_factory(target: str) -> Callable:
    """``MODULE:FACTORY`` -> the callable (the module imported, the name looked up)."""
    if not isinstance(target, str) or target.count(":") != 1:
        raise ValueError(f"factory must be MODULE:FACTORY (e.g. mypkg.optim:make_lamb), got "
                         f"{target!r}")
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"factory must be MODULE:FACTORY, got {target!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        hint = ""
        if getattr(error, "name", None) == module_name.split(".")[0]:
            hint = (" (it is looked up on sys.path: run from the folder that holds it, or "
                    "add that folder to PYTHONPATH)")
        raise ValueError(f"factory {target!r}: cannot import {module_name!r}: {error}"
                         f"{hint}") from None
    found = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise ValueError(f"factory {target!r}: {module_name} has no {attribute!r}")
        found = getattr(found, part)
    if not callable(found):
        raise TypeError(f"factory {target!r} is not callable: {found!r}")
    return found
