"""The numpy oracle: any spec, in float64 (the oracle) or float32 (the noise floor)."""

from __future__ import annotations

from typing import Mapping

import numpy as np

from .ops import numpy_ops
from .spec import Spec

DTYPES = ("float64", "float32")


class Reference:
    """Runs ``spec`` on numpy copies of ``params`` (a mapping name -> array).

    ``step(grads)`` takes one gradient per parameter (same names, shapes) and returns
    the lr it used. ``params``, ``state`` (name -> {state name -> array}) and
    ``lrs`` (the lr of every step so far) are public.
    """

    def __init__(self, spec: Spec, params: Mapping[str, "np.ndarray"], dtype: str = "float64"):
        if not isinstance(spec, Spec):
            raise TypeError(f"reference: spec must be a unified_opt spec, got {spec!r}")
        if not isinstance(params, Mapping) or not params:
            raise TypeError(f"reference: params must be a non-empty mapping name -> array, "
                            f"got {type(params).__name__}")
        if dtype not in DTYPES:
            raise ValueError(f"reference: dtype must be one of {DTYPES}, got {dtype!r}")
        self.spec = spec
        self.dtype = np.dtype(dtype)
        self.params = {name: np.array(value, dtype=self.dtype, copy=True)
                       for name, value in params.items()}
        self._specs = {name: spec.for_parameter(name) for name in self.params}
        self.state = {name: self._specs[name].init(p, numpy_ops)
                      for name, p in self.params.items()}
        self.step_count = 0
        self.lrs: list[float] = []

    def step(self, grads: Mapping[str, "np.ndarray"]) -> float:
        if not isinstance(grads, Mapping) or set(grads) != set(self.params):
            got = sorted(grads) if isinstance(grads, Mapping) else type(grads).__name__
            raise ValueError(f"reference.step: grads must have exactly the parameter names "
                             f"{sorted(self.params)}, got {got}")
        arrays = {}
        for name, grad in grads.items():
            grad = np.asarray(grad)
            if grad.shape != self.params[name].shape:
                raise ValueError(f"reference.step: grads[{name!r}] has shape {grad.shape}, "
                                 f"parameter has {self.params[name].shape}")
            arrays[name] = grad.astype(self.dtype)
        lr = self.spec.lr_at(self.step_count)
        self.step_count += 1
        with np.errstate(all="ignore"):  # NaN/Inf propagate as in the frameworks
            for name, grad in arrays.items():
                self.params[name], self.state[name] = self._specs[name].update(
                    self.params[name], grad, self.state[name], lr=lr,
                    step=self.step_count, ops=numpy_ops)
        self.lrs.append(lr)
        return lr


def reference(spec: Spec, params: Mapping[str, "np.ndarray"], dtype: str = "float64",
              workers: int | None = None) -> Reference:
    """The numpy oracle for ``spec`` (see :class:`Reference`)."""
    if workers is not None:
        raise ValueError(f"reference: workers={workers!r} is only for data-parallel "
                         f"algorithms; {spec.name!r} is not one")
    return Reference(spec, params, dtype)


def with_float32_hyperparameters(spec: Spec) -> Spec:
    """``spec`` with every float hyperparameter rounded to float32.

    Most framework kernels take their hyperparameters as float32 attributes (Paddle's
    Adam rounds the betas, so its ``1 - beta2`` is ``1 - float32(0.999)``, 1.3e-5 away
    from ``float32(1 - 0.999)``). Running the float32 reference on this spec as well
    puts that storage rounding inside the float32 noise floor, where it belongs.
    """
    changes = {}
    for key, value in spec.hyperparameters().items():
        if isinstance(value, float):
            changes[key] = float(np.float32(value))
        elif isinstance(value, tuple) and value and all(isinstance(x, float) for x in value):
            changes[key] = tuple(float(np.float32(x)) for x in value)
    return spec.replace(**changes)
