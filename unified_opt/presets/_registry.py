"""The preset registry: qualified native class name -> function of native kwargs."""

from __future__ import annotations

import inspect
import warnings
from typing import Any, Callable

from ..spec import Spec

_PRESETS: dict[str, Callable[..., Spec]] = {}
_REFUSED: dict[str, str] = {}

#: Arguments that choose an implementation, not the math. A preset accepts them so
#: a native call ports unchanged, and warns that the spec does not carry them.
IMPLEMENTATION_FLAGS = ("foreach", "fused", "capturable", "differentiable",
                        "use_multi_tensor", "multi_precision", "use_locking", "name")


def native_preset(qualified_name: str):
    """Decorator: register ``fn(**native_kwargs) -> Spec`` under ``qualified_name``.

    ``fn``'s signature is the native constructor's (without the parameters argument),
    with the native defaults; required native arguments have no default.
    """
    def deco(fn):
        _PRESETS[qualified_name] = fn
        fn.qualified_name = qualified_name
        return fn
    return deco


def refuse(qualified_name: str, why: str) -> None:
    """Register a native class whose preset raises ``NotImplementedError(why)``."""
    _REFUSED[qualified_name] = why


def presets(refused: bool = False) -> list[str]:
    """Qualified names of every native class that has a preset; with ``refused=True``,
    those whose preset is refused (it raises NotImplementedError saying what is missing)."""
    return sorted(_REFUSED if refused else _PRESETS)


def preset(qualified_name: str, **native_kwargs: Any) -> Spec:
    """The spec computing what ``qualified_name(**native_kwargs)`` computes."""
    if not isinstance(qualified_name, str):
        raise TypeError(f"preset: qualified_name must be a str, got {qualified_name!r}")
    if qualified_name in _REFUSED:
        raise NotImplementedError(f"preset {qualified_name!r} is refused: "
                                  f"{_REFUSED[qualified_name]}")
    if qualified_name not in _PRESETS:
        raise ValueError(f"preset: no preset for {qualified_name!r}; available: {presets()}")
    fn = _PRESETS[qualified_name]
    params = inspect.signature(fn).parameters
    unknown = sorted(set(native_kwargs) - set(params))
    if unknown:
        raise TypeError(f"{qualified_name} got unexpected keyword argument(s) {unknown}; "
                        f"valid: {list(params)}")
    missing = [n for n, p in params.items()
               if p.default is inspect.Parameter.empty and n not in native_kwargs]
    if missing:
        raise TypeError(f"{qualified_name} is missing required argument(s) {missing}")
    for flag in IMPLEMENTATION_FLAGS:
        if flag in native_kwargs and native_kwargs[flag] != params[flag].default:
            warnings.warn(f"{qualified_name}: {flag}={native_kwargs[flag]!r} chooses an "
                          "implementation, not the math; the spec does not carry it (pass "
                          "it to uo.build(..., options=...) to choose the native kernel)",
                          stacklevel=2)
    return fn(**native_kwargs)


def unsupported(qualified_name: str, argument: str, value: Any, why: str) -> NotImplementedError:
    return NotImplementedError(f"{qualified_name}: {argument}={value!r} is not supported "
                               f"yet: {why}")


def require_float(qualified_name: str, argument: str, value: Any) -> Any:
    """Learning rates given as a number (schedules, tensors and lists come later)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{qualified_name}: {argument} must be a float here, got {value!r} "
                        f"of type {type(value).__name__} (for a schedule build the spec with "
                        "lr=uo.schedules.<Schedule>(...))")
    return value
