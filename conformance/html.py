"""``report.html``: the conformance report as one self-contained page for people.

The summary and the environment, the matrix of cases x backend/path with a text filter
and status checkboxes, then one section per result: a plot per quantity of error/floor
against step (log scale, the K line drawn). Failures and errors are open; a pass is one
click away.

Self-contained: no script, style, font or image is fetched, so the page opens from a CI
artifact or a mail attachment as it is. The plots are drawn in the browser, from the
series each result holds in one byte per step (:mod:`.series`), when a section opens:
SVG drawn on the server for ~1400 results x ~20 quantities would take tens of
megabytes; the page carries the series' bytes deflated, under one byte per step, and
inflates them with the browser's ``DecompressionStream`` (Chrome 80, Firefox 113,
Safari 16.4; an older browser shows the page, and says so where a plot would be).
"""

from __future__ import annotations

import base64
import html
import json
import math
import platform
import zlib
from pathlib import Path

from unified_opt.devices import cpu_info
from unified_opt.files import write_text

from .series import grid

TITLE = "unified-opt conformance report"
STATUSES = ("pass", "fail", "error")


def result_id(result: dict) -> str:
    """``case[backend-path]``, the name a result has in the page (and in pytest ids)."""
    return f"{result['case']}[{result['backend']}-{result['path']}]"


def cpu_name() -> str:
    """This machine's CPU model (``/proc/cpuinfo``, else ``platform.processor()``)."""
    return cpu_info()[0] or platform.processor() or "unknown"


def _esc(value) -> str:
    return html.escape("" if value is None else str(value))


def _ratio(value) -> str:
    """A worst ratio as the reports print it (None is inf: the JSON has no Infinity)."""
    return "inf" if value is None else f"{value:.3g}"


def _worst(results: list[dict]) -> int | None:
    """The index of the result with the largest worst ratio (None, inf, the largest)."""
    def worst_ratio(i: int) -> float:
        value = results[i]["comparison"]["worst_ratio"]
        return math.inf if value is None else value

    return max((i for i, r in enumerate(results) if r.get("comparison")), key=worst_ratio,
               default=None)


def summary(report: dict) -> str:
    """The counts, the worst ratio (linked to its result) and the rule."""
    s, tolerance = report["summary"], report["tolerance"]
    known = f" ({s['known']} with a declared non-finite difference)" if s.get("known") else ""
    lines = [f"<p class=\"counts\"><b>{s['total']} results</b>: "
             f"<span class=\"pass\">{s['pass']} pass</span>{known}, "
             f"<span class=\"fail\">{s['fail']} fail</span>, "
             f"<span class=\"error\">{s['error']} error</span></p>"]
    worst = _worst(report["results"])
    if worst is not None:
        c = report["results"][worst]["comparison"]
        lines.append(f"<p>Worst ratio error/floor: <b>{_ratio(c['worst_ratio'])}</b> "
                     f"(<a href=\"#r{worst}\">{_esc(result_id(report['results'][worst]))}</a>, "
                     f"{_esc(c['worst_quantity'])}, step {_esc(c['worst_step'])}).</p>")
    lines.append(f"<p>Rule: {_esc(tolerance['rule'])}; K = {tolerance['k']:g}, "
                 f"ULPS = {tolerance['ulps']:g}.</p>")
    if report.get("unstable_cases"):
        lines.append("<p>Cases whose float32 reference has NaN/Inf where the oracle has "
                     f"none: {_esc(', '.join(report['unstable_cases']))}.</p>")
    return "<section id=\"summary\"><h2>Summary</h2>" + "".join(lines) + "</section>"


def environment(report: dict) -> str:
    """Versions and machine: a result is only comparable with one from the same ones.
    The CPU is the report's ``cpu``; a report written before reports carried one (or a
    merged one) gets this machine's, marked as such."""
    cpu = report.get("cpu") or f"{cpu_name()} (the machine that wrote this page)"
    rows = [("unified-opt", report["unified_opt_version"]),
            ("suite version", report["suite_version"]), ("created", report["created"]),
            ("Python", report["python"]), ("numpy", report["numpy"]),
            ("platform", report["platform"]), ("CPU", cpu)]
    for backend, worker in report["backends"].items():
        text = (f"{worker.get('framework_version') or '?'}; {worker.get('seconds', '?')} s, "
                f"exit status {worker.get('exit_code', '?')}")
        if worker.get("framework_device"):
            text += f"; on {worker['framework_device']} ({worker.get('device_name') or '?'})"
        if worker.get("not_run"):
            text += (f"; {len(worker['not_run'])} run(s) not run there: "
                     f"{worker['not_run'][0]['reason']}")
        if worker.get("error"):
            text += f"; {worker['error'].splitlines()[0]}"
        rows.append((backend, text))
    body = "".join(f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>" for k, v in rows)
    return f"<section id=\"environment\"><h2>Environment</h2><table>{body}</table></section>"


def columns(results: list[dict]) -> list[tuple[str, str]]:
    """(backend, path) pairs: backends in the order of the results, and each backend's
    paths in the order its results first show them (the cases' order: auto first)."""
    seen: dict[tuple[str, str], None] = {}
    for r in results:
        seen.setdefault((r["backend"], r["path"]), None)
    backends = list(dict.fromkeys(b for b, _ in seen))
    return [(b, p) for b in backends for (bb, p) in seen if bb == b]


def _search_text(results: list[dict]) -> str:
    """The words the filter matches, lower case: case, algorithm, backend, path, status
    and native class of each result."""
    words = []
    for r in results:
        native = (r.get("lowering") or {}).get("native") or ""
        words += [r["case"], r["algorithm"], r["backend"], r["path"], r["status"], native]
    return " ".join(dict.fromkeys(w.lower() for w in words if w))


def matrix(report: dict) -> str:
    """The filter controls and the table: one row per case, one cell per backend/path."""
    results = report["results"]
    cols = columns(results)
    index = {(r["case"], r["backend"], r["path"]): i for i, r in enumerate(results)}
    counts = {s: sum(r["status"] == s for r in results) for s in STATUSES}
    controls = ("<p class=\"filters\"><input id=\"filter\" type=\"search\" "
                "placeholder=\"filter: case, algorithm, backend, path, class\" size=\"40\"> "
                + " ".join(f"<label><input type=\"checkbox\" class=\"status-filter\" "
                           f"value=\"{s}\" checked> {s} ({counts[s]})</label>"
                           for s in STATUSES) + "</p>")
    head = "".join(f"<th>{_esc(b)} {_esc(p)}</th>" for b, p in cols)
    rows = []
    for case in report["cases"]:
        mine = [i for i in (index.get((case["id"], b, p)) for b, p in cols) if i is not None]
        if not mine:
            continue
        cells = []
        for b, p in cols:
            i = index.get((case["id"], b, p))
            if i is None:
                cells.append("<td>-</td>")
                continue
            r = results[i]
            ratio = _ratio(r["comparison"]["worst_ratio"]) if r.get("comparison") else ""
            star = "*" if r.get("known") else ""
            how = (r.get("lowering") or {}).get("native") or "own implementation"
            cells.append(f"<td class=\"{r['status']}\" title=\"{_esc(how)}\">"
                         f"<a href=\"#r{i}\">{r['status']}{star} {ratio}</a></td>")
        statuses = " ".join(sorted({results[i]["status"] for i in mine}))
        text = _search_text([results[i] for i in mine])
        rows.append(f"<tr data-statuses=\"{statuses}\" data-text=\"{_esc(text)}\">"
                    f"<th>{_esc(case['id'])}</th><td>{_esc(case.get('algorithm'))}</td>"
                    + "".join(cells) + "</tr>")
    table = (f"<table id=\"matrix-table\"><thead><tr><th>case</th><th>algorithm</th>{head}"
             f"</tr></thead><tbody>{''.join(rows)}</tbody></table>")
    return (f"<section id=\"matrix\"><h2>Matrix</h2>{controls}<p class=\"note\">A cell: "
            "status and worst error/floor over all steps and quantities (* a declared "
            "non-finite difference); its title: the native class or the own "
            f"implementation; a click: the result's plots.</p>{table}</section>")


def _facts(result: dict) -> list[tuple[str, str]]:
    """(label, text) lines of a result's section: its lowering, worst step, failure."""
    lowering, c = result.get("lowering") or {}, result.get("comparison")
    facts = []
    if lowering:
        facts.append(("lowering", f"{lowering.get('native') or 'own implementation'}: "
                                  f"{lowering.get('reason') or ''}"))
    if c:
        facts.append(("worst", f"{_ratio(c['worst_ratio'])} x floor, "
                               f"{c['worst_quantity']} at step {c['worst_step']}"))
        if c.get("detail"):
            facts.append(("first failure", c["detail"]))
    if result.get("explanation"):
        facts.append(("explanation", result["explanation"]["text"]))
    if result.get("known"):
        facts.append(("known", result["known"]))
    return facts


def section(index: int, result: dict) -> str:
    """One result: what it is, why it failed, and the element its plots are drawn in."""
    status, name = result["status"], result_id(result)
    c = result.get("comparison")
    worst = f" {_ratio(c['worst_ratio'])}" if c else ""
    facts = "".join(f"<dt>{_esc(k)}</dt><dd>{_esc(v)}</dd>" for k, v in _facts(result))
    error = f"<pre>{_esc(result['error'])}</pre>" if result.get("error") else ""
    plots = ("" if result.get("series") else
             "<p class=\"note\">No plot: the run has no per-step comparison.</p>")
    return (f"<details class=\"result\" id=\"r{index}\" data-status=\"{status}\" "
            f"data-text=\"{_esc(_search_text([result]))}\"{' open' if status != 'pass' else ''}>"
            f"<summary><span class=\"{status}\">{status}</span>{worst} {_esc(name)}</summary>"
            f"<dl>{facts}</dl>{error}<div class=\"plots\" data-result=\"{_esc(name)}\" "
            f"data-index=\"{index}\">{plots}</div></details>")


def data_block(report: dict) -> str:
    """The series of every result for the script, as JSON: the quantity names once; per
    result ``[steps, name index, ...]`` (null: no comparison); and ``codes``: the bytes
    of every result's series (:mod:`.series`) one after the other, deflated, in base64.
    Deflate takes them to less than half: steps near the floor repeat a few dozen codes."""
    names: dict[str, int] = {}
    layout, chunks = [], []
    for r in report["results"]:
        encoded = r.get("series")
        if not encoded:
            layout.append(None)
            continue
        codes = [base64.b64decode(text) for text in encoded.values()]
        steps = {len(c) for c in codes}
        if len(steps) != 1:     # compare() gives every quantity the oracle's steps
            raise ValueError(f"{result_id(r)}: series of unequal lengths {sorted(steps)}")
        layout.append([steps.pop()] + [names.setdefault(q, len(names)) for q in encoded])
        chunks += codes
    packed = base64.b64encode(zlib.compress(b"".join(chunks), 9)).decode("ascii")
    data = {"grid": grid(), "names": list(names), "results": layout, "codes": packed}
    text = json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")
    return f"<script type=\"application/json\" id=\"uo-data\">{text}</script>"


STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1em 2em;color:#222}
table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:2px 6px;text-align:left}
td a{color:inherit;text-decoration:none}.pass{color:#176f2c}.fail{color:#b00020}
.error{color:#8a4b00;font-weight:bold}td.fail,td.error{background:#fde8e8}
.note{color:#555;font-size:90%}[hidden]{display:none!important}
details.result{border-top:1px solid #ddd;padding:2px 0}summary{cursor:pointer}
dl{display:grid;grid-template-columns:max-content auto;gap:0 1em;margin:4px 0}dd{margin:0}
pre{background:#f6f6f6;padding:4px;overflow:auto;max-height:20em}
.plots{display:flex;flex-wrap:wrap;gap:4px}svg text{font-size:9px;fill:#333}
svg rect{fill:none;stroke:#bbb}svg polyline{fill:none;stroke:#1f5fbf}svg circle{fill:#b00020}
.k-line{stroke:#b00020;stroke-dasharray:4 3}
"""

# Draws a result's plots the first time its section opens (or is opened by a link), and
# applies the filters. Plots are SVG markup: no namespace URI appears in the page.
SCRIPT = """
"use strict";
const data = JSON.parse(document.getElementById("uo-data").textContent);
const g = data.grid, W = 260, H = 120, L = 34, R = 6, T = 14, B = 16;
function ratio(c) {
  if (c === g.zero_code) return 0;
  if (c === g.nonfinite_code) return Infinity;
  return g.k * Math.pow(10, (c - g.k_code) / g.per_decade);
}
const starts = [];
data.results.reduce((at, r) => {
  starts.push(at);
  return r ? at + r[0] * (r.length - 1) : at;
}, 0);
const codes = (async () => {
  const packed = Uint8Array.from(atob(data.codes), (ch) => ch.charCodeAt(0));
  const stream = new Blob([packed]).stream().pipeThrough(new DecompressionStream("deflate"));
  return new Uint8Array(await new Response(stream).arrayBuffer());
})();
codes.catch(() => {});   // reported where a plot is wanted
function esc(s) {
  return s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}
function plot(name, values) {
  // log scale over the decades the values and K span; 0 on the bottom edge one decade
  // below them, a non-finite mismatch (inf) on the top edge one decade above them
  const finite = values.filter((v) => v > 0 && isFinite(v));
  const lo = Math.floor(Math.log10(Math.min(g.k, ...finite)));
  const hi = Math.max(Math.ceil(Math.log10(Math.max(g.k, ...finite))), lo + 1);
  const zeros = values.includes(0), bottom = zeros ? lo - 1 : lo;
  const infs = values.includes(Infinity), top = infs ? hi + 1 : hi;
  const n = values.length;
  const x = (i) => L + (n > 1 ? i / (n - 1) : 0.5) * (W - L - R);
  const y = (v) => v === Infinity ? T : v <= 0 ? H - B
    : T + (top - Math.log10(v)) / (top - bottom) * (H - T - B);
  const out = [`<svg class="plot" width="${W}" height="${H}" data-quantity="${esc(name)}">`,
    `<text x="${L}" y="10">${esc(name)}</text>`,
    `<rect x="${L}" y="${T}" width="${W - L - R}" height="${H - T - B}"/>`];
  const every = Math.ceil((hi - lo) / 5);
  for (let d = lo; d <= hi; d += every) {
    out.push(`<text x="2" y="${y(10 ** d) + 3}">1e${d}</text>`);
  }
  if (zeros) out.push(`<text x="2" y="${H - B + 3}">0</text>`);
  if (infs) out.push(`<text x="2" y="${T + 3}">inf</text>`);
  out.push(`<text x="${L}" y="${H - 3}">1</text><text x="${W - R - 12}" y="${H - 3}">${n}</text>`);
  const ky = y(g.k);
  out.push(`<line class="k-line" x1="${L}" x2="${W - R}" y1="${ky}" y2="${ky}"/>`,
    `<text x="${W - R - 8}" y="${ky - 2}">K</text>`);
  const points = values.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(" ");
  out.push(`<polyline points="${points}"/>`);
  values.forEach((v, i) => {
    if (v > g.k) out.push(`<circle cx="${x(i)}" cy="${y(v)}" r="2"/>`);
  });
  out.push("</svg>");
  return out.join("");
}
async function draw(details) {
  const box = details.querySelector(".plots"), index = Number(box.dataset.index);
  const layout = data.results[index];
  if (!layout || box.dataset.drawn) return;
  box.dataset.drawn = "1";
  let bytes;
  try {
    bytes = await codes;
  } catch (error) {
    box.textContent = `The plots cannot be drawn in this browser: ${error}`;
    return;
  }
  const [steps, ...quantities] = layout;
  box.innerHTML = quantities.map((q, j) => {
    const at = starts[index] + j * steps;
    return plot(data.names[q], Array.from(bytes.subarray(at, at + steps), ratio));
  }).join("");
}
document.addEventListener("toggle", (event) => {
  if (event.target.matches("details.result") && event.target.open) draw(event.target);
}, true);
document.querySelectorAll("details.result[open]").forEach(draw);
function openTarget() {
  const target = location.hash && document.getElementById(location.hash.slice(1));
  if (target && target.matches("details.result")) { target.open = true; draw(target); }
}
window.addEventListener("hashchange", openTarget);
openTarget();
const filter = document.getElementById("filter");
function applyFilters() {
  const words = filter.value.toLowerCase().split(/\\s+/).filter(Boolean);
  const shown = new Set(Array.from(document.querySelectorAll(".status-filter:checked"),
    (box) => box.value));
  const keep = (text, statuses) => words.every((w) => text.includes(w))
    && statuses.some((s) => shown.has(s));
  document.querySelectorAll("#matrix-table tbody tr").forEach((row) => {
    row.hidden = !keep(row.dataset.text, row.dataset.statuses.split(" "));
  });
  document.querySelectorAll("details.result").forEach((d) => {
    d.hidden = !keep(d.dataset.text, [d.dataset.status]);
  });
}
filter.addEventListener("input", applyFilters);
document.querySelectorAll(".status-filter").forEach((box) =>
  box.addEventListener("change", applyFilters));
"""


def html_report(report: dict) -> str:
    """The page for ``report`` (:func:`.report.build_report`'s dict)."""
    sections = "".join(section(i, r) for i, r in enumerate(report["results"]))
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{TITLE}</title><link rel=\"icon\" href=\"data:,\">"
            f"<style>{STYLE}</style></head><body><h1>{TITLE}</h1>"
            f"{summary(report)}{environment(report)}{matrix(report)}"
            "<section id=\"results\"><h2>Results</h2><p class=\"note\">Per quantity: "
            "error/floor against step on a log scale, the dashed line K (a step above it "
            "fails: a red dot); a ratio of 0 (below 1e-4) sits on the bottom edge, "
            "labelled 0, non-finite positions that differ from the oracle's on the top "
            "edge, labelled inf.</p>"
            f"{sections}</section>{data_block(report)}<script>{SCRIPT}</script>"
            "</body></html>\n")


def write_html(report: dict, path: Path | str) -> None:
    """Write :func:`html_report` to ``path``, atomically (:mod:`unified_opt.files`)."""
    write_text(Path(path), html_report(report))
