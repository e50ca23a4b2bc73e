"""The training-loop conformance cases (schedules, groups, clipping, loss scale, skipped
steps, centralisation, dynamic decay, momentum cycling): they cover every scheduler
preset, each feature acts on the numbers, and they travel to a worker intact."""

import dataclasses
import json

import numpy as np
import pytest

import unified_opt as uo
from unified_opt.conformance.cases import Case, default_cases, lr_schedules, training
from unified_opt.conformance.cases.functions import FUNCTIONS, decode_spec, encode_spec
from unified_opt.conformance.compare import K, compare
from unified_opt.conformance.deviations import Deviation
from unified_opt.conformance.gradients import NONFINITE
from unified_opt.conformance.trajectory import (
    Recorder,
    Trajectory,
    floor_trajectories,
    reference_trajectory,
)
from unified_opt.groups import plan_parameters
from unified_opt.ops import numpy_ops
from unified_opt.pre_step import prepare_gradients
from unified_opt.schedules import Lambda, Schedule

SCHEDULE_CASES = lr_schedules.cases()
TRAINING_CASES = training.cases()


def test_every_scheduler_preset_has_a_case_whose_lr_moves():
    by_id = {c.id: c for c in SCHEDULE_CASES}
    assert sorted(q for q, _, _ in lr_schedules.PRESETS) == uo.schedules.presets()
    for qualified, _, kwargs in lr_schedules.PRESETS:
        case = by_id[lr_schedules.case_id(qualified)]
        assert case.spec.lr == uo.schedules.preset(qualified, **kwargs)
        lrs = [case.spec.lr_at(t) for t in range(case.steps)]
        # the lr changes inside the window, after its first step
        assert case.steps >= 50 and len(set(lrs[1:])) >= 2, qualified
    cycling = [c.id for c in SCHEDULE_CASES if c.spec.lr.momentum(0) is not None]
    assert {"preset_lr_torch_onecyclelr", "preset_lr_torch_cycliclr"} <= set(cycling)


def test_the_training_cases_are_in_the_default_suite_with_unique_ids():
    ids = [c.id for c in default_cases()]
    assert len(ids) == len(set(ids))
    assert {c.id for c in SCHEDULE_CASES + TRAINING_CASES} <= set(ids)
    assert all(c.steps >= 50 for c in TRAINING_CASES)
    assert [c.steps for c in training.acceptance_cases()] == [100, 100, 100]


@pytest.mark.parametrize("case", SCHEDULE_CASES + TRAINING_CASES, ids=lambda c: c.id)
def test_cases_round_trip_through_json(case):
    again = Case.from_dict(json.loads(json.dumps(case.to_dict())))
    assert again == case
    for t in (0, 3, 17, 49):
        for name, g in case.gradients(t).items():
            np.testing.assert_array_equal(again.gradients(t)[name], g)


def test_registered_callables_travel_by_name_and_others_are_refused():
    spec = uo.SGD(lr=Lambda(fn=FUNCTIONS["wavy_decay"], lr=0.1))
    data = encode_spec(spec)
    assert data["hyperparameters"]["lr"]["fn"] == {"function": "wavy_decay"}
    assert decode_spec(json.loads(json.dumps(data))) == spec
    with pytest.raises(TypeError, match="not a registered example function"):
        Case(id="stray_lambda", spec=uo.SGD(lr=Lambda(fn=lambda t: 0.5, lr=0.1)))
    data["hyperparameters"]["lr"]["fn"] = {"function": "nowhere"}
    with pytest.raises(ValueError, match="unknown function 'nowhere'"):
        decode_spec(data)


def test_nonfinite_steps_plant_one_value_each_in_turn():
    case = Case(id="plant", spec=uo.SGD(lr=0.1, skip_nonfinite=True),
                nonfinite_steps=(2, 5, 9, 11))
    for index, step in enumerate(case.nonfinite_steps):
        grads = case.gradients(step)
        bad = [(n, g.reshape(-1)[0]) for n, g in grads.items() if not np.isfinite(g).all()]
        assert len(bad) == 1 and sum((~np.isfinite(g)).sum() for g in grads.values()) == 1
        expected = NONFINITE[index % 3]
        assert (np.isnan(bad[0][1]) if np.isnan(expected) else bad[0][1] == expected)
    assert all(np.isfinite(g).all() for g in case.gradients(3).values())
    assert len({n for s in case.nonfinite_steps for n, g in case.gradients(s).items()
                if not np.isfinite(g).all()}) == 4     # a different parameter each time


@pytest.mark.parametrize("steps,error", [((3, 3), ValueError), ((5, 2), ValueError),
                                         ((-1,), ValueError), ("3", TypeError),
                                         ((1.5,), TypeError)])
def test_bad_nonfinite_steps_are_refused(steps, error):
    with pytest.raises(error, match="nonfinite_steps"):
        Case(id="bad", spec=uo.SGD(lr=0.1), nonfinite_steps=steps)


def test_skipped_steps_are_recorded_and_keep_the_schedule_position():
    case = next(c for c in TRAINING_CASES if c.id == "skip_nonfinite_sgd_cosine")
    trajectory = reference_trajectory(case.spec, case)
    assert np.flatnonzero(trajectory.skipped).tolist() == list(case.nonfinite_steps)
    for s in case.nonfinite_steps:       # nothing moves on a skipped step
        np.testing.assert_array_equal(trajectory.params["w"][s], trajectory.params["w"][s - 1])
    # the lr index is the count of steps taken: the lr repeats after each skip
    taken = np.cumsum(1 - trajectory.skipped) - (1 - trajectory.skipped)
    expected = [case.spec.lr_at(int(k)) for k in taken]
    np.testing.assert_array_equal(trajectory.lrs, expected)


def test_a_trajectory_without_the_skipped_record_fails_a_skip_case(tmp_path):
    case = next(c for c in TRAINING_CASES if c.id == "skip_nonfinite_adamw_unscaled")
    oracle = reference_trajectory(case.spec, case)
    oracle.save(tmp_path / "t.npz")
    loaded = Trajectory.load(tmp_path / "t.npz")
    np.testing.assert_array_equal(loaded.skipped, oracle.skipped)
    silent = Trajectory(oracle.lrs, oracle.params, oracle.state)
    result = compare(silent, oracle, floor_trajectories(case.spec, case))
    assert (result.passed, result.failure, result.failing_quantity) == (False, "missing",
                                                                       "skipped")
    never = Trajectory(oracle.lrs, oracle.params, oracle.state, np.zeros(case.steps))
    assert compare(never, oracle, floor_trajectories(case.spec, case)).failing_quantity \
        == "skipped"


def test_recorder_takes_skipped_at_every_step_or_none():
    recorder = Recorder()
    recorder.add(0.1, {"w": np.zeros(2)}, {}, skipped=False)
    with pytest.raises(RuntimeError, match="skipped"):
        recorder.add(0.1, {"w": np.zeros(2)}, {})


def _clip_activity(case):
    """Fraction of steps at which the case's clip changes the (unscaled) gradients."""
    spec = case.spec
    plans = plan_parameters(spec, list(case.params), case.groups or None)
    names, active = list(case.params), 0
    for t in range(case.steps):
        grads = [case.gradients(t)[n].astype(np.float64) / spec.loss_scale for n in names]
        if not all(np.isfinite(g).all() for g in grads):
            continue
        plain = spec.replace(loss_scale=1.0, grad_centralization=False)
        bare = prepare_gradients(plain.replace(grad_clip=None), plans, grads, numpy_ops)
        clipped = prepare_gradients(plain, plans, grads, numpy_ops)
        active += any(not np.array_equal(a, b) for a, b in zip(bare, clipped))
    return active / case.steps


@pytest.mark.parametrize("case", [c for c in TRAINING_CASES if c.spec.grad_clip is not None],
                         ids=lambda c: c.id)
def test_every_clip_bites_on_many_steps(case):
    assert _clip_activity(case) >= 0.3


@pytest.mark.parametrize("case", [c for c in TRAINING_CASES if c.groups], ids=lambda c: c.id)
def test_every_case_with_groups_depends_on_them(case):
    oracle = reference_trajectory(case.spec, case)
    planted = reference_trajectory(Deviation(case.spec, "without_groups"), case, "float32")
    assert compare(planted, oracle, floor_trajectories(case.spec, case)).worst_ratio > 100 * K


def _frozen(spec):
    """``spec`` with its per-step hyperparameters held at their first value."""
    changes = {}
    if isinstance(getattr(spec, "weight_decay", None), Schedule):
        changes["weight_decay"] = spec.weight_decay(0)
    if isinstance(spec.lr, Schedule) and spec.lr.momentum(0) is not None:
        first = spec.at_step(0)
        changes["lr"] = dataclasses.replace(spec.lr, cycle_momentum=False)
        changes.update({k: getattr(first, k) for k in ("momentum", "betas")
                        if hasattr(first, k)})
    return spec.replace(**changes)


@pytest.mark.parametrize("case", [c for c in SCHEDULE_CASES + TRAINING_CASES
                                  if c.spec.varies_per_step()], ids=lambda c: c.id)
def test_per_step_hyperparameters_change_the_numbers(case):
    """A dynamic weight decay or a cycled momentum frozen at its first value is flagged."""
    frozen = _frozen(case.spec)
    assert not frozen.varies_per_step()
    oracle = reference_trajectory(case.spec, case)
    planted = reference_trajectory(frozen, case, "float32")
    assert compare(planted, oracle, floor_trajectories(case.spec, case)).worst_ratio > 100 * K


def test_a_case_the_reference_cannot_run_is_an_error_not_a_crash():
    """``--steps 60`` on a 50-step OneCycle: the reference raises, as the native class."""
    from unified_opt.conformance.verdict import References, verdict

    case = next(c for c in SCHEDULE_CASES if c.id == "preset_lr_torch_onecyclelr")
    longer = case.with_steps(60)
    with pytest.raises(ValueError, match="past total_steps"):
        References().get(longer, "float64")
    assert References().stable(longer)
    assert References().stable(case)
    result = verdict(longer, "torch", "auto", None, None, None, References())
    assert result["status"] == "error"
    assert "the reference cannot run this case" in result["error"]
