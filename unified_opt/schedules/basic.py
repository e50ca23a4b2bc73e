"""The first five schedules, kept importable from here; they live in the family modules
(:mod:`.decay`, :mod:`.cyclic`, :mod:`.compose`)."""

from .compose import LinearWarmup
from .cyclic import Cosine
from .decay import Constant, Exponential, Step

__all__ = ["Constant", "Cosine", "Exponential", "LinearWarmup", "Step"]
