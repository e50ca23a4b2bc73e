"""Every measured figure the docs quote is generated at build time from a committed
results file (``docs/facts/``: files under ``docs/_generated/`` a page includes, and
``{{ name }}`` substitutions), never typed into a page; the README, which GitHub shows
raw, quotes none. Checked without building the site."""

import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
#: the hand-written pages: README.md and docs/*.md but the compatibility matrix, which
#: ``unified-opt matrix`` writes from the code (tests/test_docs.py holds it current)
PAGES = sorted([ROOT / "README.md", *(p for p in DOCS.glob("*.md")
                                      if p.name != "compatibility.md")])
#: a number with the unit of a measurement: a time, a ratio, a size, a share, ulps, or a
#: count of the suite's runs
FIGURE = re.compile(
    r"(?<![\w.])\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?\s*(?:-|–|to)?\s*(?:\d[\d,]*(?:\.\d+)?)?\s*"
    r"(?:ms|µs|us|ns|s|sec|seconds?|minutes?|min|hours?|x|×|[kKMGT]i?B|bytes|%|ulps?|"
    r"results|cases|configs|configurations|runs|passed|failed|GB/s|faster|slower)(?![\w])")
#: fences whose lines are a program or commands, not prose (a ``console`` block's output
#: lines, those not starting with ``$``, and ``text`` blocks are read as prose)
CODE = {"python", "yaml", "yml", "toml", "ini", "bash", "sh", "shell", "cfg", "json", "cpp",
        "c++", "diff", "{include}", "{toctree}", "{eval-rst}"}
#: an inline code span: a run of backticks, and the text up to the next run as long
SPAN = re.compile(r"(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
#: definitions, not measurements: (page, the figure as written, why it may stay)
ALLOWED = {
    ("conformance.md", "0.5 ulp",
     "rounding to nearest lands within half an ulp: arithmetic, not a measurement"),
    ("conformance.md", "30%",
     "the clip cases' design rule, held by tests/test_conformance_training.py"),
}


def prose(text: str) -> list[tuple[int, str]]:
    """The lines of a Markdown page a reader reads as text, with their numbers: outside
    code fences, and inside ``console`` and ``text`` fences the lines that are not
    commands."""
    lines, fence, language = [], None, ""
    for number, line in enumerate(text.split("\n"), 1):
        stripped = line.strip()
        if fence is None:
            opened = re.match(r"(`{3,}|~{3,}|:{3,})\s*(\S*)", stripped)
            if opened:
                fence, language = opened.group(1), opened.group(2).lower()
                continue
            lines.append((number, line))
        elif stripped.startswith(fence) and stripped.strip(fence[0]) == "":
            fence = None
        elif language not in CODE and not stripped.startswith(("$", ">>>", "...")):
            lines.append((number, line))
    return lines


def readable(lines: list[tuple[int, str]]) -> str:
    """``lines`` joined, without inline code spans (an argument's default, ``lr=1e-3``,
    is a definition; a span may run over a line break) and without substitutions
    (``{{ name }}``: generated); each line break kept, so a match's line can be told."""

    def blank(match: re.Match) -> str:
        return "``" + "\n" * match.group(0).count("\n")

    text = "\n".join(line for _, line in lines)
    return re.sub(r"\{\{[^}]*\}\}", "", SPAN.sub(blank, text))


def typed_figures(path: Path) -> list[str]:
    """Each figure of ``path``'s prose that is neither generated nor allowed; a figure
    may run over a line break ("1437" at one line's end, "results" at the next's)."""
    lines = prose(path.read_text(encoding="utf-8"))
    text = readable(lines)
    found = []
    for match in FIGURE.finditer(text):
        figure = " ".join(match.group(0).split())
        if not any(page == path.name and figure == allowed for page, allowed, _ in ALLOWED):
            number = lines[text.count("\n", 0, match.start())][0]
            found.append(f"{path.name}:{number}: {figure!r}")
    return found


def _facts():
    """docs/facts/, loaded the way docs/conf.py loads it."""
    spec = importlib.util.spec_from_file_location(
        "unified_opt_docs_facts", DOCS / "facts" / "__init__.py",
        submodule_search_locations=[str(DOCS / "facts")])
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_no_page_types_a_measured_figure():
    found = [figure for path in PAGES for figure in typed_figures(path)]
    assert found == [], "generate these in docs/facts/ (or remove them):\n" + "\n".join(found)


def test_the_rule_finds_figures_in_prose_and_output_but_not_in_code():
    page = ("Took 12.5 ms (2.88x faster), 1,454 results, 3 to 5 GB. `` a `1 s` span ``\n"
            "```python\nopt = build(lr=1e-3)  # 40 ms\n```\n"
            "```console\n$ run --timeout 600s\nwall 97 s\n```\n"
            "A default `eps=1e-8 (10 s)` and {{ a_figure }} ms.\n")
    text = readable(prose(page))
    assert text.startswith("Took") and "wall 97 s" in text
    assert "40 ms" not in text and "600s" not in text and "1e-8" not in text
    found = [m.group(0).strip() for m in FIGURE.finditer(text)]
    assert found == ["12.5 ms", "2.88x", "1,454 results", "3 to 5 GB", "97 s"]


def test_the_rule_finds_a_figure_split_over_two_lines(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("over the whole suite (1437\nresults, every case), `a span\nover two`\n"
                    "lines and then 3 ms\n", encoding="utf-8")
    assert typed_figures(page) == ["page.md:1: '1437 results'", "page.md:4: '3 ms'"]


def test_every_allowed_figure_is_still_there():
    for page, figure, _ in ALLOWED:
        text = " ".join(readable(prose((DOCS / page).read_text(encoding="utf-8"))).split())
        assert figure in text, (page, figure)


def test_facts_write_every_file_and_substitution_the_pages_use(tmp_path):
    facts = _facts()
    written = {path.name for path in facts.write(tmp_path)}
    pages = facts.pages()
    assert written == set(pages) and all(text.strip() for text in pages.values())
    for name, text in pages.items():
        assert (tmp_path / name).read_text(encoding="utf-8") == text
    substitutions = facts.substitutions()
    assert all(isinstance(v, str) and v for v in substitutions.values())
    included, used = set(), set()
    for path in sorted(DOCS.glob("*.md")):
        text = path.read_text(encoding="utf-8")
        included |= set(re.findall(r"^```\{include\} _generated/(\S+)$", text, re.M))
        spans_removed = SPAN.sub("", "\n".join(line for _, line in prose(text)))
        used |= set(re.findall(r"\{\{\s*(\w+)\s*\}\}", spans_removed))
    assert included - set(pages) == set(), "included but not generated"
    assert used - set(substitutions) == set(), "quoted but not generated"
    # every generated figure is quoted somewhere
    assert set(pages) - included == set(), "generated but included nowhere"
    assert set(substitutions) - used == set(), "generated but quoted nowhere"


def test_the_generated_figures_are_the_committed_results():
    """Spot checks against the results files, read here independently of docs/facts/."""
    import json

    from unified_opt.conformance.cases import default_cases
    from unified_opt.conformance.cases.case import SUITE_VERSION
    from unified_opt.conformance.compare import K

    facts = _facts()
    pages, substitutions = facts.pages(), facts.substitutions()
    cases = default_cases()
    assert pages["suite.md"] == (f"The suite is version {SUITE_VERSION}: {len(cases)} cases "
                                 f"over {len({c.spec.name for c in cases})} algorithms.\n")
    assert "| build time (clean) |" in pages["math.md"]
    table = json.loads((ROOT / "unified_opt" / "speed_table.json").read_text())
    assert substitutions["speed_threshold"] == f"{table['threshold']:g}x"
    assert substitutions["rule_k"] == f"{K:g}"
    results = ROOT / "benchmarks" / "results"
    counts = json.loads((results / "gpu_check_h100" / "conformance.json").read_text())["counts"]
    assert f"{counts['pass']} of {counts['total']} runs pass" in pages["gpu_run.md"]
    steps = json.loads((results / "algorithm_step_time.json").read_text())
    came = [r for r in steps if r.get("backend") == "paddle" and r.get("algorithm") == "came"
            and r.get("what") == "uo own, generated kernel"][0]
    came_row = pages["kernel_steps.md"].split("| CAME |")[1].split("\n")[0]
    assert f" {came['ratio']:g} |" in came_row


def test_the_pages_include_what_facts_writes():
    conformance = (DOCS / "conformance.md").read_text(encoding="utf-8")
    assert "```{include} _generated/suite.md" in conformance
    assert not re.search(r"suite version \d|\d+ cases, \d+ results", conformance)
    assert "```{include} _generated/math.md" in (DOCS / "building.md").read_text()
