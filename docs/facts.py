"""Figures the docs' prose quotes, computed at each docs build (``docs/conf.py``) from
the code and the committed results, never typed into a page: each is a small Markdown
file in ``docs/_generated/`` (git ignores it) that a page includes.

* ``suite.md``: the conformance suite's version and its number of cases
  (``unified_opt.conformance.cases``);
* ``math.md``: the table of docs/building.md's "Math offline", from
  ``docs/math_offline.json`` (``docs/measure_math.py`` measures it).

    python docs/facts.py OUT_DIR     # write the files (what the build does)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from unified_opt.files import write_pages

MATH = Path(__file__).resolve().parent / "math_offline.json"


def suite() -> str:
    from unified_opt.conformance.cases import default_cases
    from unified_opt.conformance.cases.case import SUITE_VERSION

    cases = default_cases()
    algorithms = {case.spec.name for case in cases}
    return (f"The suite is version {SUITE_VERSION}: {len(cases)} cases over "
            f"{len(algorithms)} algorithms.\n")


def math() -> str:
    measured = json.loads(MATH.read_text())
    a, b = measured["mathjax"], measured["katex"]

    def mb(n: int) -> str:
        return f"{n / 1e6:.2f} MB"

    rows = [("build time (clean)", f"{a['build_s']:.1f} s", f"{b['build_s']:.1f} s"),
            ("CAME page: HTML", f"{a['page_html'] / 1e3:.0f} kB",
             f"{b['page_html'] / 1e3:.0f} kB"),
            ("CAME page: everything loaded", f"{mb(a['page_loaded'])} (math "
             f"{mb(a['page_math'])})", f"{mb(b['page_loaded'])} (math {mb(b['page_math'])})"),
            ("whole site", f"{mb(a['site'])} (math {mb(a['site_math'])})",
             f"{mb(b['site'])} (math {mb(b['site_math'])})")]
    lines = ["| | MathJax from the site | KaTeX pre-rendered |", "|---|---|---|"]
    lines += [f"| {name} | {x} | {y} |" for name, x, y in rows]
    return (f"Measured with Sphinx {measured['sphinx']} (`docs/math_offline.json`):\n\n"
            + "\n".join(lines) + "\n")


def write(out: Path) -> list[Path]:
    """Write every figure file into ``out`` (a file only when its text changed)."""
    return write_pages(out, {"suite.md": suite(), "math.md": math()})


if __name__ == "__main__":
    for path in write(Path(sys.argv[1])):
        print(f"wrote {path}")
