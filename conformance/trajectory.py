"""A trajectory: the lr used at every step, and the parameters and spec state after
every step, as arrays with the step as the first axis. Stored as ``.npz`` (no pickle).

Quantity names (used by the comparison and the reports): ``lr``, ``param:<name>``,
``state:<name>:<state name>``, and ``skipped`` (1.0 where ``skip_nonfinite`` skipped the
step, else 0.0; recorded only for specs with ``skip_nonfinite``). Parameter names never
contain ``':'`` (cases check it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

import unified_opt as uo
from unified_opt.files import atomic_writer
from unified_opt.ops import float32_kernel_ops, numpy_ops, ulp_off_ops
from unified_opt.reference import Reference, with_float32_hyperparameters
from unified_opt.storage import LOW_PRECISION, state_storage


@dataclass
class Trajectory:
    lrs: np.ndarray                                   # (steps,) float64
    params: dict[str, np.ndarray]                     # name -> (steps, *shape)
    state: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    skipped: np.ndarray | None = None                 # (steps,) 1.0 where skipped
    #: quantity name -> the dtype its values are kept in, where it is not the math dtype
    #: (a reference run with ``storage``, a spec's ``state_dtype``): the comparison
    #: judges those in that dtype's ulps (:mod:`.compare`)
    storage: dict[str, str] = field(default_factory=dict)
    #: name -> (steps, *shape): the point to evaluate at after each step, for a spec whose
    #: parameters hold another while training (schedule-free: :func:`add_evaluation_points`)
    evaluation: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def steps(self) -> int:
        return int(self.lrs.shape[0])

    def quantities(self) -> dict[str, np.ndarray]:
        out = {"lr": self.lrs}
        if self.skipped is not None:
            out["skipped"] = self.skipped
        for name, values in self.params.items():
            out[f"param:{name}"] = values
        for name, arrays in self.state.items():
            for key, values in arrays.items():
                out[f"state:{name}:{key}"] = values
        for name, values in self.evaluation.items():
            out[f"eval:{name}"] = values
        return out

    def save(self, path, compress: bool = True) -> None:
        """Write an ``.npz``, compressed (the conformance output keeps these as artifacts)
        unless ``compress=False``: for a file another process reads once, as zlib takes
        about 0.1 s per MB of float32 steps, which hardly compress (random mantissas).

        ``path`` gets ``.npz`` appended when it lacks it (as ``np.savez`` does) and is
        written atomically (:func:`unified_opt.files.atomic_writer`): an error or a kill
        mid-write leaves the file it replaces; an open binary file is written as is."""
        write = np.savez_compressed if compress else np.savez
        if hasattr(path, "write"):
            write(path, **self.quantities())
            return
        target = Path(path)
        if not target.name.endswith(".npz"):
            target = target.with_name(target.name + ".npz")
        with atomic_writer(target, "wb") as handle:
            write(handle, **self.quantities())

    @classmethod
    def load(cls, path) -> "Trajectory":
        with np.load(path, allow_pickle=False) as data:
            return cls.from_quantities({key: data[key] for key in data.files})

    def first(self, steps: int) -> "Trajectory":
        """The first ``steps`` steps."""
        out = Trajectory.from_quantities({name: values[:steps] for name, values
                                          in self.quantities().items()})
        out.storage = dict(self.storage)
        return out

    @classmethod
    def from_quantities(cls, quantities: Mapping[str, np.ndarray]) -> "Trajectory":
        params: dict = {}
        state: dict = {}
        evaluation: dict = {}
        for key, values in quantities.items():
            kind, _, rest = key.partition(":")
            if kind == "param":
                params[rest] = values
            elif kind == "state":
                name, _, state_name = rest.rpartition(":")
                state.setdefault(name, {})[state_name] = values
            elif kind == "eval":
                evaluation[rest] = values
            elif key not in ("lr", "skipped"):
                raise ValueError(f"trajectory: unknown quantity {key!r}")
        skipped = quantities.get("skipped")
        return cls(np.asarray(quantities["lr"], dtype=np.float64), params, state,
                   None if skipped is None else np.asarray(skipped, dtype=np.float64),
                   evaluation=evaluation)


class FirstSteps:
    """``case`` cut to its first ``steps`` steps, for a reference run (a :class:`Case`
    holds at least 50). Each step's numbers depend on the steps before it only, so the
    run is the whole case's first ``steps`` steps, and a comparison that fails on them
    fails on the whole run (:mod:`.compare`: a step's ratio and its floor read the steps
    up to it only): a check that only needs to know that a run fails can look at the
    first steps first."""

    def __init__(self, case, steps: int):
        self._case, self.steps = case, steps

    def __getattr__(self, name):
        return getattr(self._case, name)


class Recorder:
    """Collects one step at a time; :meth:`trajectory` stacks what was recorded."""

    def __init__(self) -> None:
        self.lrs: list[float] = []
        self.params: list[dict[str, np.ndarray]] = []
        self.state: list[dict[str, dict[str, np.ndarray]]] = []
        self.skipped: list[bool] = []

    def add(self, lr: float, params: Mapping, state: Mapping,
            skipped: bool | None = None, copy: bool = True) -> None:
        """One step; ``skipped`` (for ``skip_nonfinite`` specs): whether it was skipped.
        Give it at every step or at none. ``copy=False``: the arrays are fresh copies
        nothing else holds (a driver's ``params_numpy``, ``state_numpy``), kept as
        they are."""
        if (skipped is None) != (not self.skipped) and self.lrs:
            raise RuntimeError(f"skipped given at some steps only (step {len(self.lrs) + 1})")
        if self.state:
            before = {n: sorted(s) for n, s in self.state[0].items()}
            now = {n: sorted(s) for n, s in state.items()}
            if before != now:
                raise RuntimeError(f"spec state names changed at step {len(self.lrs) + 1}: "
                                   f"{before} then {now}")
        self.lrs.append(float(lr))
        if skipped is not None:
            self.skipped.append(bool(skipped))
        self.params.append({n: np.array(a, copy=copy) for n, a in params.items()})
        self.state.append({n: {k: np.array(a, copy=copy) for k, a in s.items()}
                           for n, s in state.items()})

    def trajectory(self) -> Trajectory:
        if not self.lrs:
            return Trajectory(np.zeros(0), {}, {})
        params = {n: np.stack([p[n] for p in self.params]) for n in self.params[0]}
        state = {n: {k: np.stack([s[n][k] for s in self.state]) for k in arrays}
                 for n, arrays in self.state[0].items()}
        skipped = np.array(self.skipped, dtype=np.float64) if self.skipped else None
        return Trajectory(np.array(self.lrs, dtype=np.float64), params, state, skipped)


def add_evaluation_points(trajectory: Trajectory, spec) -> Trajectory:
    """``trajectory`` with the point to evaluate at after each step, for a spec whose
    parameters hold another point while training (``spec.swaps_weights``: schedule-free),
    computed by the spec from each step's parameter and state in their dtype, so that the
    comparison judges both points (the optimizers' ``eval()`` computes the same:
    ``tests/test_schedule_free.py``). Others, and a trajectory without the state (a
    check with ``state=False``), are returned as they are."""
    if not getattr(spec, "swaps_weights", False):
        return trajectory
    for name, values in trajectory.params.items():
        state = trajectory.state.get(name)
        if state:
            trajectory.evaluation[name] = np.asarray(
                spec.for_parameter(name).evaluation_point(values, state, numpy_ops))
    return trajectory


def run(step: Callable[[dict], float], read: Callable[[], tuple], case,
        skipped: Callable[[], bool] | None = None) -> Trajectory:
    """Drive ``case.steps`` steps: ``step(grads) -> lr``; ``read() -> (params, state)``;
    ``skipped() -> bool`` (given for ``skip_nonfinite`` specs): was the last step skipped."""
    recorder = Recorder()
    for t in range(case.steps):
        lr = step(case.gradients(t))
        recorder.add(lr, *read(), skipped=None if skipped is None else skipped())
    return recorder.trajectory()


def reference_trajectory(spec, case, dtype: str = "float64", ops=numpy_ops) -> Trajectory:
    """The numpy reference's trajectory for ``spec`` on ``case``'s params and gradients
    (``ops``: the numpy binding, :data:`unified_opt.ops.float32_kernel_ops` for one floor).

    ``spec`` may also be a planted deviation (:class:`.deviations.Deviation`: a wrong way
    of running a spec that no spec field describes), which makes its own trajectory."""
    if not isinstance(spec, uo.Spec):
        return spec.trajectory(case, dtype)
    if getattr(case, "workers", 1) > 1:
        return _workers_trajectory(spec, case, dtype, ops)
    storage = getattr(case, "storage", None)
    ref = Reference(spec, case.initial_params(), dtype, groups=case.groups or None, ops=ops,
                    storage=storage)
    out = run(ref.step, lambda: (ref.params, ref.state), case,
              (lambda: ref.skipped[-1]) if spec.skip_nonfinite else None)
    out.storage = stored_quantities(out, spec, storage)
    return add_evaluation_points(out, spec)


def stored_quantities(trajectory: Trajectory, spec, storage: str | None) -> dict[str, str]:
    """The quantities of ``trajectory`` kept in a low-precision dtype: the parameters in
    ``storage``, the state in ``spec.state_dtype`` or else ``storage``
    (:mod:`unified_opt.storage`)."""
    kept_state = state_storage(spec, storage or "float32")
    out = {}
    for name in trajectory.quantities():
        if name.startswith("param:") and storage is not None:
            out[name] = storage
        elif name.startswith("state:") and kept_state in LOW_PRECISION:
            out[name] = kept_state
    return out


def _workers_trajectory(spec, case, dtype: str, ops) -> Trajectory:
    """A distributed case's oracle as its rank sees it: the reference simulating
    ``case.workers`` workers (worker r on rank r's gradient stream); the parameters and
    lr are every rank's, the state the rank's own."""
    ref = Reference(spec, case.initial_params(), dtype, workers=case.workers, ops=ops)
    ranks = [case.at_rank(r) for r in range(case.workers)]
    recorder = Recorder()
    for t in range(case.steps):
        lr = ref.step([rank.gradients(t) for rank in ranks])
        recorder.add(lr, ref.params, ref.states[case.rank])
    out = recorder.trajectory()
    out.storage = stored_quantities(out, spec, None)
    return out


def float32_held(spec):
    """``spec`` with its float hyperparameters held in float32 (a deviation: its spec)."""
    if not isinstance(spec, uo.Spec):
        return spec.float32_held()
    return with_float32_hyperparameters(spec)


def floor_trajectories(spec, case, reference=reference_trajectory) -> list[Trajectory]:
    """The float32 references whose error against the oracle makes the noise floor:
    the plain one, the one with float hyperparameters held in float32 (kernels take them
    as float32 attributes), and that one computing as a float32 kernel may
    (:class:`unified_opt.ops.Float32KernelOps`: sums element after element, beta^t as a
    running float32 product); for a spec with a ``low_precision_update``, also that one
    whose low-precision results are a bfloat16 ulp nearer zero
    (:class:`unified_opt.ops.UlpOffOps`); see :mod:`.compare`."""
    held = float32_held(spec)
    out = [reference(spec, case, "float32"), reference(held, case, "float32"),
           reference(held, case, "float32", float32_kernel_ops)]
    if getattr(spec, "low_precision_update", None) is not None:
        out.append(reference(held, case, "float32", ulp_off_ops))
    return out
