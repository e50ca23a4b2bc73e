"""The pytest plugin of unified-opt (entry point ``pytest11``: loaded wherever
unified-opt is installed).

* Fixture ``uo_check``: ``uo_check(factory, spec, backend=None, steps=None,
  nonfinite=True, device=None)`` runs :func:`unified_opt.conformance.check` and fails
  the test with its explanation (the first failing stream, step and quantity, and the
  knob the optimizer follows); it returns the
  :class:`~unified_opt.conformance.CheckResult`. ``device=None``: ``--uo-device``'s.
* ``--uo-report DIR``: every check of the session in one report (report.json,
  report.md, junit.xml, ...), each result's case named ``<test>.<stream>``.
* ``--uo-conformance``: the project's own conformance suite as test items, one per
  ``case[backend-path]`` (``--uo-backends``, ``--uo-algorithms``, ``--uo-cases`` select;
  default: every installed backend, every case). The backends run in worker
  processes (one framework per process) from the end of collection on; each item
  waits for its result. A path whose build repeats ``auto`` is skipped, saying so.
* ``--uo-device DEVICE``: where the parameters live, for the suite and ``uo_check``:
  ``cpu`` (default), ``cuda``/``gpu`` (``cuda:1``), ``npu``. A device a selected backend
  cannot use is a usage error at collection; the distributed cases are skipped off the
  CPU, with the reason.
"""

from __future__ import annotations

import re
import tempfile
import threading
from pathlib import Path

import pytest

_REPORTS = pytest.StashKey[list]()
_SUITE = pytest.StashKey["_Suite"]()


def pytest_addoption(parser):
    group = parser.getgroup("unified-opt", "unified-opt conformance")
    group.addoption("--uo-report", metavar="DIR", default=None,
                    help="write one conformance report of every uo_check of the session "
                         "into DIR")
    group.addoption("--uo-conformance", action="store_true",
                    help="run the unified-opt conformance suite as test items "
                         "(case[backend-path])")
    group.addoption("--uo-backends", metavar="NAME,...", default=None,
                    help="backends of --uo-conformance (default: every installed one)")
    group.addoption("--uo-algorithms", metavar="NAME,...", default=None,
                    help="algorithms of --uo-conformance (default: all)")
    group.addoption("--uo-cases", metavar="GLOB,...", default=None,
                    help="case id patterns of --uo-conformance (default: all)")
    group.addoption("--uo-device", metavar="DEVICE", default="cpu",
                    help="where the parameters of --uo-conformance and uo_check live: cpu "
                         "(default), cuda or gpu (cuda:N), npu (npu:N)")


def pytest_configure(config):
    config.stash[_REPORTS] = []
    from .device import parse_device

    try:
        parse_device(config.getoption("--uo-device"), "--uo-device")
    except (TypeError, ValueError) as error:
        raise pytest.UsageError(str(error)) from None


@pytest.fixture
def uo_check(request):
    """``uo_check(factory, spec, backend=None, steps=None, nonfinite=True, device=None)``:
    see the module."""
    from unified_opt.conformance import check

    def run(factory, spec, backend=None, steps=None, nonfinite=True, device=None):
        if device is None:
            device = request.config.getoption("--uo-device")
        result = check(factory, spec, backend=backend, steps=steps, nonfinite=nonfinite,
                       device=device)
        request.config.stash[_REPORTS].append((request.node.name, result.report))
        if not result.passed:
            pytest.fail(f"uo_check: {result}", pytrace=False)
        return result
    return run


def pytest_sessionfinish(session):
    out = session.config.getoption("--uo-report")
    reports = session.config.stash.get(_REPORTS, [])
    if out and reports:
        from .report import write_reports

        Path(out).mkdir(parents=True, exist_ok=True)
        write_reports(merged_report(reports), out)
    suite = session.config.stash.get(_SUITE, None)
    if suite is not None and suite.thread.ident is not None:   # started
        suite.thread.join()
        # a worker that ended badly after its last run fails no item; it fails the session
        broken = {b: w["error"] for b, w in (suite.report or {"backends": {}})["backends"]
                  .items() if w.get("error")}
        if broken:
            terminal = session.config.pluginmanager.get_plugin("terminalreporter")
            for backend, error in broken.items():
                if terminal is not None:
                    terminal.write_line(f"unified-opt conformance [{backend}]: {error}",
                                        red=True)
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED


def merged_report(reports: list[tuple[str, dict]]) -> dict:
    """One report of several checks' reports, each case id prefixed by its test's name."""
    merged = {**reports[0][1], "cases": [], "results": [], "backends": {}, "checked": []}
    for test, report in reports:
        prefix = re.sub(r"[^\w.\-\[\]]", "_", test)
        merged["cases"] += [{**c, "id": f"{prefix}.{c['id']}"} for c in report["cases"]]
        merged["results"] += [{**r, "case": f"{prefix}.{r['case']}"} for r in report["results"]]
        for backend, worker in report["backends"].items():
            mine = merged["backends"].setdefault(backend, {**worker, "seconds": 0.0})
            mine["seconds"] = round(mine["seconds"] + worker["seconds"], 2)
        merged["checked"].append({"test": test, **report.get("checked", {})})
        for backend, rows in report.get("unexercised_lowering_rows", {}).items():
            merged.setdefault("unexercised_lowering_rows", {})[backend] = rows
    statuses = [r["status"] for r in merged["results"]]
    merged["summary"] = {"total": len(statuses), "pass": statuses.count("pass"),
                         "fail": statuses.count("fail"), "error": statuses.count("error"),
                         "known": 0}
    return merged


# -- the conformance suite as items -------------------------------------------------

def _names(text):
    return None if text is None else [n.strip() for n in text.split(",") if n.strip()]


class _Suite:
    """The selected cases, run in the background by the conformance runner."""

    def __init__(self, cases, backends, device):
        self.cases, self.backends, self.device = cases, backends, device
        self.out = tempfile.mkdtemp(prefix="uo-conformance-")
        self.report = self.error = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        from . import runner

        try:
            self.report = runner.run(self.cases, self.backends, self.out,
                                     progress=lambda line: None, device=self.device)
        except BaseException as error:   # re-raised by every item
            self.error = error

    def result(self, case_id, backend, path):
        self.thread.join()
        if self.error is not None:
            raise self.error
        for r in self.report["results"]:
            if (r["case"], r["backend"], r["path"]) == (case_id, backend, path):
                return r
        return None

    def not_run(self, case_id, backend, path) -> str | None:
        """Why the run was left out on the suite's device (None: it was not)."""
        for entry in self.report["backends"][backend].get("not_run") or ():
            if (entry["case"], entry["path"]) == (case_id, path):
                return entry["reason"]
        return None


class ConformanceItem(pytest.Item):
    def __init__(self, *, suite, case_id, backend, path, **kwargs):
        super().__init__(**kwargs)
        self.suite, self.case_id, self.backend, self.path = suite, case_id, backend, path

    def runtest(self):
        result = self.suite.result(self.case_id, self.backend, self.path)
        reason = self.suite.not_run(self.case_id, self.backend, self.path)
        if result is None and reason is not None:
            pytest.skip(reason)
        if result is None:
            pytest.skip(f"{self.path} repeats the auto build of {self.case_id} on "
                        f"{self.backend}")
        if result["status"] == "error":
            pytest.fail(f"error: {result['error']}", pytrace=False)
        if result["status"] != "pass":
            c = result["comparison"]
            text = c["detail"]
            if result.get("explanation"):
                text += f"; {result['explanation']['text']}"
            pytest.fail(f"{self.name}: fails at step {c['first_failing_step']}: {text}",
                        pytrace=False)

    def reportinfo(self):
        return "unified-opt conformance", None, self.name


class ConformanceSuite(pytest.Collector):
    def collect(self):
        return []


def pytest_collection_modifyitems(session, config, items):
    if not config.getoption("--uo-conformance"):
        return
    from unified_opt.build import backends as installed
    from unified_opt.conformance.cases import default_cases, select

    backends = _names(config.getoption("--uo-backends")) or installed()
    missing = [b for b in backends if b not in installed()]
    if missing:
        raise pytest.UsageError(f"--uo-backends: {missing} not installed; installed: "
                                f"{installed()}")
    try:
        cases = default_cases(_names(config.getoption("--uo-algorithms")))
        patterns = _names(config.getoption("--uo-cases"))
        if patterns:
            cases = select(cases, patterns)
    except (TypeError, ValueError) as error:
        raise pytest.UsageError(f"--uo-conformance: {error}") from None
    from .device import DeviceUnavailable, parse_device, probe_all

    device = parse_device(config.getoption("--uo-device"), "--uo-device")
    if not device.is_cpu:
        try:
            probe_all(backends, device)
        except DeviceUnavailable as error:
            raise pytest.UsageError(f"--uo-device: {error}") from None
    suite = _Suite(cases, backends, device)
    config.stash[_SUITE] = suite
    parent = ConformanceSuite.from_parent(session, name="unified-opt-conformance")
    for case in cases:
        for backend in backends:
            if not case.runs_on(backend) and case.refused_on(backend) is None:
                continue           # a refused case is collected: skipped with the reason
            for path in case.paths:
                items.append(ConformanceItem.from_parent(
                    parent, name=f"{case.id}[{backend}-{path}]", suite=suite,
                    case_id=case.id, backend=backend, path=path))


def pytest_collection_finish(session):
    suite = session.config.stash.get(_SUITE, None)
    if suite is not None and not session.config.option.collectonly:
        suite.thread.start()
