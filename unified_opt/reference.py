"""The numpy oracle: any spec, in float64 (the oracle) or float32 (the noise floor)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from .exchange import Exchange, SimulatedExchange
from .groups import Group, plan_parameters
from .ops import NumpyOps, Ops, numpy_ops
from .pre_step import has_pre_step, prepare_gradients
from .spec import Spec, check_momentum_cycling
from .storage import LOW_PRECISION, math_dtype, round_to, state_storage

DTYPES = ("float64", "float32")


@contextmanager
def weak_python_scalars() -> Iterator[None]:
    """numpy's NEP 50 promotion while the reference computes: a Python float is a weak
    scalar, so a 0-d float32 array (a norm, a trust ratio, a scalar state such as NAdam's
    ``mu_product``, a 0-d parameter) times a Python float stays float32, as in torch,
    Paddle, MindSpore and numpy 2. numpy 1.x's legacy rule makes it a float64 (a float32
    reference would then compute those values in float64, and its numbers would depend
    on the numpy version). On numpy 1.24 to 1.26 the rule is numpy's process-wide
    setting, switched for the reference's calls and restored after them."""
    get = getattr(np, "_get_promotion_state", None)
    if get is None or get() == "weak":  # numpy 2: NEP 50 is the default (from 2.2 the only) rule
        yield
        return
    before = get()
    np._set_promotion_state("weak")
    try:
        yield
    finally:
        np._set_promotion_state(before)


class Reference:
    """Runs ``spec`` on numpy copies of ``params`` (a mapping name -> array).

    ``step(grads)`` takes one gradient per parameter (same names, shapes) and returns
    the lr it used. ``params``, ``state`` (name -> {state name -> array}) and
    ``lrs`` (the lr of every step so far) are public.

    A gradient may be None: that parameter has none at this step (torch's ``p.grad is
    None``). It is left alone, state included, and its own count of updates
    (``param_steps``: the update's 1-based ``step``, which bias corrections count) does
    not advance; the step still counts for the optimizer (``step_count``: the lr
    schedule and ``spec.at_step`` follow the optimizer's steps, as on every backend).

    In float32 every value stays float32, 0-d ones included (a norm, a trust ratio, a
    scalar state, a 0-d parameter): the reference computes under NEP 50's promotion,
    whatever numpy's version (:func:`weak_python_scalars`). A Python float is rounded to
    float32 where it meets a float32 array, so a decoupled decay written in torch's form,
    ``param * (1 - lr*wd)`` (:func:`unified_opt.algorithms._decay.decayed`, AdamW's
    ``decay_form="before_update"``), multiplies by ``float32(1 - lr*wd)`` as torch's
    ``mul_`` does: that factor's rounding, the same at every step, is in the float32
    noise floor (``1 - 1e-4`` is 1.7e-8 relative off in float32, 24.5 floors at step 63
    of torch's Adafactor when the reference computed ``param - param*(lr*wd)``).

    ``storage`` (``"bfloat16"``, ``"float16"``) is the dtype the parameters are kept in,
    as a framework's bfloat16 model keeps them: ``dtype`` is then the math only, and the
    parameters, their gradients (as they arrive, and after the pre-step) and the state
    (in ``spec.state_dtype``, else ``storage``) are rounded where
    :mod:`unified_opt.storage` says. Without ``storage`` only a spec's ``state_dtype``
    rounds (the state).

    A spec's "machine epsilon" (``ops.machine_eps``: Adafactor's ``eps[0]=None``) is that
    of the dtype the run being modelled computes each parameter's update in, not the
    reference's ``dtype``: the math dtype (:func:`unified_opt.storage.math_dtype`) of
    ``storage``, else of the dtype ``params[name]`` is given in (float32 for a float32,
    bfloat16 or float16 array, float64 for a float64 one; ``dtype`` for an integer one).
    So the float64 oracle of a float32 run uses float32's 1.19e-7, as torch's
    ``finfo(param.dtype).eps`` does on float32 parameters. Against float64's 2.2e-16
    every float32 run differs by float32's eps, the noise floor grows by as much, and an
    eps added to :math:`g^2` passes for one used as a clamp.

    ``groups`` (a list of :class:`unified_opt.Group`) set per-parameter lr factors and
    weight decay by name, as in ``uo.build``; ``plans`` holds what each parameter got.
    ``skipped`` has one bool per ``step`` call: True where ``skip_nonfinite`` skipped it
    (then nothing changed, and the schedule position did not advance either).

    With ``workers=N`` (data-parallel specs only, e.g. ``dgc_momentum``) it simulates N
    workers: ``step([grads_worker_0, ..., grads_worker_N-1])``, each worker keeps its
    own state (``states[r]``; ``state`` is worker 0's), and the spec's sums over
    workers go through ``exchange`` (:class:`unified_opt.exchange.SimulatedExchange`
    by default; any :class:`~unified_opt.exchange.Exchange` over N workers).

    Args:
        spec: the spec to run.
        params: parameter name -> numpy array (copied).
        dtype: the dtype the math runs in, ``"float64"`` or ``"float32"``.
        workers: the number of simulated workers of a data-parallel spec, or None.
        exchange: the exchange over the workers, or None (simulated).
        groups: ``uo.Group`` name rules, or None.
        ops: the tensor operations the update runs on (numpy's).
        storage: the dtype the parameters are kept in, or None.
    """

    def __init__(self, spec: Spec, params: Mapping[str, "np.ndarray"], dtype: str = "float64",
                 workers: int | None = None, exchange: Exchange | None = None,
                 groups: Sequence[Group] | None = None, ops: Ops = numpy_ops,
                 storage: str | None = None) -> None:
        if not isinstance(spec, Spec):
            raise TypeError(f"reference: spec must be a unified_opt spec, got {spec!r}")
        if not isinstance(params, Mapping) or not params:
            raise TypeError(f"reference: params must be a non-empty mapping name -> array, "
                            f"got {type(params).__name__}")
        if dtype not in DTYPES:
            raise ValueError(f"reference: dtype must be one of {DTYPES}, got {dtype!r}")
        check_momentum_cycling(spec, "reference")
        self.workers = _check_workers(spec, workers, exchange)
        if self.workers is not None and (has_pre_step(spec) or groups):
            raise ValueError("reference: workers= does not combine with groups or the "
                             "gradient pre-step (grad_clip, loss_scale, ...) yet")
        self.exchange = exchange if exchange is not None else (
            SimulatedExchange(self.workers) if self.workers is not None else None)
        if not isinstance(ops, NumpyOps):
            raise TypeError(f"reference: ops must be a numpy binding (unified_opt.ops."
                            f"NumpyOps), got {ops!r}")
        if storage is not None and storage not in LOW_PRECISION:
            raise ValueError(f"reference: storage must be None or one of {LOW_PRECISION}, "
                             f"got {storage!r}")
        self.ops = ops
        self.spec = spec
        self.dtype = np.dtype(dtype)
        self.storage = storage
        given = {name: _real(value, f"reference: params[{name!r}]")
                 for name, value in params.items()}
        self.params = {name: self._kept(np.array(value, dtype=self.dtype, copy=True))
                       for name, value in given.items()}
        #: each parameter's machine epsilon where it is not the one ``ops`` reads from an
        #: array of ``dtype`` (class doc), else None
        self._machine_eps = {name: self._machine_eps_of(value) for name, value in given.items()}
        self.plans = dict(zip(self.params, plan_parameters(spec, list(self.params), groups,
                                                            "reference")))
        self._specs = {name: plan.spec for name, plan in self.plans.items()}
        # each parameter's state storage dtype, None where the state stays in the compute
        # dtype (numpy's dtype.name is slow enough to show in a step)
        self._state_storage = {}
        for name, parameter_spec in self._specs.items():
            kept = state_storage(parameter_spec, storage or self.dtype.name)
            self._state_storage[name] = None if kept == self.dtype.name else kept
        with weak_python_scalars():
            self.states = [{name: self._kept_state(name, self._specs[name].init(
                p, self._ops_of(name)))
                            for name, p in self.params.items()}
                           for _ in range(self.workers or 1)]
        self.step_count = 0
        #: each parameter's count of updates (those of steps where it had a gradient)
        self.param_steps = {name: 0 for name in self.params}
        self.lrs: list[float] = []
        self.skipped: list[bool] = []

    @property
    def state(self) -> dict:
        """name -> {state name -> array} (worker 0's with ``workers``)."""
        return self.states[0]

    def step(self, grads: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> float:
        with weak_python_scalars():
            return self._step(grads)

    def _step(self, grads) -> float:
        if self.workers is None:
            per_worker = [self._checked(grads, "grads")]
        else:
            if not isinstance(grads, (list, tuple)) or len(grads) != self.workers:
                raise ValueError(f"reference.step: with workers={self.workers}, grads must be "
                                 f"a list of {self.workers} mappings (one per worker), got "
                                 f"{type(grads).__name__}"
                                 + (f" of length {len(grads)}" if isinstance(grads, (list, tuple))
                                    else ""))
            per_worker = [self._checked(g, f"grads[{r}]", missing=False)
                          for r, g in enumerate(grads)]
        lr = self.spec.lr_at(self.step_count)
        with np.errstate(all="ignore"):  # NaN/Inf propagate as in the frameworks
            if self.workers is None:
                names = list(self.params)
                prepared = prepare_gradients(self.spec, [self.plans[n] for n in names],
                                             [per_worker[0][n] for n in names], self.ops)
                self.lrs.append(lr)
                self.skipped.append(prepared is None)
                if prepared is None:
                    return lr
                per_worker = [dict(zip(names, (None if g is None else self._kept(g)
                                               for g in prepared)))]
            self.step_count += 1
            for name in self.params:
                if per_worker[0][name] is None:
                    continue          # no gradient: nothing changes, its count neither
                spec = self._specs[name].at_step(self.step_count - 1)
                self.param_steps[name] += 1
                if self.workers is None:
                    value, state = spec.update(
                        self.params[name], per_worker[0][name], self.states[0][name],
                        lr=self.plans[name].lr(lr), step=self.param_steps[name],
                        ops=self._ops_of(name))
                    self.params[name] = self._kept(value)
                    self.states[0][name] = self._kept_state(name, state)
                    continue
                value, states = spec.exchange_step(
                    self.params[name], [g[name] for g in per_worker],
                    [s[name] for s in self.states], lr=lr, step=self.param_steps[name],
                    ops=self._ops_of(name), exchange=self.exchange)
                self.params[name] = self._kept(value)
                for worker_states, new in zip(self.states, states):
                    worker_states[name] = self._kept_state(name, new)
        if self.workers is not None:
            self.lrs.append(lr)
            self.skipped.append(False)
        return lr

    def _machine_eps_of(self, given: np.ndarray) -> float | None:
        """The machine epsilon of the dtype the modelled run computes a parameter given
        as ``given`` in, or None where it is ``dtype``'s."""
        if self.storage is not None:
            run = np.dtype(math_dtype(self.storage))
        elif given.dtype.kind != "f":
            run = self.dtype
        else:
            run = np.dtype(math_dtype(given.dtype.name))
        return None if run == self.dtype else float(np.finfo(run).eps)

    def _ops_of(self, name: str):
        """The ops a parameter's update computes with: ``self.ops`` (read at each step: a
        planted deviation may replace it), with the parameter's machine epsilon."""
        eps = self._machine_eps[name]
        return self.ops if eps is None else _WithMachineEps(self.ops, eps)

    def _kept(self, values):
        """A parameter or a gradient as the parameters' storage keeps it."""
        return values if self.storage is None else \
            round_to(values, self.storage).astype(self.dtype, copy=False)

    def _kept_state(self, name: str, state: dict) -> dict:
        """A parameter's state arrays rounded to their storage dtype."""
        storage = self._state_storage[name]
        if storage is None:
            return state
        return {key: round_to(np.asarray(array, dtype=self.dtype), storage)
                for key, array in state.items()}

    def _checked(self, grads, what: str, missing: bool = True) -> dict:
        if not isinstance(grads, Mapping) or set(grads) != set(self.params):
            got = sorted(grads) if isinstance(grads, Mapping) else type(grads).__name__
            raise ValueError(f"reference.step: {what} must have exactly the parameter names "
                             f"{sorted(self.params)}, got {got}")
        arrays: dict[str, np.ndarray | None] = {}
        for name, grad in grads.items():
            if grad is None:
                if not missing:
                    # a worker's missing gradient would leave the exchange's sum over
                    # the workers without its part: no framework's data-parallel step
                    # has one
                    raise ValueError(f"reference.step: {what}[{name!r}] is None; with "
                                     "workers every worker has every gradient")
                arrays[name] = None
                continue
            grad = _real(grad, f"reference.step: {what}[{name!r}]")
            if grad.shape != self.params[name].shape:
                raise ValueError(f"reference.step: {what}[{name!r}] has shape {grad.shape}, "
                                 f"parameter has {self.params[name].shape}")
            arrays[name] = self._kept(grad.astype(self.dtype))
        return arrays


class _WithMachineEps:
    """``ops`` whose ``machine_eps`` is ``eps`` whatever array it is given (the reference
    computes every array in its own dtype); every other call is ``ops``'s."""

    def __init__(self, ops, eps: float) -> None:
        self._ops, self._eps = ops, eps

    def machine_eps(self, x) -> float:
        return self._eps

    def __getattr__(self, name):
        return getattr(self._ops, name)


def _check_workers(spec: Spec, workers, exchange) -> int | None:
    if workers is None:
        if exchange is not None:
            raise ValueError("reference: exchange= needs workers=N")
        return None
    if not getattr(spec, "data_parallel", False):
        raise ValueError(f"reference: workers={workers!r} is only for data-parallel "
                         f"algorithms; {spec.name!r} is not one")
    if not isinstance(workers, int) or isinstance(workers, bool):
        raise TypeError(f"reference: workers must be an int, got {workers!r} of type "
                        f"{type(workers).__name__}")
    if workers < 1:
        raise ValueError(f"reference: workers must be >= 1, got {workers!r}")
    if exchange is not None:
        if not isinstance(exchange, Exchange):
            raise TypeError(f"reference: exchange must be a unified_opt.exchange.Exchange, "
                            f"got {type(exchange).__name__}")
        if exchange.world_size != workers:
            raise ValueError(f"reference: exchange.world_size={exchange.world_size} but "
                             f"workers={workers}")
    return workers


def _real(value, what: str) -> np.ndarray:
    """``value`` as a numpy array of real numbers (float or int), or a TypeError naming
    ``what``: a bool, complex, string or object array would be cast without a word (a
    complex one losing its imaginary part)."""
    array = np.asarray(value)
    if array.dtype.kind not in "fiu":
        raise TypeError(f"{what} must be an array of real numbers, got dtype {array.dtype} "
                        f"({type(value).__name__})")
    return array


def reference(spec: Spec, params: Mapping[str, "np.ndarray"], dtype: str = "float64",
              workers: int | None = None, exchange: Exchange | None = None,
              groups: Sequence[Group] | None = None, storage: str | None = None
              ) -> Reference:
    """The numpy oracle for ``spec`` (see :class:`Reference`).

    Args:
        spec: the spec to run.
        params: parameter name -> numpy array (copied; the arrays are not changed).
        dtype: the dtype the math runs in: ``"float64"`` (the oracle) or ``"float32"``.
        workers: for a data-parallel spec (``uo.DGCMomentum``): the number of simulated
            workers; ``step`` then takes one gradient mapping per worker.
        exchange: the exchange summing the workers' tensors (default: simulated).
        groups: ``uo.Group`` name rules, as for ``uo.build``.
        storage: the dtype the parameters are kept in (``"bfloat16"``, ``"float16"``),
            or None.

    Returns:
        Reference: stepped with ``ref.step(grads)``; ``ref.params`` and ``ref.state``.

    Raises:
        TypeError: a spec, params or argument of the wrong type.
        ValueError: a value the spec or the oracle cannot use (an unknown dtype, a
            name rule matching no parameter, workers for a spec that is not
            data-parallel).

    Example:
        >>> import numpy as np
        >>> import unified_opt as uo
        >>> ref = uo.reference(uo.SGD(lr=0.1), {"w": np.array([1.0, 2.0])})
        >>> ref.step({"w": np.array([1.0, -1.0])})
        0.1
        >>> ref.params["w"]
        array([0.9, 2.1])
    """
    return Reference(spec, params, dtype, workers, exchange, groups, storage=storage)


def with_float32_hyperparameters(spec: Spec) -> Spec:
    """``spec`` with every float hyperparameter rounded to float32.

    Most framework kernels take their hyperparameters as float32 attributes (Paddle's
    Adam rounds the betas, so its ``1 - beta2`` is ``1 - float32(0.999)``, 1.3e-5 away
    from ``float32(1 - 0.999)``). Running the float32 reference on this spec as well
    puts that storage rounding inside the float32 noise floor, where it belongs.
    """
    changes: dict[str, Any] = {}
    for key, value in spec.hyperparameters().items():
        if isinstance(value, float):
            changes[key] = float(np.float32(value))
        elif isinstance(value, tuple) and any(isinstance(x, float) for x in value):
            # floats only: a None inside (Adafactor's eps[0], CAME's betas[1]) stays None
            changes[key] = tuple(float(np.float32(x)) if isinstance(x, float) else x
                                 for x in value)
    return spec.replace(**changes)
