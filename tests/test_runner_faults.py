"""The conformance runner when a backend's worker dies: a crash (``os._exit``), a
SIGKILL and a hang past ``--timeout`` are planted as native torch optimizers built by
hand (``fault_optimizers.py``) that fail at their third step. The finished results, the
other backends' results and the reports stand; the unfinished runs are errors that say
how the worker ended; the exit status is 1. Also: what stays in the output directory."""

import json
import os
import time
import xml.etree.ElementTree as ET
import zipfile
from pathlib import Path

import pytest
from conftest import require

import unified_opt as uo
from unified_opt import cli
from unified_opt.conformance import cases as cases_module
from unified_opt.conformance import runner
from unified_opt.conformance.cases import Case
from unified_opt.conformance.cases.native import Native
from unified_opt.conformance.trajectory import Trajectory

TESTS = Path(__file__).parent
REPORTS = {"report.json", "report.md", "report.html", "junit.xml"}
STEPS = 50


@pytest.fixture(autouse=True)
def importable_faults(monkeypatch):
    """The workers inherit this environment: they import ``fault_optimizers`` by name."""
    path = os.environ.get("PYTHONPATH")
    monkeypatch.setenv("PYTHONPATH", str(TESTS) + (os.pathsep + path if path else ""))


def plain(case_id: str) -> Case:
    return Case(id=case_id, spec=uo.SGD(lr=0.1), paths=("auto",)).with_steps(STEPS)


def faulty(case_id: str, fault: str) -> Case:
    native = Native(f"fault_optimizers.{fault}", kwargs={"lr": 0.1}, framework="torch")
    return Case(id=case_id, spec=uo.SGD(lr=0.1), native=native).with_steps(STEPS)


def statuses(report: dict) -> dict:
    return {(r["case"], r["backend"]): (r["status"], r["error"]) for r in report["results"]}


def junit_cases(out: Path) -> dict:
    root = ET.parse(out / "junit.xml").getroot()
    return {(c.get("classname"), c.get("name")): c for c in root.iter("testcase")}


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for its parent counts as ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


@require("torch")
def test_a_crashed_worker_keeps_its_finished_results_and_exits_1(tmp_path, monkeypatch,
                                                                  capsys):
    cases = [plain("before"), faulty("crash", "ExitAtStep3"), plain("after")]
    monkeypatch.setattr(cases_module, "default_cases", lambda algorithms=None: cases)
    out = tmp_path / "report"
    assert cli.main(["conformance", "--backends", "torch", "--out", str(out),
                     "--timeout", "300"]) == 1
    assert "3 results: 1 pass, 0 fail, 2 error" in capsys.readouterr().out

    report = json.loads((out / "report.json").read_text())
    got = statuses(report)
    assert got[("before", "torch")] == ("pass", None)
    status, error = got[("crash", "torch")]
    assert status == "error"
    # the cause last (as in a traceback), after the end of the worker's stderr
    assert error.splitlines()[-1] == "the worker crashed with exit status 3 during this run"
    assert "ExitAtStep3: exiting with status 3" in error
    assert got[("after", "torch")] == (
        "error", "not run: the worker crashed with exit status 3 during crash (hand)")
    worker = report["backends"]["torch"]
    assert worker["exit_code"] == 3 and worker["logs"] == ["logs/torch.stderr.log"]
    assert worker["error"].splitlines()[0] == (
        "the worker crashed with exit status 3 while running crash (hand); "
        "logs: logs/torch.stderr.log")
    assert "ExitAtStep3" in (out / "logs" / "torch.stderr.log").read_text()
    # the reports and the failed worker's log; no working files, no trajectory
    assert {p.relative_to(out).as_posix() for p in out.rglob("*")} == REPORTS | {
        "logs", "logs/torch.stderr.log"}

    testcases = junit_cases(out)
    assert set(testcases) == {("conformance.torch", f"{c}[torch-{p}]")
                              for c, p in [("before", "auto"), ("crash", "hand"),
                                           ("after", "auto")]}
    crashed = testcases[("conformance.torch", "crash[torch-hand]")].find("error")
    assert crashed.get("message") == "the worker crashed with exit status 3 during this run"
    assert "not run" in testcases[("conformance.torch", "after[torch-auto]")].find(
        "error").get("message")
    assert "**error**: the worker crashed with exit status 3" in (out / "report.md").read_text()


@require("torch")
def test_a_worker_crashing_after_its_last_run_fails_the_job(tmp_path, monkeypatch, capsys):
    cases = [plain("before"), faulty("teardown", "ExitAtProcessEnd")]
    monkeypatch.setattr(cases_module, "default_cases", lambda algorithms=None: cases)
    out = tmp_path / "report"
    assert cli.main(["conformance", "--backends", "torch", "--out", str(out),
                     "--timeout", "300"]) == 1
    printed = capsys.readouterr().out
    assert "2 results: 2 pass, 0 fail, 0 error" in printed
    assert "[torch] the worker crashed with exit status 3 outside any run" in printed
    report = json.loads((out / "report.json").read_text())
    assert {key: status for key, (status, _) in statuses(report).items()} == {
        ("before", "torch"): "pass", ("teardown", "torch"): "pass"}
    worker = report["backends"]["torch"]
    assert worker["exit_code"] == 3 and worker["logs"] == ["logs/torch.stderr.log"]


@require("torch")
@require("paddle")
@pytest.mark.slow
def test_a_worker_killed_by_sigkill_leaves_the_other_backend_alone(tmp_path):
    cases = [plain("before"), faulty("killed", "KilledAtStep3"), plain("after")]
    report = runner.run(cases, ["torch", "paddle"], tmp_path, timeout=300,
                        progress=lambda line: None)
    got = statuses(report)
    assert got[("before", "torch")] == ("pass", None)
    assert got[("killed", "torch")][0] == "error"
    assert got[("killed", "torch")][1].endswith(
        "the worker was killed by signal SIGKILL during this run")
    assert got[("after", "torch")] == (
        "error", "not run: the worker was killed by signal SIGKILL during killed (hand)")
    # the torch native case does not run on paddle; paddle's runs all pass
    assert got[("before", "paddle")] == got[("after", "paddle")] == ("pass", None)
    assert ("killed", "paddle") not in got
    assert report["backends"]["torch"]["exit_code"] == -9
    # nothing of its own on stderr: the runner's line says what happened (issue 22)
    assert "the torch worker was killed by signal SIGKILL while running killed (hand)" in (
        tmp_path / "logs" / "torch.stderr.log").read_text()
    assert report["backends"]["paddle"]["exit_code"] == 0
    assert report["backends"]["paddle"]["error"] is None
    assert report["summary"]["error"] == 2 and report["summary"]["pass"] == 3
    assert {("conformance.paddle", "before[paddle-auto]"),
            ("conformance.torch", "killed[torch-hand]")} <= set(junit_cases(tmp_path))


@require("torch")
@pytest.mark.slow
def test_a_hanging_worker_is_killed_with_its_children_at_the_timeout(tmp_path, monkeypatch):
    """The hanging optimizer's child holds the worker's stdout: the runner must neither
    wait for it nor leave it running."""
    child_pid_file = tmp_path / "child.pid"
    monkeypatch.setenv("FAULT_CHILD_PID_FILE", str(child_pid_file))
    cases = [plain("before"), faulty("hangs", "HangAtStep3"), plain("after")]
    timeout = 25
    started = time.monotonic()
    report = runner.run(cases, ["torch"], tmp_path / "out", timeout=timeout,
                        progress=lambda line: None)
    assert time.monotonic() - started < timeout + runner.PIPE_GRACE + 10
    got = statuses(report)
    assert got[("before", "torch")] == ("pass", None)
    assert got[("hangs", "torch")][1].endswith(
        "the worker timed out after 25 s and was killed during this run")
    assert got[("after", "torch")] == (
        "error", "not run: the worker timed out after 25 s and was killed during hangs "
                 "(hand)")
    # the log says where the worker hung (faulthandler at SIGABRT) and how it ended
    # (issue 22: it was empty)
    log = (tmp_path / "out" / "logs" / "torch.stderr.log").read_text()
    assert "fault_optimizers.py" in log and "in fault" in log, log
    assert log.rstrip().endswith("[unified-opt conformance runner] the torch worker timed "
                                 "out after 25 s and was killed while running hangs (hand)")
    child = int(child_pid_file.read_text())
    deadline = time.monotonic() + 5
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(child)
    assert (tmp_path / "out" / "junit.xml").exists()


def test_a_timeout_must_be_positive(tmp_path, capsys):
    for bad in ("0", "-1", "nan"):
        assert cli.main(["conformance", "--timeout", bad, "--out", str(tmp_path)]) == 2
        assert f"--timeout must be a number of seconds > 0, got {bad}" in \
            capsys.readouterr().err
    with pytest.raises(ValueError, match="timeout must be a number of seconds > 0, got -2"):
        runner.run([plain("before")], ["torch"], tmp_path, timeout=-2)
    assert not any(tmp_path.iterdir())


# -- what stays in the output directory -------------------------------------------------

def wrong_lr(case_id: str) -> Case:
    """torch's SGD run with twice the lr the spec claims: fails from step 1."""
    native = Native("torch.optim.SGD", kwargs={"lr": 0.2})
    return Case(id=case_id, spec=uo.SGD(lr=0.1), native=native).with_steps(STEPS)


@require("torch")
def test_by_default_only_failing_trajectories_stay(tmp_path):
    (tmp_path / "trajectories" / "torch").mkdir(parents=True)
    (tmp_path / "trajectories" / "torch" / "stale__auto.npz").write_bytes(b"old run")
    report = runner.run([plain("passes"), wrong_lr("fails")], ["torch"], tmp_path,
                        progress=lambda line: None)
    by_case = {r["case"]: r for r in report["results"]}
    assert by_case["passes"]["status"] == "pass" and by_case["passes"]["trajectory"] is None
    assert by_case["fails"]["status"] == "fail"
    assert by_case["fails"]["trajectory"] == "trajectories/torch/fails__hand.npz"
    assert {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")} == REPORTS | {
        "trajectories", "trajectories/torch", "trajectories/torch/fails__hand.npz"}
    trajectory = Trajectory.load(tmp_path / by_case["fails"]["trajectory"])
    assert trajectory.steps == STEPS
    assert report["backends"]["torch"]["trajectories_dropped"] == []
    assert report["backends"]["torch"]["logs"] == []


@require("torch")
def test_keep_trajectories_keeps_every_run_compressed(tmp_path):
    report = runner.run([plain("passes"), wrong_lr("fails")], ["torch"], tmp_path,
                        progress=lambda line: None, keep_trajectories=True)
    files = sorted(p.name for p in (tmp_path / "trajectories" / "torch").iterdir())
    assert files == ["fails__hand.npz", "passes__auto.npz"]
    for result in report["results"]:
        path = tmp_path / result["trajectory"]
        with zipfile.ZipFile(path) as archive:
            assert {i.compress_type for i in archive.infolist()} == {zipfile.ZIP_DEFLATED}
        assert Trajectory.load(path).params["w"].shape[0] == STEPS
    assert not (tmp_path / "runs").exists() and not (tmp_path / "cases.json").exists()


@require("torch")
def test_failing_trajectories_beyond_the_budget_are_dropped(tmp_path):
    from unified_opt.conformance.worker import driver_class, run_all

    cases = [wrong_lr("first"), wrong_lr("second")]
    run_all(driver_class("torch"), "torch", cases[:1], tmp_path / "probe",
            say=lambda line: None)
    one = (tmp_path / "probe" / "first__hand.npz").stat().st_size   # fits the budget
    summary = run_all(driver_class("torch"), "torch", cases, tmp_path / "out",
                      say=lambda line: None, trajectories=tmp_path / "kept",
                      failing_budget=one)
    assert summary["trajectories_dropped"] == ["second__hand"]
    assert [p.name for p in (tmp_path / "kept").iterdir()] == ["first__hand.npz"]
    second = json.loads((tmp_path / "out" / "second__hand.json").read_text())
    assert second["status"] == "fail" and second["trajectory"] is None
    assert json.loads((tmp_path / "out" / "worker.json").read_text()) == summary


def test_junit_stays_parseable_when_an_error_holds_terminal_colours():
    """A worker's stderr may colour its text; XML 1.0 has no ESC character."""
    from unified_opt.conformance.report import junit

    error = "stderr ends:\n\x1b[31mW0101 warning\x1b[0m\nthe worker crashed with exit status 3"
    result = {"case": "c", "backend": "torch", "path": "auto", "status": "error",
              "seconds": None, "error": error, "comparison": None}
    report = {"summary": {"total": 1, "fail": 0, "error": 1}, "backends": {"torch": {}},
              "results": [result]}
    node = ET.fromstring(junit(report)).find(".//testcase[@name='c[torch-auto]']/error")
    assert node.get("message") == "the worker crashed with exit status 3"
    assert "[31mW0101 warning[0m" in node.text
