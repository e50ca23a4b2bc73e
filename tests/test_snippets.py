"""Every Python block of README.md and docs/*.md runs as written (docs/building.md,
"Code blocks are tested", states the rules for writers).

* A block runs in the process of the framework it imports (``import torch``, ``import
  paddle``, ``import mindspore``, or ``from`` one of them), a block importing none in the
  ``core`` process (numpy only); a block importing two frameworks is an error. The
  processes run one after the other, core, torch, paddle, mindspore (importing paddle
  before mindspore in one process breaks mindspore), in one scratch folder: a later
  framework's block may read a file an earlier framework's block wrote (the quick
  start's state file, resumed elsewhere).
* The blocks of one page and one framework share one namespace, in page order.
* A block whose first line is ``# fragment: ...`` (saying what it leaves out) is a
  fragment: it is compiled (its syntax checked), not run.
* A block of ``>>>`` prompts is a doctest: its expected output is compared too (a
  fragment's examples are compiled only).
* A framework that is not installed skips its blocks, and the later frameworks' blocks
  of the same pages (which may read what the skipped ones wrote); the skip reason says
  which.
* The ``Example:`` sections of the public names' docstrings run the same way, each a
  doctest in the process of the framework it imports.
"""

from __future__ import annotations

import ast
import doctest
import importlib.util
import json
import os
import re
import subprocess
import sys
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FRAMEWORKS = ("torch", "paddle", "mindspore")
#: the processes, in the order they run
PROCESSES = ("core", *FRAMEWORKS)
FRAGMENT = "# fragment:"
_BLOCK = re.compile(r"^(?P<indent>[ \t]*)```python[ \t]*\n(?P<code>.*?)^(?P=indent)```[ \t]*$",
                    re.M | re.S)
_IMPORT = re.compile(r"^\s*(?:>>>\s*)?(?:import|from)\s+(torch|paddle|mindspore)\b", re.M)


@dataclass(frozen=True)
class Block:
    page: str        # relative to the repository root
    line: int        # 1-based line of the opening fence
    code: str
    process: str     # core, torch, paddle or mindspore
    fragment: bool
    doctest: bool

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The Python blocks of one Markdown page."""
    text = page.read_text(encoding="utf-8")
    found = []
    for match in _BLOCK.finditer(text):
        indent = match.group("indent")
        code = "\n".join(line[len(indent):] if line.startswith(indent) else line
                         for line in match.group("code").split("\n"))
        line = text.count("\n", 0, match.start()) + 1
        name = str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else page.name
        where = f"{name}:{line}"
        imported = sorted(set(_IMPORT.findall(code)))
        if len(imported) > 1:
            raise ValueError(f"{where}: a block imports {imported}: one framework per block")
        found.append(Block(page=name, line=line, code=code,
                           process=imported[0] if imported else "core",
                           fragment=code.lstrip().startswith(FRAGMENT),
                           doctest=_after_marker(code).startswith(">>>")))
    return found


def _after_marker(code: str) -> str:
    """The block without its fragment marker line (a doctest may be a fragment)."""
    code = code.lstrip()
    return code.split("\n", 1)[1].lstrip() if code.startswith(FRAGMENT) else code


def docstring_examples() -> list[Block]:
    """The ``Example:`` section of every public name's docstring (``uo.__all__``), as
    a doctest block (the API reference shows them; ``# doctest: +SKIP`` marks a line
    that needs what a docstring cannot make, a process group or a file)."""
    import inspect
    import textwrap
    import types

    import unified_opt as uo

    found = []
    for name in uo.__all__:
        obj = getattr(uo, name)
        if isinstance(obj, (types.ModuleType, str)):
            continue
        doc = inspect.getdoc(obj) or ""
        section = re.search(r"^Examples?:\n((?:[ \t]+.*\n?|\n)+)", doc, re.M)
        if section is None or ">>>" not in section.group(1):
            continue
        code = textwrap.dedent(section.group(1)).strip() + "\n"
        imported = sorted(set(_IMPORT.findall(code)))
        if len(imported) > 1:
            raise ValueError(f"uo.{name}'s example imports {imported}: one framework")
        found.append(Block(page=f"docstring of uo.{name}", line=1, code=code,
                           process=imported[0] if imported else "core",
                           fragment=code.startswith(FRAGMENT), doctest=True))
    return found


def all_blocks() -> list[Block]:
    return [block for page in PAGES for block in blocks(page)]


# -- the process that runs one framework's blocks -------------------------------------------

def run_blocks(blocks_file: Path) -> list[dict]:
    """Run the blocks listed in ``blocks_file`` (JSON) here; the failures, each with its
    place and the traceback or the doctest's report."""
    failures = []
    namespaces: dict[str, dict] = {}
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS |
                                   doctest.NORMALIZE_WHITESPACE)
    for item in json.loads(blocks_file.read_text()):
        block = Block(**item)
        namespace = namespaces.setdefault(block.page, {"__name__": "__snippet__"})
        try:
            if block.fragment and block.doctest:
                for example in doctest.DocTestParser().get_examples(block.code):
                    compile(example.source, block.where, "single")
            elif block.fragment:
                compile(block.code, block.where, "exec")
            elif block.doctest:
                test = doctest.DocTestParser().get_doctest(block.code, namespace,
                                                           block.where, block.page,
                                                           block.line)
                report: list[str] = []
                outcome = runner.run(test, out=report.append, clear_globs=False)
                if outcome.failed:
                    failures.append({"where": block.where, "error": "".join(report)})
            else:
                exec(compile(block.code, block.where, "exec"), namespace)
        except BaseException:        # SystemExit too: a block must not end the run
            failures.append({"where": block.where, "error": traceback.format_exc()})
    return failures


# -- the tests ----------------------------------------------------------------------------------

def test_the_blocks_are_found_and_each_imports_at_most_one_framework():
    found = all_blocks() + docstring_examples()   # raises on a block importing two
    pages = {block.page for block in found}
    assert {"README.md", "docs/index.md", "docs/install.md"} <= pages
    quick_start = [b for b in found if b.page == "docs/install.md"]
    assert {b.process for b in quick_start} == set(PROCESSES)
    assert not any(b.fragment for b in found if b.page in ("README.md", "docs/index.md",
                                                           "docs/install.md"))
    examples = {b.page: b.process for b in found if b.page.startswith("docstring of ")}
    assert examples["docstring of uo.build"] == "torch"
    assert examples["docstring of uo.reference"] == "core"
    assert len(examples) >= 30


def test_a_block_importing_two_frameworks_is_refused(tmp_path):
    page = tmp_path / "two.md"
    page.write_text("text\n\n```python\nimport torch\nimport paddle\n```\n")
    with pytest.raises(ValueError, match=r"two.md:3: a block imports \['paddle', "
                                         r"'torch'\]: one framework per block"):
        blocks(page)


def test_a_failing_block_is_reported_with_its_place(tmp_path):
    listed = [Block("docs/x.md", 3, "x = 1\n", "core", False, False),
              Block("docs/x.md", 9, "y = x + undefined_name\n", "core", False, False),
              Block("docs/x.md", 15, "# fragment: uses model\nmodel.step(\n", "core",
                    True, False),
              Block("docs/x.md", 20, "# fragment: compiled\nopt.step(model)\n", "core",
                    True, False),
              Block("docs/x.md", 25, ">>> x + 1\n3\n", "core", False, True),
              Block("docs/x.md", 30, "# fragment: m\n>>> m.f(\n", "core", True, True),
              Block("docs/x.md", 35, "# fragment: m\n>>> m.f()\n1\n", "core", True, True)]
    path = tmp_path / "blocks.json"
    path.write_text(json.dumps([asdict(b) for b in listed]))
    failures = run_blocks(path)
    assert [f["where"] for f in failures] == ["docs/x.md:9", "docs/x.md:15", "docs/x.md:25",
                                              "docs/x.md:30"]
    assert "NameError" in failures[0]["error"] and "undefined_name" in failures[0]["error"]
    assert "SyntaxError" in failures[1]["error"]
    assert "Expected:\n    3\nGot:\n    2" in failures[2]["error"]


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    """Every block (the pages' and the docstrings' examples) run once, one process per
    framework: ``(failures, skipped)``."""
    tmp_path = tmp_path_factory.mktemp("snippets")
    found = all_blocks() + docstring_examples()
    failures, skipped = [], []
    # a page whose blocks of one framework were not run: its later frameworks' blocks
    # may read what those wrote (the quick start's state file), so they wait too
    pages_cut: set[str] = set()
    for process in PROCESSES:
        listed = [b for b in found if b.process == process]
        waiting = [b for b in listed if b.page in pages_cut]
        listed = [b for b in listed if b.page not in pages_cut]
        if waiting:
            skipped.append(f"{process} ({len(waiting)} blocks after a framework not "
                           "installed on their page)")
        if not listed:
            continue
        if process != "core" and importlib.util.find_spec(process) is None:
            skipped.append(f"{process} ({len(listed)} blocks)")
            pages_cut |= {b.page for b in listed}
            continue
        path = tmp_path / f"{process}.json"
        path.write_text(json.dumps([asdict(b) for b in listed]))
        scratch = tmp_path / "scratch"
        scratch.mkdir(exist_ok=True)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            "MPLBACKEND": "Agg"}
        done = subprocess.run([sys.executable, str(Path(__file__).resolve()), str(path)],
                              cwd=scratch, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
        failures += json.loads(done.stdout.strip().splitlines()[-1])
    return failures, skipped


def _assert_ran(outcome, docstrings: bool) -> None:
    failures, skipped = outcome
    failures = [f for f in failures if f["where"].startswith("docstring of ") == docstrings]
    assert not failures, "\n\n".join(f"{f['where']}:\n{f['error']}" for f in failures)
    if skipped:
        pytest.skip("not installed, their blocks not run: " + ", ".join(skipped))


def test_every_block_of_the_pages_runs(outcome):
    _assert_ran(outcome, docstrings=False)


def test_every_docstring_example_runs(outcome):
    _assert_ran(outcome, docstrings=True)


def test_the_writing_rules_are_documented():
    page = (ROOT / "docs" / "building.md").read_text()
    assert FRAGMENT in page and ">>>" in page and "tests/test_snippets.py" in page
    # the module docstring and the page agree on the marker
    assert ast.get_docstring(ast.parse(Path(__file__).read_text())).count(FRAGMENT) == 1


if __name__ == "__main__":
    found_failures = run_blocks(Path(sys.argv[1]))
    # the last line of stdout is the result (a block may print before it)
    print("\n" + json.dumps(found_failures))
    sys.exit(1 if found_failures else 0)
