"""Driving a built optimizer with numpy gradients: the part of a conformance worker
that touches a framework. Each framework subclasses :class:`Driver` in
``drivers/<framework>.py`` with the handful of framework calls it needs; a native
optimizer's state is read through the backend
(:meth:`unified_opt.backend.Backend.native_state`)."""

from __future__ import annotations

from typing import Mapping

import numpy as np

from unified_opt.backend import load, record_of
from unified_opt.build import build, skipped_steps


class Driver:
    backend = ""

    def __init__(self, spec, arrays: Mapping[str, np.ndarray], *, path: str = "auto",
                 options: Mapping | None = None, total_steps: int | None = None,
                 groups=None):
        self.spec = spec
        self.names = list(arrays)
        self.total_steps = total_steps
        self.params = {name: self.make_param(name, np.ascontiguousarray(a))
                       for name, a in arrays.items()}
        self.optimizer = build(spec, list(self.params.items()), path=path,
                               options=self.build_options(options), groups=groups)
        self.record = record_of(self.optimizer)
        self.calls = 0

    @property
    def decision(self):
        return self.record.decision

    def build_options(self, options):
        return options

    # -- framework calls (overridden) ---------------------------------------------
    def make_param(self, name: str, array: np.ndarray):
        raise NotImplementedError

    def current_lr(self) -> float:
        """The spec's lr for the next ``optimizer`` step (before any group's factor:
        the lr of a parameter whose group leaves the lr alone)."""
        raise NotImplementedError

    def apply(self, grads: Mapping[str, np.ndarray]) -> None:
        """Set the gradients, take one optimizer step the framework's usual way, clear."""
        raise NotImplementedError

    def to_numpy(self, tensor) -> np.ndarray:
        raise NotImplementedError

    def native_state(self, param, spec) -> dict:
        """A native optimizer's state of ``param`` under ``spec``'s state names."""
        return load(self.backend).native_state(self.record, self.optimizer, param, spec)

    def spec_state(self, name: str) -> dict:
        """The optimizer state of parameter ``name`` under the spec's state names."""
        p = self.params[name]
        if self.decision.path == "native":
            plan = self.record.plans[self.names.index(name)]
            return self.native_state(p, plan.spec)
        return self.optimizer.spec_state(p)

    # -- the loop -----------------------------------------------------------------
    def step(self, grads: Mapping[str, np.ndarray]) -> float:
        lr = float(self.current_lr())
        self.apply(grads)
        self.calls += 1
        return lr

    def last_skipped(self) -> bool:
        """Whether the last step was skipped (``skip_nonfinite``), as the optimizer
        reported it: one flag per step, or the backend does not report."""
        flags = skipped_steps(self.optimizer)
        if len(flags) != self.calls:
            raise RuntimeError(f"the optimizer reported {len(flags)} skip flags after "
                               f"{self.calls} steps")
        return bool(flags[-1])

    def params_numpy(self) -> dict[str, np.ndarray]:
        return {n: self.to_numpy(p).copy() for n, p in self.params.items()}

    def state_numpy(self) -> dict[str, dict[str, np.ndarray]]:
        return {n: {k: self.to_numpy(v).copy() for k, v in self.spec_state(n).items()}
                for n in self.names}
