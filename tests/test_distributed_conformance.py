"""The ``distributed`` conformance case kind: a case with ``workers=N`` runs as N ranks
launched in the framework's process group (torchrun / gloo, paddle.distributed.launch,
msrun); every rank's lr, parameters and own spec state at every step are judged against
the reference over N simulated workers, and the ranks must agree bit for bit. The
verdict is checked here on trajectories made by the reference (a rank that stepped
alone, a rank holding another's state, one flipped bit all fail), then on real launches
through the conformance runner (``WORKER_CASES``: the session runs them once)."""

import dataclasses

import numpy as np
import pytest
from conftest import require
from support import installed_frameworks

import unified_opt as uo
from unified_opt.conformance.cases import Case, default_cases
from unified_opt.conformance.distributed import RanksRun, disagreement, judge, run_ranks
from unified_opt.conformance.trajectory import reference_trajectory
from unified_opt.conformance.verdict import References

DISTRIBUTED = [c for c in default_cases() if c.workers > 1]
TWO = next(c for c in DISTRIBUTED if c.id == "dgc_2_workers")
OWN = {"path": "own", "native": None, "reason": "", "own_class": "DGCMomentum"}


def _float32_ranks(case: Case) -> list:
    """Each rank's float32 reference trajectory: what a correct run of the ranks holds."""
    return [reference_trajectory(case.spec, case.at_rank(r), "float32")
            for r in range(case.workers)]


def test_the_default_suite_has_distributed_cases_of_2_and_4_ranks():
    assert {c.workers for c in DISTRIBUTED} == {2, 4}
    assert all(c.spec.name == "dgc_momentum" for c in DISTRIBUTED)
    for case in DISTRIBUTED:
        assert Case.from_dict(case.to_dict()) == case
        # the run crosses the dense warm-up and ends at Paddle's default sparsity
        assert case.spec.rampup_begin_step < case.steps
        assert case.spec.sparsity_at(case.steps - 1) == 0.999


def test_each_rank_has_its_own_stream_and_its_own_state():
    ranks = [TWO.at_rank(r) for r in range(2)]
    assert not np.array_equal(ranks[0].gradients(0)["w"], ranks[1].gradients(0)["w"])
    oracle = [reference_trajectory(TWO.spec, r) for r in ranks]
    np.testing.assert_array_equal(oracle[0].params["w"], oracle[1].params["w"])
    assert not np.array_equal(oracle[0].state["w"]["v"], oracle[1].state["w"]["v"])


def test_correct_ranks_pass_and_record_each_rank():
    result = judge(TWO, "torch", "auto", RanksRun(_float32_ranks(TWO), OWN), References())
    assert result["status"] == "pass", result["comparison"]["detail"]
    assert [r["rank"] for r in result["ranks"]] == [0, 1]
    assert result["workers"] == 2 and result["lowering"] == OWN
    assert any(q.startswith("state:w:") for q in result["comparison"]["per_quantity"])


def test_a_rank_that_stepped_alone_fails():
    """The silent failure the kind exists for: each rank on its own gradients, no
    exchange (a world-size-1 DGC in each process)."""
    alone = [reference_trajectory(TWO.spec, dataclasses.replace(
        TWO, workers=1, seed=TWO.seed + r), "float32") for r in range(2)]
    result = judge(TWO, "torch", "auto", RanksRun(alone, OWN), References())
    assert result["status"] == "fail"


def test_a_rank_holding_another_ranks_state_fails():
    ranks = _float32_ranks(TWO)
    ranks[1] = dataclasses.replace(ranks[1], state=ranks[0].state)
    result = judge(TWO, "torch", "auto", RanksRun(ranks, OWN), References())
    assert result["status"] == "fail"
    assert [r["status"] for r in result["ranks"]] == ["pass", "fail"]
    assert result["comparison"]["failing_quantity"].startswith("state:")


def test_one_flipped_bit_between_ranks_fails():
    ranks = _float32_ranks(TWO)
    params = {n: a.copy() for n, a in ranks[1].params.items()}
    params["w"][30, 3, 4] = np.nextafter(params["w"][30, 3, 4], np.float32(np.inf))
    ranks[1] = dataclasses.replace(ranks[1], params=params)
    assert disagreement(ranks) == "rank 1's param:w differs from rank 0's in its bits " \
                                  "from step 31"
    result = judge(TWO, "torch", "auto", RanksRun(ranks, OWN), References())
    assert [r["status"] for r in result["ranks"]] == ["pass", "pass"]
    assert result["status"] == "fail" and result["comparison"]["failure"] == "ranks"


def test_a_failed_launch_is_an_error_with_its_cause():
    result = judge(TWO, "torch", "auto", RanksRun(error="the torch launch of 2 ranks "
                                                        "exited with status 1"), References())
    assert result["status"] == "error" and "exited with status 1" in result["error"]


def test_bad_distributed_cases_are_refused():
    with pytest.raises(ValueError, match="workers=2 needs a data-parallel spec"):
        Case(id="x", spec=uo.AdamW(), workers=2)
    with pytest.raises(ValueError, match="rank must be below workers=2, got 2"):
        Case(id="x", spec=uo.DGCMomentum(), workers=2, rank=2)
    with pytest.raises(ValueError, match="workers"):
        Case(id="x", spec=uo.DGCMomentum(), workers=0)
    with pytest.raises(ValueError, match="pre-step"):
        Case(id="x", spec=uo.DGCMomentum(grad_clip=uo.ClipByGlobalNorm(max_norm=1.0)), workers=2)
    with pytest.raises(ValueError, match="groups"):
        Case(id="x", spec=uo.DGCMomentum(), workers=2, groups=(uo.Group(match="w", lr=2.0),))


# -- real launches through the conformance runner ------------------------------------------

#: the 2-rank case on every installed backend (the 4-rank case runs in the full suite)
WORKER_CASES = [TWO] if installed_frameworks() else []


@pytest.mark.parametrize("framework", [pytest.param(f, marks=require(f))
                                       for f in ("torch", "paddle", "mindspore")])
def test_the_launched_ranks_pass_in_the_report(worker_runs, framework):
    result = worker_runs.assert_passes(TWO.id, framework, "auto")
    assert result["lowering"]["path"] == "own"
    assert [r["status"] for r in result["ranks"]] == ["pass", "pass"]
    assert result["seconds"] > 0


@require("torch")
def test_a_launch_whose_ranks_cannot_build_is_an_error_naming_why(tmp_path):
    """torch has no native DGC: every rank's build refuses the path, the launch exits
    non-zero, and the result carries the refusal."""
    run = run_ranks("torch", TWO, "native", tmp_path / "run", timeout=300)
    result = judge(TWO, "torch", "native", run, References())
    assert result["status"] == "error"
    assert "the torch launch of 2 ranks exited with status" in result["error"]
    assert "native" in result["error"].split("output ends:")[1]
