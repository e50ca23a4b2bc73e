"""What changed between two conformance reports (``report.json``), for a CI gate.

A result is keyed by ``(case, backend, path)`` and shown as ``case[backend-path]``. The
diff lists new failures (a pass that now fails or errors, and a result new in the second
report that fails or errors), fixes, results still failing, worst-ratio regressions,
results added and removed, and cases added and removed. Only a new failure makes the exit
status 1: a baseline that already failed, or a passing result that got closer to the
tolerance, is reported but does not block.

Worst-ratio regression rule: both results pass, and the new worst ratio (error / floor,
see :mod:`.compare`) is more than ``ratio_threshold`` times the old one *and* at least
``MIN_REGRESSION_RATIO`` (0.5). Below half a floor the error is rounding noise (a ratio
going from 1e-3 to 1e-2 means nothing); an old ratio of 0 (bit-exact) that becomes 0.5 or
more counts. ``worst_ratio`` None in a report stands for infinity.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from unified_opt.files import write_text

from .report import COMPLETE, FORMAT_VERSION, STATUSES, json_safe

MIN_REGRESSION_RATIO = 0.5
RESULT_KEYS = ("case", "backend", "path", "status")


def display_name(key: tuple[str, str, str]) -> str:
    """``case[backend-path]``: how a result is named in the diff and in junit.xml."""
    case, backend, path = key
    return f"{case}[{backend}-{path}]"


@dataclass(frozen=True)
class Change:
    """One result in one list of the diff; ``None`` where a report has no such result."""

    name: str
    old_status: str | None = None
    new_status: str | None = None
    old_ratio: float | None = None
    new_ratio: float | None = None
    detail: str = ""

    def line(self) -> str:
        if self.old_status is None:
            text = f"{self.name}: new result, {self.new_status}"
        else:
            text = f"{self.name}: {self.old_status} -> {self.new_status}"
        return text + (f": {self.detail}" if self.detail else "")


@dataclass
class ReportDiff:
    """The differences from an old report to a new one (see the module docstring)."""

    old_suite_version: object
    new_suite_version: object
    ratio_threshold: float
    new_failures: list[Change] = field(default_factory=list)
    fixes: list[Change] = field(default_factory=list)
    still_failing: list[Change] = field(default_factory=list)
    regressions: list[Change] = field(default_factory=list)
    results_added: list[str] = field(default_factory=list)
    results_removed: list[str] = field(default_factory=list)
    cases_added: list[str] = field(default_factory=list)
    cases_removed: list[str] = field(default_factory=list)

    @property
    def exit_status(self) -> int:
        """1 when the new report has a failure the old one did not have, else 0."""
        return 1 if self.new_failures else 0

    def _sections(self) -> list[tuple[str, list[str]]]:
        regression_title = (f"worst-ratio regressions (> {self.ratio_threshold:g}x and "
                            f">= {MIN_REGRESSION_RATIO:g})")
        return [("new failures", [c.line() for c in self.new_failures]),
                ("fixes", [c.line() for c in self.fixes]),
                ("still failing", [c.line() for c in self.still_failing]),
                (regression_title, [_regression_line(c) for c in self.regressions]),
                ("results added", self.results_added),
                ("results removed", self.results_removed),
                ("cases added", self.cases_added),
                ("cases removed", self.cases_removed)]

    def text(self) -> str:
        """Counts first, then every non-empty list; "no changes" when every list but
        "still failing" (a state, not a change) is empty."""
        sections = self._sections()
        lines = [f"report diff: suite {self.old_suite_version} -> {self.new_suite_version}",
                 ", ".join(f"{title}: {len(items)}" for title, items in sections)]
        if not any(items for title, items in sections if title != "still failing"):
            lines.append("no changes")
        for title, items in sections:
            if items:
                lines += ["", f"{title}:"] + [f"  {item}" for item in items]
        return "\n".join(lines) + "\n"

    def to_dict(self) -> dict:
        """Every field, plus the rule's minimum ratio and the exit status; an infinite
        ratio is None, as in report.json."""
        out = asdict(self)
        out["min_regression_ratio"] = MIN_REGRESSION_RATIO
        out["exit_status"] = self.exit_status
        return json_safe(out)


def _regression_line(change: Change) -> str:
    old, new = change.old_ratio, change.new_ratio
    growth = new / old if old else math.inf
    return f"{change.name}: worst ratio {old:.3g} -> {new:.3g} (x{growth:.3g})"


def validate_report(report, name: str) -> None:
    """Raise TypeError/ValueError naming ``name`` unless ``report`` is a complete
    conformance report (``status``, :mod:`.report`) of this unified-opt's format_version,
    each result keyed once."""
    if not isinstance(report, dict):
        raise TypeError(f"{name}: a report is a dict, got {type(report).__name__}")
    # an interrupted run's report, or the stub of one that has not finished, is no verdict
    # (a report written before "status" existed is a finished run's)
    status = report.get("status", COMPLETE)
    if status != COMPLETE:
        why = (f"interrupted by {report['interrupted_by']}" if report.get("interrupted_by")
               else "killed, or still running")
        raise ValueError(f"{name}: status {status!r}: the run that wrote it did not finish "
                         f"({why}); only a complete report can be compared")
    missing = [k for k in ("format_version", "results") if k not in report]
    if missing:
        raise ValueError(f"{name}: not a conformance report (no {', '.join(missing)})")
    if report["format_version"] != FORMAT_VERSION:
        raise ValueError(f"{name}: format_version {report['format_version']!r}; this "
                         f"unified-opt reads format_version {FORMAT_VERSION}")
    if not isinstance(report["results"], list):
        raise ValueError(f"{name}: 'results' is a {type(report['results']).__name__}, "
                         "expected a list")
    seen = set()
    for index, result in enumerate(report["results"]):
        if not isinstance(result, dict) or any(k not in result for k in RESULT_KEYS):
            raise ValueError(f"{name}: results[{index}] is not a result (needs "
                             f"{', '.join(RESULT_KEYS)}): {result!r:.200}")
        if result["status"] not in STATUSES:
            raise ValueError(f"{name}: results[{index}] has status {result['status']!r}; "
                             f"expected one of {STATUSES}")
        _check_fields(result, f"{name}: results[{index}]")
        key = _key(result)
        if key in seen:
            raise ValueError(f"{name}: result {display_name(key)} appears twice")
        seen.add(key)


def _check_fields(result: dict, where: str) -> None:
    """The fields the diff reads, of the types it reads them as (a report edited by hand
    or written by another tool is refused here, not with an AttributeError later)."""
    for key in ("case", "backend", "path"):
        if not isinstance(result[key], str):
            raise ValueError(f"{where}: {key} is {result[key]!r}, expected a string")
    comparison = result.get("comparison")
    if comparison is not None:
        if not isinstance(comparison, dict):
            raise ValueError(f"{where}: comparison is {comparison!r:.100}, expected an "
                             "object or null")
        ratio = comparison.get("worst_ratio")
        if ratio is not None and (isinstance(ratio, bool)
                                  or not isinstance(ratio, (int, float))):
            raise ValueError(f"{where}: comparison.worst_ratio is {ratio!r:.100}, expected "
                             "a number or null")
        detail = comparison.get("detail")
        if detail is not None and not isinstance(detail, str):
            raise ValueError(f"{where}: comparison.detail is {detail!r:.100}, expected a "
                             "string")
    explanation = result.get("explanation")
    # a check run or an older report writes the explanation as its text alone
    if explanation is not None and not isinstance(explanation, (dict, str)):
        raise ValueError(f"{where}: explanation is {explanation!r:.100}, expected an "
                         "object, a string or null")
    if isinstance(explanation, dict) and not isinstance(explanation.get("text", ""), str):
        raise ValueError(f"{where}: explanation.text is {explanation['text']!r:.100}, "
                         "expected a string")
    error = result.get("error")
    if error is not None and not isinstance(error, str):
        raise ValueError(f"{where}: error is {error!r:.100}, expected a string or null")


def load_report(path) -> dict:
    """The report in the JSON file ``path``; ValueError naming the path when the file is
    missing, is not JSON or is not a conformance report of this format_version."""
    if not isinstance(path, (str, Path)):
        raise TypeError(f"path must be a str or Path, got {type(path).__name__}")
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"report {str(path)!r} is a directory; give its report.json")
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ValueError(f"report {str(path)!r}: no such file") from None
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"report {str(path)!r}: cannot read it: {error}") from None
    try:
        report = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"report {str(path)!r} is not valid JSON: {error}") from None
    try:
        validate_report(report, f"report {str(path)!r}")
    except TypeError as error:        # valid JSON of another shape: a wrong value
        raise ValueError(str(error)) from None
    return report


def _key(result: dict) -> tuple[str, str, str]:
    return (result["case"], result["backend"], result["path"])


def _worst_ratio(result: dict) -> float | None:
    """The result's worst ratio, ``math.inf`` for None (inf), None without a comparison."""
    comparison = result.get("comparison")
    if not comparison:
        return None
    ratio = comparison.get("worst_ratio")
    return math.inf if ratio is None else float(ratio)


def _problem(result: dict) -> str:
    """One line saying why a result does not pass ('' for a pass)."""
    if result["status"] == "error":
        lines = (result.get("error") or "").strip().splitlines()
        return lines[-1] if lines else "error"
    if result["status"] == "fail":
        text = (result.get("comparison") or {}).get("detail") or "fail"
        explanation = result.get("explanation") or ""
        if isinstance(explanation, dict):
            explanation = explanation.get("text") or ""
        return f"{text}; {explanation}" if explanation else text
    return ""


def _case_ids(report: dict) -> list[str]:
    """The report's case ids, in its order: its ``cases`` and the cases of its results."""
    ids = [c["id"] for c in report.get("cases", []) if isinstance(c, dict) and "id" in c]
    ids += [r["case"] for r in report["results"]]
    return list(dict.fromkeys(ids))


def _is_regression(old: float, new: float, threshold: float) -> bool:
    if math.isinf(old):
        return False
    return new > threshold * old and new >= MIN_REGRESSION_RATIO


def diff_reports(old: dict, new: dict, *, ratio_threshold: float = 2.0) -> ReportDiff:
    """What changed from report ``old`` to report ``new`` (see the module docstring)."""
    validate_report(old, "old report")
    validate_report(new, "new report")
    if isinstance(ratio_threshold, bool) or not isinstance(ratio_threshold, (int, float)):
        raise TypeError(f"ratio_threshold must be a number, got "
                        f"{type(ratio_threshold).__name__}")
    if not (math.isfinite(ratio_threshold) and ratio_threshold >= 1):
        raise ValueError(f"ratio_threshold must be a finite number >= 1, got {ratio_threshold}")

    old_results = {_key(r): r for r in old["results"]}
    new_results = {_key(r): r for r in new["results"]}
    diff = ReportDiff(old.get("suite_version"), new.get("suite_version"),
                      float(ratio_threshold))
    for key, after in new_results.items():
        name = display_name(key)
        before = old_results.get(key)
        failing_now = after["status"] != "pass"
        if before is None:
            diff.results_added.append(name)
            if failing_now:
                diff.new_failures.append(Change(name, None, after["status"],
                                                detail=_problem(after)))
            continue
        change = Change(name, before["status"], after["status"], _worst_ratio(before),
                        _worst_ratio(after), _problem(after))
        failing_before = before["status"] != "pass"
        if failing_now and not failing_before:
            diff.new_failures.append(change)
        elif failing_before and not failing_now:
            diff.fixes.append(replace(change, detail=f"was: {_problem(before)}"))
        elif failing_now:
            diff.still_failing.append(change)
        elif None not in (change.old_ratio, change.new_ratio) and _is_regression(
                change.old_ratio, change.new_ratio, ratio_threshold):
            diff.regressions.append(change)
    diff.results_removed = [display_name(k) for k in old_results if k not in new_results]
    old_cases, new_cases = _case_ids(old), _case_ids(new)
    diff.cases_added = [c for c in new_cases if c not in old_cases]
    diff.cases_removed = [c for c in old_cases if c not in new_cases]
    return diff


def main_diff(old_path, new_path, ratio_threshold: float = 2.0, json_out=None) -> int:
    """``unified-opt report diff``: print the diff of two report files, write it as JSON to
    ``json_out`` when given, and return its exit status (1 on a new failure, else 0).
    ValueError (the CLI's exit 2) for an unreadable report or a bad threshold."""
    diff = diff_reports(load_report(old_path), load_report(new_path),
                        ratio_threshold=ratio_threshold)
    print(diff.text(), end="")
    if json_out is not None:
        text = json.dumps(diff.to_dict(), indent=1, allow_nan=False) + "\n"
        try:
            write_text(json_out, text)      # atomically: a failure keeps the old file
        except OSError as error:
            raise ValueError(f"--json {str(json_out)!r}: cannot write it: "
                             f"{error.strerror or error}") from None
    return diff.exit_status
