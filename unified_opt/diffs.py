"""What ``uo.diff`` returns: whether two configurations compute the same numbers
(:class:`Diff`), how far B's trajectory parts from A's (:class:`Parting`) and each
differing field (:class:`KnobDifference`). The comparison itself runs the references
under the conformance suite's rule (:mod:`unified_opt.conformance.spec_diff`); these
result types are plain data, so the core can name them without importing the suite.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .spec import Spec

#: seeded gradient streams per diff
STREAMS = 3
#: steps per stream (the conformance suite's minimum)
STEPS = 50


@dataclass(frozen=True)
class Parting:
    """How far B's trajectory is from A's over the streams: ``first_step`` (1-based,
    None when it never leaves A's floor), ``quantity`` (where it first does),
    ``worst_ratio`` (error/floor, the rule's K is the line) and ``gap`` (the parameters'
    distance at the last step as a fraction of A's movement; the largest stream's)."""

    same: bool
    worst_ratio: float
    first_step: int | None
    quantity: str | None
    gap: float

    def text(self) -> str:
        if self.same:
            return f"within the float32 noise floor (worst error/floor {self.worst_ratio:.3g})"
        where = (f" from step {self.first_step} ({self.quantity})" if self.first_step
                 else "")
        return (f"parts{where}: worst error/floor {self.worst_ratio:.3g}, parameters "
                f"{self.gap:.3g} of their movement apart after {STEPS} steps")


@dataclass(frozen=True)
class KnobDifference:
    """One field whose value differs: ``a`` and ``b``; ``alone``: how A with only this
    field set to ``b`` parts from A (None where that spec is not valid: ``why_not``)."""

    field: str
    a: Any
    b: Any
    alone: Parting | None = None
    why_not: str = ""

    def text(self) -> str:
        head = f"{self.field}: {self.a!r} vs {self.b!r}"
        if self.alone is None:
            return head + (f" (cannot be tried alone: {self.why_not})" if self.why_not else "")
        if self.alone.same:
            return head + " -- alone, no effect beyond the noise floor"
        return head + " -- alone, " + self.alone.text()


@dataclass(frozen=True)
class Diff:
    """What :func:`diff` found: ``same``; ``parting`` (B against A); ``knobs`` (every
    differing field, each tried alone where the algorithms agree); ``algorithms`` (A's
    and B's registry names)."""

    spec_a: Spec
    spec_b: Spec
    parting: Parting
    knobs: tuple[KnobDifference, ...]

    @property
    def same(self) -> bool:
        return self.parting.same

    def __bool__(self) -> bool:
        return self.same

    def __str__(self) -> str:
        verdict = "SAME" if self.same else "DIFFERENT"
        lines = [f"{verdict}: {self.parting.text()} "
                 f"({STREAMS} gradient streams x {STEPS} steps, float32 against float64)"]
        if self.spec_a.name != self.spec_b.name:
            lines.append(f"algorithm: {self.spec_a.name!r} vs {self.spec_b.name!r}")
        if self.knobs:
            lines.append("knobs that differ:" if self.spec_a.name == self.spec_b.name
                         else "fields that differ:")
            lines += [f"  {k.text()}" for k in self.knobs]
        elif self.spec_a == self.spec_b:
            lines.append("the two specs are equal")
        return "\n".join(lines)
