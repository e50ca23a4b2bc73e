"""Lowering tables: which native class computes a spec exactly, and why (or why not).

Each backend holds a tuple of :class:`NativeLowering` rows. A row names the native
class, the conditions under which it computes exactly the spec (each with the reason
in words), how spec hyperparameters become native arguments, and how the native
optimizer's state maps onto the spec's state names. :func:`decide` picks the first
row whose conditions all hold; otherwise the backend runs the spec's own update.
The conformance suite checks every row's claim.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from .spec import Spec

PATHS = ("auto", "native", "own")


@dataclass(frozen=True)
class Condition:
    """A requirement on the spec, e.g. ``eps_placement == 'outside'``."""

    text: str
    holds: Callable[[Spec], bool]


@dataclass(frozen=True)
class NativeLowering:
    algorithm: str
    native: str                                   # qualified class name
    conditions: tuple[Condition, ...]
    arguments: Callable[[Spec], dict[str, Any]]   # native constructor keywords
    state: dict[str, str] = field(default_factory=dict)  # spec state -> native state
    note: str = ""                                # shown by explain

    def unmet(self, spec: Spec) -> list[str]:
        return [c.text for c in self.conditions if not holds(c, spec)]


def holds(condition: Condition, spec: Spec) -> bool:
    """Whether ``condition`` holds for ``spec``; a condition written for a number that
    meets a schedule there (a weight-decay schedule compared with 0) does not hold."""
    try:
        return bool(condition.holds(spec))
    except TypeError:
        return False


def when(text: str, holds: Callable[[Spec], bool]) -> Condition:
    return Condition(text, holds)


@dataclass(frozen=True)
class Decision:
    """What ``uo.build`` does for a spec on a backend, and why."""

    backend: str
    algorithm: str
    path: str                                  # "native" or "own"
    native: str | None                         # the native class on the native path
    reason: str
    rejected: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (native class, unmet conditions)
    lowering: NativeLowering | None = None
    own_class: str | None = None

    def __str__(self) -> str:
        if self.path == "native":
            head = f"{self.backend}: {self.algorithm} -> native {self.native}"
        else:
            head = f"{self.backend}: {self.algorithm} -> own implementation ({self.own_class})"
        lines = [head, f"  why: {self.reason}"]
        for native, unmet in self.rejected:
            lines.append(f"  not {native}: needs " + "; ".join(unmet))
        return "\n".join(lines)


def decide(backend: str, table: Sequence[NativeLowering], spec: Spec, path: str = "auto",
           own_class: str = "",
           extra: Callable[[NativeLowering], Sequence[Condition]] | None = None) -> Decision:
    """Choose the lowering of ``spec`` on ``backend`` from its ``table``.

    ``extra(row)``: conditions the backend adds to every row, for what lies outside the
    algorithm (the gradient pre-step, per-step hyperparameters): which of them the
    backend can run around that native class."""
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")
    rows = [row for row in table if row.algorithm == spec.name]
    rejected = []
    for row in rows:
        unmet = row.unmet(spec)
        if extra is not None:
            unmet += [c.text for c in extra(row) if not holds(c, spec)]
        if not unmet:
            if path == "own":
                return Decision(backend, spec.name, "own", None,
                                f"own implementation requested (native {row.native} would be "
                                "exact)", tuple(rejected), None, own_class)
            reason = f"{row.native} computes exactly this spec"
            if row.note:
                reason += f" ({row.note})"
            return Decision(backend, spec.name, "native", row.native, reason,
                            tuple(rejected), row, own_class)
        rejected.append((row.native, tuple(unmet)))
    if path == "native":
        detail = "; ".join(f"{n} needs {', '.join(u)}" for n, u in rejected) or \
            f"{backend} has no native class for {spec.name!r}"
        raise ValueError(f"path='native': no native {backend} optimizer computes this spec "
                         f"exactly: {detail}")
    if path == "own":
        reason = "own implementation requested"
    elif rows:
        reason = "no native class computes this configuration exactly"
    else:
        reason = f"{backend} has no native optimizer for {spec.name!r}"
    return Decision(backend, spec.name, "own", None, reason, tuple(rejected), None, own_class)


def distinct(items) -> list:
    """The distinct items in order of first appearance, compared by ``==`` (specs hold
    schedules and tuples of them: they are compared, not hashed)."""
    out: list = []
    for item in items:
        if all(item is not seen and item != seen for seen in out):
            out.append(item)
    return out


def every_group_condition(row: NativeLowering, plans) -> Condition | None:
    """The row's own conditions for every parameter's spec (groups and name rules
    applied): a group's hyperparameters must be ones the native class takes too. None
    without plans."""
    specs = distinct(plan.spec for plan in plans or ())
    if not specs:
        return None
    return when("every parameter group's hyperparameters meet these conditions too",
                lambda s: not any(row.unmet(p) for p in specs))


def _no_pre_step(spec: Spec) -> bool:
    from .pre_step import has_pre_step

    return not has_pre_step(spec)


#: conditions for a native class that runs nothing around its own step
NO_PRE_STEP = when("no gradient pre-step: grad_clip=None, loss_scale=1, skip_nonfinite=False, "
                   "grad_centralization=False (the native class would not do it)",
                   _no_pre_step)
CONSTANT_HYPERPARAMETERS = when(
    "constant weight decay and momentum (no weight-decay schedule, no momentum-cycling lr "
    "schedule: the native class would not change them per step)",
    lambda s: not s.varies_per_step())
