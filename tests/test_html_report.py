"""``report.html``: the series encoding (:mod:`unified_opt.conformance.series`), the page
(:mod:`unified_opt.conformance.html`) read back as HTML and as data, and the page in a
browser (Playwright driving an installed Chromium; skipped where there is none)."""

import base64
import json
import math
import re
import shutil
import zlib
from html.parser import HTMLParser

import numpy as np
import pytest
from conftest import require

import unified_opt as uo
from unified_opt.conformance import series
from unified_opt.conformance.cases import Case, default_cases
from unified_opt.conformance.compare import K
from unified_opt.conformance.html import html_report, result_id
from unified_opt.conformance.report import build_report, write_reports
from unified_opt.conformance.trajectory import reference_trajectory
from unified_opt.conformance.verdict import References, verdict

BOTTOM = float(series.ratios(np.array([1], dtype=np.uint8))[0])      # the grid's ends
TOP = float(series.ratios(np.array([series.TOP_CODE], dtype=np.uint8))[0])
HALF_STEP = 1 / (2 * series.PER_DECADE)           # decades: the nearest code's distance


# -- the series encoding -------------------------------------------------------------

def _round_trip(values):
    return series.decode(series.encode({"q": np.asarray(values, dtype=np.float64)}))["q"]


def test_the_grid_spans_1e_4_to_6e11_with_k_on_a_code():
    # the grid's ends to the digits written here (no rounding question: a statement)
    assert BOTTOM == pytest.approx(9.24e-5, rel=1e-3) and TOP == pytest.approx(6.0e11, rel=1e-2)
    # a code decodes as K * 10 ** (n / PER_DECADE) in float64 (numpy's power: an ulp or
    # so apart between CPUs); K's own code has n = 0, far inside rel=1e-12 anywhere
    assert _round_trip([K])[0] == pytest.approx(K, rel=1e-12)


def test_round_trip_is_within_half_a_code_and_keeps_the_side_of_k():
    ratios = 10.0 ** np.random.default_rng(0).uniform(-3.9, 11.7, 5000)
    back = _round_trip(ratios)
    off = np.abs(np.log10(back / ratios))
    far_from_k = ratios > K * 10 ** (1 / series.PER_DECADE)
    assert off[far_from_k | (ratios <= K)].max() <= HALF_STEP + 1e-9
    assert off.max() <= 2 * HALF_STEP + 1e-9          # one code up just above K
    assert np.all((back > K) == (ratios > K))
    just_above = _round_trip([K * 1.0001, K * 1.02])
    assert np.all(just_above > K) and np.all(just_above < K * 10 ** (1 / series.PER_DECADE)
                                              + 1e-9)


def test_zero_below_the_grid_nonfinite_and_above_the_grid():
    back = _round_trip([0.0, 1e-6, np.inf, np.nan, 1e30, BOTTOM])
    assert back[:2].tolist() == [0.0, 0.0]
    assert np.isinf(back[2]) and np.isinf(back[3])      # inf marks differing NaN/Inf
    # the grid's ends decoded (numpy's float64 power, an ulp or so apart between CPUs)
    # against their definition: far inside approx's default rel=1e-6
    assert back[4] == pytest.approx(TOP) and back[5] == pytest.approx(BOTTOM)


def test_one_byte_per_step_in_base64():
    encoded = series.encode({"param:w": np.ones(50), "lr": np.zeros(0)})
    assert len(encoded["param:w"]) == 68 and encoded["lr"] == ""
    assert base64.b64decode(encoded["param:w"]) == bytes([series.K_CODE - 14]) * 50
    assert series.decode(encoded)["lr"].shape == (0,)


# -- results and the page, from numpy trajectories -------------------------------------

@pytest.fixture(scope="module")
def report():
    """Three results of one Adam case: the float32 reference (passes), the reference
    without bias correction (fails from step 1), and an error."""
    case = Case(id="planted", spec=uo.Adam(lr=0.01, eps=1e-3))
    decision = uo.explain(case.spec, backend="torch")
    references = References()
    passing = reference_trajectory(case.spec, case, "float32")
    failing = reference_trajectory(case.spec.replace(bias_correction=False), case, "float32")
    results = [
        {**verdict(case, "torch", "auto", passing, decision, None, references), "seconds": 0.1},
        {**verdict(case, "torch", "own", failing, decision, None, references), "seconds": 0.1},
        {**verdict(case, "paddle", "auto", None, None, "Traceback ...\nRuntimeError: boom",
                   references), "seconds": None},
    ]
    workers = {b: {"exit_code": 0, "seconds": 1.5, "framework_version": f"{b}-9.9",
                   "error": None} for b in ("torch", "paddle")}
    return build_report([case], ["torch", "paddle"], workers, results)


def test_a_result_holds_the_series_of_every_compared_quantity(report):
    passing, failing, error = report["results"]
    assert (passing["status"], failing["status"], error["status"]) == ("pass", "fail", "error")
    assert "series" not in error
    for result in (passing, failing):
        decoded = series.decode(result["series"])
        per_quantity = result["comparison"]["per_quantity"]
        assert list(decoded) == list(per_quantity)
        for name, values in decoded.items():
            assert values.shape == (50,)
            worst = per_quantity[name]
            if worst >= BOTTOM:
                assert abs(math.log10(values.max() / worst)) <= 2 * HALF_STEP + 1e-9, name
    comparison = failing["comparison"]
    first = series.decode(failing["series"])[comparison["failing_quantity"]]
    assert first[comparison["first_failing_step"] - 1] > K
    assert max(v.max() for v in series.decode(passing["series"]).values()) <= K


class _Page(HTMLParser):
    """Every start tag with its attributes, and the text of the scripts and styles."""

    def __init__(self):
        super().__init__()
        self.tags, self.inline, self._in = [], [], None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self._in = tag if tag in ("script", "style") else None

    def handle_data(self, data):
        if self._in:
            self.inline.append((self._in, data))

    def handle_endtag(self, tag):
        self._in = None


def _parse(text: str) -> _Page:
    page = _Page()
    page.feed(text)
    page.close()
    return page


def test_the_page_loads_nothing_from_outside(report):
    text = html_report(report)
    page = _parse(text)
    assert "http://" not in text and "https://" not in text
    for tag, attrs in page.tags:
        for key in ("src", "href", "srcset", "data", "action", "poster"):
            value = attrs.get(key) or ""
            assert "//" not in value, (tag, key, value)
        assert not (tag == "link" and "stylesheet" in (attrs.get("rel") or "")), attrs
        assert not (tag == "script" and "src" in attrs), attrs
        assert "url(" not in (attrs.get("style") or "")
    styles = "".join(data for kind, data in page.inline if kind == "style")
    assert styles and "url(" not in styles and "@import" not in styles
    assert [t for t, _ in page.tags].count("script") == 2     # the data and the code


def test_one_plot_element_per_result_and_failures_open(report):
    page = _parse(html_report(report))
    plots = [a["data-result"] for t, a in page.tags if "plots" in (a.get("class") or "")]
    assert plots == [result_id(r) for r in report["results"]]
    assert plots == ["planted[torch-auto]", "planted[torch-own]", "planted[paddle-auto]"]
    details = {a["id"]: a for t, a in page.tags if t == "details"}
    assert [a["data-status"] for a in details.values()] == ["pass", "fail", "error"]
    assert ["open" in a for a in details.values()] == [False, True, True]


def test_the_page_says_the_counts_the_worst_ratio_and_the_environment(report):
    text = html_report(report)
    worst = report["results"][1]["comparison"]["worst_ratio"]
    assert "<b>3 results</b>" in text and "1 pass</span>" in text and "1 fail</span>" in text
    assert f"<b>{worst:.3g}</b>" in text and 'href="#r1">planted[torch-own]</a>' in text
    for value in ("torch-9.9", "paddle-9.9", report["numpy"], report["python"],
                  report["platform"], report["cpu"], report["unified_opt_version"]):
        assert f"<td>{value}" in text, value
    assert "bias_correction=False follows this optimizer" in text
    assert "RuntimeError: boom" in text


def test_the_data_block_carries_each_result_s_codes(report):
    """Inflating the page's data gives back every result's bytes, where the script
    looks for them."""
    text = html_report(report)
    data = json.loads(re.search(r'id="uo-data">(.*?)</script>', text).group(1))
    codes = zlib.decompress(base64.b64decode(data["codes"]))
    at = 0
    for result, layout in zip(report["results"], data["results"]):
        if "series" not in result:
            assert layout is None
            continue
        steps, *names = layout
        assert [data["names"][i] for i in names] == list(result["series"])
        for encoded in result["series"].values():
            assert codes[at:at + steps] == base64.b64decode(encoded)
            at += steps
    assert at == len(codes) and data["grid"]["k"] == K


def test_write_reports_writes_report_html_beside_the_others(report, tmp_path):
    write_reports(report, tmp_path)
    assert {"report.json", "report.md", "report.html", "junit.xml"} <= {
        p.name for p in tmp_path.iterdir()}
    assert (tmp_path / "report.html").read_text() == html_report(report)


@require("torch")
def test_a_torch_run_writes_a_page_with_a_plot_per_result(tmp_path):
    from unified_opt.conformance.runner import run

    result = run(default_cases(["adam"])[:2], ["torch"], tmp_path, progress=lambda _: None)
    page = _parse((tmp_path / "report.html").read_text())
    plots = [a["data-result"] for t, a in page.tags if "plots" in (a.get("class") or "")]
    assert plots == [result_id(r) for r in result["results"]] and len(plots) >= 2
    assert all(r["series"] and len(r["series"]) == len(r["comparison"]["per_quantity"])
               for r in result["results"])


#: the four reports of the full suite, for a CI's store: 11.0 MiB with 25 algorithms
#: (1,627 results in a real run; the synthetic suite above runs "own" everywhere), from
#: 10 MiB with 17
ARTIFACT_BUDGET = 12 * 2**20


def _runs_native(case, backend) -> bool:
    """Whether the worker runs ``case``'s "native" path on ``backend``: where the "auto"
    build (``prefer="speed"``, at the case's size) takes the own implementation over an
    exact native class (the worker's ``native_skip``)."""
    from unified_opt.backend import Context, load

    elements = sum(math.prod(shape) for shape in case.params.values())
    decision = load(backend).decide(case.spec, "auto", Context(elements=elements), "speed")
    return decision.path == "own" and decision.alternative is not None


@pytest.fixture(scope="module")
def full_suite(tmp_path_factory):
    """The reports of a report the size of the full default suite, without running a
    framework (judging ~900 results would take minutes): every case on every backend it
    runs on and each of its paths ("own" even where a run skips it as the same as
    "auto"; "native" where a run takes it: "auto" took the own implementation over an
    exact class, :func:`_runs_native`), each result a pass whose series has the case's
    own steps and quantities (no state for "hand"), drawn at random between 1e-3 and 1 of
    the floor, which compresses worse than a real run's series."""
    rng = np.random.default_rng(0)
    references, results = References(), []
    cases = default_cases()
    template = verdict(cases[0], "torch", "auto", references.get(cases[0], "float32"), None,
                       None, references)
    for case in cases:
        names = list(references.get(case, "float32").quantities())
        for backend in ("torch", "paddle", "mindspore"):
            for path in case.paths if case.runs_on(backend) else ():
                if path == "native" and not _runs_native(case, backend):
                    continue
                drawn = {n: 10 ** rng.uniform(-3, 0, case.steps) for n in names
                         if path != "hand" or not n.startswith("state:")}
                comparison = {**template["comparison"], "per_quantity": {
                    n: float(v.max()) for n, v in drawn.items()}}
                results.append({**template, "case": case.id, "algorithm": case.spec.name,
                                "backend": backend, "path": path, "seconds": 0.1,
                                "comparison": comparison, "series": series.encode(drawn)})
    workers = {b: {"exit_code": 0, "seconds": 60.0, "framework_version": f"{b}-9.9",
                   "error": None} for b in ("torch", "paddle", "mindspore")}
    report = build_report(cases, ["torch", "paddle", "mindspore"], workers, results)
    out = tmp_path_factory.mktemp("full-suite")
    write_reports(report, out)
    return report, out


def test_the_full_suite_s_reports_fit_a_ci_artifact(full_suite):
    report, out = full_suite
    sizes = {p.name: p.stat().st_size for p in out.iterdir()}
    assert set(sizes) == {"report.json", "report.md", "report.html", "junit.xml"}
    assert report["summary"]["total"] > 600, report["summary"]
    assert sum(sizes.values()) <= ARTIFACT_BUDGET, sizes


def test_the_full_suite_s_page_has_a_plot_per_result_and_loads_nothing(full_suite):
    report, out = full_suite
    text = (out / "report.html").read_text()
    page = _parse(text)
    plots = [a["data-result"] for t, a in page.tags if "plots" in (a.get("class") or "")]
    assert plots == [result_id(r) for r in report["results"]]
    assert all(r["series"] for r in report["results"])
    assert "http://" not in text and "https://" not in text
    assert not [a for t, a in page.tags if t == "script" and "src" in a]


# -- in a browser ----------------------------------------------------------------------

def _browser():
    """Playwright's sync API and a Chromium executable, or the test skips saying why."""
    try:
        from playwright import sync_api as playwright
    except ImportError as error:
        pytest.skip(f"playwright is not importable: {error}")
    executable = shutil.which("chromium") or shutil.which("chromium-browser")
    if executable is None:
        pytest.skip("no chromium executable on PATH")
    return playwright, executable


def test_the_page_in_chromium_filters_and_draws_plots(report, tmp_path):
    playwright, executable = _browser()
    path = tmp_path / "report.html"
    path.write_text(html_report(report))
    problems, requests = [], []
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable)
        try:
            page = browser.new_page()
            page.on("console", lambda m: m.type in ("error", "warning")
                    and problems.append(f"{m.type}: {m.text}"))
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(path.as_uri())
            fail = page.locator("details#r1")   # open from the start: drawn
            fail.locator("svg.plot").first.wait_for()
            quantities = len(report["results"][1]["series"])
            assert fail.locator("svg.plot").count() == quantities
            drawn = fail.locator("svg.plot").evaluate_all(
                "svgs => svgs.map(s => [s.dataset.quantity, s.querySelector('polyline')"
                ".getAttribute('points').trim().split(' ').length,"
                " s.querySelectorAll('circle').length])")
            decoded = series.decode(report["results"][1]["series"])   # a dot per step > K
            assert drawn == [[q, 50, int((v > K).sum())] for q, v in decoded.items()]
            assert sum(n for _, _, n in drawn) > 0
            passing = page.locator("details#r0")
            assert passing.locator("svg").count() == 0               # closed, not drawn
            passing.locator("summary").click()
            passing.locator("svg.plot").first.wait_for()
            assert passing.locator("svg.plot").count() == len(report["results"][0]["series"])
            assert passing.locator("svg.plot line.k-line").count() == passing.locator(
                "svg.plot").count()
            assert passing.locator("svg.plot circle").count() == 0
            page.fill("#filter", "paddle")
            assert page.locator("details.result:not([hidden])").count() == 1
            assert page.locator("details#r2").is_visible()
            page.fill("#filter", "zzz-unknown")
            assert page.locator("#matrix-table tbody tr:not([hidden])").count() == 0
            page.fill("#filter", "")
            page.uncheck(".status-filter[value=pass]")
            assert not page.locator("details#r0").is_visible()
            assert page.locator("#matrix-table tbody tr:not([hidden])").count() == 1
            page.uncheck(".status-filter[value=fail]")
            page.uncheck(".status-filter[value=error]")
            assert page.locator("#matrix-table tbody tr:not([hidden])").count() == 0
        finally:
            browser.close()
    assert problems == []
    assert requests == [path.as_uri()]
