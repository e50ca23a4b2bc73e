"""Figures the docs' prose quotes, computed at each docs build (``docs/conf.py``) from
the code and the committed results, never typed into a page: each is a small Markdown
file in ``docs/_generated/`` (git ignores it) that a page includes.

* ``suite.md``: the conformance suite's version and its number of cases
  (``unified_opt.conformance.cases``).

    python docs/facts.py OUT_DIR     # write the files (what the build does)
"""

from __future__ import annotations

import sys
from pathlib import Path


def suite() -> str:
    from unified_opt.conformance.cases import default_cases
    from unified_opt.conformance.cases.case import SUITE_VERSION

    cases = default_cases()
    algorithms = {case.spec.name for case in cases}
    return (f"The suite is version {SUITE_VERSION}: {len(cases)} cases over "
            f"{len(algorithms)} algorithms.\n")


def write(out: Path) -> list[Path]:
    """Write every figure file into ``out`` (a file only when its text changed)."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in {"suite.md": suite()}.items():
        path = out / name
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        written.append(path)
    return written


if __name__ == "__main__":
    for path in write(Path(sys.argv[1])):
        print(f"wrote {path}")
