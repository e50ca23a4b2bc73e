"""``report_diff``: planted changes between two conformance reports are each found, in the
right list, and only a new failure sets the exit status."""

import copy
import importlib.util
import json

import pytest

from unified_opt.cli import main as cli_main
from unified_opt.conformance.report import FORMAT_VERSION
from unified_opt.conformance.report_diff import (
    MIN_REGRESSION_RATIO,
    diff_reports,
    load_report,
    main_diff,
)


def result(case, status="pass", ratio=0.3, backend="torch", path="auto"):
    """A result as report.json holds it (the keys the diff reads, plus a comparison)."""
    passed = status == "pass"
    comparison = None if status == "error" else {
        "passed": passed, "worst_ratio": ratio, "first_failing_step": None if passed else 7,
        "failing_quantity": None if passed else "param:w",
        "detail": "" if passed else f"{case}: param:w off at step 7"}
    return {"case": case, "algorithm": case.split("_")[0], "backend": backend, "path": path,
            "status": status, "comparison": comparison, "explanation": None,
            "error": "Traceback ...\nRuntimeError: boom" if status == "error" else None,
            "known": None}


def report(*results, cases=None):
    cases = cases if cases is not None else list(dict.fromkeys(r["case"] for r in results))
    return {"format_version": FORMAT_VERSION, "suite_version": 3,
            "cases": [{"id": c} for c in cases], "results": list(results),
            "summary": {"total": len(results)}}


def names(changes):
    return [c.name for c in changes]


# -- planted changes in a real report ----------------------------------------------------

@pytest.fixture(scope="module")
def real_report(tmp_path_factory):
    """A real run: two sgd cases on torch (auto and own paths), ~5 s."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    from unified_opt.conformance import runner
    from unified_opt.conformance.cases import default_cases

    out = tmp_path_factory.mktemp("real-report")
    found = runner.run(default_cases(["sgd"])[:2], ["torch"], out, progress=lambda line: None)
    assert found["summary"]["pass"] == 4, found["summary"]
    return found


def _find(report_dict, case, path):
    return next(r for r in report_dict["results"] if (r["case"], r["path"]) == (case, path))


@pytest.fixture()
def planted(real_report):
    """(old, new): old has sgd_plain[torch-own] failing; new has sgd_plain[torch-auto]
    failing, sgd_plain[torch-own] fixed, sgd_momentum[torch-auto]'s worst ratio x10,
    sgd_momentum[torch-own] removed, and a case sgd_extra added whose one result errors."""
    old, new = copy.deepcopy(real_report), copy.deepcopy(real_report)
    own = _find(old, "sgd_plain", "own")
    own["status"] = "fail"
    own["comparison"].update(passed=False, first_failing_step=3, detail="param:w off")
    auto = _find(new, "sgd_plain", "auto")
    auto["status"] = "fail"
    auto["comparison"].update(passed=False, first_failing_step=12, detail="state drifts")
    _find(new, "sgd_momentum", "auto")["comparison"]["worst_ratio"] *= 10
    new["results"].remove(_find(new, "sgd_momentum", "own"))
    new["cases"].append({**new["cases"][0], "id": "sgd_extra"})
    new["results"].append({**result("sgd_extra", "error"), "backend": "torch"})
    return old, new


def test_planted_changes_land_in_their_lists(planted):
    diff = diff_reports(*planted)
    assert names(diff.new_failures) == ["sgd_plain[torch-auto]", "sgd_extra[torch-auto]"]
    assert [(c.old_status, c.new_status) for c in diff.new_failures] == [
        ("pass", "fail"), (None, "error")]
    assert diff.new_failures[0].detail == "state drifts"
    assert diff.new_failures[1].detail == "RuntimeError: boom"
    assert names(diff.fixes) == ["sgd_plain[torch-own]"]
    assert diff.fixes[0].detail == "was: param:w off"
    assert diff.still_failing == []
    assert names(diff.regressions) == ["sgd_momentum[torch-auto]"]
    regression = diff.regressions[0]
    # ratios read back from the reports' JSON (float64): 10 times to an ulp
    assert regression.new_ratio == pytest.approx(10 * regression.old_ratio)
    assert diff.results_added == ["sgd_extra[torch-auto]"]
    assert diff.results_removed == ["sgd_momentum[torch-own]"]
    assert diff.cases_added == ["sgd_extra"]
    assert diff.cases_removed == []
    assert diff.exit_status == 1


def test_text_gives_counts_then_each_list(planted):
    text = diff_reports(*planted).text()
    lines = text.splitlines()
    assert lines[1].startswith("new failures: 2, fixes: 1, still failing: 0, ")
    assert "results added: 1, results removed: 1, cases added: 1, cases removed: 0" in lines[1]
    assert "  sgd_plain[torch-auto]: pass -> fail: state drifts" in lines
    assert "  sgd_extra[torch-auto]: new result, error: RuntimeError: boom" in lines
    assert "  sgd_plain[torch-own]: fail -> pass: was: param:w off" in lines
    assert any(line.startswith("  sgd_momentum[torch-auto]: worst ratio ") and
               line.endswith("(x10)") for line in lines), text
    assert "still failing:" not in lines          # an empty list has no section
    assert "no changes" not in text


def test_main_diff_prints_writes_json_and_returns_the_status(planted, tmp_path, capsys):
    old_file, new_file = tmp_path / "old.json", tmp_path / "new.json"
    old_file.write_text(json.dumps(planted[0]))
    new_file.write_text(json.dumps(planted[1]))
    json_file = tmp_path / "diff.json"
    assert main_diff(old_file, new_file, 2.0, json_out=json_file) == 1
    assert capsys.readouterr().out == diff_reports(*planted).text()
    written = json.loads(json_file.read_text())
    assert written["exit_status"] == 1
    assert [c["name"] for c in written["new_failures"]] == ["sgd_plain[torch-auto]",
                                                            "sgd_extra[torch-auto]"]
    assert written["results_removed"] == ["sgd_momentum[torch-own]"]
    # the baseline against itself: no changes, exit 0
    assert main_diff(old_file, old_file, 2.0) == 0
    assert "no changes" in capsys.readouterr().out


def test_cli_report_diff_exit_statuses(planted, tmp_path, capsys):
    old_file, new_file = tmp_path / "old.json", tmp_path / "new.json"
    old_file.write_text(json.dumps(planted[0]))
    new_file.write_text(json.dumps(planted[1]))
    assert cli_main(["report", "diff", str(old_file), str(new_file)]) == 1
    assert cli_main(["report", "diff", str(new_file), str(new_file)]) == 0
    capsys.readouterr()
    assert cli_main(["report", "diff", str(old_file), str(tmp_path / "absent.json")]) == 2
    assert "absent.json" in capsys.readouterr().err


# -- the lists, one by one -------------------------------------------------------------

def test_fixes_and_old_failures_do_not_gate():
    old = report(result("a_x", "fail"), result("b_x", "error"), result("c_x", "fail"))
    new = report(result("a_x", "pass"), result("b_x", "fail"), result("c_x", "fail"))
    diff = diff_reports(old, new)
    assert names(diff.fixes) == ["a_x[torch-auto]"]
    assert names(diff.still_failing) == ["b_x[torch-auto]", "c_x[torch-auto]"]
    assert (diff.still_failing[0].old_status, diff.still_failing[0].new_status) == (
        "error", "fail")
    assert diff.new_failures == []
    assert diff.exit_status == 0


def test_a_new_passing_result_is_added_not_a_failure():
    diff = diff_reports(report(result("a_x")), report(result("a_x"),
                                                      result("a_x", path="own")))
    assert diff.results_added == ["a_x[torch-own]"]
    assert diff.new_failures == [] and diff.cases_added == []
    assert diff.exit_status == 0


def test_removed_case_and_its_results():
    diff = diff_reports(report(result("a_x"), result("b_x", backend="paddle")),
                        report(result("a_x")))
    assert diff.results_removed == ["b_x[paddle-auto]"]
    assert diff.cases_removed == ["b_x"]
    assert diff.exit_status == 0


def test_identical_reports_say_no_changes():
    clean = report(result("a_x"))
    assert diff_reports(clean, clean).text().splitlines()[2:] == ["no changes"]
    # a result failing in both is listed, but is no change
    failing = report(result("a_x"), result("b_x", "fail"))
    lines = diff_reports(failing, copy.deepcopy(failing)).text().splitlines()
    assert lines[2:] == ["no changes", "", "still failing:",
                         "  b_x[torch-auto]: fail -> fail: b_x: param:w off at step 7"]


@pytest.mark.parametrize("old_ratio, new_ratio, threshold, counted", [
    (0.3, 3.0, 2.0, True),       # x10
    (0.3, 0.61, 2.0, True),      # just over 2x and over the minimum
    (0.3, 0.59, 2.0, False),     # under 2x
    (0.3, 0.59, 1.5, True),      # the threshold is the caller's
    (1e-3, 1e-2, 2.0, False),    # x10, but rounding noise under MIN_REGRESSION_RATIO
    (0.0, 0.6, 2.0, True),       # bit-exact became inexact
    (0.0, 0.4, 2.0, False),
    (2.0, None, 2.0, True),      # None is inf
    (3.0, 1.0, 2.0, False),      # an improvement
])
def test_worst_ratio_regression_rule(old_ratio, new_ratio, threshold, counted):
    diff = diff_reports(report(result("a_x", ratio=old_ratio)),
                        report(result("a_x", ratio=new_ratio)), ratio_threshold=threshold)
    assert names(diff.regressions) == (["a_x[torch-auto]"] if counted else [])
    assert diff.exit_status == 0          # a passing result closer to K does not gate
    if counted:
        assert "worst-ratio regressions" in diff.text()
        json.dumps(diff.to_dict(), allow_nan=False)     # an inf ratio is written as None


def test_min_regression_ratio_is_small():
    assert 0 < MIN_REGRESSION_RATIO <= 1


# -- bad input ---------------------------------------------------------------------------

def test_other_format_version_is_refused():
    other = {**report(result("a_x")), "format_version": FORMAT_VERSION + 1}
    with pytest.raises(ValueError, match=f"new report: format_version {FORMAT_VERSION + 1}"):
        diff_reports(report(result("a_x")), other)
    with pytest.raises(ValueError, match=r"old report: format_version"):
        diff_reports(other, report(result("a_x")))


def test_load_report_other_format_version_names_the_path(tmp_path):
    path = tmp_path / "report.json"
    path.write_text(json.dumps({**report(result("a_x")), "format_version": 99}))
    with pytest.raises(ValueError, match=r"report\.json.*format_version 99"):
        load_report(path)


@pytest.mark.parametrize("content, message", [
    ('{"format_version": 1, "results": [', "is not valid JSON"),
    ("\x00\x01 garbage", "is not valid JSON"),
    ("[1, 2]", "a report is a dict, got list"),
    ('{"results": []}', "not a conformance report .no format_version"),
    ('{"format_version": 1, "results": [{"case": "a"}]}', r"results\[0\] is not a result"),
])
def test_corrupt_file_is_a_value_error_naming_the_path(tmp_path, content, message):
    path = tmp_path / "corrupt.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message) as caught:
        load_report(path)
    assert str(path) in str(caught.value)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(ValueError, match=r"absent\.json'?: no such file"):
        load_report(tmp_path / "absent.json")
    with pytest.raises(ValueError, match="is a directory"):
        load_report(tmp_path)
    with pytest.raises(TypeError, match="path must be a str or Path, got int"):
        load_report(3)


def test_bad_reports_and_thresholds():
    good = report(result("a_x"))
    with pytest.raises(TypeError, match="old report: a report is a dict, got str"):
        diff_reports("report.json", good)
    twice = report(result("a_x"), result("a_x"))
    with pytest.raises(ValueError, match=r"a_x\[torch-auto\] appears twice"):
        diff_reports(good, twice)
    with pytest.raises(ValueError, match="status 'passed'"):
        diff_reports(good, report({**result("a_x"), "status": "passed"}))
    with pytest.raises(TypeError, match="ratio_threshold must be a number, got str"):
        diff_reports(good, good, ratio_threshold="2")
    for bad in (0.5, float("nan"), float("inf")):
        with pytest.raises(ValueError, match=f"ratio_threshold must be .* got {bad}"):
            diff_reports(good, good, ratio_threshold=bad)


# -- issue 22: an explanation as a string; unreadable fields -----------------------------

def test_a_string_explanation_is_read_as_its_text(tmp_path, capsys):
    failing = dict(result("adam_x", "fail"), explanation="eps_placement='inside' follows")
    old, new = report(result("adam_x")), report(failing)
    found = diff_reports(old, new)
    assert found.new_failures[0].detail.endswith("; eps_placement='inside' follows")
    (tmp_path / "old.json").write_text(json.dumps(old))
    (tmp_path / "new.json").write_text(json.dumps(new))
    assert cli_main(["report", "diff", str(tmp_path / "old.json"),
                     str(tmp_path / "new.json")]) == 1
    assert "eps_placement='inside' follows" in capsys.readouterr().out


@pytest.mark.parametrize("field, value, words", [
    ("explanation", 7, "explanation is 7, expected an object, a string or null"),
    ("comparison", "bad", "comparison is 'bad', expected an object or null"),
    ("error", ["x"], "error is ['x'], expected a string or null"),
    ("case", None, "case is None, expected a string"),
])
def test_an_unreadable_result_is_exit_2_naming_it(tmp_path, capsys, field, value, words):
    bad = dict(result("adam_x", "fail"), **{field: value})
    (tmp_path / "old.json").write_text(json.dumps(report(result("adam_x"))))
    (tmp_path / "new.json").write_text(json.dumps(report(bad)))
    assert cli_main(["report", "diff", str(tmp_path / "old.json"),
                     str(tmp_path / "new.json")]) == 2
    err = capsys.readouterr().err
    assert "results[0]: " + words in err and "Traceback" not in err
    with pytest.raises(ValueError, match="worst_ratio is 'x'"):
        diff_reports(report(result("a")), report({**result("a"), "comparison": {
            "worst_ratio": "x"}}))
