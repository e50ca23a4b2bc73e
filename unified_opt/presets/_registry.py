"""The preset registry: qualified native class name -> its descriptor's ``from_native``,
gathered from every backend's descriptors (read without importing a framework)."""

from __future__ import annotations

import inspect
import warnings
from typing import Any

from .._native_registry import NativeRegistry
from ..backend import BACKENDS, load
from ..spec import Spec

#: Arguments that choose an implementation, not the math. A preset accepts them so
#: a native call ports unchanged, and warns that the spec does not carry them.
IMPLEMENTATION_FLAGS = ("foreach", "fused", "capturable", "differentiable",
                        "use_multi_tensor", "multi_precision", "use_locking", "name")

_REGISTRY: NativeRegistry | None = None


def registry() -> NativeRegistry:
    """The registry of every backend's presets (made at the first call)."""
    global _REGISTRY
    if _REGISTRY is None:
        made = NativeRegistry("preset", "uo.presets()")
        for backend in BACKENDS:
            for cls in load(backend).classes:
                if cls.refused:
                    made.refuse(cls.name, cls.refused)
                else:
                    made.register(cls.name)(cls.from_native)
        _REGISTRY = made
    return _REGISTRY


def presets(refused: bool = False) -> list[str]:
    """Qualified names of every native class that has a preset; with ``refused=True``,
    those whose preset is refused (it raises NotImplementedError saying what is missing).

    Args:
        refused: False: the classes :func:`preset` reads; True: the refused ones.

    Returns:
        list[str]: qualified class names, sorted.

    Example:
        >>> import unified_opt as uo
        >>> "torch.optim.AdamW" in uo.presets()
        True"""
    return registry().names(refused)


def preset(qualified_name: str, **native_kwargs: Any) -> Spec:
    """The spec computing what ``qualified_name(**native_kwargs)`` computes.

    ``qualified_name`` may also be the class's real module path
    (``"torch.optim.adamw.AdamW"``, ``"mindspore.nn.optim.adam.Adam"``): see
    :func:`descriptor_name`.

    Args:
        qualified_name: the native class's qualified name (``uo.presets()`` lists them).
        **native_kwargs: its constructor's arguments, under its own names and with its
            own defaults (``learning_rate=`` for Paddle and MindSpore).

    Returns:
        Spec: the exact spec (eps placement, bias correction, decay coupling, which
        parameters are decayed by default, ...).

    Raises:
        TypeError: an argument the class does not take.
        ValueError: an unknown class (the message names the closest), or a value out
            of range.
        NotImplementedError: a configuration no spec computes exactly (the message
            says what is missing).

    Example:
        >>> import unified_opt as uo
        >>> spec = uo.preset("mindspore.nn.AdamWeightDecay", learning_rate=1e-3)
        >>> spec.bias_correction, spec.eps
        (False, 1e-06)"""
    if not isinstance(qualified_name, str) and not isinstance(qualified_name, type) \
            and hasattr(qualified_name, "step"):
        raise TypeError(f"preset: qualified_name must be a str, got the optimizer object "
                        f"{qualified_name!r}: read a live optimizer with "
                        "uo.from_native(optimizer)")
    qualified_name = descriptor_name(qualified_name)
    fn = registry().checked(qualified_name, native_kwargs)
    params = inspect.signature(fn).parameters
    for flag in IMPLEMENTATION_FLAGS:
        if flag in native_kwargs and native_kwargs[flag] != params[flag].default:
            warnings.warn(f"{qualified_name}: {flag}={native_kwargs[flag]!r} chooses an "
                          "implementation, not the math; the spec does not carry it (pass "
                          "it to uo.build(..., options=...) to choose the native kernel)",
                          stacklevel=2)
    return fn(**native_kwargs)


#: top-level modules of the frameworks whose classes the presets describe
_FRAMEWORKS = {"torch": "torch", "paddle": "paddle", "mindspore": "mindspore",
               "mindformers": "mindspore"}


def descriptor_name(qualified_name: Any) -> Any:
    """The preset name of the class at ``qualified_name``: itself when it has a preset (or
    is refused); else, for a name in an installed framework that imports to a class one
    of its descriptors names (the real module path, ``torch.optim.adamw.AdamW`` for
    ``torch.optim.AdamW``), that descriptor's name. Only such a name imports its
    framework; anything else comes back unchanged (and ``checked`` says what is wrong)."""
    import importlib.util

    from ..native import import_native

    known = registry()
    if not isinstance(qualified_name, str) or qualified_name in known.names() \
            or qualified_name in known.names(True):
        return qualified_name
    backend = _FRAMEWORKS.get(qualified_name.split(".")[0])
    if backend is None or importlib.util.find_spec(qualified_name.split(".")[0]) is None:
        return qualified_name
    try:
        klass = import_native(qualified_name)
    except (ImportError, AttributeError, ValueError):
        return qualified_name
    for cls in load(backend).classes:
        try:
            if import_native(cls.name) is klass:
                return cls.name
        except (ImportError, AttributeError):
            continue
    return qualified_name


def refusal(qualified_name: str) -> str:
    return registry().refusal(qualified_name)


def signature(qualified_name: str) -> inspect.Signature:
    return registry().signature(qualified_name)


# -- helpers for the presets in the backends' descriptors --------------------------------------

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
