"""The package's layers and imports, read from the source (nothing is imported): no
import cycle inside ``unified_opt``, the core never imports the backends or the
conformance suite, the backends never import the conformance suite, nothing imports the
command line; and ruff (lint and import order, configured in pyproject.toml) passes."""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: source folder -> package it installs as (pyproject.toml's package-dir)
SOURCES = {"unified_opt": "unified_opt", "backends": "unified_opt.backends",
           "conformance": "unified_opt.conformance"}


def _modules() -> dict[str, Path]:
    out = {}
    for folder, package in SOURCES.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([package, *parts])] = path
    return out


def _imports(name: str, path: Path, modules) -> set[str]:
    """The package's modules ``name`` imports, at module level or inside functions."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([node.module] if node.module else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            # a package's __init__ runs before its submodules: not an edge back
            if target and target != name and not name.startswith(target + "."):
                found.add(target)
    return found


MODULES = _modules()
GRAPH = {name: _imports(name, path, MODULES) for name, path in MODULES.items()}


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in graph:
        if v not in index:
            visit(v)
    return out


def _layer(name: str) -> str:
    if name.startswith("unified_opt.conformance"):
        return "conformance"
    if name.startswith("unified_opt.backends"):
        return "backends"
    if name == "unified_opt.cli":
        return "cli"
    return "core"


#: which layers a layer may import
ALLOWED = {"core": {"core"}, "backends": {"core", "backends"},
           "conformance": {"core", "backends", "conformance"},
           "cli": {"core", "backends", "conformance", "cli"}}


def test_no_import_cycle_inside_the_package():
    assert _cycles(GRAPH) == []


def test_the_cycle_check_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_layers_import_only_downwards():
    wrong = [f"{name} ({_layer(name)}) imports {target} ({_layer(target)})"
             for name, targets in GRAPH.items() for target in targets
             if _layer(target) not in ALLOWED[_layer(name)]]
    assert wrong == []


def test_the_graph_sees_function_level_and_relative_imports():
    assert "unified_opt.backend" in GRAPH["unified_opt.build"]
    assert "unified_opt.backends.paddle.layout" in GRAPH["unified_opt.backends.paddle"]
    assert "unified_opt.conformance.verdict" in GRAPH["unified_opt.conformance.worker"]


@pytest.mark.skipif(shutil.which("ruff") is None and
                    not (Path(sys.executable).parent / "ruff").exists(),
                    reason="ruff is not installed (pip install 'unified-opt[test]')")
def test_ruff_passes():
    ruff = Path(sys.executable).parent / "ruff"
    command = [str(ruff) if ruff.exists() else "ruff", "check", "."]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
