"""The conformance cases whose gradients come from a real backward (``Case.backward``),
in both of the frameworks' clearing modes: torch's ``zero_grad(set_to_none=True/False)``
and Paddle's ``clear_grad(set_to_zero=False/True)``, over SGD with momentum, Adam,
Lamb, Adan, schedule-free AdamW and Muon with its auxiliary AdamW, on every build
path; MindSpore (no gradient kept on a parameter) does not run them, and the report
says why."""

import dataclasses

import pytest

import unified_opt as uo
from unified_opt.conformance.cases import Case, default_cases
from unified_opt.conformance.cases.case import BACKWARD_MODES, DENSE_PARAMS

BACKWARD_CASES = [c for c in default_cases() if c.backward is not None]
#: the same cases through the conformance runner (a worker process per backend)
WORKER_CASES = [dataclasses.replace(c, id=f"grads_{c.id}") for c in BACKWARD_CASES]


def test_sgd_momentum_adam_lamb_and_the_state_keeping_algorithms_run_in_both_modes():
    # Adan keeps the previous gradient, schedule-free AdamW its base point, Muon with
    # AdamW two kinds of state
    assert sorted((c.spec.name, c.backward) for c in BACKWARD_CASES) == sorted(
        (name, mode) for name in ("adam", "lamb", "sgd", "adan", "schedule_free_adamw",
                                  "muon") for mode in BACKWARD_MODES)
    sgd = [c.spec for c in BACKWARD_CASES if c.spec.name == "sgd"]
    assert all(s.momentum > 0 for s in sgd)


def test_a_backward_case_travels_to_a_worker_and_refuses_what_it_cannot_do():
    case = BACKWARD_CASES[0]
    assert Case.from_dict(case.to_dict()) == case
    assert "backward" not in dataclasses.replace(case, backward=None).to_dict()
    with pytest.raises(ValueError, match="backward must be None or one of"):
        Case(id="x", spec=uo.SGD(lr=0.1), params=DENSE_PARAMS, backward="zero")
    with pytest.raises(ValueError, match="no missing_gradients"):
        Case(id="x", spec=uo.SGD(lr=0.1), params=DENSE_PARAMS, backward="set_to_zero",
             missing_gradients={"w": (3,)})
    assert "keep no gradient" in case.refused_on("mindspore")
    assert case.refused_on("torch") is None and case.refused_on("paddle") is None


def test_every_backend_in_the_conformance_runner(worker_runs):
    worker_runs.assert_cases_pass_or_are_refused(WORKER_CASES)
