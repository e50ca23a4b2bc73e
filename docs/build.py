"""Build the docs site strictly and offline.

    python docs/build.py [OUT]        # default OUT: docs/_build/html

Sphinx with ``-W --keep-going -n``: every warning (a broken link or reference, a
docstring that does not parse, a page outside the table of contents) and every
reference that resolves to nothing is an error, all of them listed before it stops.
Nothing is fetched (no intersphinx; MathJax is served from the built site). The
pictures are not drawn here: they are committed, ``python docs/plots.py`` redraws them.
``tox -e docs`` runs this; tests/test_docs_site.py too.
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent


def build(out: Path, doctrees: Path | None = None, jobs: str = "1") -> int:
    """The sphinx-build exit status (0: built without a warning)."""
    from sphinx.cmd.build import build_main

    args = ["-b", "html", "-W", "--keep-going", "-n", "-q", "-j", jobs,
            "-d", str(doctrees or out.parent / "doctrees"), str(DOCS), str(out)]
    return build_main(args)


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else DOCS / "_build" / "html"
    code = build(out)
    if code == 0:
        print(f"built {out / 'index.html'}")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
