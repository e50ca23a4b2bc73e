"""docs/building.md's "Math offline" table, from ``docs/math_offline.json``
(``docs/measure_math.py`` measures it)."""

from __future__ import annotations

from .common import ROOT, load

MATH = ROOT / "docs" / "math_offline.json"


def _mb(n: int) -> str:
    return f"{n / 1e6:.2f} MB"


def table() -> str:
    measured = load(MATH)
    a, b = measured["mathjax"], measured["katex"]
    rows = [("build time (clean)", f"{a['build_s']:.1f} s", f"{b['build_s']:.1f} s"),
            ("CAME page: HTML", f"{a['page_html'] / 1e3:.0f} kB",
             f"{b['page_html'] / 1e3:.0f} kB"),
            ("CAME page: everything loaded", f"{_mb(a['page_loaded'])} (math "
             f"{_mb(a['page_math'])})", f"{_mb(b['page_loaded'])} (math {_mb(b['page_math'])})"),
            ("whole site", f"{_mb(a['site'])} (math {_mb(a['site_math'])})",
             f"{_mb(b['site'])} (math {_mb(b['site_math'])})")]
    lines = ["| | MathJax from the site | KaTeX pre-rendered |", "|---|---|---|"]
    lines += [f"| {name} | {x} | {y} |" for name, x, y in rows]
    return (f"Measured with Sphinx {measured['sphinx']} (`docs/math_offline.json`):\n\n"
            + "\n".join(lines) + "\n")


def pages() -> dict[str, str]:
    return {"math.md": table()}


def substitutions() -> dict[str, str]:
    return {}
