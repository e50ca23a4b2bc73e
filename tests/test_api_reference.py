"""Every public name (``unified_opt.__all__``) is documented for the API reference
(docs/building.md, "The API reference"), in Google style (``Args:``, ``Returns:``,
``Raises:``, ``Example:``, rendered by Sphinx's Napoleon parser):

* a function: ``Returns:``, and ``Args:`` when it takes any argument;
* a class: ``Args:`` (what its constructor takes), and, for a spec, every field named
  there with its meaning; an exception or warning class (raised by the library, not
  made by a user): its docstring;
* a module (``schedules``, ``porting``, ``conformance``, ``lr_scheduler``): a module
  docstring (its members have their own pages, written by the module's own rules);
* a constant (``__version__``): nothing.

The names are real attributes of the package: in ``dir(uo)``, typed, none leaking from
the implementation (``uo.Any``).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import re
import types
import typing

import pytest

import unified_opt as uo

RULE = ("every public name is documented in Google style (docs/building.md, 'The API "
        "reference'): a function has 'Returns:' (and 'Args:' when it takes an argument), "
        "a class 'Args:', a module a docstring; missing")
_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Returns|Yields|Raises|Example|Examples)"
                      r":\s*$", re.M)


def sections(doc: str | None) -> set[str]:
    found = {m.group(1) for m in _SECTION.finditer(doc or "")}
    return {"Args" if s in ("Arguments", "Parameters") else
            "Returns" if s == "Yields" else "Example" if s == "Examples" else s
            for s in found}


def _takes_arguments(function) -> bool:
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return True
    return any(p.name not in ("self", "cls") for p in signature.parameters.values())


def missing(name: str, obj) -> list[str]:
    """What ``obj`` (documented as ``name``) lacks under the rule."""
    if isinstance(obj, types.ModuleType):
        return [] if (obj.__doc__ or "").strip() else [f"{name}: a module docstring"]
    if inspect.isclass(obj):
        doc = inspect.getdoc(obj) or ""
        if issubclass(obj, BaseException):
            return [] if doc.strip() else [f"{name}: a docstring"]
        problems = [] if "Args" in sections(doc) else [f"{name}: Args"]
        if dataclasses.is_dataclass(obj) and isinstance(obj, type) and "Args" in sections(doc):
            args = doc[doc.index("Args:"):]
            undescribed = [f.name for f in dataclasses.fields(obj)
                           if f.init and not re.search(rf"^\s+{f.name}\b.*:", args, re.M)]
            if undescribed:
                problems.append(f"{name}: Args entries for {undescribed}")
        return problems
    if callable(obj):
        found = sections(inspect.getdoc(obj))
        needed = (["Args"] if _takes_arguments(obj) else []) + ["Returns"]
        return [f"{name}: {section}" for section in needed if section not in found]
    return []


def test_every_public_name_has_its_sections():
    problems = []
    for name in uo.__all__:
        if name == "__version__":
            continue
        problems += missing(name, getattr(uo, name))
    assert not problems, RULE + ":\n  " + "\n  ".join(problems)


def test_the_rule_reads_sections_as_napoleon_does():
    def documented(a, b=1):
        """Add.

        Args:
            a: one.
            b: two.

        Returns:
            The sum.

        Example:
            >>> documented(1)
            2
        """

    def undocumented(a):
        """Add, with a and b."""

    def nothing():
        """Nothing.

        Returns:
            None.
        """

    assert missing("documented", documented) == []
    assert missing("undocumented", undocumented) == ["undocumented: Args",
                                                     "undocumented: Returns"]
    assert missing("nothing", nothing) == []

    @dataclasses.dataclass
    class Knobs:
        """Knobs.

        Args:
            eps: added to the denominator.
        """

        eps: float = 1e-8
        placement: str = "outside"

    assert missing("Knobs", Knobs) == ["Knobs: Args entries for ['placement']"]


def test_the_public_names_are_attributes_in_dir_and_none_leaks():
    listed = set(uo.__all__)
    assert listed <= set(dir(uo))
    for name in ("from_native", "diff", "save_state", "load_state", "resume",
                 "convert_checkpoint", "conformance", "porting"):
        assert name in listed, name
    assert callable(uo.from_native) and uo.from_native.__module__ == "unified_opt.porting.live"
    assert uo.porting.name_map.__module__ == "unified_opt.porting.names"
    assert uo.porting.live.read_native.__name__ == "read_native"
    assert uo.conformance.check.__name__ == "check"
    leaked = {name for name in dir(uo) if not name.startswith("_")
              and not isinstance(getattr(uo, name), types.ModuleType)} - listed
    assert leaked == set(), leaked
    assert not hasattr(uo, "Any")


def test_star_import_gives_every_public_name():
    namespace: dict = {}
    exec("from unified_opt import *", namespace)
    assert set(uo.__all__) <= set(namespace)


def test_the_lazy_names_are_typed():
    hints = inspect.signature(uo.diff)
    assert hints.return_annotation == "diffs.Diff"
    assert typing.get_type_hints(uo.diff)["return"] is uo.diffs.Diff
    assert str(hints.parameters["spec_a"].annotation) == "Spec | str"
    assert inspect.signature(uo.from_native).return_annotation == "tuple[Spec, list[Group]]"


def _choices(cls, field: str) -> tuple[str, ...]:
    """The values a str-valued knob allows, as its check's error lists them."""
    try:
        cls(**{field: "not-a-choice"})
    except ValueError as error:
        found = re.search(rf"{field} must be one of (\(.*?\)), got", str(error))
        return ast.literal_eval(found.group(1)) if found else ()   # a tuple of strs
    except TypeError:
        return ()
    return ()


@pytest.mark.parametrize("name", [n for n in uo.__all__
                                  if isinstance(getattr(uo, n), type)
                                  and issubclass(getattr(uo, n), uo.Spec)
                                  and getattr(uo, n) is not uo.Spec])
def test_a_spec_describes_each_knob_and_its_allowed_values(name):
    """Every field of every spec has an ``Args:`` entry of a few words, and a knob with
    named values names each of them there."""
    cls = getattr(uo, name)
    args = inspect.getdoc(cls).split("\nArgs:\n", 1)[1]
    entries = dict(re.findall(r"^    (\w+): (.*?)(?=^    \w+: |^\S|\Z)", args, re.M | re.S))
    choices_seen = 0
    for field in dataclasses.fields(cls):
        entry = entries.get(field.name, "")
        assert len(entry.split()) >= 4, (name, field.name, entry)
        if field.type in ("str", "str | None") or isinstance(field.default, str):
            choices = _choices(cls, field.name)
            choices_seen += len(choices)
            for value in choices:
                assert f"``{value!r}``" in entry, (name, field.name, value)
    if name in ("AdamW", "Lamb", "LARS", "Adafactor", "RMSprop", "SGD"):
        assert choices_seen >= 2, name


def test_the_spec_examples_run():
    """The ``Example:`` doctest of every spec (uo.get, the numpy oracle's first step)."""
    import doctest

    finder, runner = doctest.DocTestFinder(exclude_empty=True), doctest.DocTestRunner()
    ran = 0
    for name in uo.__all__:
        obj = getattr(uo, name)
        if not (isinstance(obj, type) and issubclass(obj, uo.Spec) and obj is not uo.Spec):
            continue
        for test in finder.find(obj, name, globs={}):
            if test.name != name:
                continue                          # methods' doctests: not examples here
            result = runner.run(test)
            assert result.failed == 0, name
            ran += 1
    assert ran == len([n for n in uo.__all__ if isinstance(getattr(uo, n), type)
                       and issubclass(getattr(uo, n), uo.Spec)]) - 1
