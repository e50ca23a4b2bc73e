"""The spec base class and the algorithm registry.

A spec is data plus math: a frozen, keyword-only dataclass of hyperparameters,
checked when it is built, with the reference update written once as pure functions
over a small tensor-ops interface (:mod:`unified_opt.ops`). Subclasses declare their
fields, a ``_check`` method that validates and normalises them, and ``init`` /
``update``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any, ClassVar, Mapping

from . import _validation as v
from .schedules import Schedule, schedule_from_dict

FORMAT_VERSION = 1

_REGISTRY: dict[str, type["Spec"]] = {}


def register(cls: type["Spec"]) -> type["Spec"]:
    """Class decorator: make ``cls`` reachable as ``uo.get(cls.name)``."""
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"algorithm name {cls.name!r} is registered twice")
    _REGISTRY[cls.name] = cls
    return cls


def algorithms() -> list[str]:
    """Registry names of every algorithm, sorted."""
    return sorted(_REGISTRY)


def spec_class(name: str) -> type["Spec"]:
    if not isinstance(name, str):
        raise TypeError(f"algorithm name must be a str, got {name!r}")
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown algorithm {name!r}; registered: {algorithms()}") from None


def get(name: str, **hyperparameters: Any) -> "Spec":
    """The spec of registry algorithm ``name`` with the given hyperparameters."""
    return spec_class(name)(**hyperparameters)


def spec_from_dict(data: Mapping[str, Any]) -> "Spec":
    """Inverse of :meth:`Spec.to_dict`."""
    if not isinstance(data, Mapping):
        raise TypeError(f"spec_from_dict: data must be a mapping, got {type(data).__name__}")
    missing = {"algorithm", "hyperparameters"} - set(data)
    if missing:
        raise ValueError(f"spec_from_dict: missing keys {sorted(missing)} in {dict(data)!r}")
    version = data.get("format_version", FORMAT_VERSION)
    if version != FORMAT_VERSION:
        raise ValueError(f"spec_from_dict: format_version {version!r} is not supported "
                         f"(this library writes {FORMAT_VERSION})")
    hyper = dict(data["hyperparameters"])
    if isinstance(hyper.get("lr"), Mapping):
        hyper["lr"] = schedule_from_dict(hyper["lr"])
    return get(data["algorithm"], **hyper)


class Spec:
    """Base of every algorithm spec (subclasses are frozen keyword-only dataclasses)."""

    name: ClassVar[str] = ""

    # -- construction -----------------------------------------------------------
    def __post_init__(self) -> None:
        owner = type(self).__name__
        if not isinstance(self.lr, Schedule):
            object.__setattr__(self, "lr", v.check_range(owner, "lr", self.lr, low=0.0))
        for key, value in self._check(owner).items():
            object.__setattr__(self, key, value)

    def _check(self, owner: str) -> dict[str, Any]:
        """Validate fields; return the normalised values to store."""
        return {}

    # -- data ---------------------------------------------------------------------
    def hyperparameters(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def to_dict(self) -> dict[str, Any]:
        hyper = {}
        for key, value in self.hyperparameters().items():
            if isinstance(value, Schedule):
                value = value.to_dict()
            elif isinstance(value, tuple):
                value = list(value)
            hyper[key] = value
        return {"format_version": FORMAT_VERSION, "algorithm": self.name,
                "hyperparameters": hyper}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def replace(self, **changes: Any) -> "Spec":
        return dataclasses.replace(self, **changes)

    # -- learning rate and per-parameter hyperparameters -----------------------------
    def lr_at(self, step: int) -> float:
        """The lr of 0-based optimizer step ``step``."""
        return self.lr(step) if isinstance(self.lr, Schedule) else self.lr

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

    def init(self, param, ops) -> dict[str, Any]:
        """Fresh optimizer state for ``param``."""
        return {key: ops.zeros_like(param) for key in self.state_names()}

    def update(self, param, grad, state: dict, *, lr: float, step: int, ops):
        """One step. ``step`` is 1-based (the step being taken). Returns
        ``(new_param, new_state)`` and does not modify its inputs."""
        raise NotImplementedError

    def alternatives(self) -> list[tuple[str, "Spec"]]:
        """Known variants of this spec (other frameworks' conventions), used to
        explain a conformance failure: ``[(description, spec), ...]``."""
        return []


def refuse_momentum_cycling(spec: "Spec", caller: str) -> None:
    """Momentum-cycling schedules (torch's OneCycleLR / CyclicLR default) set the
    momentum or beta1 each step too; nothing runs that part yet, so say so rather than
    silently cycle only the lr."""
    if isinstance(spec.lr, Schedule) and spec.lr.momentum(0) is not None:
        raise NotImplementedError(
            f"{caller}: {type(spec.lr).__name__}(cycle_momentum=True) cycles the momentum/"
            "beta1 as well as the lr, which is not supported yet; use cycle_momentum=False")


def _checked_init(cls: type, original):
    @functools.wraps(original)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        owner = type(self).__name__
        if args:
            raise TypeError(f"{owner} takes keyword arguments only, got {len(args)} "
                            f"positional argument(s) {args!r}")
        valid = [f.name for f in dataclasses.fields(self)]
        unknown = sorted(set(kwargs) - set(valid))
        if unknown:
            raise TypeError(f"{owner} got unexpected keyword argument(s) {unknown}; "
                            f"valid: {valid}")
        original(self, **kwargs)

    return __init__


def spec_dataclass(cls: type) -> type:
    """Decorator for algorithm specs: frozen, keyword-only, argument-checked."""
    cls = dataclasses.dataclass(frozen=True, kw_only=True)(cls)
    cls.__init__ = _checked_init(cls, cls.__init__)
    return cls
