"""Argument checks shared by specs, schedules and presets.

Every check names the argument and the offending value: ``TypeError`` for a wrong
type, ``ValueError`` for a wrong value. Nothing is coerced silently: ``True`` is not
a number, ``"0.1"`` is not a float, and a list of betas becomes a tuple only after
each element has been checked.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
from typing import Any, Iterable


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def check_real(owner: str, name: str, value: Any) -> float:
    """A finite real number (int or float, not bool); returned as a Python float."""
    if not _is_real(value):
        raise TypeError(f"{owner}: {name} must be a real number, got {value!r} "
                        f"of type {type(value).__name__}")
    try:
        as_float = float(value)
    except OverflowError:       # an int beyond any float
        raise ValueError(f"{owner}: {name} must be finite, got {value!r}") from None
    if not math.isfinite(as_float):
        raise ValueError(f"{owner}: {name} must be finite, got {as_float!r}")
    return as_float


def check_range(owner: str, name: str, value: Any, *, low: float | None = None,
                high: float | None = None, low_open: bool = False,
                high_open: bool = False) -> float:
    """A finite real number inside [low, high]; ``*_open`` makes that end exclusive."""
    value = check_real(owner, name, value)
    too_low = low is not None and (value <= low if low_open else value < low)
    too_high = high is not None and (value >= high if high_open else value > high)
    if too_low or too_high:
        parts = []
        if low is not None:
            parts.append(f"{'>' if low_open else '>='} {low:g}")
        if high is not None:
            parts.append(f"{'<' if high_open else '<='} {high:g}")
        raise ValueError(f"{owner}: {name} must be {' and '.join(parts)}, got {value!r}")
    return value


def check_bool(owner: str, name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{owner}: {name} must be a bool, got {value!r} "
                        f"of type {type(value).__name__}")
    return value


def check_float(owner: str, name: str, value: Any) -> float:
    """A Python float, not an int or a bool: MindSpore's and MindFormers' own checks
    (``check_is_float``, ``check_value_type(..., [float])``), which the presets of their
    classes repeat."""
    if isinstance(value, bool) or not isinstance(value, float):
        raise TypeError(f"{owner}: {name} must be a float, got {value!r} of type "
                        f"{type(value).__name__}")
    return value


def check_int(owner: str, name: str, value: Any, *, low: int | None = None) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise TypeError(f"{owner}: {name} must be an int, got {value!r} "
                        f"of type {type(value).__name__}")
    value = int(value)
    if low is not None and value < low:
        raise ValueError(f"{owner}: {name} must be >= {low}, got {value!r}")
    return value


def check_choice(owner: str, name: str, value: Any, choices: Iterable[str]) -> str:
    choices = tuple(choices)
    if not isinstance(value, str):
        raise TypeError(f"{owner}: {name} must be one of {choices}, got {value!r} "
                        f"of type {type(value).__name__}")
    if value not in choices:
        raise ValueError(f"{owner}: {name} must be one of {choices}, got {value!r}")
    return value


def check_sequence(owner: str, name: str, value: Any, length: int) -> tuple:
    """A list or tuple of exactly ``length`` items, returned as a tuple."""
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{owner}: {name} must be a list or tuple of {length} values, "
                        f"got {value!r} of type {type(value).__name__}")
    if len(value) != length:
        raise ValueError(f"{owner}: {name} must have {length} values, got {value!r}")
    return tuple(value)


def check_betas(owner: str, name: str, value: Any, length: int = 2) -> tuple[float, ...]:
    """Exponential-decay rates, each in [0, 1)."""
    items = check_sequence(owner, name, value, length)
    out = []
    for i, beta in enumerate(items):
        out.append(check_range(owner, f"{name}[{i}]", beta, low=0.0, high=1.0,
                               high_open=True))
    return tuple(out)


def check_names(owner: str, name: str, value: Any) -> tuple[str, ...]:
    """A list or tuple of non-empty strings (shell-style parameter-name patterns)."""
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise TypeError(f"{owner}: {name} must be a list or tuple of strings, got "
                        f"{value!r} of type {type(value).__name__}")
    for item in value:
        if not isinstance(item, str):
            raise TypeError(f"{owner}: {name} must contain only strings, got {item!r} "
                            f"in {value!r}")
        if not item:
            raise ValueError(f"{owner}: {name} must not contain an empty string, "
                             f"got {value!r}")
    return tuple(value)


def checked_keyword_init(cls: type, original):
    """``original`` (a dataclass __init__) taking keyword arguments only, and naming the
    valid ones when given others."""
    @functools.wraps(original)
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        owner = type(self).__name__
        if args:
            raise TypeError(f"{owner} takes keyword arguments only, got {len(args)} "
                            f"positional argument(s) {args!r}")
        # the class's own fields first: they are what a caller usually means
        fields = [f.name for f in dataclasses.fields(self)]
        own = [n for n in fields if n in cls.__dict__.get("__annotations__", {})]
        valid = own + [n for n in fields if n not in own]
        unknown = sorted(set(kwargs) - set(valid))
        if unknown:
            raise TypeError(f"{owner} got unexpected keyword argument(s) {unknown}; "
                            f"valid: {valid}")
        original(self, **kwargs)

    return __init__
