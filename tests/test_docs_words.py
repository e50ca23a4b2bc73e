"""The docs tell readers about the library, not about how it was made: no page speaks of
issues, sessions or machine starts (docs/building.md, "Figures in prose"); the figures
the prose quotes are generated (tests/test_docs_figures.py)."""

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

