"""The spec base class and the algorithm registry.

A spec is data plus math: a frozen, keyword-only dataclass of hyperparameters,
checked when it is built, with the reference update written once as pure functions
over a small tensor-ops interface (:mod:`unified_opt.ops`). Subclasses declare their
fields, a ``_check`` method that validates and normalises them, and ``init`` /
``update``.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import os
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterable, Mapping, TypeAlias, TypeVar

from . import _validation as v
from .clipping import Clip, clip_from_dict
from .ops import Ops
from .schedules import Schedule, schedule_from_dict
from .spec_docs import document
from .storage import STATE_DTYPES

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:
    def dataclass_transform(**_: Any) -> Callable[[Any], Any]:
        """typing.dataclass_transform (Python 3.11; typing_extensions before) for the
        type checker only: at run time the decorator is returned unchanged."""
        return lambda decorated: decorated

#: A parameter, gradient or state tensor: a numpy array in the reference, the
#: framework's own tensor on a backend's own path (arithmetic by Python operators,
#: everything else through :class:`unified_opt.ops.Ops`).
Tensor: TypeAlias = Any
#: One parameter's optimizer state: state name -> tensor.
State: TypeAlias = dict[str, Any]

_SpecClass = TypeVar("_SpecClass", bound=type)
#: a spec's hyperparameters as the type checker sees them: any keyword of any spec
Hyperparameters: TypeAlias = Any

FORMAT_VERSION = 1

_REGISTRY: dict[str, type["Spec"]] = {}
_Registered = TypeVar("_Registered", bound="type[Spec]")


def register(cls: _Registered) -> _Registered:
    """Class decorator: make ``cls`` reachable as ``uo.get(cls.name)``."""
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"algorithm name {cls.name!r} is registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def registered_class(name: str) -> "type[Spec] | None":
    """The class registered under ``name`` exactly, or None (no plugin is loaded)."""
    return _REGISTRY.get(name)


#: the entry-point group and the environment variable naming algorithm modules from
#: outside the package (:mod:`unified_opt.records`)
ENTRY_POINT_GROUP = "unified_opt.algorithms"
ENVIRONMENT = "UNIFIED_OPT_ALGORITHMS"
_LOADED: list[str] = []
_ENTRY_POINTS: list[str] = []


def load_plugins() -> list[str]:
    """Import the algorithm modules named by the ``unified_opt.algorithms`` entry points
    of the installed distributions (read once per process) and by the environment
    variable ``UNIFIED_OPT_ALGORITHMS`` (module names, comma-separated; read at every
    call), each once; returns the names imported so far. A module that fails to import
    raises an ImportError naming it: a run that silently lacked an algorithm would
    report less than it was asked."""
    if not _ENTRY_POINTS:
        from importlib import metadata

        _ENTRY_POINTS.append("")          # read: even when there is none
        _ENTRY_POINTS.extend(e.value for e in metadata.entry_points(group=ENTRY_POINT_GROUP))
    names = [n for n in _ENTRY_POINTS if n]
    names += [n.strip() for n in os.environ.get(ENVIRONMENT, "").split(",") if n.strip()]
    for module in names:
        if module in _LOADED:
            continue
        _LOADED.append(module)
        try:
            importlib.import_module(module)
        except ImportError as error:
            _LOADED.remove(module)
            raise ImportError(f"the algorithm module {module!r} (named by {ENVIRONMENT} "
                              f"or the {ENTRY_POINT_GROUP!r} entry points) does not "
                              f"import: {error}") from error
    return list(_LOADED)


def algorithms() -> list[str]:
    """Registry names of every algorithm, sorted.

    Args:
        None.

    Returns:
        list[str]: the names :func:`get` takes (``"adamw"``, ``"lamb"``, ...).

    Example:
        >>> import unified_opt as uo
        >>> "adamw" in uo.algorithms() and "came" in uo.algorithms()
        True
    """
    load_plugins()
    return sorted(_REGISTRY)


def spec_class(name: str) -> type["Spec"]:
    """The spec class of registry algorithm ``name``, in any case (``"adamw"``,
    ``"AdamW"``, ``"ADAMW"``); the class's own name is accepted too (``"AdamOffload"``
    for ``adam_offload``). An unknown name is a ValueError naming the closest ones."""
    if not isinstance(name, str):
        raise TypeError(f"algorithm name must be a str, got {name!r}")
    load_plugins()
    cls = _REGISTRY.get(name)
    if cls is None:
        key = name.lower()
        cls = _REGISTRY.get(key) or next(
            (c for c in _REGISTRY.values() if c.__name__.lower() == key), None)
    if cls is None:
        from ._native_registry import did_you_mean

        raise ValueError(f"unknown algorithm {name!r}{did_you_mean(name, algorithms())} "
                         "(uo.algorithms() lists them)")
    return cls


def get(name: str, **hyperparameters: Any) -> "Spec":
    """The spec of registry algorithm ``name`` (any case) with the given hyperparameters.

    Args:
        name: a registry name (:func:`algorithms`) in any case, or the class's name
            (``"AdamW"``, ``"AdamOffload"``).
        **hyperparameters: the spec's fields, as its class takes them.

    Returns:
        Spec: the spec, checked as its class checks it.

    Raises:
        TypeError: ``name`` is not a str, or a hyperparameter of the wrong type or
            unknown to the algorithm.
        ValueError: an unknown algorithm (the message names the closest), or a value out
            of its range.

    Example:
        >>> import unified_opt as uo
        >>> uo.get("AdamW", lr=1e-3) == uo.AdamW(lr=1e-3)
        True
    """
    return spec_class(name)(**hyperparameters)


def spec_from_dict(data: Mapping[str, Any]) -> "Spec":
    """Inverse of :meth:`Spec.to_dict`: the spec a JSON document describes.

    Args:
        data: ``{"format_version": 1, "algorithm": name, "hyperparameters": {...}}``
            (``format_version`` may be left out); schedules and clips as their own
            ``to_dict()`` documents.

    Returns:
        Spec: the spec, equal to the one that wrote ``data``.

    Raises:
        TypeError: ``data`` or its hyperparameters are not mappings.
        ValueError: missing or unknown keys, an unsupported ``format_version``, or what
            :func:`get` refuses.

    Example:
        >>> import json
        >>> import unified_opt as uo
        >>> spec = uo.Lamb(lr=1e-3, weight_decay=0.01)
        >>> uo.spec_from_dict(json.loads(spec.to_json())) == spec
        True
    """
    if not isinstance(data, Mapping):
        raise TypeError(f"spec_from_dict: data must be a mapping, got {type(data).__name__}")
    missing = {"algorithm", "hyperparameters"} - set(data)
    if missing:
        raise ValueError(f"spec_from_dict: missing keys {sorted(missing)} in {dict(data)!r}")
    unknown = sorted(set(data) - {"algorithm", "hyperparameters", "format_version"},
                     key=str)
    if unknown:
        raise ValueError(f"spec_from_dict: unknown keys {unknown}; a spec document holds "
                         f"'format_version', 'algorithm' and 'hyperparameters'")
    version = data.get("format_version", FORMAT_VERSION)
    if isinstance(version, bool) or version != FORMAT_VERSION:
        raise ValueError(f"spec_from_dict: format_version {version!r} is not supported "
                         f"(this library writes {FORMAT_VERSION})")
    if not isinstance(data["hyperparameters"], Mapping):
        raise TypeError(f"spec_from_dict: hyperparameters must be a mapping, got "
                        f"{data['hyperparameters']!r} of type "
                        f"{type(data['hyperparameters']).__name__}")
    hyper = dict(data["hyperparameters"])
    for key in SCHEDULABLE:
        if isinstance(hyper.get(key), Mapping):
            hyper[key] = schedule_from_dict(hyper[key])
    if isinstance(hyper.get("grad_clip"), Mapping):
        hyper["grad_clip"] = clip_from_dict(hyper["grad_clip"])
    return get(data["algorithm"], **hyper)


#: hyperparameters that may be a Schedule (evaluated per step by :meth:`Spec.at_step`)
SCHEDULABLE = ("lr", "weight_decay")
#: the fields every spec has (:mod:`unified_opt.pre_step`), with their defaults
PRE_STEP_DEFAULTS = {"grad_clip": None, "loss_scale": 1.0, "skip_nonfinite": False,
                     "grad_centralization": False}
#: the fields every spec has, written by :meth:`Spec.to_dict` only when set
COMMON_DEFAULTS = {**PRE_STEP_DEFAULTS, "state_dtype": None}


@dataclasses.dataclass(frozen=True, kw_only=True)
class Spec:
    """Base of every algorithm spec (subclasses are frozen keyword-only dataclasses).

    Every spec has the gradient pre-step fields of :mod:`unified_opt.pre_step`:
    ``grad_clip`` (a :mod:`unified_opt.clipping` clip or None), ``loss_scale`` (the
    gradients arrive multiplied by it), ``skip_nonfinite`` (skip a step whose unscaled
    gradients hold inf/NaN) and ``grad_centralization``.

    ``state_dtype`` is the dtype the state arrays are kept in: None (the default) keeps
    them in the parameter's dtype, as every framework's optimizers do; ``"float32"`` or
    ``"bfloat16"`` rounds them to that dtype after every update. The update itself
    computes in float32 for bfloat16 and float16 parameters (:mod:`unified_opt.storage`
    says where each value is rounded). No native class keeps its state in another dtype
    than the parameter's: a spec with a ``state_dtype`` builds the own update.

    Specs are compared by value (``==``), hashable, and never changed: :meth:`replace`
    makes a new one.

    Args:
        grad_clip: a gradient clip (``uo.ClipByGlobalNorm``, ``uo.ClipByNorm``,
            ``uo.ClipByValue``) or None.
        loss_scale: a static loss scale > 0 (1.0: none).
        skip_nonfinite: whether a step with non-finite unscaled gradients is skipped.
        grad_centralization: whether gradients of two or more dimensions are centralised.
        state_dtype: None, ``"float32"`` or ``"bfloat16"``.

    Example:
        >>> import unified_opt as uo
        >>> spec = uo.AdamW(lr=1e-3)
        >>> isinstance(spec, uo.Spec), spec.name
        (True, 'adamw')
    """

    name: ClassVar[str] = ""
    #: knobs whose values differ only in the order of rounding, not in the math (a
    #: native class may compute one of them bit for bit; the float32 noise floor cannot
    #: tell them apart)
    rounding_knobs: ClassVar[tuple[str, ...]] = ()

    grad_clip: Clip | None = None
    loss_scale: float = 1.0
    skip_nonfinite: bool = False
    grad_centralization: bool = False
    state_dtype: str | None = None
    if TYPE_CHECKING:
        # every algorithm declares its lr (a float or a schedule); for the type checker
        # only, so that the base class's methods may read it (no field at run time)
        lr: float | Schedule

    # -- construction -----------------------------------------------------------
    def __post_init__(self) -> None:
        owner = type(self).__name__
        if not isinstance(self.lr, Schedule):
            object.__setattr__(self, "lr", v.check_range(owner, "lr", self.lr, low=0.0))
        if self.grad_clip is not None and not isinstance(self.grad_clip, Clip):
            raise TypeError(f"{owner}: grad_clip must be None or a unified_opt.clipping "
                            f"clip (ClipByGlobalNorm, ClipByNorm, ClipByValue), got "
                            f"{self.grad_clip!r}")
        object.__setattr__(self, "loss_scale", v.check_range(
            owner, "loss_scale", self.loss_scale, low=0.0, low_open=True))
        v.check_bool(owner, "skip_nonfinite", self.skip_nonfinite)
        v.check_bool(owner, "grad_centralization", self.grad_centralization)
        if self.state_dtype is not None:
            if not isinstance(self.state_dtype, str):
                raise TypeError(f"{owner}: state_dtype must be None or a str, got "
                                f"{self.state_dtype!r} of type {type(self.state_dtype).__name__}")
            if self.state_dtype not in STATE_DTYPES:
                raise ValueError(f"{owner}: state_dtype must be None or one of "
                                 f"{STATE_DTYPES}, got {self.state_dtype!r}")
        for key, value in self._check(owner).items():
            object.__setattr__(self, key, value)

    def _check(self, owner: str) -> dict[str, Any]:
        """Validate fields; return the normalised values to store."""
        return {}

    # -- data ---------------------------------------------------------------------
    def hyperparameters(self) -> dict[str, Any]:
        """Every field and its value, in field order.

        Returns:
            dict[str, Any]: field name -> value (schedules and clips as objects).
        """
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def to_dict(self) -> dict[str, Any]:
        """The spec as a JSON-ready document (:func:`unified_opt.spec_from_dict` reads it).

        The pre-step fields and ``state_dtype`` are written only when they differ from
        their defaults; tuples become lists, schedules and clips their own documents.

        Returns:
            dict[str, Any]: ``{"format_version": 1, "algorithm": name,
            "hyperparameters": {...}}``.
        """
        hyper = {}
        for key, value in self.hyperparameters().items():
            if key in COMMON_DEFAULTS and value == COMMON_DEFAULTS[key]:
                continue   # written only when set, so older documents stay current
            if isinstance(value, (Schedule, Clip)):
                value = value.to_dict()
            elif isinstance(value, tuple):
                value = list(value)
            hyper[key] = value
        return {"format_version": FORMAT_VERSION, "algorithm": self.name,
                "hyperparameters": hyper}

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON text, keys sorted (the same spec, the same text).

        Returns:
            str: the JSON document.
        """
        return json.dumps(self.to_dict(), sort_keys=True)

    def replace(self, **changes: Hyperparameters) -> "Spec":
        """A copy with ``changes`` applied, checked as a new spec is.

        Args:
            **changes: field name -> new value.

        Returns:
            Spec: the new spec (this one is unchanged).

        Raises:
            TypeError: an unknown field or a value of the wrong type.
            ValueError: a value out of its range.
        """
        return dataclasses.replace(self, **changes)

    # -- learning rate and per-parameter hyperparameters -----------------------------
    def lr_at(self, step: int) -> float:
        """The lr of 0-based optimizer step ``step``."""
        return self.lr(step) if isinstance(self.lr, Schedule) else self.lr

    def varies_per_step(self) -> bool:
        """Whether :meth:`at_step` changes hyperparameters other than the lr (a
        weight-decay schedule, a momentum-cycling lr schedule)."""
        return (isinstance(getattr(self, "weight_decay", None), Schedule)
                or (isinstance(self.lr, Schedule) and self.lr.momentum(0) is not None))

    def at_step(self, step: int) -> "Spec":
        """The spec that 0-based step ``step`` runs: a weight-decay schedule evaluated,
        and the momentum (``momentum``, or ``betas[0]``) a cycling lr schedule sets."""
        if not self.varies_per_step():
            return self
        changes: dict[str, Any] = {}
        weight_decay = getattr(self, "weight_decay", None)
        if isinstance(weight_decay, Schedule):
            changes["weight_decay"] = weight_decay(step)
        momentum = self.lr.momentum(step) if isinstance(self.lr, Schedule) else None
        if momentum is not None:
            changes.update(momentum_change(self, momentum, "at_step"))
        return dataclasses.replace(self, **changes)

    def for_parameter(self, name: str | None) -> "Spec":
        """The spec that applies to the parameter called ``name``.

        Specs with name rules (e.g. ``no_decay_names``) return a copy with that
        parameter's hyperparameters; the default is the spec itself.
        """
        return self

    # -- math (overridden by each algorithm) ----------------------------------------
    def state_names(self) -> tuple[str, ...]:
        """Names of the per-parameter state arrays ``init`` creates."""
        return ()

    #: whether the parameter the optimizer holds while training is not the point to
    #: evaluate the model at (schedule-free specs): then the optimizers ``uo.build``
    #: makes have ``train()`` and ``eval()``, which move each parameter between the two
    #: points with :meth:`evaluation_point` and :meth:`training_point`
    swaps_weights: ClassVar[bool] = False

    @property
    def low_precision_update(self) -> str | None:
        """The low-precision dtype (``"bfloat16"``) part of the update computes in, with
        :meth:`unified_opt.ops.Ops.rounded` after each operation (Muon's ``ns_dtype``);
        None: the update computes in the parameter's precision. The conformance rule
        then holds a bfloat16 ulp of that part on either side
        (:class:`unified_opt.ops.UlpOffOps`)."""
        return None

    def full_precision(self) -> tuple[str, "Spec"] | None:
        """Where :attr:`low_precision_update` is set: ``(description, spec)``, the same
        update with that part computed in the parameter's precision (Muon's
        ``("ns_dtype=None", ...)``); None otherwise. The conformance rule fails a run
        that is nearer this spec's trajectory than its own (:mod:`.conformance.compare`):
        the bfloat16 floor alone is wide enough to hold such a run."""
        return None

    def smallest_float32_gradient(self, shape: tuple[int, ...]) -> float:
        """The smallest gradient magnitude at which a float32 run of this update, in
        each operation order the frameworks use, still holds the values the float64
        oracle holds for a parameter of ``shape`` (0.0: every magnitude). The check's
        quiet streams keep such a tensor's gradients at least this large
        (:mod:`conformance.gradients`): below it a correct float32 optimizer underflows
        where the oracle does not, and a check there would fail it."""
        return 0.0

    def updates_shape(self, shape: tuple[int, ...]) -> bool:
        """Whether :meth:`update` takes a parameter of ``shape`` (every spec but Muon's
        matrices-only form does; its update raises for the others)."""
        return True

    def evaluation_point(self, param: Tensor, state: State, ops: Ops) -> Tensor:
        """The point to evaluate at, from the training point ``param`` and its state
        (specs with :attr:`swaps_weights`)."""
        raise NotImplementedError(f"{type(self).__name__} holds the point to evaluate at")

    def training_point(self, param: Tensor, state: State, ops: Ops) -> Tensor:
        """The training point, from the evaluation point ``param`` and its state (the
        inverse of :meth:`evaluation_point`, up to rounding)."""
        raise NotImplementedError(f"{type(self).__name__} holds the point to evaluate at")

    def init(self, param: Tensor, ops: Ops) -> State:
        """Fresh optimizer state for ``param``."""
        return {key: ops.zeros_like(param) for key in self.state_names()}

    def update(self, param: Tensor, grad: Tensor, state: State, *, lr: float, step: int,
               ops: Ops) -> tuple[Tensor, State]:
        """One step. ``step`` is 1-based (the step being taken). Returns
        ``(new_param, new_state)`` and does not modify its inputs.

        The contract between an update and the engines that run it: the update returns
        new arrays, or one of its inputs unchanged (SGD's first momentum step returns the
        gradient itself as the buffer), and never writes into an input. An engine copies
        what it keeps into the parameter and into state arrays it owns, and never keeps
        a reference to a gradient, a parameter or a returned input: a gradient is
        rewritten in place by ``zero_grad(set_to_none=False)`` and the next backward
        (``tests/test_update_contract.py`` checks every sample of every algorithm)."""
        raise NotImplementedError

    def canonical(self) -> "Spec":
        """This spec with every knob that cannot change its numbers, given the others, at
        its default (e.g. SGD's first-step rule without dampening): two specs compute the
        same numbers when their canonical forms are equal."""
        return self

    def with_defaults(self, names: Iterable[str]) -> "Spec":
        """This spec with the fields ``names`` at their class defaults."""
        defaults: dict[str, Any] = {f.name: f.default for f in dataclasses.fields(self)}
        return dataclasses.replace(self, **{n: defaults[n] for n in names})

    def alternatives(self) -> list[tuple[str, "Spec"]]:
        """Known variants of this spec (other frameworks' conventions), used to
        explain a conformance failure: ``[(description, spec), ...]``."""
        return []

    def state_alternatives(self) -> list[tuple[str, "Spec"]]:
        """Known variants that compute this spec's parameters (up to float32 rounding)
        but another state, e.g. a momentum buffer ``lr`` times this spec's: only a run
        whose state is read shows them, and the explainer tries them only there. Same
        form as :meth:`alternatives`."""
        return []


def state_layout(spec: "Spec", shapes: Iterable[Any]) -> tuple[tuple[str, ...], ...]:
    """The state arrays ``spec`` keeps for a parameter of each of ``shapes``: a spec whose
    state depends on the parameter's shape (Adafactor's and CAME's moments, factored for
    two or more dimensions: their ``state_names`` takes the shape) is asked once per
    shape, any other once. Two specs keep the same state for a group's parameters where
    their layouts over the group's shapes are equal."""
    names: Callable[..., tuple[str, ...]] = spec.state_names
    if "shape" not in inspect.signature(names).parameters:
        return (names(),)
    return tuple(names(tuple(shape)) for shape in shapes)


def layout_names(layout: tuple[tuple[str, ...], ...]) -> list[str]:
    """The state names of a :func:`state_layout`, each once, in order of appearance."""
    return list(dict.fromkeys(name for names in layout for name in names))


def momentum_change(spec: "Spec", momentum: float, caller: str) -> dict[str, Any]:
    """The field change that sets ``spec``'s momentum to ``momentum`` (torch's
    ``cycle_momentum``: SGD-style ``momentum``, Adam-style ``betas[0]``)."""
    fields = {f.name for f in dataclasses.fields(spec)}
    if "momentum" in fields:
        return {"momentum": momentum}
    if "betas" in fields:
        return {"betas": (momentum, *getattr(spec, "betas")[1:])}
    raise ValueError(f"{caller}: {type(spec.lr).__name__}(cycle_momentum=True) cycles the "
                     f"momentum, but {type(spec).__name__} has neither momentum nor betas")


def check_momentum_cycling(spec: "Spec", caller: str) -> None:
    """A momentum-cycling schedule needs a spec with a momentum, and the momenta it cycles
    between (``base_momentum``, ``max_momentum``) in the spec's range (checked up front,
    not at the step that reaches them)."""
    momentum = spec.lr.momentum(0) if isinstance(spec.lr, Schedule) else None
    if momentum is None:
        return
    momentum_change(spec, momentum, caller)
    for name in ("base_momentum", "max_momentum"):
        value = getattr(spec.lr, name, None)
        if value is None:
            continue
        try:
            spec.replace(**momentum_change(spec, value, caller))
        except ValueError as error:
            raise ValueError(f"{caller}: {type(spec.lr).__name__}({name}={value!r}) cycles "
                             f"{type(spec).__name__}'s momentum out of its range: "
                             f"{error}") from None


_checked_init = v.checked_keyword_init


@dataclass_transform(kw_only_default=True, frozen_default=True)
def spec_dataclass(cls: _SpecClass) -> _SpecClass:
    """Decorator for algorithm specs: frozen, keyword-only, argument-checked, and
    documented: every field in the docstring's ``Args:`` section
    (:func:`unified_opt.spec_docs.document`)."""
    made: Any = dataclasses.dataclass(frozen=True, kw_only=True)(cls)
    made.__init__ = _checked_init(made, made.__init__)
    made.__doc__ = document(made)
    return made
