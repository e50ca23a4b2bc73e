"""``uo.build``, ``uo.explain``, ``uo.backends``: the entry points into the backends.

The core never imports a framework at import time: the backend package is imported
when a call needs it, and the backend is inferred from the parameters' types by the
name of the module that defines them.
"""

from __future__ import annotations

import importlib
import importlib.util
import weakref
import dataclasses
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from .groups import ParameterPlan, plan_parameters
from .lowering import PATHS, Decision
from .spec import Spec, check_momentum_cycling

BACKENDS = ("torch", "paddle", "mindspore")
_DISTRIBUTIONS = {"torch": "torch", "paddle": "paddle", "mindspore": "mindspore"}


@dataclass
class BuildRecord:
    """What ``uo.build`` made: kept per optimizer for explain, schedulers and state."""

    spec: Spec
    decision: Decision
    names: list[str | None]
    params: list[Any]
    lr_scheduler: Any = None
    plans: list[ParameterPlan] | None = None
    #: one bool per optimizer step call: True where ``skip_nonfinite`` skipped it
    skipped: list[bool] = dataclasses.field(default_factory=list)


_RECORDS: "weakref.WeakKeyDictionary[Any, BuildRecord]" = weakref.WeakKeyDictionary()


def backends() -> list[str]:
    """Backends whose framework is installed (found without importing it)."""
    return [b for b in BACKENDS if importlib.util.find_spec(_DISTRIBUTIONS[b]) is not None]


def backend_module(name: str):
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {name!r}")
    if importlib.util.find_spec(_DISTRIBUTIONS[name]) is None:
        raise ValueError(f"backend {name!r} is not installed (pip install "
                         f"'unified-opt[{name}]')")
    return importlib.import_module(f"unified_opt.backends.{name}")


def framework_of(obj: Any) -> str | None:
    """'torch', 'paddle' or 'mindspore' when ``obj``'s class comes from that framework."""
    for klass in type(obj).__mro__:
        root = (klass.__module__ or "").split(".")[0]
        if root in BACKENDS:
            return root
    return None


def _named(params: Any) -> list[tuple[str | None, Any]]:
    if framework_of(params) is not None:
        if hasattr(params, "named_parameters"):      # torch Module, paddle Layer
            return list(params.named_parameters())
        if hasattr(params, "parameters_and_names"):  # mindspore Cell: its trainable ones
            # (the others, e.g. BatchNorm moving statistics, are not the optimizer's)
            return [(n, p) for n, p in params.parameters_and_names() if p.requires_grad]
        return [(None, params)]                      # a single parameter
    if isinstance(params, Mapping):
        return list(params.items())
    if isinstance(params, (str, bytes)) or not isinstance(params, Iterable):
        raise TypeError(f"build: params must be a module, an iterable of parameters or of "
                        f"(name, parameter) pairs, got {type(params).__name__}")
    out = []
    for item in params:
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
            out.append(item)
        else:
            out.append((None, item))
    return out


def build(spec: Spec, params: Any, backend: str | None = None, groups: Any = None, *,
          path: str = "auto", options: Mapping[str, Any] | None = None):
    """The framework's own optimizer computing ``spec`` over ``params``.

    ``groups``: a list of :class:`unified_opt.Group` (name rules setting per-parameter lr
    factors, weight decay and clipping exclusions), lowered to the framework's own
    parameter groups.

    ``path``: "auto" (native where exact, else own), "native" (error if no native class
    is exact) or "own" (always the spec's own update). ``options``: implementation
    flags passed to the native class (e.g. ``{"foreach": True}``), checked against
    that class's signature.
    """
    if not isinstance(spec, Spec):
        raise TypeError(f"build: spec must be a unified_opt spec, got {spec!r}")
    if path not in PATHS:
        raise ValueError(f"build: path must be one of {PATHS}, got {path!r}")
    if options is not None and not isinstance(options, Mapping):
        raise TypeError(f"build: options must be a mapping, got {options!r}")
    check_momentum_cycling(spec, "build")
    named = _named(params)
    if not named:
        raise ValueError("build: params is empty")
    kinds = {framework_of(p) for _, p in named}
    if None in kinds or len(kinds) != 1:
        raise TypeError(f"build: parameters must all come from one framework, got "
                        f"{sorted(str(k) for k in kinds)}")
    inferred = kinds.pop()
    if backend is not None and backend != inferred:
        raise ValueError(f"build: backend={backend!r} but the parameters are {inferred} "
                         "objects")
    names = [n for n, _ in named]
    if len(set(n for n in names if n is not None)) != len([n for n in names if n is not None]):
        raise ValueError(f"build: parameter names must be unique, got {names}")
    module = backend_module(inferred)
    # name rules see the framework's own name of an unnamed parameter where it has one
    own_name = getattr(module, "parameter_name", None)
    rule_names = [n if n is not None or own_name is None else own_name(p) for n, p in named]
    plans = plan_parameters(spec, rule_names, groups, "build")
    optimizer, record = module.build(spec, named, path=path, options=dict(options or {}),
                                     plans=plans)
    record.plans = plans
    _RECORDS[optimizer] = record
    return optimizer


def record_of(optimizer: Any) -> BuildRecord:
    try:
        return _RECORDS[optimizer]
    except (KeyError, TypeError):
        raise ValueError(f"{type(optimizer).__name__} object was not built by "
                         "unified_opt.build") from None


def lr_scheduler(optimizer: Any):
    """The native scheduler ``build`` made for a scheduled lr, to step the framework's
    usual way (torch and paddle: ``scheduler.step()`` after ``optimizer.step()``);
    ``None`` for a constant lr and on MindSpore (its optimizers step the lr themselves)."""
    return record_of(optimizer).lr_scheduler


def skipped_steps(optimizer: Any) -> list[bool]:
    """Whether each step call of an optimizer made by ``build`` was skipped by the spec's
    ``skip_nonfinite`` (non-finite unscaled gradients): one bool per call for a spec with
    ``skip_nonfinite=True`` (with a dynamic loss scale, read the last entry after each
    step to lower the scale). Optimizers that cannot skip may leave it empty."""
    return record_of(optimizer).skipped


def explain(spec: Any, backend: str | None = None) -> Decision:
    """Which path ``build`` takes for ``spec`` on ``backend`` and why. Also accepts an
    optimizer made by ``build`` (then ``backend`` is not needed)."""
    if not isinstance(spec, Spec):
        return record_of(spec).decision
    if backend is None:
        raise TypeError("explain: backend is required for a spec (one of "
                        f"{BACKENDS})")
    if backend not in BACKENDS:
        raise ValueError(f"explain: backend must be one of {BACKENDS}, got {backend!r}")
    lowering = importlib.import_module(f"unified_opt.backends.{backend}.lowering")
    return lowering.decide_for(spec)
