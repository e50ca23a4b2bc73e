"""Sphinx configuration of the docs site (``python docs/build.py`` or ``tox -e docs``).

Sphinx + furo + MyST, not mkdocs-material + mkdocstrings (docs/architecture.md, "The
docs site", says why): the docstrings are reStructuredText (``.. math::``,
``:math:``, ``:mod:`` references), which Sphinx's autodoc renders as written, MathJax
included; the Markdown pages come in through MyST unchanged.

Built strictly (``-W -n``: every warning, and every reference that resolves to nothing,
is an error; a reference to an internal helper that exists is shown unlinked) and
offline (nothing is fetched: no intersphinx), and read offline: MathJax 3 is served from
the built site (``_static/mathjax``, copied there by the ``sphinx-mathjax-offline``
extension), never from a CDN. Chosen over KaTeX pre-rendered at build time
(``sphinxcontrib-katex`` with ``katex_prerender``), measured on this site (docs/building.md,
"Math offline", from docs/math_offline.json): pre-rendering needs Node.js and the npm
``katex`` package at every build and built slower; MathJax needs nothing beyond pip, at
the cost of a larger site and one script a page loads whatever its math. Generated at
each build,
into folders git ignores: ``api/`` (a page per public function and class:
``docs/api_pages.py``), ``pairs/`` (one porting page per framework pair, from the
native-class descriptors: ``docs/porting_pairs.py``) and ``_generated/`` (figures the
prose quotes, from the code and the results: ``docs/facts/``, also the
``{{ name }}`` substitutions). The pictures are committed
(``docs/plots.py``).
"""

from __future__ import annotations

import importlib
import importlib.util
import re
import sys
from pathlib import Path

from sphinx.ext.napoleon import Config as NapoleonConfig
from sphinx.ext.napoleon.docstring import GoogleDocstring

import unified_opt

DOCS = Path(__file__).resolve().parent


def _beside(name: str):
    """A module of this folder, loaded from its file (this folder stays off sys.path:
    docs/build.py would shadow the ``build`` package)."""
    spec = importlib.util.spec_from_file_location(f"unified_opt_docs_{name}",
                                                  DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _package_beside(name: str):
    """A package of this folder (``docs/facts/``), loaded from its ``__init__.py`` under
    a name of its own, so its modules' relative imports resolve."""
    spec = importlib.util.spec_from_file_location(
        f"unified_opt_docs_{name}", DOCS / name / "__init__.py",
        submodule_search_locations=[str(DOCS / name)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


api_pages = _beside("api_pages")
porting_pairs = _beside("porting_pairs")
facts = _package_beside("facts")

project = "unified-opt"
author = "the unified-opt authors"
copyright = "the unified-opt authors"
release = version = unified_opt.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    # MathJax 3 copied into the site and loaded from there (sets mathjax_path)
    "sphinx-mathjax-offline",
    # a [source] link beside every documented object: the module's code as a page
    "sphinx.ext.viewcode",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
# plots/gpu_step_time.md is included by plots.md, plots/realistic_sets.md by speed.md:
# not pages of their own
# _generated/: figures the prose quotes (docs/facts/), included by the pages
exclude_patterns = ["_build", "plots/gpu_step_time.md", "plots/realistic_sets.md", "_generated"]

# -- strict: a reference that resolves to nothing is an error ------------------------------
nitpicky = True
nitpick_ignore_regex = [
    # the frameworks' and numpy's own classes: no inventory offline (no intersphinx)
    (r"py:.*", r"(torch|paddle|mindspore|np|numpy|libcst)(\..*)?"),
    # standard-library names in signatures (no intersphinx offline)
    (r"py:.*", r"(Any|Callable|Iterable|Mapping|Sequence|TypeAlias|Path|pathlib\.Path|"
               r"collections\.abc\..*|typing\..*|inspect\..*|os\.PathLike|datetime\..*)"),
    (r"py:class", r"(str|int|float|bool|bytes|dict|list|tuple|set|type|object|None|"
                  r"Exception|ValueError|TypeError|NotImplementedError)"),
]
# (a reference to an internal helper that exists is shown unlinked: internal_reference)

# -- MyST: the Markdown pages -----------------------------------------------------------------
myst_heading_anchors = 3
# substitution: a figure a sentence quotes, ``{{ name }}``, computed from the committed
# results at each build (docs/facts/; the longer ones are files under _generated/)
myst_enable_extensions = ["colon_fence", "substitution"]
myst_substitutions = facts.substitutions()

# -- Google-style sections (Args:, Returns:, Raises:, Example:) --------------------------
# sphinx.ext.napoleon's parser, run on functions, classes and modules only (google_sections
# below): as an extension it would also read every ``#:`` attribute comment's
# "words: text" as "type: text" (``#: world size 1: every sum ...``). The types come
# from the annotations.
NAPOLEON = NapoleonConfig(napoleon_google_docstring=True, napoleon_numpy_docstring=False,
                          napoleon_use_rtype=False, napoleon_use_param=True,
                          napoleon_use_ivar=True)

# -- autodoc: the API reference from the docstrings ----------------------------------------
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_class_signature = "mixed"
autodoc_default_options = {"exclude-members": "__init__, __new__, name, rounding_knobs, "
                                              "data_parallel"}
# (no autodoc_type_aliases: Sphinx renders an alias inside a generic, tuple[Tensor,
# State], as its internal TypeAliasForwardRef; the signatures show what the aliases
# stand for, Any and dict[str, Any])
add_module_names = False

# -- HTML -------------------------------------------------------------------------------------
html_theme = "furo"
html_title = f"unified-opt {release}"
# _static/wide.css: wide tables and console blocks scroll inside their frame
html_static_path = ["_static"]
html_css_files = ["wide.css"]
html_show_sourcelink = False
# MathJax renders the docstrings' LaTeX (.. math:: and :math:) in the browser, from the
# site's own copy (sphinx-mathjax-offline: _static/mathjax/tex-chtml.js)
mathjax3_config = {"tex": {"tags": "none"}}

_SECTION = re.compile(r"^(\s*)([^\s].*)\n\1(-{3,}|={3,}|~{3,})\s*$", re.M)


def docstring_sections(app, what, name, obj, options, lines) -> None:
    """A docstring's own section titles ("Differences between frameworks" under a line of
    dashes) become rubrics: a section title cannot sit inside an API entry."""
    text = "\n".join(lines)
    new = _SECTION.sub(lambda m: f"{m.group(1)}.. rubric:: {m.group(2)}\n", text)
    if new != text:
        lines[:] = new.split("\n")


def google_sections(app, what, name, obj, options, lines) -> None:
    """The Google-style sections of a function's, class's or module's docstring
    (``Args:``, ``Returns:``, ``Raises:``, ``Example:``) become Sphinx fields and
    rubrics."""
    if what in ("function", "method", "class", "exception", "module"):
        lines[:] = GoogleDocstring(lines, NAPOLEON, app, what, name, obj, options).lines()


def _exists(name: str) -> bool:
    """Whether the dotted ``name`` is an importable module or an attribute of one."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except Exception:        # not a module (or one that cannot import here)
            continue
        try:
            for part in parts[cut:]:
                obj = getattr(obj, part)
        except AttributeError:
            return False
        return True
    return False


def internal_reference(app, env, node, contnode):
    """A Python reference to nothing in the site: when it names an object that exists
    (a module's internal helper, looked up from the docstring's module, its class and its
    package, as Python would read the name there), show the name unlinked; else leave
    the reference broken (the strict build fails on it: a typo or a renamed object)."""
    if node.get("refdomain") != "py":
        return None
    target = node["reftarget"].lstrip("~.")
    # the docstring's own object (autodoc's source: "docstring of unified_opt.x.f"), whose
    # module the name is written in, and the page's module and class
    owner = re.search(r"docstring of ([\w.]+)", node.source or "")
    dotted = owner.group(1).split(".") if owner else []
    scopes = [".".join(dotted[:i]) for i in range(len(dotted), 0, -1)]
    module, cls = node.get("py:module") or "", node.get("py:class") or ""
    scopes += [f"{module}.{cls}" if module and cls else "", module]
    candidates = [f"{scope}.{target}" for scope in scopes if scope] + [target]
    return contnode if any(_exists(name) for name in candidates) else None


def generate(app) -> None:
    api_pages.write(DOCS / "api")
    porting_pairs.write(DOCS / "pairs")
    facts.write(DOCS / "_generated")


def setup(app) -> dict:
    app.connect("builder-inited", generate)
    app.connect("autodoc-process-docstring", docstring_sections)
    app.connect("autodoc-process-docstring", google_sections)
    app.connect("missing-reference", internal_reference)
    return {"parallel_read_safe": True}
