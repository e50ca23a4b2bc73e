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


def insert_imports(module, imports: list[str]):
    """``imports`` not in the script yet, after its last top-level import."""
    import libcst as cst

    present = f"\n{module.code}"
    new = [cst.parse_statement(line + "\n") for line in imports
           if f"\n{line}\n" not in present]
    if not new:
        return module
    body = list(module.body)
    last = max((i for i, s in enumerate(body) if isinstance(s, cst.SimpleStatementLine)
                and any(isinstance(x, (cst.Import, cst.ImportFrom)) for x in s.body)),
               default=None)
    if last is None:
        docstring = bool(body) and isinstance(body[0], cst.SimpleStatementLine) and \
            isinstance(body[0].body[0], cst.Expr) and isinstance(
                body[0].body[0].value, (cst.SimpleString, cst.ConcatenatedString))
        last = 0 if docstring else -1
    return module.with_changes(body=body[:last + 1] + new + body[last + 1:])


def nothing_found(filename: str) -> str:
    """What :attr:`Ported.nothing_found` says of a script without an optimizer
    construction."""
    return (f"{filename}: no optimizer construction found: the port reads direct calls of "
            "torch, Paddle and MindSpore optimizer classes (torch.optim.AdamW(...), "
            "paddle.optimizer.Adam(...), mindspore.nn.Adam(...)) through the script's "
            "imports")
