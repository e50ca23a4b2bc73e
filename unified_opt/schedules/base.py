"""Schedule base class, registry, JSON encoding and the argument checks schedules share."""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, TypeVar

from .. import _validation as v

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:
    def dataclass_transform(**_: Any) -> Callable[[Any], Any]:
        """For the type checker only (as in :mod:`unified_opt.spec`)."""
        return lambda decorated: decorated

_SCHEDULES: dict[str, type["Schedule"]] = {}
_ScheduleClass = TypeVar("_ScheduleClass", bound=type)


def schedules() -> list[str]:
    """Registry names of every schedule, sorted."""
    return sorted(_SCHEDULES)


@dataclass_transform(kw_only_default=True, frozen_default=True)
def schedule_dataclass(cls: _ScheduleClass) -> _ScheduleClass:
    """Decorator: frozen keyword-only dataclass, argument-checked, registered."""
    from .._validation import checked_keyword_init as _checked_init

    cls = dataclasses.dataclass(frozen=True, kw_only=True)(cls)
    if "schedule" in {f.name for f in dataclasses.fields(cls)}:
        raise TypeError(f"{cls.__name__}: a field named 'schedule' clashes with to_dict's key")
    cls.__init__ = _checked_init(cls, cls.__init__)
    _SCHEDULES[cls.name] = cls
    return cls


class Schedule:
    """Base of every schedule: ``schedule(step)`` is the lr of 0-based step ``step``.

    ``value(step)`` is the pure formula; ``__call__`` checks the step first.
    """

    name: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for key, value in self._check(type(self).__name__).items():
            object.__setattr__(self, key, value)

    def _check(self, owner: str) -> dict[str, Any]:
        return {}

    def __call__(self, step: int) -> float:
        if isinstance(step, bool) or not isinstance(step, numbers.Integral):
            raise TypeError(f"{type(self).__name__}: step must be an int >= 0, got {step!r} "
                            f"of type {type(step).__name__}")
        if step < 0:
            raise ValueError(f"{type(self).__name__}: step must be an int >= 0, got {step!r}")
        return float(self.value(int(step)))     # (a numpy integer: the same count)

    def value(self, step: int) -> float:
        raise NotImplementedError

    def momentum(self, step: int) -> float | None:
        """The momentum (SGD) or beta1 (Adam family) this schedule sets for ``step``;
        None when it leaves them alone (every schedule but cycling OneCycle / Cyclic)."""
        return None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"schedule": self.name}
        for f in dataclasses.fields(self):
            out[f.name] = _encode(self, f.name, getattr(self, f.name))
        return out


def checked_factor(owner: Schedule, step: int, factor) -> float:
    """``fn(step)`` of a user's function, refused where it would make an lr no spec may
    have (not a finite number >= 0). The schedules built in follow their frameworks'
    formulas and are not checked here."""
    if isinstance(factor, bool) or not isinstance(factor, numbers.Real):
        raise TypeError(f"{type(owner).__name__}: fn({step}) gave {factor!r} of type "
                        f"{type(factor).__name__}; the lr factor must be a number")
    if not math.isfinite(factor) or factor < 0:
        raise ValueError(f"{type(owner).__name__}: fn({step}) gave {factor!r}; the lr "
                         f"factor must be finite and >= 0")
    return float(factor)


def _encode(owner: Schedule, field: str, value: Any) -> Any:
    if isinstance(value, Schedule):
        return value.to_dict()
    if isinstance(value, (tuple, list)):
        return [_encode(owner, field, item) for item in value]
    if callable(value):
        raise TypeError(f"{type(owner).__name__}: {field}={value!r} is a Python callable and "
                        "cannot be serialised to JSON; rebuild the schedule in the receiving "
                        "process, or express it with a registered schedule "
                        f"({', '.join(schedules())})")
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, Mapping):
        return schedule_from_dict(value)
    if isinstance(value, list):
        return [_decode(item) for item in value]
    return value


def schedule_from_dict(data: Mapping[str, Any]) -> Schedule:
    """Inverse of :meth:`Schedule.to_dict`."""
    if not isinstance(data, Mapping) or "schedule" not in data:
        raise ValueError(f"schedule_from_dict: expected a mapping with a 'schedule' key, "
                         f"got {data!r}")
    name = data["schedule"]
    if name not in _SCHEDULES:
        raise ValueError(f"unknown schedule {name!r}; registered: {schedules()}")
    kwargs = {k: _decode(value) for k, value in data.items() if k != "schedule"}
    return _SCHEDULES[name](**kwargs)


# -- checks shared by the schedule modules (each names the argument and the value) --------

def check_lr(owner: str, name: str, value: Any) -> float:
    return v.check_range(owner, name, value, low=0.0)


def check_schedule(owner: str, name: str, value: Any) -> Schedule:
    if not isinstance(value, Schedule):
        raise TypeError(f"{owner}: {name} must be a Schedule, got {value!r} "
                        f"of type {type(value).__name__}")
    return value


def check_callable(owner: str, name: str, value: Any) -> Any:
    if isinstance(value, Schedule) or not callable(value):
        raise TypeError(f"{owner}: {name} must be a Python callable (function of the step), "
                        f"got {value!r} of type {type(value).__name__}")
    return value


def check_list(owner: str, name: str, value: Any) -> tuple:
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"{owner}: {name} must be a list or tuple, got {value!r} "
                        f"of type {type(value).__name__}")
    return tuple(value)


def check_steps(owner: str, name: str, value: Any, *, strictly: bool = False) -> tuple[int, ...]:
    """A list of step indices >= 0, non-decreasing (``strictly``: increasing)."""
    items = check_list(owner, name, value)
    out = tuple(v.check_int(owner, f"{name}[{i}]", item, low=0) for i, item in enumerate(items))
    for i in range(1, len(out)):
        if out[i] < out[i - 1] or (strictly and out[i] == out[i - 1]):
            raise ValueError(f"{owner}: {name} must be {'increasing' if strictly else 'sorted'},"
                             f" got {list(out)!r}")
    return out
