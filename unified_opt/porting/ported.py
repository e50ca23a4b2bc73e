"""What ``unified-opt port`` gives back (:mod:`.script`, :mod:`.mapper`): the rewritten
script, each rewrite, notes, and what was left to the user."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..spec import Spec


@dataclass
class Rewrite:
    """One rewritten construction: its line in the script, the code before and after,
    and why (``uo.explain``)."""

    line: int
    original: str
    replacement: str
    reasons: str
    spec: Spec | None = None      # what an optimizer's construction computes


@dataclass
class Ported:
    """The rewritten script, what changed, and what is left to the user: ``refusals``,
    ``(line, message)`` of each construction left as written (marked in the source by a
    ``# unified-opt port: not ported: ...`` comment)."""

    source: str
    rewrites: list[Rewrite]
    notes: list[str] = field(default_factory=list)
    refusals: list[tuple[int, str]] = field(default_factory=list)
    #: why nothing was ported, where the script holds no optimizer construction the port
    #: reads and nothing was refused either ("" otherwise): the command exits 1 then
    nothing_found: str = ""


class PortRefused(ValueError):
    """Constructions that cannot be read statically: ``(line, message)`` each."""

    def __init__(self, refusals: list[tuple[int, str]]):
        self.refusals = refusals
        super().__init__("; ".join(f"line {line}: {message}" for line, message in refusals))
