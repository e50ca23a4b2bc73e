"""The docs site: it builds strictly (every warning and every unresolved reference an
error) and offline, holds the generated API pages with the algorithms' math, the porting
pages and the pictures, and the pictures are current (drawn from the committed results
by docs/plots.py, with and without a committed GPU run)."""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, DOCS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


plots = _module("plots")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    pytest.importorskip("sphinx")
    pytest.importorskip("furo")
    pytest.importorskip("myst_parser")
    out = tmp_path_factory.mktemp("site") / "html"
    # offline: any fetch would go to a proxy that is not there (and fail the build)
    env = {**os.environ, "http_proxy": "http://127.0.0.1:9", "https_proxy":
           "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9",
           "HTTPS_PROXY": "http://127.0.0.1:9", "no_proxy": "", "NO_PROXY": ""}
    done = subprocess.run([sys.executable, str(DOCS / "build.py"), str(out)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-6000:]
    return out


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def test_every_page_is_built(site):
    for page in ("index", "api/index", "plots", "compatibility", "porting", "architecture",
                 "training", "conformance", "ci", "backends", "changelog",
                 "pairs/torch-paddle", "pairs/torch-mindspore", "pairs/paddle-mindspore"):
        assert (site / f"{page}.html").is_file(), page
    for markdown in DOCS.glob("*.md"):      # every Markdown page is in the site
        assert (site / f"{markdown.stem}.html").is_file(), markdown.name


def test_the_api_reference_has_a_page_per_public_name_with_its_math(site):
    import unified_opt as uo

    for name in uo.__all__:
        if name in ("__version__", "schedules"):
            continue
        assert (site / "api" / f"uo.{name}.html").is_file(), name
    for name in ("from_native", "save_state", "load_state", "resume", "diff",
                 "conformance.check", "schedules.Cosine", "schedules.preset"):
        assert (site / "api" / f"uo.{name}.html").is_file(), name
    adam = _text(site / "api" / "uo.Adam.html")
    # the docstring's .. math:: block, for MathJax, which the page loads
    assert r"\frac{\eta}{c_1}" in adam and 'class="math' in adam
    assert re.search(r"<script[^>]*mathjax", adam)
    assert ".. math::" not in adam and "Differences between frameworks" in adam
    build = _text(site / "api" / "uo.build.html")
    assert "groups" in build and "Sequence" in build   # the signature, annotated
    backends = _text(site / "api" / "uo.backends.html")
    assert "Backends whose framework is installed" in backends
    for page in ("uo.porting.name_map", "uo.porting.live.read_native", "devices.VERIFIED",
                 "uo.UnverifiedDeviceWarning", "uo.conformance", "uo.porting"):
        assert (site / "api" / f"{page}.html").is_file(), page
    # Google-style sections rendered as fields, a [source] link, the knobs in words
    assert "viewcode-link" in build and "Raises" in build and "Returns" in build
    adamw = _text(site / "api" / "uo.AdamW.html")
    assert "eps_placement" in adamw and "TF/Keras and MindSpore form" in adamw
    assert "Parameters" in adamw and "Example" in adamw
    assert (site / "_modules" / "unified_opt" / "build.html").is_file()


def test_math_is_served_from_the_site(site):
    """MathJax is the site's own copy (sphinx-mathjax-offline), on every page with math;
    no page loads a script or a stylesheet from elsewhere."""
    came = _text(site / "api" / "uo.CAME.html")
    script = re.search(r'<script[^>]*src="([^"]*mathjax[^"]*)"', came)
    assert script and script.group(1).startswith("../_static/mathjax/tex-chtml.js")
    assert (site / "_static" / "mathjax" / "tex-chtml.js").stat().st_size > 500_000
    assert (site / "_static" / "mathjax" / "output" / "chtml" / "fonts" /
            "woff-v2").is_dir()
    for page in site.rglob("*.html"):
        loaded = re.findall(r'<(?:script|link)[^>]*(?:src|href)="(https?:)?//', _text(page))
        assert not loaded, page


def test_the_came_page_draws_its_math_in_chromium_offline(site, tmp_path):
    """The CAME page in Chromium, every request outside the site refused: MathJax's
    output elements are there and no raw TeX delimiter is left in the visible text."""
    try:
        from playwright import sync_api
    except ImportError as error:
        pytest.skip(f"playwright is not importable: {error}")
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        pytest.skip("no chromium executable on PATH")
    refused, problems = [], []

    def route(route):
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            refused.append(route.request.url)
            route.abort()

    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.route("**/*", route)
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.goto((site / "api" / "uo.CAME.html").as_uri())
            page.locator("mjx-container").first.wait_for(timeout=30_000)
            page.wait_for_function("() => window.MathJax && MathJax.startup && "
                                   "MathJax.startup.promise", timeout=30_000)
            page.evaluate("() => MathJax.startup.promise")
            page.screenshot(path=str(tmp_path / "came.png"), full_page=True)
            displayed = page.locator('mjx-container[display="true"]').count()
            inline = page.locator("mjx-container:not([display])").count()
            text = page.inner_text("article")
            # a wide display equation scrolls inside the article, not past it
            overflow = page.evaluate(
                "() => getComputedStyle(document.querySelector('div.math')).overflowX")
        finally:
            browser.close()
    assert (tmp_path / "came.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert displayed >= 1 and inline >= 5, (displayed, inline)
    assert "\\[" not in text and "\\begin{split}" not in text and "\\frac" not in text
    assert overflow == "auto"
    assert refused == [] and problems == []


def test_the_sidebar_lists_each_page_once(site):
    sidebar = _text(site / "index.html").split('class="sidebar-tree"', 1)[1]
    sidebar = sidebar.split("<article", 1)[0]
    links = re.findall(r'class="reference internal" href="([^"#]+)"', sidebar)
    assert len(links) == len(set(links)) and "install.html" in links, links


def test_the_plots_page_shows_the_pictures(site):
    page = _text(site / "plots.html")
    for picture in ("cpu_step_time.png", "dgc_traffic.png", "conformance_error_floor.png",
                    "porting_curves.png"):
        assert picture in page, picture
    assert ("gpu_step_time.png" in page) == plots.GPU_RESULTS.exists()
    images = {p.name for p in (site / "_images").iterdir()}
    assert {"cpu_step_time.png", "dgc_traffic.png", "conformance_error_floor.png"} <= images


def test_the_porting_pages_cover_both_directions(site):
    page = _text(site / "pairs" / "torch-mindspore.html")
    assert "PyTorch to MindSpore" in page and "MindSpore to PyTorch" in page
    assert "torch.optim.AdamW" in page and "mindspore.nn.AdamWeightDecay" in page


def test_the_committed_pictures_are_current():
    assert plots.stale() == [], "run: python docs/plots.py"


def test_the_pictures_draw_with_and_without_a_gpu_run(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    out = tmp_path / "plots"
    monkeypatch.setattr(plots, "GPU_RESULTS", tmp_path / "absent.json")
    plots.draw(out)
    assert not (out / "gpu_step_time.png").exists()
    assert (out / "gpu_step_time.md").read_text() == plots.GPU_ABSENT
    for name in ("cpu_step_time.png", "dgc_traffic.png", "conformance_error_floor.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # a GPU run as benchmarks/gpu_step_time.py writes it (rows with and without times)
    gpu = tmp_path / "gpu_step_time.json"
    gpu.write_text(json.dumps({
        "environment": {"device_name": "NVIDIA H200", "torch": "2.13.0", "triton": "3.6.0",
                        "cuda": "12.8"},
        "parameters": {"name": "GPT-2 small", "tensors": 148, "elements": 124439808},
        "baseline_ms": 2.0, "targets": {"speed_x_fused_adamw": {"adamw": 1.3, "came": 2.5}},
        "rows": [{"key": "torch/adamw-fused", "algorithm": "adamw", "what": "fused",
                  "ms": 2.0},
                 {"key": "uo/adamw", "algorithm": "adamw", "what": "uo", "ms": 2.2},
                 {"key": "own/came/auto", "algorithm": "came", "what": "own", "ms": 4.0},
                 {"key": "own/came/true", "algorithm": "came", "what": "own", "ms": 3.0},
                 {"key": "own/came/inductor", "algorithm": "came", "what": "own",
                  "skipped": "time budget spent"},
                 {"key": "peer/came/pytorch_optimizer.CAME", "algorithm": "came",
                  "what": "pytorch_optimizer.CAME", "ms": 9.0},
                 {"key": "peer/lion/x.Lion", "algorithm": "lion", "what": "x.Lion",
                  "error": "ImportError: no x"}]}))
    monkeypatch.setattr(plots, "GPU_RESULTS", gpu)
    plots.draw(out)
    assert (out / "gpu_step_time.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    section = (out / "gpu_step_time.md").read_text()
    assert "NVIDIA H200" in section and "gpu_step_time.png" in section
    assert plots.stale(out) == []
    gpu.write_text(gpu.read_text().replace('"ms": 9.0', '"ms": 8.0'))
    assert plots.stale(out) == ["gpu_step_time.png: drawn from other results or another "
                                "docs/plots.py"]
    gpu.write_text(gpu.read_text().replace("H200", "H100"))
    assert plots.stale(out)[1:] == ["gpu_step_time.md: not the GPU section of the "
                                    "committed results"]


def test_a_reference_to_nothing_stays_broken():
    """The strict build shows a reference to an internal helper that exists unlinked,
    and fails on one to a name that does not exist."""
    from docutils import nodes

    conf = _module("conf")

    def reference(target, source="x.py:docstring of unified_opt.porting.state.load_state"):
        node = nodes.reference(refdomain="py", reftarget=target)
        node["py:module"] = "unified_opt"
        node.source = source
        return conf.internal_reference(None, None, node, nodes.literal(text=target))

    assert reference("across") is not None                  # porting.state's helper
    assert reference("unified_opt.kernels.runtime.SPECIALIZE_MIN") is not None
    assert reference("acros") is None                       # a typo
    assert reference("unified_opt.porting.state.nothing") is None


def test_the_readme_links_the_docs_index_below_its_two_commands():
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"```bash\n(.*?)\n```", readme, re.S)
    assert commands[:2] == [
        'python3 -m venv .venv && .venv/bin/pip install -q -e ".[all]" && '
        ".venv/bin/unified-opt conformance --out conformance-report",
        'python3 -m venv .venv && .venv/bin/pip install -q -e ".[all,test,peers]" && '
        ".venv/bin/python -m pytest -q -n 2"]
    link = readme.index("](docs/index.md)")
    assert link > readme.index(commands[1])
    assert (DOCS / "index.md").is_file()


def test_tox_builds_the_docs():
    import configparser

    tox = configparser.ConfigParser()
    tox.read(ROOT / "tox.ini")
    assert "docs" in tox["tox"]["envlist"]
    assert tox["testenv:docs"]["extras"].strip() == "docs"
    assert "docs/build.py" in tox["testenv:docs"]["commands"]
