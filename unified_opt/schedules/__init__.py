"""Learning-rate schedules as specs: ``s(step) -> lr`` for the 0-based optimizer step.

A schedule is a frozen keyword-only dataclass with a pure ``__call__``, a JSON round
trip (``to_dict`` / ``schedule_from_dict``) and validation at construction. Pass one
as ``lr=`` to any algorithm spec; each backend lowers it to the framework's own
mechanism (see the backend lowering modules).
"""

from .base import Schedule, schedule_from_dict, schedules
from .basic import Constant, Cosine, Exponential, LinearWarmup, Step

__all__ = ["Schedule", "schedule_from_dict", "schedules", "Constant", "Cosine",
           "Exponential", "LinearWarmup", "Step"]
