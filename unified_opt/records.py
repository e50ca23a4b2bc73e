"""An algorithm's record: what the conformance suite, the tests and the docs know about
it beyond its spec, kept next to the spec (in the spirit of torch's ``OptimizerInfo``).

A spec module ends with its record::

    @register
    @spec_dataclass
    class Adan(Spec):
        ...

    RECORD = record(Adan, samples=(Adan(lr=0.01), ...), planted=(...), cases=(...))

Every table that lists algorithms derives from the records: the conformance suite's
cases (:attr:`Record.cases`, :attr:`Record.case_module`, the non-finite case's
:attr:`Record.nonfinite`), the tests' table of samples and planted deviations, the
benchmark table of the kernels and the docs' plots (:attr:`Record.benchmark`), the API
pages. ``docs/contributing.md`` gives the recipe.

An algorithm may also come from outside the package: a module that registers a spec and
its record, named in the entry-point group ``unified_opt.algorithms`` of its
distribution, or in the environment variable ``UNIFIED_OPT_ALGORITHMS`` (module names,
comma-separated; the conformance runner's workers inherit it). :func:`load_plugins`
(in :mod:`unified_opt.spec`) imports them the first time the registry is read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, cast

from .spec import ENTRY_POINT_GROUP, ENVIRONMENT, Spec, load_plugins, registered_class

__all__ = ["ENTRY_POINT_GROUP", "ENVIRONMENT", "CaseSketch", "Planted", "Record",
           "benchmarked", "load_plugins", "record", "record_of", "records"]


@dataclass(frozen=True)
class Planted:
    """A wrong variant of a sample: ``spec`` run on each backend must fail against the
    oracle of ``spec.replace(**wrong)`` (the suite's power)."""

    spec: Spec
    wrong: Mapping[str, Any]


@dataclass(frozen=True)
class CaseSketch:
    """A conformance case on the standard parameter set, the default steps and paths
    (``unified_opt.conformance.cases.Case`` holds the rest; a case that needs more goes
    in :attr:`Record.case_module`)."""

    id: str
    spec: Spec
    description: str = ""


@dataclass(frozen=True)
class Record:
    """What the suite, the tests and the docs need of one algorithm.

    Attributes:
        samples: specs covering its knobs: the tests run each on every backend, on the
            ``auto`` and the ``own`` path, against the float64 oracle. The tests' table
            (``tests/algorithms.py``) adds the samples that go with a backend's
            hand-built native class; an algorithm needs at least one in all.
        planted: deviations of samples that the comparison must flag.
        cases: its conformance cases on the standard parameter set.
        case_module: a module (dotted name) whose ``cases()`` returns further
            ``Case`` objects (other parameters, groups, hand-built native classes).
        nonfinite: knob changes for its non-finite-gradient case (a larger lr where the
            default barely moves the parameters).
        benchmark: the spec of the benchmark table (step times, the kernels'
            instruction counts, the docs' plots); ``None``: not in the table.
        params: the parameters (name -> shape) its cases, its non-finite case and the
            tests' runs of its samples use, for an algorithm that takes some shapes only
            (Muon: matrices); ``None``: the standard set (every rank, a 0-size tensor).
    """

    samples: tuple[Spec, ...]
    planted: tuple[Planted, ...] = ()
    cases: tuple[CaseSketch, ...] = ()
    case_module: str | None = None
    nonfinite: Mapping[str, Any] = field(default_factory=dict)
    benchmark: Spec | None = None
    params: Mapping[str, tuple[int, ...]] | None = None

    def dense_params(self) -> dict[str, tuple[int, ...]] | None:
        """:attr:`params` without their 0-size ones (as a network being ported holds
        none), or None for the standard set."""
        if self.params is None:
            return None
        return {name: shape for name, shape in self.params.items() if 0 not in shape}


_RECORDS: dict[str, Record] = {}


def record(spec_class: type[Spec], *, samples: tuple[Spec, ...] = (),
           planted: tuple[Planted, ...] = (), cases: tuple[CaseSketch, ...] = (),
           case_module: str | None = None, nonfinite: Mapping[str, Any] | None = None,
           benchmark: Spec | None = None,
           params: Mapping[str, tuple[int, ...]] | None = None) -> Record:
    """Keep the record of registered ``spec_class`` (see the module) and return it.

    Every spec it holds must be of ``spec_class``; a sample, a case and a planted
    deviation are checked here, so a wrong record fails at import, naming the field."""
    owner = f"record({getattr(spec_class, '__name__', spec_class)!r})"
    if not isinstance(spec_class, type) or not issubclass(spec_class, Spec):
        raise TypeError(f"record: spec_class must be a Spec subclass, got {spec_class!r}")
    samples = _specs(owner, "samples", samples, spec_class)
    if not isinstance(planted, tuple) or not all(isinstance(p, Planted) for p in planted):
        raise TypeError(f"{owner}: planted must be a tuple of Planted, got {planted!r}")
    for deviation in planted:
        if deviation.spec not in samples:
            raise ValueError(f"{owner}: a planted deviation must be of a sample, got "
                             f"{deviation.spec!r}")
        deviation.spec.replace(**dict(deviation.wrong))     # the knobs exist and are valid
    if not isinstance(cases, tuple) or not all(isinstance(c, CaseSketch) for c in cases):
        raise TypeError(f"{owner}: cases must be a tuple of CaseSketch, got {cases!r}")
    _specs(owner, "cases", tuple(c.spec for c in cases), spec_class)
    if not cases and case_module is None:
        raise ValueError(f"{owner}: give its conformance cases (cases= or case_module=)")
    if case_module is not None and not isinstance(case_module, str):
        raise TypeError(f"{owner}: case_module must be a dotted module name, got "
                        f"{case_module!r}")
    nonfinite = dict(nonfinite or {})
    _default(spec_class).replace(**nonfinite)
    if benchmark is not None:
        _specs(owner, "benchmark", (benchmark,), spec_class)
    name = spec_class.name
    if registered_class(name) is not spec_class:
        raise ValueError(f"{owner}: {name!r} is not registered (decorate the class with "
                         "@register first)")
    if name in _RECORDS:
        raise ValueError(f"{owner}: {name!r} has a record already")
    if params is not None:
        if not isinstance(params, Mapping) or not params or not all(
                isinstance(n, str) and isinstance(shape, tuple)
                and all(isinstance(d, int) and d >= 0 for d in shape)
                for n, shape in params.items()):
            raise TypeError(f"{owner}: params must be a non-empty mapping of names to "
                            f"shapes (tuples of ints >= 0), got {params!r}")
        params = dict(params)
    made = Record(samples, planted, cases, case_module, nonfinite, benchmark, params)
    _RECORDS[name] = made
    return made


def _default(spec_class: type[Spec]) -> Spec:
    made: Spec = cast(Any, spec_class)()      # every field of a spec has a default
    return made


def _specs(owner: str, field_name: str, specs, spec_class) -> tuple[Spec, ...]:
    if not isinstance(specs, tuple):
        raise TypeError(f"{owner}: {field_name} must be a tuple of specs, got {specs!r}")
    for spec in specs:
        if type(spec) is not spec_class:
            raise TypeError(f"{owner}: {field_name} must hold {spec_class.__name__} specs, "
                            f"got {spec!r}")
    return specs


def record_of(name: str) -> Record:
    """The record of registry algorithm ``name`` (ValueError when it has none)."""
    load_plugins()
    found = _RECORDS.get(name)
    if found is None:
        raise ValueError(f"algorithm {name!r} has no record: its spec module ends with "
                         "RECORD = record(...) (docs/contributing.md)")
    return found


def records() -> dict[str, Record]:
    """Every algorithm's record, by registry name (the algorithms without one left out:
    ``tests/test_records.py`` requires one of every algorithm)."""
    load_plugins()
    return dict(sorted(_RECORDS.items()))


def benchmarked() -> dict[str, Spec]:
    """The benchmark table's algorithms, by registry name: each record's
    :attr:`Record.benchmark` spec, the records without one left out."""
    return {name: entry.benchmark for name, entry in records().items()
            if entry.benchmark is not None}
