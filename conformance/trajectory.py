"""A trajectory: the lr used at every step, and the parameters and spec state after
every step, as arrays with the step as the first axis. Stored as ``.npz`` (no pickle).

Quantity names (used by the comparison and the reports): ``lr``, ``param:<name>``,
``state:<name>:<state name>``. Parameter names never contain ``':'`` (cases check it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np

import unified_opt as uo
from unified_opt.reference import with_float32_hyperparameters


@dataclass
class Trajectory:
    lrs: np.ndarray                                   # (steps,) float64
    params: dict[str, np.ndarray]                     # name -> (steps, *shape)
    state: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)

    @property
    def steps(self) -> int:
        return int(self.lrs.shape[0])

    def quantities(self) -> dict[str, np.ndarray]:
        out = {"lr": self.lrs}
        for name, values in self.params.items():
            out[f"param:{name}"] = values
        for name, arrays in self.state.items():
            for key, values in arrays.items():
                out[f"state:{name}:{key}"] = values
        return out

    def save(self, path) -> None:
        np.savez(path, **self.quantities())

    @classmethod
    def load(cls, path) -> "Trajectory":
        with np.load(path, allow_pickle=False) as data:
            return cls.from_quantities({key: data[key] for key in data.files})

    @classmethod
    def from_quantities(cls, quantities: Mapping[str, np.ndarray]) -> "Trajectory":
        params: dict = {}
        state: dict = {}
        for key, values in quantities.items():
            kind, _, rest = key.partition(":")
            if kind == "param":
                params[rest] = values
            elif kind == "state":
                name, _, state_name = rest.rpartition(":")
                state.setdefault(name, {})[state_name] = values
            elif key != "lr":
                raise ValueError(f"trajectory: unknown quantity {key!r}")
        return cls(np.asarray(quantities["lr"], dtype=np.float64), params, state)


class Recorder:
    """Collects one step at a time; :meth:`trajectory` stacks what was recorded."""

    def __init__(self) -> None:
        self.lrs: list[float] = []
        self.params: list[dict[str, np.ndarray]] = []
        self.state: list[dict[str, dict[str, np.ndarray]]] = []

    def add(self, lr: float, params: Mapping, state: Mapping) -> None:
        if self.state:
            before = {n: sorted(s) for n, s in self.state[0].items()}
            now = {n: sorted(s) for n, s in state.items()}
            if before != now:
                raise RuntimeError(f"spec state names changed at step {len(self.lrs) + 1}: "
                                   f"{before} then {now}")
        self.lrs.append(float(lr))
        self.params.append({n: np.array(a, copy=True) for n, a in params.items()})
        self.state.append({n: {k: np.array(a, copy=True) for k, a in s.items()}
                           for n, s in state.items()})

    def trajectory(self) -> Trajectory:
        if not self.lrs:
            return Trajectory(np.zeros(0), {}, {})
        params = {n: np.stack([p[n] for p in self.params]) for n in self.params[0]}
        state = {n: {k: np.stack([s[n][k] for s in self.state]) for k in arrays}
                 for n, arrays in self.state[0].items()}
        return Trajectory(np.array(self.lrs, dtype=np.float64), params, state)


def run(step: Callable[[dict], float], read: Callable[[], tuple], case) -> Trajectory:
    """Drive ``case.steps`` steps: ``step(grads) -> lr``; ``read() -> (params, state)``."""
    recorder = Recorder()
    for t in range(case.steps):
        lr = step(case.gradients(t))
        recorder.add(lr, *read())
    return recorder.trajectory()


def reference_trajectory(spec, case, dtype: str = "float64") -> Trajectory:
    """The numpy reference's trajectory for ``spec`` on ``case``'s params and gradients."""
    ref = uo.reference(spec, case.initial_params(), dtype=dtype, groups=case.groups or None)
    return run(ref.step, lambda: (ref.params, ref.state), case)


def floor_trajectories(spec, case, reference=reference_trajectory) -> list[Trajectory]:
    """The float32 references whose error against the oracle makes the noise floor:
    the plain one, and the one with float hyperparameters held in float32 (kernels take
    them as float32 attributes; see :mod:`.compare`)."""
    return [reference(spec, case, "float32"),
            reference(with_float32_hyperparameters(spec), case, "float32")]
