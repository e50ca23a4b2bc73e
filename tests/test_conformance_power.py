"""The conformance comparison has power: planted one-knob deviations are flagged and
the explainer names the planted knob; correct float32 trajectories pass."""

import numpy as np
import pytest
from conftest import require

import unified_opt as uo
from unified_opt.conformance.cases import Case
from unified_opt.conformance.compare import K, compare
from unified_opt.conformance.explainer import explain_failure, shifted
from unified_opt.conformance.trajectory import floor_trajectories, reference_trajectory
from unified_opt.schedules import Cosine

COSINE = Cosine(lr=0.1, T_max=50, eta_min=0.005)
ADAM = uo.Adam(lr=0.01, eps=1e-3)
ADAMW = uo.AdamW(lr=0.01, eps=1e-3, weight_decay=0.1)


def _adam_fields(spec):
    return {k: v for k, v in spec.hyperparameters().items()
            if k not in ("decay_form", "decay_times_lr")}


# (label, spec the backend claims, the spec it actually runs, text the explainer must give)
PLANTED = [
    ("eps_placement", ADAM, ADAM.replace(eps_placement="eps_hat"), "eps_placement='eps_hat'"),
    ("eps_inside", ADAM, ADAM.replace(eps_placement="inside"), "eps_placement='inside'"),
    ("bias_correction", ADAM, ADAM.replace(bias_correction=False), "bias_correction=False"),
    ("coupled_decay", ADAMW, uo.Adam(**_adam_fields(ADAMW)), "coupled L2 weight decay"),
    ("decoupled_decay", ADAM.replace(weight_decay=0.1),
     uo.AdamW(**ADAM.replace(weight_decay=0.1).hyperparameters()), "decoupled weight decay"),
    ("decay_times_lr", ADAMW, ADAMW.replace(decay_times_lr=False), "decay_times_lr=False"),
    ("lr_inside_buffer", uo.SGD(lr=COSINE, momentum=0.9),
     uo.SGD(lr=COSINE, momentum=0.9, lr_placement="inside"), "lr_placement='inside'"),
    ("first_step_rule", uo.SGD(lr=0.05, momentum=0.9, dampening=0.5),
     uo.SGD(lr=0.05, momentum=0.9, dampening=0.5, momentum_init="zeros"),
     "momentum_init='zeros'"),
    ("lr_shift_early", uo.SGD(lr=COSINE, momentum=0.9),
     shifted(uo.SGD(lr=COSINE, momentum=0.9), +1), "shifted by +1 step"),
    ("lr_shift_late", uo.AdamW(lr=COSINE, eps=1e-3, weight_decay=0.1),
     shifted(uo.AdamW(lr=COSINE, eps=1e-3, weight_decay=0.1), -1), "shifted by -1 step"),
]


def _case(label, spec):
    return Case(id=f"planted_{label}", spec=spec)


@pytest.mark.parametrize("label,claimed,actual,named", PLANTED, ids=[p[0] for p in PLANTED])
def test_planted_deviation_is_flagged_and_named(label, claimed, actual, named):
    case = _case(label, claimed)
    oracle = reference_trajectory(claimed, case)
    floor = reference_trajectory(claimed, case, "float32")
    planted = reference_trajectory(actual, case, "float32")
    assert compare(floor, oracle, floor).passed   # control: the unmutated float32 run
    result = compare(planted, oracle, floor)
    assert not result.passed
    assert result.worst_ratio > 100 * K        # far from the threshold, not near it
    assert result.first_failing_step is not None and result.failure == "ratio"
    explanation = explain_failure(planted, case)
    assert any(named in m for m in explanation["matches"]), explanation
    assert named in explanation["text"]


def test_two_planted_knobs_are_named_together():
    """nn.AdamWeightDecay-like: no bias correction *and* decay inside the lr-free form."""
    claimed = ADAMW
    actual = ADAMW.replace(bias_correction=False, decay_times_lr=False)
    case = _case("two_knobs", claimed)
    planted = reference_trajectory(actual, case, "float32")
    assert not compare(planted, reference_trajectory(claimed, case),
                       reference_trajectory(claimed, case, "float32")).passed
    text = explain_failure(planted, case)["text"]
    assert "bias_correction=False" in text and "decay_times_lr=False" in text


@require("torch")
@pytest.mark.parametrize("label,claimed,actual,named,path", [
    ("eps_placement_own", ADAM, ADAM.replace(eps_placement="eps_hat"),
     "eps_placement='eps_hat'", "own"),
    ("bias_correction_own", ADAM, ADAM.replace(bias_correction=False), "bias_correction=False",
     "own"),
    ("coupled_decay_native", ADAMW, uo.Adam(**_adam_fields(ADAMW)), "coupled L2", "auto"),
    ("first_step_rule_own", uo.SGD(lr=0.05, momentum=0.9, dampening=0.5),
     uo.SGD(lr=0.05, momentum=0.9, dampening=0.5, momentum_init="zeros"),
     "momentum_init='zeros'", "own"),
    ("lr_shift_native", uo.SGD(lr=COSINE, momentum=0.9),
     shifted(uo.SGD(lr=COSINE, momentum=0.9), +1), "shifted by +1 step", "auto"),
])
def test_planted_deviation_through_torch_is_flagged(label, claimed, actual, named, path):
    from unified_opt.conformance.worker import driver_class, run_case

    case = _case(label, claimed)
    trajectory, decision, error = run_case(driver_class("torch"), case, path, spec=actual)
    assert error is None, error
    assert decision.path == ("own" if path == "own" else "native")
    oracle = reference_trajectory(claimed, case)
    floor = reference_trajectory(claimed, case, "float32")
    result = compare(trajectory, oracle, floor)
    assert not result.passed and result.worst_ratio > 100 * K
    assert any(named in m for m in explain_failure(trajectory, case)["matches"])
    # the same run checked against the spec it really ran passes
    assert compare(trajectory, reference_trajectory(actual, case),
                   reference_trajectory(actual, case, "float32")).passed


def test_betas_held_in_float32_are_inside_the_floor():
    """What Paddle's and MindSpore's Adam kernels do: 1 - float32(0.999) is 1.3e-5
    relative off, about a hundred plain float32 noise floors in the second moment; the
    float32-held reference puts that storage rounding inside the floor."""
    held = tuple(float(np.float32(b)) for b in ADAM.betas)
    case = _case("betas_float32", ADAM)
    planted = reference_trajectory(ADAM.replace(betas=held), case, "float32")
    oracle = reference_trajectory(ADAM, case)
    plain_only = compare(planted, oracle, reference_trajectory(ADAM, case, "float32"))
    assert not plain_only.passed and plain_only.worst_ratio > 5 * K
    assert plain_only.failing_quantity.endswith("exp_avg_sq")
    assert compare(planted, oracle, floor_trajectories(ADAM, case)).passed
