"""The conformance reports: ``report.json`` (everything, for machines), ``report.md``
(the matrix of cases x backend/path, counts, failures with their explanation),
``report.html`` (one self-contained page: the filterable matrix and every result's
error/floor per step plotted, :mod:`.html`) and ``junit.xml`` (one testcase per case x
backend x path, for CI). Each backend's entry names the device it ran on
(``device``, ``framework_device``, ``device_name``) and the runs it left out there
(``not_run``: JUnit ``skipped``, ``not run`` in the matrix, the reason in the notes).

``status`` says whether the run behind a report finished: ``"complete"``;
``"interrupted"`` (stopped by a signal, ``interrupted_by``: its name; the results that
finished, the others errors saying so; the Markdown and the page say so at the top, and
``junit.xml`` has an erroring testcase ``run[interrupted]``); ``"incomplete"``: the stub
reports a run writes when it starts (:func:`write_stub_reports`: no results, no
summary; ``junit.xml`` one erroring testcase ``run[incomplete]``), which stay if it is
killed. Only a complete report is a verdict; :mod:`.report_diff` refuses the others.
Every file is written atomically (:mod:`unified_opt.files`)."""

from __future__ import annotations

import datetime
import json
import math
import platform
import sys
import xml.etree.ElementTree as ET
from html import escape as html_escape
from pathlib import Path

import numpy as np

import unified_opt as uo
from unified_opt.files import write_text

from .cases import SUITE_VERSION
from .compare import TINY, ULPS, K
from .html import cpu_name, html_report

FORMAT_VERSION = 1
PATH_ORDER = ("auto", "own", "native", "hand", "check")
STATUSES = ("pass", "fail", "error")
#: a report's ``status``: its run finished, was stopped by a signal, or has not finished
#: (the stub a run writes first)
COMPLETE, INTERRUPTED, INCOMPLETE = "complete", "interrupted", "incomplete"
#: the reports a run writes into its folder
REPORT_FILES = ("report.json", "report.md", "report.html", "junit.xml")

RULE = ("per step and quantity: max|backend - oracle(float64)| <= K * max(float32 "
        "reference error, ULPS float32 ulps of max|oracle|, TINY); non-finite positions "
        "equal (NaN and Inf interchangeable, Inf signs equal)")


def _finite_or_none(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def json_safe(obj):
    """``obj`` with non-finite floats as None, so the JSON is standard (no Infinity/NaN)."""
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return _finite_or_none(obj)


def unexercised_rows(backend: str, results: list[dict]) -> list[str]:
    """Native lowerings of ``backend`` (for the algorithms of ``results``) that no run of
    ``results`` built with."""
    from unified_opt.backend import load

    used = {(r["algorithm"], r["lowering"]["native"]) for r in results
            if r["backend"] == backend and r["lowering"] and r["lowering"]["path"] == "native"}
    algorithms = {r["algorithm"] for r in results}
    return [f"{lowering.algorithm} -> {cls.name}" for cls, lowering in load(backend).rows()
            if lowering.algorithm in algorithms and (lowering.algorithm, cls.name) not in used]


def build_report(cases, backends, workers: dict, results: list[dict], *,
                 unstable_cases=(), interrupted_by: str | None = None) -> dict:
    """The report; ``interrupted_by`` (a signal's name): the run was stopped, and
    ``results`` are what it has (see the module)."""
    counts = {s: sum(r["status"] == s for r in results) for s in STATUSES}
    counts["known"] = sum(bool(r.get("known")) and r["status"] == "pass" for r in results)
    uncovered = {b: unexercised_rows(b, results) for b in backends}
    report = {
        "format_version": FORMAT_VERSION,
        "status": COMPLETE if interrupted_by is None else INTERRUPTED,
        **({} if interrupted_by is None else {"interrupted_by": interrupted_by}),
        "suite_version": SUITE_VERSION,
        "unified_opt_version": uo.__version__,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu": cpu_name(),
        "numpy": np.__version__,
        "tolerance": {"k": K, "ulps": ULPS, "tiny": TINY, "rule": RULE},
        "backends": {b: {**workers[b]} for b in backends},
        "cases": [{**c.to_dict(), "algorithm": c.spec.name} for c in cases],
        "unstable_cases": list(unstable_cases),
        "unexercised_lowering_rows": uncovered,
        "results": results,
        "summary": {"total": len(results), **counts},
    }
    return json_safe(report)


# -- the matrix ---------------------------------------------------------------------

def columns(report: dict) -> list[tuple[str, str]]:
    present = {(r["backend"], r["path"]) for r in report["results"]}
    return [(b, p) for b in report["backends"] for p in PATH_ORDER if (b, p) in present]


def cell(result: dict | None) -> str:
    if result is None:
        return "-"
    if result["status"] == "error":
        return "ERROR"
    ratio = result["comparison"]["worst_ratio"]
    ratio = "inf" if ratio is None else f"{ratio:.3g}"
    lowering = result.get("lowering") or {}
    kind = {"native": "native", "hand": "by hand", "check": "checked"}.get(
        lowering.get("path"), "own")
    known = "*" if result.get("known") else ""
    return f"{'pass' if result['status'] == 'pass' else 'FAIL'}{known} {ratio} ({kind})"


def matrix(report: dict) -> tuple[list[str], list[list[str]]]:
    """Header and rows: one row per case, one column per backend/path; ``not run`` where
    the backend left the case out on its device."""
    cols = columns(report)
    by_key = {(r["case"], r["backend"], r["path"]): r for r in report["results"]}
    left_out = {(e["case"], e["backend"], e["path"]) for e in not_run_entries(report)}
    header = ["case"] + [f"{b} {p}" for b, p in cols]
    rows = [[c["id"]] + ["not run" if (c["id"], b, p) in left_out
                         else cell(by_key.get((c["id"], b, p))) for b, p in cols]
            for c in report["cases"]]
    return header, rows


def summary_line(report: dict) -> str:
    s = report["summary"]
    known = (f" ({s['known']} of them with a declared non-finite difference)"
             if s.get("known") else "")
    return (f"{s['total']} results: {s['pass']} pass{known}, {s['fail']} fail, "
            f"{s['error']} error")


def text_matrix(report: dict) -> str:
    header, rows = matrix(report)
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip()
             for row in [header] + rows]
    return "\n".join(lines + ["", summary_line(report)])


def problems_text(report: dict) -> str:
    """The summary line, each backend's worker seconds, and every result that did not
    pass, one line each (what the terminal shows at the end; the matrix is in
    ``report.md``)."""
    seconds = ", ".join(f"{b} {w.get('seconds', 0):.0f} s"
                        for b, w in report["backends"].items())
    lines = [summary_line(report) + (f" (workers: {seconds})" if seconds else "")]
    devices = device_text(report)
    if devices and any(w.get("device") != "cpu" for w in report["backends"].values()):
        lines.append(f"device: {devices}")
    reasons: dict[tuple[str, str], set] = {}
    for entry in not_run_entries(report):
        reasons.setdefault((entry["backend"], entry["reason"]), set()).add(entry["case"])
    for (backend, reason), cases in reasons.items():
        lines.append(f"  NOT RUN {len(cases)} case(s) on {backend} "
                     f"({', '.join(sorted(cases))}): {reason}")
    # the runs a worker that ended early never began share one reason: one line per
    # backend with their count, not one line per run
    problems = [(r, _problem_text(r)) for r in _problems(report)]
    unstarted: dict[tuple[str, str], int] = {}
    for r, text in problems:
        if r["status"] == "error" and text.startswith(NOT_STARTED):
            unstarted[(r["backend"], text)] = unstarted.get((r["backend"], text), 0) + 1
    for r, text in problems:
        if unstarted.get((r["backend"], text), 0) < 2:
            lines.append(f"  {r['status'].upper()} {r['case']} on {r['backend']} "
                         f"({r['path']}): {text}")
    lines += [f"  ERROR {count} runs on {backend} {text}"
              for (backend, text), count in unstarted.items() if count > 1]
    return "\n".join(lines)


#: the error of a run that a worker ending early never began (runner._missing)
NOT_STARTED = "not run: the worker "


def _problems(report: dict):
    for r in report["results"]:
        if r["status"] != "pass":
            yield r


def _problem_text(r: dict) -> str:
    if r["status"] == "error":
        lines = (r["error"] or "").strip().splitlines()
        return lines[-1] if lines else "error"
    c = r["comparison"]
    text = c["detail"]
    if r.get("explanation"):
        text += "; " + r["explanation"]["text"]
    return text


def device_text(report: dict) -> str | None:
    """Where each backend ran (``torch on cuda:0 (NVIDIA H200)``); None for a report
    without device entries (written before they existed, a merged one)."""
    placed = [f"{b} on {w['framework_device']} ({w.get('device_name') or '?'})"
              for b, w in report["backends"].items() if w.get("framework_device")]
    return ", ".join(placed) or None


def not_run_entries(report: dict) -> list[dict]:
    """Every (case, backend, path) a backend did not run on its device, with the reason
    (``backends[b]["not_run"]``)."""
    return [{**entry, "backend": b} for b, w in report["backends"].items()
            for entry in w.get("not_run") or ()]


def markdown(report: dict) -> str:
    header, rows = matrix(report)
    versions = ", ".join(f"{b} {w.get('framework_version') or '?'}"
                         for b, w in report["backends"].items())
    devices = device_text(report)
    out = ["# unified-opt conformance report", "",
           f"Suite {report['suite_version']}, unified-opt {report['unified_opt_version']}, "
           f"{versions}; Python {report['python']}, numpy {report['numpy']}, "
           f"{report['platform']}; {report['created']}."
           + (f" Device: {devices}." if devices else ""), "",
           f"Rule: {report['tolerance']['rule']}; K = {report['tolerance']['k']:g}, "
           f"ULPS = {report['tolerance']['ulps']:g}. A cell shows the worst ratio "
           "error/floor over all steps and quantities, and whether the build used the "
           "framework's native class or the spec's own update; `-`: not run (the "
           "`auto` build already took the own implementation).", "",
           *([f"**{interrupted_text(report)}**", ""] if interrupted_text(report) else []),
           f"**{summary_line(report)}**", "",
           "| " + " | ".join(header) + " |",
           "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    problems = list(_problems(report))
    if problems:
        out += ["", "## Failures and errors", ""]
        for r in problems:
            out.append(f"- `{r['case']}` on {r['backend']} ({r['path']}): "
                       f"**{r['status']}**: {_problem_text(r)}")
    notes = [f"- {b}: lowering rows no run built with: {', '.join(rows)}"
             for b, rows in report["unexercised_lowering_rows"].items() if rows]
    known = sorted({r["known"] for r in report["results"]
                    if r.get("known") and r["status"] == "pass"})
    if known:
        notes.append("- `pass*`: a native class that declares how it departs from the spec "
                     "under a non-finite gradient, compared with that tolerance (elements "
                     "the oracle holds non-finite may stay finite): " + "; ".join(known))
    skipped = not_run_entries(report)
    if skipped:
        reasons = {}
        for entry in skipped:
            reasons.setdefault((entry["backend"], entry["reason"]), []).append(
                f"{entry['case']} ({entry['path']})")
        notes += [f"- {backend}: {', '.join(runs)}: {reason}"
                  for (backend, reason), runs in reasons.items()]
    if report["unstable_cases"]:
        notes.append("- cases whose float32 reference has NaN/Inf where the oracle has "
                     f"none: {', '.join(report['unstable_cases'])}")
    for b, w in report["backends"].items():
        if w.get("error"):
            notes.append(f"- {b} worker: {w['error'].splitlines()[0]}")
    if notes:
        out += ["", "## Notes", ""] + notes
    return "\n".join(out) + "\n"


def interrupted_text(report: dict) -> str | None:
    """What an interrupted report says first (None for any other report)."""
    if report.get("status") != INTERRUPTED:
        return None
    return (f"INTERRUPTED by {report.get('interrupted_by') or 'a signal'}: the run was "
            "stopped before it finished; these are the results that finished, the runs it "
            "did not finish are errors. Not a verdict on the suite.")


def _run_testsuite(root: ET.Element, name: str, message: str) -> None:
    """A testsuite ``conformance.run`` of one erroring testcase ``run[name]`` (an
    interrupted or unfinished run: a CI's test view shows it red)."""
    suite = ET.SubElement(root, "testsuite", name="conformance.run", tests="1",
                          failures="0", errors="1", skipped="0", time="0.000")
    case = ET.SubElement(suite, "testcase", classname="conformance.run", name=f"run[{name}]",
                         time="0.000")
    ET.SubElement(case, "error", type=name, message=message).text = message


def junit(report: dict) -> str:
    """JUnit XML for a CI's test view: a testsuite per backend, a testcase per result,
    named ``case[backend-path]`` (as :mod:`.report_diff` names results) in class
    ``conformance.<backend>``. A failure's ``message`` is its first failing step and
    quantity with the explanation, an error's the last line of its text (the exception,
    or how the worker ended); the element's text holds the whole comparison or error."""
    # XML 1.0 has no control characters but tab, newline and carriage return (a worker's
    # stderr may hold a terminal colour's ESC)
    xml_text = dict.fromkeys(c for c in range(32) if c not in (9, 10, 13))
    skipped = not_run_entries(report)
    interrupted = interrupted_text(report)
    root = ET.Element("testsuites", name="unified-opt conformance",
                      tests=str(report["summary"]["total"] + len(skipped) + bool(interrupted)),
                      failures=str(report["summary"]["fail"]),
                      errors=str(report["summary"]["error"] + bool(interrupted)),
                      skipped=str(len(skipped)))
    if interrupted:
        _run_testsuite(root, INTERRUPTED, interrupted)
    for backend, worker in report["backends"].items():
        mine = [r for r in report["results"] if r["backend"] == backend]
        left_out = [e for e in skipped if e["backend"] == backend]
        suite = ET.SubElement(root, "testsuite", name=f"conformance.{backend}",
                              tests=str(len(mine) + len(left_out)),
                              failures=str(sum(r["status"] == "fail" for r in mine)),
                              errors=str(sum(r["status"] == "error" for r in mine)),
                              skipped=str(len(left_out)),
                              time=f"{sum(r['seconds'] or 0.0 for r in mine):.3f}")
        if worker.get("framework_device"):
            properties = ET.SubElement(suite, "properties")
            for key in ("device", "framework_device", "device_name"):
                ET.SubElement(properties, "property", name=key, value=str(worker.get(key)))
        for r in mine:
            case = ET.SubElement(suite, "testcase", classname=f"conformance.{backend}",
                                 name=f"{r['case']}[{backend}-{r['path']}]",
                                 time=f"{r['seconds'] or 0.0:.3f}")
            if r["status"] == "fail":
                node = ET.SubElement(case, "failure", type=r["comparison"]["failure"],
                                     message=_problem_text(r))
                node.text = json.dumps(r["comparison"], indent=1)
            elif r["status"] == "error":
                node = ET.SubElement(case, "error",
                                     message=_problem_text(r).translate(xml_text))
                node.text = (r["error"] or "").translate(xml_text)
        for entry in left_out:
            case = ET.SubElement(suite, "testcase", classname=f"conformance.{backend}",
                                 name=f"{entry['case']}[{backend}-{entry['path']}]", time="0")
            ET.SubElement(case, "skipped", message=entry["reason"])
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def html_page(report: dict) -> str:
    """:func:`.html.html_report`'s page; an interrupted report's says so under its
    title."""
    page = html_report(report)
    interrupted = interrupted_text(report)
    if interrupted:
        banner = (f"<p class=\"fail\" id=\"status\"><b>{html_escape(interrupted)}</b></p>")
        page = page.replace("</h1>", "</h1>" + banner, 1)
    return page


def write_reports(report: dict, out: Path | str) -> None:
    """``report.json``, ``report.md``, ``report.html`` and ``junit.xml`` of ``report``
    into the folder ``out``, each replaced atomically."""
    out = Path(out)
    write_text(out / "report.json", json.dumps(report, indent=1, allow_nan=False) + "\n")
    write_text(out / "report.md", markdown(report))
    write_text(out / "report.html", html_page(report))
    write_text(out / "junit.xml", junit(report))


def stub_report(started: str, pid: int) -> dict:
    """What ``report.json`` holds while a run (process ``pid``, started at ``started``)
    has not finished: ``status`` incomplete, no results, no summary."""
    return {"format_version": FORMAT_VERSION, "status": INCOMPLETE, "started": started,
            "pid": pid, "unified_opt_version": uo.__version__,
            "message": (f"INCOMPLETE: the conformance run started at {started} (process "
                        f"{pid}) has not written its reports: it is still running, or it "
                        "was killed before it could. There are no results here; this is "
                        "not a verdict on the suite.")}


def write_stub_reports(out: Path | str, *, started: str, pid: int) -> None:
    """Mark the folder ``out`` as holding no finished run's reports: the four reports
    an earlier run left are removed (a kill between two of these writes leaves a report
    missing, never an earlier run's), then written as stubs that say so
    (:func:`stub_report`)."""
    out = Path(out)
    for name in REPORT_FILES:
        (out / name).unlink(missing_ok=True)
    stub = stub_report(started, pid)
    message = stub["message"]
    write_text(out / "report.json", json.dumps(stub, indent=1) + "\n")
    write_text(out / "report.md", f"# unified-opt conformance report\n\n**{message}**\n")
    write_text(out / "report.html",
               "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
               "<title>unified-opt conformance report: incomplete</title></head><body>"
               f"<h1>unified-opt conformance report</h1><p><b>{html_escape(message)}</b></p>"
               "</body></html>\n")
    root = ET.Element("testsuites", name="unified-opt conformance", tests="1",
                      failures="0", errors="1", skipped="0")
    _run_testsuite(root, INCOMPLETE, message)
    ET.indent(root)
    write_text(out / "junit.xml",
               ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n")
