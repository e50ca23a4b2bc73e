"""Native optimizer classes as data: one :class:`NativeClass` per class of a framework.

A descriptor holds every fact about one native class that the library relies on:

* ``name``: its qualified class name (``"torch.optim.AdamW"``);
* ``from_native``: the preset, a function with the class's own keyword arguments and
  defaults returning the exact spec (``uo.preset`` calls it);
* ``lowerings``: for each algorithm the class computes, the conditions under which it
  computes a spec exactly (each with its reason in words) and ``to_native``, the class's
  keyword arguments for such a spec: the inverse of ``from_native``;
* ``state``: spec state name -> the class's own state name;
* ``nonfinite``: how the class departs from the spec when a gradient holds inf or NaN
  (measured; empty when it does not), which ``uo.explain`` shows;
* ``example``: the native arguments to read the class with where its defaults alone
  cannot build it (the compatibility matrix, the tests);
* per-class quirks, as fields of the backend's subclass (``TorchClass``, ...).

Because ``from_native`` and ``to_native`` sit side by side, a property test checks
``from_native(to_native(spec)) == spec`` for every lowering and every spec it accepts.

This module imports no framework; :func:`import_native` resolves a class when a build
needs it.
"""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from .groups import NAME_RULES
from .spec import Spec

#: what :meth:`NativeClass.example_arguments` gives native arguments without a default
REQUIRED_ARGUMENTS = {"learning_rate": 0.01, "lr": 0.01, "momentum": 0.9}


@dataclass(frozen=True)
class Condition:
    """A requirement on the spec, e.g. ``eps_placement == 'outside'``, with its reason."""

    text: str
    holds: Callable[[Spec], bool]


def when(text: str, holds: Callable[[Spec], bool]) -> Condition:
    return Condition(text, holds)


def holds(condition: Condition, spec: Spec) -> bool:
    """Whether ``condition`` holds for ``spec``; a condition written for a number that
    meets a schedule there (a weight-decay schedule compared with 0) does not hold."""
    try:
        return bool(condition.holds(spec))
    except TypeError:
        return False


@dataclass(frozen=True)
class Lowering:
    """The native class computing specs of ``algorithm``: exactly when every condition
    holds, with the keyword arguments ``to_native(spec)`` (the lr excluded unless the
    class takes another value than the spec's, e.g. nn.AdaFactor's ``None``).

    ``read_back`` turns the preset's spec into this algorithm's where the preset reads
    the class as another algorithm (``experimental.optim.AdamW(weight_decay=0)`` is
    Adam)."""

    algorithm: str
    conditions: tuple[Condition, ...]
    to_native: Callable[[Spec], dict[str, Any]]
    note: str = ""
    read_back: Callable[[Spec], Spec] | None = None

    def unmet(self, spec: Spec) -> list[str]:
        return [c.text for c in (*self.conditions, STATE_IN_PARAMETER_DTYPE)
                if not holds(c, spec)]


@dataclass(frozen=True, kw_only=True)
class NativeClass:
    """One native optimizer class (see the module docstring). ``refused``: why it has
    no preset; ``not_lowered``: why a build never makes it (a preset only)."""

    name: str
    from_native: Callable[..., Spec] | None = None
    lowerings: tuple[Lowering, ...] = ()
    state: Mapping[str, str] = field(default_factory=dict)
    lr_keyword: str = "lr"
    nonfinite: str = ""
    example: Callable[[], dict] = dict
    refused: str = ""
    not_lowered: str = ""

    def __post_init__(self) -> None:
        if (self.from_native is None) == (not self.refused):
            raise ValueError(f"NativeClass {self.name}: give from_native or refused, "
                             "exactly one")
        if self.refused and self.lowerings:
            raise ValueError(f"NativeClass {self.name}: a refused class has no lowering")

    @property
    def short_name(self) -> str:
        return self.name.rpartition(".")[2]

    def example_arguments(self) -> dict[str, Any]:
        """Native arguments that read the class: every argument without a default (an lr
        0.01, a momentum 0.9) and :attr:`example`'s."""
        import inspect

        params = inspect.signature(self.from_native).parameters
        out = {n: REQUIRED_ARGUMENTS[n] for n, p in params.items()
               if p.default is inspect.Parameter.empty and n in REQUIRED_ARGUMENTS}
        return {**out, **self.example()}

    def native_call(self, lowering: Lowering, spec: Spec) -> dict[str, Any]:
        """The keyword arguments a user would pass to build the class for ``spec``
        (``to_native`` and the lr): what ``from_native`` reads back."""
        arguments = dict(lowering.to_native(spec))
        if self.lr_keyword:
            arguments.setdefault(self.lr_keyword, spec.lr)
        return arguments

    def round_trip(self, lowering: Lowering, spec: Spec) -> Spec:
        """``from_native(native_call(spec))``, read back as ``lowering``'s algorithm, with
        what the build lowers around the class taken from ``spec``: the name rules, and a
        scheduled lr (which the framework's scheduler carries, not the constructor)."""
        scheduled = not isinstance(spec.lr, (int, float))
        called = spec.replace(lr=spec.lr_at(0)) if scheduled else spec
        out = self.from_native(**self.native_call(lowering, called))
        if lowering.read_back is not None:
            out = lowering.read_back(out)
        return out.replace(lr=spec.lr, **without_name_rules(spec, keep=True))


def without_name_rules(spec: Spec, keep: bool = False) -> dict[str, Any]:
    """The name-rule fields of ``spec`` (a build lowers them around the class, into
    parameter groups or the class's own name filter): emptied, or with ``keep`` its own
    values."""
    fields = {f.name for f in dataclasses.fields(spec)}
    return {k: (getattr(spec, k) if keep else ()) for k in NAME_RULES if k in fields}


def import_native(qualified_name: str):
    """The class called ``qualified_name`` (imports its framework)."""
    module, _, name = qualified_name.rpartition(".")
    return getattr(importlib.import_module(module), name)


# -- conditions every backend uses ---------------------------------------------------------

#: every lowering's: the native classes keep their state in the parameter's dtype
STATE_IN_PARAMETER_DTYPE = when(
    "state kept in the parameter's dtype (state_dtype=None: the native class allocates "
    "its state like the parameter)", lambda s: getattr(s, "state_dtype", None) is None)


def _no_pre_step(spec: Spec) -> bool:
    from .pre_step import has_pre_step

    return not has_pre_step(spec)


#: for a native class that runs nothing around its own step
NO_PRE_STEP = when("no gradient pre-step: grad_clip=None, loss_scale=1, skip_nonfinite=False, "
                   "grad_centralization=False (the native class would not do it)",
                   _no_pre_step)
CONSTANT_HYPERPARAMETERS = when(
    "constant weight decay and momentum (no weight-decay schedule, no momentum-cycling lr "
    "schedule: the native class would not change them per step)",
    lambda s: not s.varies_per_step())


def every_group_condition(lowering: Lowering, plans) -> Condition | None:
    """The lowering's own conditions for every parameter's spec (groups and name rules
    applied): a group's hyperparameters must be ones the native class takes too. None
    without plans."""
    from .groups import distinct

    specs = distinct(plan.spec for plan in plans or ())
    if not specs:
        return None
    return when("every parameter group's hyperparameters meet these conditions too",
                lambda s: not any(lowering.unmet(p) for p in specs))


def mentioned_fields(lowering: Lowering, specs) -> set[str]:
    """The spec fields ``lowering``'s conditions and ``to_native`` read, over ``specs``
    (found by running them on a recording view of each spec)."""
    seen: set[str] = set()
    for spec in specs:
        view = _Recording(spec, seen)
        for condition in lowering.conditions:
            holds(condition, view)
        if not lowering.unmet(spec):
            # a build passes step 0's values (a weight-decay schedule evaluated)
            lowering.to_native(_Recording(spec.at_step(0), seen))
    names = {f.name for f in dataclasses.fields(specs[0])} if specs else set()
    return seen & names


class _Recording:
    """A read-only view of a spec that notes which attributes are read."""

    def __init__(self, spec: Spec, seen: set[str]):
        object.__setattr__(self, "_spec", spec)
        object.__setattr__(self, "_seen", seen)

    def __getattr__(self, name: str):
        self._seen.add(name)
        return getattr(self._spec, name)
