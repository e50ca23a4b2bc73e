"""Conformance cases: a spec, named parameter shapes, a seed, a number of steps, paths.

:func:`default_cases` exercises every knob of every algorithm with hyperparameters
chosen so that the knob changes the numbers far beyond float32 rounding (eps 1e-3 so
its placement shows, changing learning rates so the lr placement and schedule step
semantics show), and every native lowering row: the frameworks' own classes appear
through their presets. One module per algorithm family, one for the lr schedules, one for
the training loop, one for non-finite gradients (every algorithm) and one for bfloat16
parameters and a spec's ``state_dtype``.
"""

from __future__ import annotations

import fnmatch
import importlib
from typing import Iterable

import unified_opt as uo
from unified_opt.records import records

from . import low_precision, lr_schedules, nonfinite, training
from .case import (
    DEFAULT_PATHS,
    DEFAULT_STEPS,
    DENSE_PARAMS,
    HAND,
    KERNEL_SIZES,
    MIN_STEPS,
    PARAMS,
    SUITE_VERSION,
    Case,
    dense,
)
from .native import Native

__all__ = ["Case", "DEFAULT_PATHS", "DEFAULT_STEPS", "DENSE_PARAMS", "HAND", "KERNEL_SIZES",
           "MIN_STEPS", "Native", "PARAMS", "SUITE_VERSION", "default_cases", "dense", "select",
           "uncovered_rows"]

#: the cases that span algorithms (after every algorithm's own)
_ACROSS = (lr_schedules, training, nonfinite, low_precision)


def record_cases(names: Iterable[str] | None = None) -> list[Case]:
    """Every algorithm's own cases (of ``names`` only, when given), from its record
    (:mod:`unified_opt.records`): the sketches on the standard parameter set, then each
    ``case_module``'s ``cases()`` (once per module: a family module holds several
    algorithms' cases, and returns them all)."""
    cases, modules = [], []
    chosen = None if names is None else set(names)
    for name, entry in records().items():
        if chosen is not None and name not in chosen:
            continue
        cases += [Case(id=sketch.id, spec=sketch.spec, description=sketch.description,
                       params=dict(entry.params or PARAMS))
                  for sketch in entry.cases]
        if entry.case_module is not None and entry.case_module not in modules:
            modules.append(entry.case_module)
    for module in modules:
        cases += importlib.import_module(module).cases()
    return cases


def default_cases(algorithms: Iterable[str] | None = None) -> list[Case]:
    """The default suite, optionally only the cases of the given algorithm names."""
    if algorithms is None:
        return record_cases() + [case for family in _ACROSS for case in family.cases()]
    if isinstance(algorithms, str) or not isinstance(algorithms, Iterable):
        raise TypeError(f"default_cases: algorithms must be a list of names, got "
                        f"{algorithms!r}")
    names = list(algorithms)
    unknown = [n for n in names if n not in uo.algorithms()]
    if unknown:
        raise ValueError(f"default_cases: unknown algorithm(s) {unknown}; registered: "
                         f"{uo.algorithms()}")
    # only the named algorithms' case modules are imported
    cases = record_cases(names) + [case for family in _ACROSS for case in family.cases()]
    covered = sorted({c.spec.name for c in cases})
    missing = [n for n in names if n not in covered]
    if missing:
        raise ValueError(f"default_cases: no conformance cases yet for {missing}; cases "
                         f"exist for {covered}")
    return [c for c in cases if c.spec.name in names]


def select(cases: list[Case], patterns: Iterable[str]) -> list[Case]:
    """The cases whose id matches one of the shell-style ``patterns``."""
    patterns = list(patterns)
    chosen = [c for c in cases if any(fnmatch.fnmatchcase(c.id, p) for p in patterns)]
    if not chosen:
        raise ValueError(f"no case id matches {patterns}; ids: {[c.id for c in cases]}")
    return chosen


def uncovered_rows(cases: list[Case], backend: str) -> list[str]:
    """Native lowerings of ``backend`` (for the algorithms of ``cases``) that no case's
    "auto" build selects, judged from the spec alone (conditions on the parameters, such
    as MindSpore's "a parameter with elements", are the report's business: it lists the
    rows no run built with)."""
    from unified_opt.backend import load

    adapter = load(backend)
    chosen = set()
    for case in cases:
        decision = adapter.decide(case.spec)
        if decision.path == "native":
            chosen.add((decision.algorithm, decision.native))
    algorithms = {case.spec.name for case in cases}
    return [f"{lowering.algorithm} -> {cls.name}" for cls, lowering in adapter.rows()
            if lowering.algorithm in algorithms and (lowering.algorithm, cls.name) not in chosen]
