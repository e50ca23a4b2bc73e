"""The typed public API: mypy runs clean on unified_opt/ with the committed configuration
(pyproject.toml [tool.mypy], which names each module it leaves out and why), every name
``unified_opt.__all__`` exports is annotated, and the annotations resolve at run time
(what Sphinx, IDEs and ``typing.get_type_hints`` read)."""

import dataclasses
import inspect
import subprocess
import sys
import typing
from pathlib import Path

import pytest

import unified_opt as uo

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_is_clean(tmp_path):
    pytest.importorskip("mypy")
    done = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found" in done.stdout


def test_the_package_says_it_is_typed():
    assert (ROOT / "unified_opt" / "py.typed").is_file()
    text = (ROOT / "pyproject.toml").read_text()
    # package-data: the wheel ships it (beside the speed table)
    assert '"unified_opt" = ["py.typed", "speed_table.json"]' in text


def _exported_callables():
    """(qualified name, function) for every exported function and every public method
    (``__init__`` and ``__call__`` included) the library defines on an exported class."""
    for name in uo.__all__:
        obj = getattr(uo, name)
        if inspect.ismodule(obj) or name == "__version__":
            continue
        if not inspect.isclass(obj):
            yield name, obj
            continue
        for attr, member in inspect.getmembers(obj):
            if attr.startswith("_") and attr not in ("__init__", "__call__"):
                continue
            function = inspect.unwrap(member) if callable(member) else None
            if not inspect.isfunction(function):
                continue
            if not function.__module__.startswith("unified_opt"):
                continue
            if attr == "__init__" and dataclasses.is_dataclass(obj):
                continue     # generated from the annotated fields (checked below)
            yield f"{name}.{attr}", function


def test_every_export_is_annotated():
    missing = []
    for qualified, function in _exported_callables():
        signature = inspect.signature(function)
        for parameter in signature.parameters.values():
            if parameter.name in ("self", "cls"):
                continue
            if parameter.annotation is inspect.Parameter.empty:
                missing.append(f"{qualified}: parameter {parameter.name}")
        if (signature.return_annotation is inspect.Signature.empty
                and not qualified.endswith("__init__")):
            missing.append(f"{qualified}: return")
    assert missing == []


def test_the_annotations_resolve_at_run_time():
    """``from __future__ import annotations`` keeps them as text: every name in them
    must be importable from the defining module (else Sphinx and get_type_hints fail)."""
    failed = []
    for qualified, function in _exported_callables():
        try:
            typing.get_type_hints(function)
        except Exception as error:      # the name and the error, for every one
            failed.append(f"{qualified}: {type(error).__name__}: {error}")
    for name in uo.__all__:
        obj = getattr(uo, name)
        if inspect.isclass(obj) and dataclasses.is_dataclass(obj):
            try:
                typing.get_type_hints(obj)
            except Exception as error:
                failed.append(f"{name} fields: {type(error).__name__}: {error}")
    assert failed == []


def test_spec_fields_are_what_the_type_checker_sees():
    """The base class declares ``lr`` for the type checker only: no field at run time
    (the algorithms declare their own, with their defaults)."""
    assert "lr" not in {f.name for f in dataclasses.fields(uo.Spec)}
    for name in uo.algorithms():
        assert "lr" in {f.name for f in dataclasses.fields(uo.get(name))}
