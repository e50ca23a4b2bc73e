"""Measure the two ways of drawing the docs' math offline (docs/building.md, "Math
offline") and write ``docs/math_offline.json``, which the page's table is generated from
(``docs/facts.py``).

    python docs/measure_math.py MATHJAX_SITE KATEX_SITE MATHJAX_BUILD_S KATEX_BUILD_S

Each SITE is a clean build of these docs (``python docs/build.py DIR``; the KaTeX one
with ``sphinxcontrib-katex``, ``katex_prerender = True`` and KaTeX's CSS and fonts in
the site, in place of ``sphinx-mathjax-offline``), each BUILD_S its wall time in seconds
(``/usr/bin/time``). The CAME page is opened in Chromium (playwright), every request
outside the site refused, and the files it loaded are summed.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

OUT = Path(__file__).resolve().parent / "math_offline.json"
PAGE = "api/uo.CAME.html"


def _size(folder: Path, only: str = "") -> int:
    return sum(p.stat().st_size for p in folder.rglob("*")
               if p.is_file() and only in str(p.relative_to(folder)))


def weigh(site: Path) -> dict:
    """The CAME page's weight in Chromium and the site's, in bytes."""
    from playwright.sync_api import sync_playwright

    loaded: set[str] = set()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"))
        page = browser.new_page()
        page.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:")
                   else r.abort())
        page.on("requestfinished", lambda r: loaded.add(unquote(urlparse(r.url).path)))
        page.goto((site / PAGE).as_uri())
        page.wait_for_load_state("networkidle")
        page.wait_for_timeout(1500)
        browser.close()
    files = [Path(f) for f in loaded if os.path.isfile(f)]
    math = [f for f in files if "mathjax" in str(f) or "katex" in str(f)]
    static = site / "_static"
    return {"page_html": (site / PAGE).stat().st_size,
            "page_loaded": sum(f.stat().st_size for f in files),
            "page_math": sum(f.stat().st_size for f in math),
            "site": _size(site),
            "site_math": _size(static, "mathjax") + _size(static, "katex")}


def main(argv: list[str]) -> int:
    mathjax, katex, mathjax_s, katex_s = argv
    import sphinx

    from unified_opt.files import write_text

    results = {"sphinx": sphinx.__version__, "page": PAGE,
               "mathjax": {**weigh(Path(mathjax)), "build_s": float(mathjax_s)},
               "katex": {**weigh(Path(katex)), "build_s": float(katex_s)}}
    write_text(OUT, json.dumps(results, indent=1) + "\n")
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
