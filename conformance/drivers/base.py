"""Driving an optimizer with numpy gradients: the part of a conformance worker that
touches a framework. Each framework subclasses :class:`Driver` in
``drivers/<framework>.py`` with the handful of framework calls it needs; a native
optimizer's state is read through the backend
(:meth:`unified_opt.backend.Backend.native_state`).

The optimizer is ``uo.build``'s, or, with ``native`` (a
:class:`unified_opt.conformance.cases.native.Native`), the framework's own optimizer
built by hand from its qualified class name and keyword arguments, with its lr
scheduler stepped the framework's usual way. Such a run records the lr and the
parameters; its decision has the path "hand". With ``factory`` (``unified-opt check``:
a user's function of the parameter list that returns an optimizer, or an
``(optimizer, lr_scheduler)`` pair), the optimizer is the factory's; its decision has
the path "check", and its state is read where it can be mapped (:meth:`spec_state`).

With ``device`` (a :class:`..device.Placement`), the parameters and the gradients are
on that device, and so is whatever the optimizer makes from them; trajectories are
read back into host memory (:meth:`Driver.to_numpy`)."""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Mapping

import numpy as np

from unified_opt.backend import BuildRecord, Decision, load, record_of
from unified_opt.build import build, skipped_steps
from unified_opt.native import import_native

from ..cases.native import Native, decode
from ..device import Placement


class Driver:
    backend = ""
    #: the low-precision dtypes its parameters may be made in (``Case.storage``)
    storage_dtypes: tuple[str, ...] = ()

    def __init__(self, spec, arrays: Mapping[str, np.ndarray], *, path: str = "auto",
                 options: Mapping | None = None, total_steps: int | None = None,
                 groups=None, native: Native | None = None, factory=None,
                 device: Placement | None = None, prefer: str = "speed",
                 storage: str | None = None, backward: str | None = None,
                 param_group_writes: tuple[str, ...] = ()):
        # prefer: uo.build's (a test of a native row asks for "native")
        #: the schedules written into every param group before each step
        #: (``Case.param_group_writes``); the optimizer is built with their step-0 values
        self.written = {key: getattr(spec, key) for key in param_group_writes}
        if self.written:
            spec = spec.replace(**{key: schedule(0) for key, schedule in self.written.items()})
        self.spec = spec
        #: the dtype the parameters are made in (None: the arrays'; Case.storage)
        self.storage = storage
        #: how the gradients arrive (``Case.backward``: None, assigned)
        self.backward = backward
        if storage is not None and storage not in self.storage_dtypes:
            raise ValueError(f"the {self.backend} driver makes no {storage} parameters "
                             f"(storage: {self.storage_dtypes or 'none'})")
        # where the parameters and gradients go (None: the framework's CPU); a
        # process-wide default (Paddle, MindSpore) was set by device.place
        self.device = device
        self.names = list(arrays)
        self.total_steps = total_steps
        self.params = {name: self.make_param(name, np.ascontiguousarray(a))
                       for name, a in arrays.items()}
        self.native = native
        self.before_step: list = []
        self.factory = factory
        if factory is not None:
            made = factory(list(self.params.values()))
            self.optimizer, self.scheduler = made if isinstance(made, tuple) else (made, None)
            self._decision = checked_decision(self.backend, spec, self.optimizer, factory)
            self.record = BuildRecord(spec, self._decision, self.names,
                                      list(self.params.values()), self.scheduler)
        elif native is None:
            self.optimizer = build(spec, list(self.params.items()), path=path,
                                   options=self.build_options(options), groups=groups,
                                   prefer=prefer)
            self.record = record_of(self.optimizer)
            self.scheduler = self.record.lr_scheduler
            self._decision = self.record.decision
        else:
            if native.framework != self.backend:
                raise ValueError(f"{native.optimizer} is a {native.framework} optimizer; this "
                                 f"is the {self.backend} driver")
            self.optimizer, self.scheduler = self.build_by_hand(native)
            self.before_step = [(import_native(f), self.decode(kw))
                                for f, kw in native.before_step]
            self._decision = hand_decision(self.backend, spec, native)
            # what native_state reads (the class's descriptor); no plans: not uo.build's
            self.record = BuildRecord(spec, self._decision, self.names,
                                      list(self.params.values()), self.scheduler)
        if spec.swaps_weights and callable(getattr(self.optimizer, "train", None)):
            # a schedule-free optimizer trains after train() (schedulefree's start in eval
            # mode and refuse a step before it); uo.build's start in train mode
            self.optimizer.train()
        self.calls = 0

    @property
    def decision(self):
        return self._decision

    def build_options(self, options):
        return options

    # -- a native optimizer built by hand -------------------------------------------
    def decode(self, value: Any, optimizer: Any = None) -> Any:
        """``value`` with the markers of :mod:`..cases.native` resolved."""
        return decode(value, self.params, self.framework_name, optimizer)

    def hand_params(self, native: Native):
        """The optimizer's parameter argument: every parameter, or ``native.params``."""
        if native.params is None:
            return list(self.params.values())
        return self.decode(native.params)

    def framework_name(self, param) -> str | None:
        """The framework's own name of a parameter (None where it has none)."""
        return None

    def build_by_hand(self, native: Native):
        """``(optimizer, lr scheduler or None)``, as a user of the framework builds them."""
        raise NotImplementedError

    def hand_lr(self) -> float:
        """The lr the hand-built optimizer runs its next step with (``native.lr_param``'s)."""
        raise NotImplementedError

    def lr_param(self):
        chosen = self.native.lr_param if self.native is not None else None
        return self.params[chosen or self.names[0]]

    def run_before_step(self) -> None:
        for function, kwargs in self.before_step:
            function(list(self.params.values()), **kwargs)

    def clear_gradients(self, method: str, keyword: str, value: bool) -> None:
        """The optimizer's ``method`` (torch's ``zero_grad``, Paddle's ``clear_grad``)
        with ``keyword=value`` where it takes that keyword, else as a training loop calls
        it, with no argument (a user's optimizer whose ``zero_grad()`` has none)."""
        clear = getattr(self.optimizer, method)
        takes = self.__dict__.setdefault("_clear_takes", {})
        if method not in takes:       # read once: a signature costs more than the call
            try:
                parameters = inspect.signature(clear).parameters.values()
            except (TypeError, ValueError):    # a builtin without a signature: try it
                parameters = [inspect.Parameter(keyword, inspect.Parameter.KEYWORD_ONLY)]
            takes[method] = any(q.name == keyword or q.kind is q.VAR_KEYWORD
                                for q in parameters)
        if takes[method]:
            clear(**{keyword: value})
        else:
            clear()

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

    def native_state(self, param, spec, native_class=None) -> dict:
        """A native optimizer's state of ``param`` under ``spec``'s state names, read
        through its class's descriptor (``native_class``: another descriptor's, for a
        class built by hand that keeps the state of the row it stands for)."""
        record = self.record
        if native_class is not None:
            record = dataclasses.replace(record, decision=dataclasses.replace(
                record.decision, native_class=native_class))
        return load(self.backend).native_state(record, self.optimizer, param, spec)

    def spec_state(self, name: str) -> dict:
        """The optimizer state of parameter ``name`` under the spec's state names (none
        for a native optimizer built by hand)."""
        p = self.params[name]
        if self.native is not None:
            return {}
        if self.factory is not None:
            return self.checked_state(p, name)
        if self.decision.path == "native":
            plan = self.record.plans[self.names.index(name)]
            return self.native_state(p, plan.spec)
        return self.optimizer.spec_state(p)

    def checked_state(self, p, name: str) -> dict:
        """The state of a factory's optimizer under the spec's state names: through the
        class's descriptor where it is a native class; else the arrays the optimizer
        keeps by parameter (:meth:`optimizer_state`) mapped onto the spec's names
        (:func:`map_state`: the same names, a factor stored without its keepdims axis
        reshaped, extra keys ignored), fixed at the first step: every name or none. What
        was mapped, ignored or could not be mapped is :attr:`state_maps`."""
        if self.decision.native_class is not None:
            return self.native_state(p, self.spec)
        held = self.optimizer_state(p)
        if name not in self.state_maps:
            wanted = spec_state_shapes(self.spec, self.to_numpy(p).shape)
            shapes = {k: tuple(self.to_numpy(v).shape) for k, v in held.items()}
            mapping = map_state(wanted, shapes, self.optimizer_state_keys(p))
            negated = tuple(k for k in held_negated(self.optimizer) if k in mapping.names)
            self.state_maps[name] = dataclasses.replace(mapping, negated=negated)
        mapping = self.state_maps[name]
        if mapping.unmapped:
            return {}
        out = {k: held[k] if k not in mapping.reshaped else held[k].reshape(
            mapping.reshaped[k][1]) for k in mapping.names}
        return {k: -v if k in mapping.negated else v for k, v in out.items()}

    @property
    def state_maps(self) -> dict:
        """Parameter name -> its :class:`StateMap` (a factory's optimizer without a
        descriptor, once its state was first read)."""
        if not hasattr(self, "_state_maps"):
            self._state_maps = {}
        return self._state_maps

    def optimizer_state(self, param) -> Mapping:
        """A user optimizer's state tensors of ``param`` by key (torch's
        ``optimizer.state``); empty where the framework keeps no such mapping."""
        return {}

    def optimizer_state_keys(self, param) -> list[str]:
        """Every key of a user optimizer's state of ``param``, tensors or not (a step
        count kept as an int)."""
        return list(self.optimizer_state(param))

    # -- the loop -----------------------------------------------------------------
    def write_param_groups(self) -> float:
        """Write this step's values of :attr:`written` into every param group (each
        group's lr factor applied, read from its first parameter's plan); the lr
        written for a group without a factor."""
        t = self.calls
        plan_of = {id(p): plan for p, plan in zip(self.record.params, self.record.plans)}
        values = {key: float(schedule(t)) for key, schedule in self.written.items()}
        for group in self.optimizer.param_groups:
            plan = plan_of[id(group["params"][0])]
            for key, value in values.items():
                group[key] = plan.lr(value) if key == "lr" else value
        return values.get("lr", float(self.spec.lr))

    def step(self, grads: Mapping[str, np.ndarray]) -> float:
        if self.written:
            lr = self.write_param_groups()
            self.apply(grads)
            self.calls += 1
            return lr
        if self.factory is not None:
            lr = self.checked_lr()
        elif self.native is None:
            lr = float(self.current_lr())
        else:
            lr = float(self.native.fixed_lr if self.native.fixed_lr is not None
                       else self.hand_lr())
        self.apply(grads)
        self.calls += 1
        return lr

    def checked_lr(self) -> float:
        """A factory optimizer's lr for its next step, NaN where it cannot be read (then
        the lr is not compared: its effect shows in the parameters)."""
        try:
            return float(self.hand_lr())
        except Exception:   # a user's optimizer need not expose its lr the native way
            return float("nan")

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
        """Every parameter's state under the spec's names (empty dicts for a native
        optimizer built by hand: such a run is compared on the lr and the parameters)."""
        return {n: {k: self.to_numpy(v).copy() for k, v in self.spec_state(n).items()}
                for n in self.names}


def spec_state_shapes(spec, shape) -> dict[str, tuple[int, ...]]:
    """The spec's state names of a parameter of ``shape``, with their shapes (factored
    moments have other shapes than the parameter)."""
    from unified_opt.ops import numpy_ops

    return {k: np.shape(a) for k, a in spec.init(np.zeros(shape), numpy_ops).items()}


@dataclasses.dataclass(frozen=True)
class StateMap:
    """How one parameter's state, as a user's optimizer keeps it, is read under the
    spec's state names: ``names`` (the spec's, all read when ``unmapped`` is empty);
    ``reshaped``: spec name -> (the held shape, the spec's shape) where the held array
    lacks the spec's keepdims axes (a row or column factor kept 1-D); ``ignored``: held
    keys the spec has no state of (a step count, CAME's ``RMS``); ``unmapped``: why the
    state cannot be read (then none of it is compared)."""

    names: tuple[str, ...] = ()
    reshaped: dict = dataclasses.field(default_factory=dict)
    ignored: tuple[str, ...] = ()
    unmapped: str = ""
    #: spec state names the optimizer keeps negated (:data:`HELD_NEGATED`), read so
    negated: tuple[str, ...] = ()


#: third-party classes (public qualified name) that keep a spec state negated: the
#: same update, another sign convention of its state (pytorch-optimizer's Adan keeps
#: ``previous_grad`` as -g, its per-parameter loop negating ``p.grad`` in place)
HELD_NEGATED = {"pytorch_optimizer.Adan": ("previous_grad",)}


def held_negated(optimizer) -> tuple[str, ...]:
    """The spec state names ``optimizer``'s class (or its nearest listed base) keeps
    negated (:data:`HELD_NEGATED`)."""
    for _, candidate in _class_names(type(optimizer)):
        if candidate in HELD_NEGATED:
            return HELD_NEGATED[candidate]
    return ()


def map_state(wanted: Mapping[str, tuple], held: Mapping[str, tuple],
              keys: list[str]) -> StateMap:
    """The :class:`StateMap` of a parameter whose spec state is ``wanted`` (name ->
    shape) and whose optimizer holds arrays ``held`` (key -> shape) among its state keys
    ``keys``. A spec name maps to the held array of that name with the spec's shape, or
    with the spec's shape less some of its size-1 axes (the same elements in the same
    order: a factor stored without keepdims); any other difference (a missing name,
    another shape) leaves the whole state unmapped."""
    ignored = tuple(sorted((str(k) for k in keys if k not in wanted), key=str))
    reshaped, problems = {}, []
    for name, shape in wanted.items():
        shape = tuple(shape)
        if name not in held:
            problems.append(f"no {name}")
        elif tuple(held[name]) == shape:
            continue
        elif _without_keepdims(shape, tuple(held[name])):
            reshaped[name] = (tuple(held[name]), shape)
        else:
            problems.append(f"{name} of shape {tuple(held[name])}, the spec's is {shape}")
    unmapped = ""
    if problems:
        holds = ", ".join(str(k) for k in keys) if keys else "nothing"
        unmapped = f"{'; '.join(problems)} (the optimizer's state holds {holds})"
    return StateMap(tuple(wanted), reshaped, ignored, unmapped)


def _without_keepdims(shape: tuple, held: tuple) -> bool:
    """Is ``held`` ``shape`` with some of its size-1 axes left out (a keepdims factor
    kept without them)?"""
    if len(held) >= len(shape):
        return False
    rest = iter(held)
    pending = next(rest, None)
    for size in shape:
        if pending is not None and size == pending:
            pending = next(rest, None)
        elif size != 1:
            return False
    return pending is None


def checked_decision(backend: str, spec, optimizer, factory) -> Decision:
    """The decision record of a factory's optimizer (path "check"): its class, and the
    descriptor of the class or of its nearest base that is a native class (its state is
    then mapped, and the class's declared departures hold: a subclass that adds logging
    steps as its base does)."""
    cls = type(optimizer)
    name = f"{cls.__module__}.{cls.__qualname__}"
    descriptor, base, klass = None, None, cls
    adapter = load(backend)
    for klass, candidate in _class_names(cls):
        try:
            descriptor, base = adapter.native_class(candidate), candidate
            break
        except KeyError:
            continue
    maker = getattr(factory, "__qualname__", repr(factory))
    made = f"{name} made by {maker}"
    if descriptor is not None and klass is not cls:
        made += f" (a subclass of {base}: read through its descriptor)"
    return Decision(backend, spec.name, "check", name, made, native_class=descriptor)


def _class_names(cls):
    """``(class, qualified name)`` of ``cls`` and each of its bases, nearest first (not
    ``object``), each class under its real module path and then its public ones."""
    for klass in cls.__mro__[:-1]:
        for candidate in (f"{klass.__module__}.{klass.__qualname__}", *_public_names(klass)):
            yield klass, candidate


def _public_names(cls) -> list[str]:
    """Qualified names a native class is registered under: ``torch.optim.adamw.AdamW``
    is ``torch.optim.AdamW``."""
    parts = cls.__module__.split(".")
    return [".".join(parts[:i] + [cls.__qualname__]) for i in range(1, len(parts))]


def hand_decision(backend: str, spec, native: Native) -> Decision:
    """The decision record of a run with a native optimizer built by hand: path "hand",
    the class, and its descriptor where the backend has one (its declared non-finite
    departures then hold for the run, as for a ``uo.build`` of the class)."""
    try:
        descriptor = load(backend).native_class(native.optimizer)
    except KeyError:
        descriptor = None
    return Decision(backend, spec.name, "hand", native.optimizer,
                    f"{native.optimizer} built by hand", native_class=descriptor)
