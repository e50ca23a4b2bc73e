"""The conformance comparison has power: planted one-knob deviations are flagged and
the explainer names the planted knob; correct float32 trajectories pass. The training
loop's knobs too: clip vs decay order, per-group vs global norm, the clip's eps, no
unscaling, no centralisation, a shifted or skip-advanced schedule, groups ignored."""

import numpy as np
import pytest
from conftest import require

import unified_opt as uo
from unified_opt.clipping import ClipByGlobalNorm
from unified_opt.conformance.cases import PARAMS, Case
from unified_opt.conformance.compare import K, compare
from unified_opt.conformance.deviations import Deviation
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


# -- the training loop around the update ----------------------------------------------

GROUPS = (uo.Group(match="w*", lr_scale=0.5), uo.Group(match="ln.*", weight_decay=0.0))
SKIPS = (3, 17, 18, 31)
CLIPPED = uo.SGD(lr=0.05, momentum=0.9, weight_decay=0.05,
                 grad_clip=ClipByGlobalNorm(max_norm=1.0))
PER_GROUP = CLIPPED.replace(grad_clip=ClipByGlobalNorm(max_norm=1.0, per_group=True))
# unscaled norms of 1e-6 to 1e-3 clipped to 1e-6: the clip's eps shows
EPS_CLIP = uo.SGD(lr=0.5, momentum=0.9, loss_scale=2.0 ** 20,
                  grad_clip=ClipByGlobalNorm(max_norm=1e-6, eps=1e-6))
NO_EPS_CLIP = EPS_CLIP.replace(grad_clip=ClipByGlobalNorm(max_norm=1e-6))
SCALED = uo.SGD(lr=COSINE, momentum=0.9, weight_decay=0.05, loss_scale=1024.0)
SKIPPING = SCALED.replace(skip_nonfinite=True)
CENTRALIZED = uo.Adam(lr=0.01, eps=1e-3, weight_decay=0.05, grad_centralization=True)
GROUPED_COSINE = uo.SGD(lr=COSINE, momentum=0.9, weight_decay=0.05)
# torch's AdamW (decay 0.01) ported to MindSpore's nn.AdamWeightDecay at its default 0.0
DECAYED = uo.AdamW(lr=0.01, eps=1e-3, weight_decay=0.1)

# (label, claimed, actual, text the explainer must give, case fields)
LOOP_PLANTED = [
    ("decay_before_clip", CLIPPED, Deviation(CLIPPED, "decay_before_clip"),
     "weight decay before the clipping", {}),
    ("global_norm_for_per_group", PER_GROUP, CLIPPED, "grad_clip per_group=False",
     {"groups": GROUPS}),
    ("per_group_for_global_norm", CLIPPED, PER_GROUP, "grad_clip per_group=True",
     {"groups": GROUPS}),
    ("clip_eps_1e-6_for_0", NO_EPS_CLIP, EPS_CLIP, "grad_clip eps=1e-06", {}),
    ("clip_eps_0_for_1e-6", EPS_CLIP, NO_EPS_CLIP, "grad_clip eps=0", {}),
    ("no_unscale", SCALED, SCALED.replace(loss_scale=1.0), "loss_scale=1", {}),
    ("decay_not_scaled", SCALED, SCALED.replace(weight_decay=0.05 / 1024.0),
     "weight decay not scaled with loss_scale", {}),
    ("no_decay", DECAYED, DECAYED.replace(weight_decay=0.0), "weight_decay=0", {}),
    ("centralization_off", CENTRALIZED, CENTRALIZED.replace(grad_centralization=False),
     "grad_centralization=False", {}),
    ("lr_shift_with_groups", GROUPED_COSINE, shifted(GROUPED_COSINE, +1),
     "shifted by +1 step", {"groups": GROUPS}),
    ("skip_advances_schedule", SKIPPING,
     Deviation(SKIPPING, "schedule_counts_skipped", SKIPS),
     "skipped steps advancing the lr schedule", {"nonfinite_steps": SKIPS}),
    ("groups_ignored", GROUPED_COSINE, Deviation(GROUPED_COSINE, "without_groups"),
     "the parameter groups ignored", {"groups": GROUPS}),
]


def _loop_case(label, spec, fields):
    return Case(id=f"planted_{label}", spec=spec, params=PARAMS, **fields)


@pytest.mark.parametrize("label,claimed,actual,named,fields", LOOP_PLANTED,
                         ids=[p[0] for p in LOOP_PLANTED])
def test_planted_training_loop_deviation_is_flagged_and_named(label, claimed, actual, named,
                                                              fields):
    case = _loop_case(label, claimed, fields)
    oracle = reference_trajectory(claimed, case)
    floors = floor_trajectories(claimed, case)
    assert compare(floors[0], oracle, floors).passed      # control
    planted = reference_trajectory(actual, case, "float32")
    result = compare(planted, oracle, floors)
    assert not result.passed and result.failure == "ratio"
    assert result.worst_ratio > 100 * K
    explanation = explain_failure(planted, case)
    assert any(named in m for m in explanation["matches"]), explanation
    assert named in explanation["text"]


def test_a_step_that_was_not_skipped_is_flagged():
    """Without the skip, the planted inf/NaN reaches the parameters: NaN positions differ."""
    case = _loop_case("no_skip", SKIPPING, {"nonfinite_steps": SKIPS})
    planted = reference_trajectory(SKIPPING.replace(skip_nonfinite=False), case, "float32")
    planted.skipped = np.zeros(case.steps)   # a backend that says it skipped nothing
    result = compare(planted, reference_trajectory(SKIPPING, case),
                     floor_trajectories(SKIPPING, case))
    assert not result.passed and result.first_failing_step == SKIPS[0] + 1


@require("torch")
@pytest.mark.parametrize("label,claimed,actual,named,fields,path", [
    ("per_group_native", CLIPPED, PER_GROUP, "grad_clip per_group=True",
     {"groups": GROUPS}, "auto"),
    ("no_unscale_native", SCALED, SCALED.replace(loss_scale=1.0), "loss_scale=1", {},
     "auto"),
    ("centralization_off_own", CENTRALIZED, CENTRALIZED.replace(grad_centralization=False),
     "grad_centralization=False", {}, "own"),
    ("lr_shift_groups_native", GROUPED_COSINE, shifted(GROUPED_COSINE, -1),
     "shifted by -1 step", {"groups": GROUPS}, "auto"),
])
def test_planted_training_loop_deviation_through_torch_is_flagged(label, claimed, actual,
                                                                  named, fields, path):
    from unified_opt.conformance.worker import driver_class, run_case

    case = _loop_case(label, claimed, fields)
    trajectory, decision, error = run_case(driver_class("torch"), case, path, spec=actual)
    assert error is None, error
    result = compare(trajectory, reference_trajectory(claimed, case),
                     floor_trajectories(claimed, case))
    assert not result.passed and result.worst_ratio > 100 * K
    assert any(named in m for m in explain_failure(trajectory, case)["matches"])
    # the same run checked against what it really ran passes
    assert compare(trajectory, reference_trajectory(actual, case),
                   floor_trajectories(actual, case)).passed
