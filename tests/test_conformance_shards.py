"""Helper workers (``conformance/shards.py``): a backend's cases split over two workers
that claim them run every case exactly once, with the same results as one worker; the
report names, for a run a worker did not finish, the worker that claimed it."""

import json
import os
import threading

from conftest import require

import unified_opt as uo
from unified_opt.conformance import runner, shards
from unified_opt.conformance.cases import Case, default_cases
from unified_opt.conformance.worker import claim


def test_a_case_is_claimed_by_exactly_one_worker(tmp_path):
    ids = [f"case_{i}" for i in range(200)]
    taken: dict[int, list[str]] = {0: [], 1: []}

    def take(shard):
        taken[shard] += [i for i in ids if claim(tmp_path, i, shard)]

    threads = [threading.Thread(target=take, args=(s,)) for s in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(taken[0] + taken[1]) == sorted(ids)
    assert shards.claimed(tmp_path) == {i: s for s in (0, 1) for i in taken[s]}
    assert claim(None, "anything", 0)          # no claims folder: every case is run


def tally(tmp_path, backend, cases, running):
    made = shards.Tally(backend, cases, total=3 * len(cases),
                        claims=tmp_path / backend, progress=lambda line: None)
    made.claims.mkdir()
    for _ in range(running):
        made.begin()
    return made


def test_a_helper_goes_to_the_running_backend_with_most_unclaimed_cases(tmp_path):
    tallies = {"torch": tally(tmp_path, "torch", [f"t{i}" for i in range(30)], running=1),
               "paddle": tally(tmp_path, "paddle", [f"p{i}" for i in range(40)], running=1),
               "mindspore": tally(tmp_path, "mindspore", [f"m{i}" for i in range(90)],
                                  running=0)}          # not started: not helped
    for i in range(25):
        claim(tallies["paddle"].claims, f"p{i}", 0)   # 15 left, torch 30
    helpers = shards.Helpers(tallies, minimum=12)
    assert helpers.choose() == ("torch", 1)
    assert tallies["torch"].running == 2
    assert helpers.choose() == ("paddle", 1)        # torch has its helper
    assert helpers.choose() is None                  # mindspore's worker is not running


def test_no_helper_for_fewer_unclaimed_cases_than_the_minimum(tmp_path):
    tallies = {"torch": tally(tmp_path, "torch", [f"t{i}" for i in range(11)], running=1)}
    assert shards.Helpers(tallies, minimum=12).choose() is None
    assert shards.Helpers(tallies, minimum=11).choose() == ("torch", 1)


def test_the_backend_finishes_once_its_last_worker_ends(tmp_path):
    made = tally(tmp_path, "torch", ["a", "b"], running=2)
    assert made.numbered("7/6 a auto pass own") == "1/6 a auto pass own"
    assert made.numbered("1/6 b auto pass own") == "2/6 b auto pass own"
    assert made.end(None) is None
    line = made.end("crashed with exit status 3")
    assert line.startswith("finished in ") and line.endswith(
        " s by 2 workers (the worker crashed with exit status 3)")


def test_merged_entry_sums_the_work_and_keeps_each_workers_figures():
    first = runner._info(runner.CPU, exit_code=0, seconds=10.0, logs=[])
    second = runner._info(runner.CPU, exit_code=3, seconds=4.5, error="it crashed",
                          logs=["logs/torch.2.stderr.log"])
    merged = shards.merge([first, second])
    assert merged["seconds"] == 14.5 and merged["exit_code"] == 3
    assert merged["error"] == "worker 2 of 2: it crashed"
    assert merged["logs"] == ["logs/torch.2.stderr.log"]
    assert merged["shards"] == [{"seconds": 10.0, "exit_code": 0, "error": None},
                                {"seconds": 4.5, "exit_code": 3, "error": "it crashed"}]
    assert shards.merge([first]) is first


def test_an_unfinished_run_names_the_worker_that_claimed_it(tmp_path):
    """The helper (worker 2) claimed ``b`` and crashed during it; ``c`` nobody claimed:
    the first worker's ending (it finished) leaves it 'not reported'."""
    cases = [Case(id=i, spec=uo.SGD(lr=0.1), paths=("auto",)) for i in "abc"]
    work = tmp_path / runner.WORK
    (work / "torch").mkdir(parents=True)
    (work / "torch.2").mkdir()
    claims = shards.claims_folder(work, "torch")
    claims.mkdir(parents=True)
    claim(claims, "a", 0)
    claim(claims, "b", 1)
    passed = {"case": "a", "algorithm": "sgd", "backend": "torch", "path": "auto",
              "status": "pass", "lowering": None, "comparison": None, "explanation": None,
              "known": None, "seconds": 0.5, "error": None}
    (work / "torch" / "a__auto.json").write_text(json.dumps(passed))
    first = runner._info(runner.CPU, exit_code=0, seconds=3.0, label="torch")
    helper = runner._info(runner.CPU, exit_code=3, seconds=2.0, label="torch.2",
                          ending="crashed with exit status 3", running=("b", "auto"),
                          stderr_tail="stderr ends:\nBoom\n",
                          error="the worker crashed with exit status 3 while running b")
    report = runner._report(cases, ["torch"], {}, {"torch": [first, helper]}, tmp_path)
    got = {r["case"]: r for r in report["results"]}
    assert got["a"]["status"] == "pass"
    assert got["b"]["status"] == "error" and got["b"]["error"] == (
        "stderr ends:\nBoom\nthe worker crashed with exit status 3 during this run")
    assert got["c"]["error"] == "the worker did not report this run"
    entry = report["backends"]["torch"]
    assert entry["exit_code"] == 3 and entry["seconds"] == 5.0
    assert [s["exit_code"] for s in entry["shards"]] == [0, 3]


@require("torch")
def test_a_helper_worker_gives_every_result_once_and_the_same_numbers(tmp_path,
                                                                      monkeypatch):
    """One backend, two slots: with the minimum at 1 a helper starts beside the first
    worker at once; the results equal a run of one worker (``jobs=1``), run for run."""
    cases = [c.with_steps(50) for c in default_cases(["sgd"])][:8]
    alone = runner.run(cases, ["torch"], tmp_path / "alone", jobs=1,
                       progress=lambda line: None)
    monkeypatch.setattr(shards, "HELPER_MIN_CASES", 1)
    lines = []
    helped = runner.run(cases, ["torch"], tmp_path / "helped", jobs=2, progress=lines.append)
    assert len(helped["backends"]["torch"]["shards"]) == 2
    assert "shards" not in alone["backends"]["torch"]
    assert [line for line in lines if "finished" in line] == [
        line for line in lines if line.startswith("[torch] finished in ")]
    assert len([line for line in lines if "finished" in line]) == 1

    def key(result):
        return result["case"], result["path"]

    def numbers(result):
        comparison = result["comparison"] or {}
        return (result["status"], result["lowering"], comparison.get("worst_ratio"),
                comparison.get("per_quantity"))

    assert sorted(map(key, helped["results"])) == sorted(map(key, alone["results"]))
    assert len(set(map(key, helped["results"]))) == len(helped["results"])
    assert {key(r): numbers(r) for r in helped["results"]} == {
        key(r): numbers(r) for r in alone["results"]}
    assert helped["summary"] == alone["summary"]


def test_one_job_starts_no_helper(tmp_path, monkeypatch):
    """``jobs=1``: the one slot runs the backends one after another, no helper task."""
    started = []

    def stand_in(backend, *args):
        started.append(backend)
        return runner._info(runner.CPU, exit_code=0)

    monkeypatch.setattr(runner, "_run_worker", stand_in)
    monkeypatch.setattr(shards, "HELPER_MIN_CASES", 1)
    runner.run([Case(id="a", spec=uo.SGD(lr=0.1), paths=("auto",))], ["torch"], tmp_path,
               jobs=1, progress=lambda line: None)
    assert started == ["torch"]


def test_each_worker_gets_the_cpus_over_the_jobs_as_its_openmp_threads():
    cpus = len(os.sched_getaffinity(0))
    assert runner.worker_threads(2, environ={}) == max(1, cpus // 2)
    assert runner.worker_threads(1, environ={}) == cpus
    assert runner.worker_threads(4 * cpus, environ={}) == 1
    assert runner.worker_threads(2, environ={"OMP_NUM_THREADS": "3"}) is None
