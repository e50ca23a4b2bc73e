"""The docs tell readers about the library, not about how it was made: no page speaks of
issues, sessions or machine starts (docs/building.md, "Figures in prose"), and the
figures the prose quotes about the suite are generated (docs/facts.py), not typed."""

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
#: every text a reader of the site sees that is written by hand (the changelog is
#: included by docs/changelog.md; docs/plots.py writes the GPU section's text)
TEXTS = sorted([*DOCS.glob("*.md"), *DOCS.glob("*.py"), *DOCS.glob("plots/*.md"),
                ROOT / "CHANGELOG.md", ROOT / "README.md"])
HISTORY = re.compile(r"\bissues?\b|\bsessions?\b|\bmachine[- ]starts?\b|\bmachine started\b",
                     re.I)


def history_words(text: str) -> list[str]:
    return [f"line {text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}"
            for m in HISTORY.finditer(text)]


def test_no_page_speaks_of_how_the_library_was_made():
    found = {str(path.relative_to(ROOT)): words for path in TEXTS
             if (words := history_words(path.read_text(encoding="utf-8")))}
    assert found == {}, found


def test_the_rule_finds_the_words():
    assert history_words("as the issue said\nin one session\n") == [
        "line 1: 'issue'", "line 2: 'session'"]
    assert history_words("three H100 machine starts; a machine started") == [
        "line 1: 'machine starts'", "line 1: 'machine started'"]
    assert history_words("the tissue of sessional issuers") == []


def test_the_suite_figures_are_generated(tmp_path):
    spec = importlib.util.spec_from_file_location("docs_facts", DOCS / "facts.py")
    facts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(facts)
    from unified_opt.conformance.cases import default_cases
    from unified_opt.conformance.cases.case import SUITE_VERSION

    path, math = facts.write(tmp_path)
    cases = default_cases()
    assert path.read_text() == (f"The suite is version {SUITE_VERSION}: {len(cases)} cases "
                                f"over {len({c.spec.name for c in cases})} algorithms.\n")
    page = (DOCS / "conformance.md").read_text()
    assert "```{include} _generated/suite.md" in page
    # no hand-typed suite version or case count left in the prose
    assert not re.search(r"suite version \d|\d+ cases, \d+ results", page)
    assert "| build time (clean) |" in math.read_text()
    assert "```{include} _generated/math.md" in (DOCS / "building.md").read_text()
