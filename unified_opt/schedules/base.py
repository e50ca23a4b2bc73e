"""Schedule base class and registry."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping

_SCHEDULES: dict[str, type["Schedule"]] = {}


def schedules() -> list[str]:
    """Registry names of every schedule, sorted."""
    return sorted(_SCHEDULES)


def schedule_dataclass(cls: type) -> type:
    """Decorator: frozen keyword-only dataclass, argument-checked, registered."""
    from ..spec import _checked_init  # shared keyword checking

    cls = dataclasses.dataclass(frozen=True, kw_only=True)(cls)
    cls.__init__ = _checked_init(cls, cls.__init__)
    _SCHEDULES[cls.name] = cls
    return cls


class Schedule:
    """Base of every schedule: ``schedule(step)`` is the lr of 0-based step ``step``."""

    name: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for key, value in self._check(type(self).__name__).items():
            object.__setattr__(self, key, value)

    def _check(self, owner: str) -> dict[str, Any]:
        return {}

    def __call__(self, step: int) -> float:
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"{type(self).__name__}: step must be an int >= 0, got {step!r}")
        return float(self.value(step))

    def value(self, step: int) -> float:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"schedule": self.name}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Schedule):
                value = value.to_dict()
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        return out


def schedule_from_dict(data: Mapping[str, Any]) -> Schedule:
    """Inverse of :meth:`Schedule.to_dict`."""
    if not isinstance(data, Mapping) or "schedule" not in data:
        raise ValueError(f"schedule_from_dict: expected a mapping with a 'schedule' key, "
                         f"got {data!r}")
    name = data["schedule"]
    if name not in _SCHEDULES:
        raise ValueError(f"unknown schedule {name!r}; registered: {schedules()}")
    kwargs = {k: (schedule_from_dict(v) if isinstance(v, Mapping) else v)
              for k, v in data.items() if k != "schedule"}
    return _SCHEDULES[name](**kwargs)
