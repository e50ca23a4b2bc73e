"""The preset registry: qualified native class name -> function of native kwargs."""

from __future__ import annotations

import warnings
from typing import Any

from .._native_registry import NativeRegistry
from ..spec import Spec

REGISTRY = NativeRegistry("preset")
native_preset = REGISTRY.register
refuse = REGISTRY.refuse
refusal = REGISTRY.refusal

#: Arguments that choose an implementation, not the math. A preset accepts them so
#: a native call ports unchanged, and warns that the spec does not carry them.
IMPLEMENTATION_FLAGS = ("foreach", "fused", "capturable", "differentiable",
                        "use_multi_tensor", "multi_precision", "use_locking", "name")


def presets(refused: bool = False) -> list[str]:
    """Qualified names of every native class that has a preset; with ``refused=True``,
    those whose preset is refused (it raises NotImplementedError saying what is missing)."""
    return REGISTRY.names(refused)


def preset(qualified_name: str, **native_kwargs: Any) -> Spec:
    """The spec computing what ``qualified_name(**native_kwargs)`` computes."""
    fn = REGISTRY.checked(qualified_name, native_kwargs)
    params = REGISTRY.signature(qualified_name).parameters
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
