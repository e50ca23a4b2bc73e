"""The conformance run's progress display (``conformance/progress.py``): plain lines in a
log (a backend's start, at most one line per interval, its end; every failing run at
once) and one bar per backend on a terminal."""

import io

from unified_opt.conformance.progress import ProgressDisplay

LINES = ["[torch] start 2 cases, up to 4 runs, torch 2.13.0+cpu",
         "[paddle] start 1 cases, up to 2 runs, paddle 3.3.1",
         "[torch] 1/4 sgd_momentum auto pass torch.optim.SGD",
         "[torch] 2/4 sgd_momentum own pass own",
         "[paddle] 1/2 adam_eps_hat auto fail own",
         "[torch] 3/4 adam_eps_hat auto error ValueError: no native class",
         "[torch] 4/4 adam_eps_hat own skipped (same as auto)",
         "[paddle] 2/2 adam_eps_hat own skipped (same as auto)",
         "[paddle] finished in 3.5 s (exit status 0)",
         "[torch] the worker crashed with exit status 3 outside any run",
         "[torch] finished in 9.0 s (the worker crashed with exit status 3)"]


def _shown(**options) -> str:
    stream = io.StringIO()
    with ProgressDisplay(stream, **options) as display:
        for line in LINES:
            display(line)
    return stream.getvalue()


def test_a_log_gets_the_starts_the_problems_and_the_ends():
    assert _shown(interactive=False, every=3600).splitlines() == [
        "[torch] start 2 cases, up to 4 runs, torch 2.13.0+cpu",
        "[paddle] start 1 cases, up to 2 runs, paddle 3.3.1",
        "[paddle] FAIL adam_eps_hat (auto): own",
        "[torch] ERROR adam_eps_hat (auto): ValueError: no native class",
        "[paddle] 2/2 runs (1 skipped, 1 fail); finished in 3.5 s (exit status 0)",
        "[torch] the worker crashed with exit status 3 outside any run",
        "[torch] 4/4 runs (2 pass, 1 skipped, 1 error); finished in 9.0 s (the worker "
        "crashed with exit status 3)"]


def test_a_log_gets_a_progress_line_once_the_interval_has_passed():
    shown = _shown(interactive=False, every=0.0).splitlines()
    assert "[torch] 1/4 runs (1 pass), 0 s" in shown
    assert "[torch] 2/4 runs (2 pass), 0 s" in shown
    # a line per start, run, problem, end and backend message
    assert len(shown) == 2 + 6 + 2 + 2 + 1


def test_verbose_prints_every_line_as_given():
    assert _shown(verbose=True, interactive=True).splitlines() == LINES


def test_a_terminal_gets_one_bar_per_backend():
    shown = _shown(interactive=True)
    assert "[paddle] FAIL adam_eps_hat (auto): own" in shown
    bars = [line for line in shown.splitlines() if line.startswith(("torch", "paddle"))]
    assert [b.split()[0] for b in bars] == ["torch", "paddle"]
    assert "4/4" in bars[0] and "1 error" in bars[0] and "2/2" in bars[1]
    assert "sgd_momentum auto" not in shown       # passing runs do not get lines


def test_a_backend_that_ends_before_its_start_line_says_no_run_started():
    """Not "0/0 runs" (issue 22)."""
    stream = io.StringIO()
    with ProgressDisplay(stream, interactive=False) as display:
        display("[mindspore] finished in 2.0 s (the worker crashed with exit status 1)")
    assert stream.getvalue().splitlines() == [
        "[mindspore] no run started; finished in 2.0 s (the worker crashed with exit "
        "status 1)"]


def test_the_runs_a_killed_worker_never_began_are_one_line_per_backend():
    """294 near-identical lines were one per run (issue 22)."""
    from unified_opt.conformance.report import problems_text

    not_run = "not run: the worker timed out after 60 s and was killed during adam_x (auto)"
    results = [{"case": "adam_x", "backend": "torch", "path": "auto", "status": "error",
                "error": "stderr ends:\nx\nthe worker timed out after 60 s and was killed "
                         "during this run", "comparison": None}]
    results += [{"case": f"c{i}", "backend": "torch", "path": "auto", "status": "error",
                 "error": not_run, "comparison": None} for i in range(294)]
    report = {"summary": {"total": 295, "pass": 0, "fail": 0, "error": 295},
              "backends": {"torch": {"seconds": 60.0}}, "results": results}
    lines = problems_text(report).splitlines()
    assert lines[1:] == [
        "  ERROR adam_x on torch (auto): the worker timed out after 60 s and was killed "
        "during this run",
        f"  ERROR 294 runs on torch {not_run}"]
