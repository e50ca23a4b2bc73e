"""An interrupted or concurrent ``unified-opt conformance`` run leaves no false report
(issue 41): SIGINT and SIGTERM stop the workers and mark the reports interrupted (exit
130 and 143, one line on stderr); a second run into a folder another run holds is
refused (exit 2) and changes nothing there; while a run goes on its folder holds stubs
marked incomplete, which ``report diff`` refuses.

The command runs one case (``sgd_plain``, 50 steps) on torch: its worker takes about
9 s on a 2-core machine, most of it importing torch, so a signal sent 0.5 s after the
worker appears reaches the run before the worker has finished."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from conftest import require

from unified_opt import cli
from unified_opt.conformance import runner
from unified_opt.conformance.cases import default_cases, select
from unified_opt.conformance.report import REPORT_FILES, write_stub_reports
from unified_opt.conformance.report_diff import load_report

CASE = "sgd_plain"
#: the command as a terminal starts it: a process that a non-interactive shell starts in
#: the background inherits SIGINT ignored, and the command keeps a signal ignored
LAUNCH = ("import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
          "from unified_opt.cli import main; sys.exit(main(sys.argv[1:]))")


def command(out: Path) -> list[str]:
    return [sys.executable, "-c", LAUNCH, "conformance", "--backends", "torch", "--cases",
            CASE, "--steps", "50", "--out", str(out)]


def old_passing_reports(out: Path) -> None:
    """What an earlier, passing run left in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps({
        "format_version": 1, "status": "complete", "created": "2000-01-01T00:00:00+00:00",
        "results": [{"case": CASE, "backend": "torch", "path": "auto", "status": "pass"}],
        "summary": {"total": 1, "pass": 1, "fail": 0, "error": 0, "known": 0}}))
    (out / "report.md").write_text("**1 results: 1 pass, 0 fail, 0 error**\n")
    (out / "report.html").write_text("<p>1 results: 1 pass</p>\n")
    (out / "junit.xml").write_text(
        '<testsuites tests="1" failures="0" errors="0"><testsuite name="conformance.torch" '
        'tests="1" failures="0" errors="0"><testcase name="sgd_plain[torch-auto]"/>'
        "</testsuite></testsuites>\n")


def processes_naming(text: str) -> list[int]:
    """The live processes (zombies count as ended) whose command line holds ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rpartition(")")[2].split()[0]
        except OSError:                   # ended meanwhile
            continue
        if text.encode() in cmdline and state != "Z":
            found.append(int(entry.name))
    return found


def wait_for_worker(out: Path, run: subprocess.Popen) -> None:
    """Until the run's worker (its command line names ``out/runs/``) runs."""
    deadline = time.monotonic() + 120
    while not processes_naming(f"{out}/runs/"):
        assert run.poll() is None, run.communicate()
        assert time.monotonic() < deadline, "no worker started in 120 s"
        time.sleep(0.05)


def listing(out: Path) -> dict:
    """Every file under ``out`` with its size and modification time."""
    return {p.relative_to(out).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in out.rglob("*") if p.is_file()}


def junit_errors(out: Path) -> dict:
    """junit.xml's testcases that error: name -> message."""
    root = ET.parse(out / "junit.xml").getroot()
    return {case.get("name"): case.find("error").get("message")
            for case in root.iter("testcase") if case.find("error") is not None}


@require("torch")
@pytest.mark.parametrize("signal_number, status", [(signal.SIGINT, 130),
                                                   (signal.SIGTERM, 143)])
def test_a_signal_stops_the_workers_and_marks_the_reports_interrupted(tmp_path,
                                                                      signal_number, status):
    out = tmp_path / "report"
    old_passing_reports(out)
    run = subprocess.Popen(command(out), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    wait_for_worker(out, run)
    time.sleep(0.5)
    run.send_signal(signal_number)
    stdout, stderr = run.communicate(timeout=60)
    name = signal.Signals(signal_number).name
    assert run.returncode == status, stdout + stderr
    assert "Traceback" not in stderr and len(stderr.splitlines()) == 1, stderr
    assert stderr.startswith(f"unified-opt conformance: interrupted by {name}: the workers "
                             f"were stopped; {out}/report.json"), stderr
    # no worker outlives the command, and nothing writes into out after it
    assert processes_naming(str(out)) == []
    written = listing(out)
    time.sleep(1.0)
    assert listing(out) == written
    assert not (out / "runs").exists() and not (out / runner.LOCK).exists()

    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "interrupted" and report["interrupted_by"] == name
    assert report["created"] != "2000-01-01T00:00:00+00:00"
    unfinished = [r for r in report["results"] if r["status"] != "pass"]
    assert unfinished, report["results"]       # the worker needs seconds more
    for result in unfinished:
        assert result["status"] == "error"
        assert result["error"].endswith(f"the run was interrupted by {name}") or \
            f"the run was interrupted by {name} during" in result["error"], result["error"]
    errors = junit_errors(out)
    assert errors["run[interrupted]"].startswith(f"INTERRUPTED by {name}")
    assert len(errors) == 1 + len(unfinished)
    assert f"**INTERRUPTED by {name}" in (out / "report.md").read_text()
    assert f"INTERRUPTED by {name}" in (out / "report.html").read_text()
    with pytest.raises(ValueError, match=f"status 'interrupted'.*interrupted by {name}"):
        load_report(out / "report.json")


@require("torch")
def test_a_second_run_into_the_same_out_is_refused_and_the_first_passes(tmp_path):
    out = tmp_path / "report"
    old_passing_reports(out)
    first = subprocess.Popen(command(out), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    wait_for_worker(out, first)
    # while the first runs, its folder holds stubs, not the old passing reports
    stub = json.loads((out / "report.json").read_text())
    assert stub["status"] == "incomplete" and "results" not in stub
    assert stub["pid"] == first.pid
    assert list(junit_errors(out)) == ["run[incomplete]"]
    assert "INCOMPLETE" in (out / "report.md").read_text()
    assert "INCOMPLETE" in (out / "report.html").read_text()
    before = listing(out)
    second = subprocess.run(command(out), capture_output=True, text=True, timeout=120)
    assert second.returncode == 2, second.stdout + second.stderr
    assert second.stderr == (
        f"unified-opt conformance: error: output folder {str(out)!r} is in use by another "
        f"conformance run (process {first.pid}, holding {runner.LOCK}); wait for it to end "
        "or give another folder\n")
    # the refused run changed nothing (the first may have written its working files)
    assert {k: v for k, v in listing(out).items() if not k.startswith("runs/")} == {
        k: v for k, v in before.items() if not k.startswith("runs/")}

    stdout, stderr = first.communicate(timeout=300)
    assert first.returncode == 0, stdout + stderr
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "complete"
    assert report["summary"]["pass"] == report["summary"]["total"] >= 2
    assert junit_errors(out) == {}
    assert sorted(p.name for p in out.iterdir()) == sorted(REPORT_FILES)


@pytest.fixture
def sigint_raises():
    """SIGINT raises KeyboardInterrupt in this process, as Python sets it up (unless the
    process was started with SIGINT ignored)."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, before)


def interrupt_once_a_worker_runs(out: Path) -> list:
    """Send SIGINT to this, the main, thread once a worker of the run into ``out`` runs
    (``_thread.interrupt_main`` would not wake it from its wait); the list it returns
    gets an item then."""
    main, sent = threading.main_thread().ident, []

    def interrupt():
        deadline = time.monotonic() + 120
        while not processes_naming(f"{out}/runs/") and time.monotonic() < deadline:
            time.sleep(0.05)
        sent.append(True)
        signal.pthread_kill(main, signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    return sent


@require("torch")
def test_the_library_run_raises_run_interrupted_after_stopping_its_workers(tmp_path,
                                                                           sigint_raises):
    """A KeyboardInterrupt in the thread that called :func:`runner.run` (a SIGINT once
    the worker runs): RunInterrupted, with the interrupted report written and every
    worker gone."""
    out = tmp_path / "report"
    cases = select(default_cases(["sgd"]), [CASE])
    interrupted = interrupt_once_a_worker_runs(out)
    with pytest.raises(runner.RunInterrupted) as stopped:
        runner.run([c.with_steps(50) for c in cases], ["torch"], out,
                   progress=lambda line: None)
    assert stopped.value.signal_name == "SIGINT" and stopped.value.out == out
    assert interrupted and processes_naming(str(out)) == []
    report = json.loads((out / "report.json").read_text())
    assert report == stopped.value.report
    assert report["status"] == "interrupted" and report["interrupted_by"] == "SIGINT"
    assert report["backends"]["torch"]["error"].startswith(
        "the worker was stopped: the run was interrupted by SIGINT")
    assert not (out / "runs").exists() and not (out / runner.LOCK).exists()


@require("torch")
def test_a_held_folder_is_refused_before_anything_changes(tmp_path, capsys):
    """In one process: the lock is an open file's, so a second open of it conflicts."""
    old_passing_reports(tmp_path)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    cases = select(default_cases(["sgd"]), [CASE])
    with runner._OutLock(tmp_path):
        with pytest.raises(runner.OutInUse, match=f"process {os.getpid()}, holding"):
            runner.run(cases, ["torch"], tmp_path)
        assert cli.main(["conformance", "--backends", "torch", "--cases", CASE,
                         "--out", str(tmp_path)]) == 2
        assert capsys.readouterr().err == (
            f"unified-opt conformance: error: output folder {str(tmp_path)!r} is in use by "
            f"another conformance run (process {os.getpid()}, holding {runner.LOCK}); wait "
            "for it to end or give another folder\n")
        assert (tmp_path / runner.LOCK).read_text() == f"{os.getpid()}\n"
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before   # lock removed


def test_the_stubs_say_incomplete_and_report_diff_refuses_them(tmp_path, capsys):
    old_passing_reports(tmp_path / "old")
    write_stub_reports(tmp_path, started="2030-01-01T00:00:00+00:00", pid=4242)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == sorted(REPORT_FILES)
    stub = json.loads((tmp_path / "report.json").read_text())
    assert stub["status"] == "incomplete" and stub["pid"] == 4242
    assert "summary" not in stub and "results" not in stub    # nothing reads as passing
    root = ET.parse(tmp_path / "junit.xml").getroot()
    assert (root.get("tests"), root.get("errors")) == ("1", "1")
    assert "process 4242" in junit_errors(tmp_path)["run[incomplete]"]
    with pytest.raises(ValueError, match="status 'incomplete'.*killed, or still running"):
        load_report(tmp_path / "report.json")
    assert cli.main(["report", "diff", str(tmp_path / "old" / "report.json"),
                     str(tmp_path / "report.json")]) == 2
    assert "status 'incomplete'" in capsys.readouterr().err


@require("torch")
@require("paddle")
def test_a_worker_the_interrupted_run_never_started_is_reported_so(tmp_path, sigint_raises):
    """``jobs=1``: Paddle's worker starts first (the slower backends first), torch's
    waits for it; the interrupt stops Paddle's, and torch's never starts."""
    out = tmp_path / "report"
    cases = [c.with_steps(50) for c in select(default_cases(["sgd"]), [CASE])]
    interrupted = interrupt_once_a_worker_runs(out)
    with pytest.raises(runner.RunInterrupted) as stopped:
        runner.run(cases, ["torch", "paddle"], out, jobs=1, progress=lambda line: None)
    assert interrupted and processes_naming(str(out)) == []
    backends = stopped.value.report["backends"]
    assert backends["paddle"]["error"].startswith(
        "the worker was stopped: the run was interrupted by SIGINT")
    assert backends["torch"]["error"] == (
        "the worker was not started: the run was interrupted by SIGINT")
    assert backends["torch"]["exit_code"] is None
    torch_results = [r for r in stopped.value.report["results"] if r["backend"] == "torch"]
    assert torch_results and {r["error"] for r in torch_results} == {
        "not run: the worker was not started: the run was interrupted by SIGINT"}
    assert not (out / "runs").exists() and not (out / runner.LOCK).exists()


def test_a_signal_before_the_run_is_one_line_and_the_handlers_are_put_back(monkeypatch,
                                                                           capsys, tmp_path):
    """A signal while the command line is read (here raised by ``_plan``): one line, exit
    143, nothing written; the handlers of the calling process are back afterwards."""
    def signalled(args):
        raise runner.Signalled("SIGTERM")

    handlers = {s: signal.getsignal(s) for s in cli.STOP_SIGNALS}
    monkeypatch.setattr(cli, "_plan", signalled)
    out = tmp_path / "report"
    assert cli.main(["conformance", "--out", str(out)]) == 143
    assert capsys.readouterr().err == (
        "unified-opt conformance: interrupted by SIGTERM before any case ran\n")
    assert not out.exists()
    assert {s: signal.getsignal(s) for s in cli.STOP_SIGNALS} == handlers


@require("torch")
def test_a_signal_after_the_complete_reports_leaves_them(monkeypatch, capsys, tmp_path):
    """The signal comes once the complete reports are written (here while the working
    files are cleared; the worker is a stand-in that reports nothing): they stay, and
    the line says so."""
    cleared = []
    prune = runner._prune

    def prune_interrupted(out):
        written = json.loads((out / "report.json").read_text())
        if not cleared and written["status"] == "complete":    # (also called at the start)
            cleared.append(out)
            raise runner.Signalled("SIGTERM")
        prune(out)

    monkeypatch.setattr(runner, "_run_worker", lambda backend, *args: runner._info(
        runner.CPU, exit_code=0))
    monkeypatch.setattr(runner, "_prune", prune_interrupted)
    out = tmp_path / "report"
    assert cli.main(["conformance", "--backends", "torch", "--cases", CASE,
                     "--out", str(out)]) == 143
    err = capsys.readouterr().err
    assert err.startswith("unified-opt conformance: interrupted by SIGTERM after the run "
                          f"ended ({out}'s reports are complete: 3 results: 0 pass, "), err
    report = json.loads((out / "report.json").read_text())
    assert report["status"] == "complete" and "interrupted_by" not in report
    assert junit_errors(out).keys() == {f"{CASE}[torch-{p}]" for p in ("auto", "own",
                                                                        "native")}
    assert not (out / "runs").exists() and not (out / runner.LOCK).exists()


def test_a_lock_file_left_by_a_killed_run_does_not_hold_the_folder(tmp_path):
    """A run killed by SIGKILL leaves its lock file, unlocked (the lock went with its
    process): the next run takes it, and removes it at its end."""
    (tmp_path / runner.LOCK).write_text("999999\n")
    with runner._OutLock(tmp_path):
        assert (tmp_path / runner.LOCK).read_text() == f"{os.getpid()}\n"
    assert not (tmp_path / runner.LOCK).exists()
