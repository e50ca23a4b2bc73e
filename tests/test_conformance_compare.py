"""The comparison rule, the gradient stream, the cases and the trajectory files."""

import functools
import zipfile

import numpy as np
import pytest
from support import judge

import unified_opt as uo
from unified_opt.conformance import gradients
from unified_opt.conformance.cases import PARAMS, Case, default_cases, select, uncovered_rows
from unified_opt.conformance.compare import TINY, ULPS, K, compare
from unified_opt.conformance.explainer import knob_variants
from unified_opt.conformance.trajectory import (
    FirstSteps,
    Trajectory,
    floor_trajectories,
    reference_trajectory,
)

STEPS = 4


def _trajectory(values, lrs=None, state=None):
    values = np.asarray(values, dtype=np.float64)
    lrs = np.full(values.shape[0], 0.1) if lrs is None else np.asarray(lrs, dtype=np.float64)
    return Trajectory(lrs, {"w": values}, state or {})


def _base():
    rng = np.random.default_rng(0)
    return rng.standard_normal((STEPS, 5))


def test_error_within_k_floors_passes_and_beyond_fails():
    oracle = _base()
    floor32 = oracle + 1e-4                      # float32 reference error 1e-4 everywhere
    ok = compare(_trajectory(oracle + 0.99 * K * 1e-4), _trajectory(oracle),
                 _trajectory(floor32))
    # float64 errors of ~1e-4 on values of ~1: the ratio is exact to ~1e-12 on any CPU,
    # inside approx's default rel=1e-6 (and rel=1e-6 below)
    assert ok.passed and ok.worst_ratio == pytest.approx(0.99 * K)
    bad = oracle.copy()
    bad[2, 3] += 1.01 * K * 1e-4
    result = compare(_trajectory(bad), _trajectory(oracle), _trajectory(floor32))
    assert not result.passed
    assert (result.first_failing_step, result.failing_quantity, result.failure) == (
        3, "param:w", "ratio")
    assert result.worst_ratio == pytest.approx(1.01 * K, rel=1e-6)


def test_floor_is_a_few_ulps_when_the_float32_reference_is_exact():
    oracle = np.full((STEPS, 3), 3.0)            # float32 holds 3.0 exactly: no reference error
    ulp = float(np.spacing(np.float32(3.0)))
    near = compare(_trajectory(oracle + K * ULPS * ulp * 0.9), _trajectory(oracle),
                   _trajectory(oracle))
    far = compare(_trajectory(oracle + K * ULPS * ulp * 1.1), _trajectory(oracle),
                  _trajectory(oracle))
    assert near.passed and not far.passed


def test_float32_rounded_lr_passes_and_a_wrong_lr_fails():
    oracle = _base()
    lrs = np.array([0.1, 0.07, 0.05, 0.03])
    as_float32 = lrs.astype(np.float32).astype(np.float64)
    assert compare(_trajectory(oracle, as_float32), _trajectory(oracle, lrs),
                   _trajectory(oracle, lrs)).passed
    wrong = lrs * (1 + 1e-5)
    result = compare(_trajectory(oracle, wrong), _trajectory(oracle, lrs),
                     _trajectory(oracle, lrs))
    assert not result.passed and result.failing_quantity == "lr"


def test_zero_tensors_use_the_tiny_floor():
    oracle = np.zeros((STEPS, 3))
    assert compare(_trajectory(oracle + TINY), _trajectory(oracle), _trajectory(oracle)).passed
    assert not compare(_trajectory(oracle + 1e-30), _trajectory(oracle),
                       _trajectory(oracle)).passed


@pytest.mark.parametrize("planted", [np.nan, np.inf, -np.inf])
def test_nonfinite_where_the_oracle_is_finite_fails(planted):
    oracle = _base()
    bad = oracle.copy()
    bad[1, 0] = planted
    result = compare(_trajectory(bad), _trajectory(oracle), _trajectory(oracle))
    assert not result.passed
    assert (result.failure, result.first_failing_step) == ("nonfinite", 2)


def test_nonfinite_positions_must_match_the_oracle():
    oracle = _base()
    oracle[2:, 1] = np.nan
    oracle[3, 2] = np.inf
    same = compare(_trajectory(oracle.copy()), _trajectory(oracle), _trajectory(oracle))
    assert same.passed
    finite_instead = oracle.copy()
    finite_instead[3, 1] = 0.0                   # the oracle has NaN there
    assert compare(_trajectory(finite_instead), _trajectory(oracle),
                   _trajectory(oracle)).failure == "nonfinite"
    sign = oracle.copy()
    sign[3, 2] = -np.inf
    assert compare(_trajectory(sign), _trajectory(oracle), _trajectory(oracle)).failure == \
        "nonfinite"
    # NaN for Inf: which one an element holds depends on the order of IEEE operations
    nan_for_inf = oracle.copy()
    nan_for_inf[3, 2] = np.nan
    assert compare(_trajectory(nan_for_inf), _trajectory(oracle), _trajectory(oracle)).passed
    # a class declaring that it keeps such elements finite is compared with that tolerance,
    # in that direction only
    assert compare(_trajectory(finite_instead), _trajectory(oracle), _trajectory(oracle),
                   tolerate_finite=True).passed
    nonfinite_instead = oracle.copy()
    nonfinite_instead[1, 0] = np.nan             # the oracle is finite there
    assert compare(_trajectory(nonfinite_instead), _trajectory(oracle), _trajectory(oracle),
                   tolerate_finite=True).failure == "nonfinite"


def test_missing_state_wrong_shape_and_short_runs_fail():
    oracle = _base()
    with_state = _trajectory(oracle, state={"w": {"exp_avg": oracle * 0.5}})
    missing = compare(_trajectory(oracle), with_state, with_state)
    assert (missing.failure, missing.failing_quantity) == ("missing", "state:w:exp_avg")
    shape = compare(_trajectory(oracle[:, :4]), _trajectory(oracle), _trajectory(oracle))
    assert shape.failure == "shape"
    short = compare(_trajectory(oracle[:2]), _trajectory(oracle), _trajectory(oracle))
    assert (short.passed, short.failure, short.first_failing_step) == (False, "steps", 3)


@pytest.mark.parametrize("compress", [True, False])
def test_trajectory_npz_round_trip_without_pickle(tmp_path, compress):
    case = Case(id="round_trip", spec=uo.Adam(lr=0.01, amsgrad=True))
    trajectory = reference_trajectory(case.spec, case, "float32")
    trajectory.save(tmp_path / "t.npz", compress=compress)
    with zipfile.ZipFile(tmp_path / "t.npz") as archive:
        methods = {member.compress_type for member in archive.infolist()}
    assert methods == {zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED}
    loaded = Trajectory.load(tmp_path / "t.npz")
    for name, values in trajectory.quantities().items():
        np.testing.assert_array_equal(loaded.quantities()[name], values)
    assert sorted(loaded.state["ln.gamma"]) == ["exp_avg", "exp_avg_sq", "max_exp_avg_sq"]


# -- the gradient stream -------------------------------------------------------------

def test_gradient_stream_is_deterministic_float32_and_adversarial():
    shapes = dict(PARAMS)
    first = [gradients.gradients_at(7, t, shapes) for t in range(10)]
    again = [gradients.gradients_at(7, t, shapes) for t in range(10)]
    for a, b in zip(first, again):
        for name in shapes:
            assert a[name].dtype == np.float32 and a[name].shape == shapes[name]
            np.testing.assert_array_equal(a[name], b[name])
    for position, name in enumerate(shapes):
        kinds = [gradients.kind_at(t, position) for t in range(1, 11)]
        assert set(kinds) == set(gradients.CYCLE)   # every cycled kind within ten steps
        assert gradients.kind_at(0, position) == "normal"
    w = {gradients.kind_at(t, 0): first[t]["w"] for t in range(10)}
    assert not w["zeros"].any()
    assert 0 < np.abs(w["tiny"]).max() < 1e-28
    assert np.abs(w["huge"]).max() > 100
    magnitudes = np.abs(w["mixed"])
    assert magnitudes.min() < 1e-28 and magnitudes.max() > 100 and (w["mixed"] < 0).any()
    rows = np.abs(w["zero_rows"]).sum(axis=1)
    assert (rows == 0).any() and (rows > 0).any()


def test_a_shared_stream_is_drawn_once_per_run_with_the_same_bits(tmp_path, monkeypatch):
    """The first worker to reach a case draws its stream and writes it into the run's
    shared folder; another reads it back bit for bit without drawing."""
    shapes = dict(PARAMS)
    drawn = [gradients.gradients_at(11, t, shapes) for t in range(12)]
    gradients.share_stream(tmp_path, 11, 12, shapes)
    (written,) = tmp_path.glob("*.grads.npz")
    gradients._shared_streams.clear()
    gradients._gradients_at.cache_clear()

    def no_drawing(*args, **kwargs):
        raise AssertionError("a shared stream was drawn again")

    monkeypatch.setattr(gradients.np.random, "default_rng", no_drawing)
    gradients.share_stream(tmp_path, 11, 12, shapes)
    for t, expected in enumerate(drawn):
        got = gradients.gradients_at(11, t, shapes)
        assert {n: g.tobytes() for n, g in got.items()} == \
            {n: g.tobytes() for n, g in expected.items()}
    got = gradients.gradients_at(11, 0, shapes)
    got["w"][:] = 7.0                         # a caller's copy: the stream stays
    assert gradients.gradients_at(11, 0, shapes)["w"].tobytes() == drawn[0]["w"].tobytes()
    with pytest.raises(AssertionError, match="drawn again"):
        gradients.gradients_at(11, 12, shapes)       # past the shared steps: drawn
    gradients._shared_streams.clear()


# -- the cases -----------------------------------------------------------------------

def test_default_cases_are_valid_and_serialisable():
    cases = default_cases()
    assert len({c.id for c in cases}) == len(cases)
    assert {c.spec.name for c in cases} == set(uo.algorithms())   # every algorithm has cases
    for case in cases:
        # every case runs the default path, but one writing a hyperparameter other than
        # the lr into param_groups (native classes read those when built, and refuse it)
        assert case.steps >= 50 and ("auto" in case.paths
                                     or set(case.param_group_writes) - {"lr"})
        # a 0-size parameter everywhere but in the presets (ported networks)
        # (Muon's cases: a 0 x 5 matrix, as it takes matrices only)
        assert any(0 in shape for shape in case.params.values()) == \
            (not case.id.startswith("preset_"))
        assert Case.from_dict(case.to_dict()) == case
        params = case.initial_params()
        assert all(p.dtype == np.float32 for p in params.values())
    assert [c.spec.name for c in default_cases(["adamw"])] == ["adamw"] * len(
        default_cases(["adamw"]))
    assert [c.id for c in select(cases, ["adam_eps_*"])] == ["adam_eps_hat", "adam_eps_inside"]


def test_bad_cases_and_selections_are_rejected():
    with pytest.raises(ValueError, match="steps"):
        Case(id="short", spec=uo.SGD(), steps=10)
    with pytest.raises(ValueError, match="id"):
        Case(id="a b", spec=uo.SGD())
    with pytest.raises(TypeError, match="spec"):
        Case(id="x", spec={"lr": 0.1})
    with pytest.raises(ValueError, match="paths"):
        Case(id="x", spec=uo.SGD(), paths=("fast",))
    with pytest.raises(ValueError, match="unknown algorithm"):
        default_cases(["adamm"])
    with pytest.raises(TypeError, match="list of names"):
        default_cases("adam")
    with pytest.raises(ValueError, match="no case id matches"):
        select(default_cases(), ["nothing*"])


def test_default_cases_select_every_torch_lowering_row():
    assert uncovered_rows(default_cases(), "torch") == []


def _knob(description):
    return description.split("=")[0].split(" (")[0]


@functools.cache
def _default_cases_by_id() -> dict:
    """The default cases by id, made once per worker process (0.2 s each time)."""
    return {c.id: c for c in default_cases()}


def test_a_case_s_first_steps_are_the_first_steps_of_its_run():
    """``FirstSteps`` runs a case's first steps: bit for bit the whole run's first steps
    (a step schedule, gradient clipping and a skipped non-finite step in them), and a
    comparison failing there fails on the whole run."""
    case = _default_cases_by_id()["skip_nonfinite_adam_clip"]
    assert min(case.nonfinite_steps) < 10
    whole = reference_trajectory(case.spec, case)
    first = reference_trajectory(case.spec, FirstSteps(case, 10))
    assert first.steps == 10 and whole.steps == case.steps > 10
    for name, values in whole.first(10).quantities().items():
        np.testing.assert_array_equal(first.quantities()[name], values, err_msg=name)
    wrong = case.spec.replace(eps=case.spec.eps * 10)
    floors = floor_trajectories(case.spec, case)
    early = compare(reference_trajectory(wrong, FirstSteps(case, 10)), whole.first(10),
                    [f.first(10) for f in floors])
    assert not early.passed
    assert not compare(reference_trajectory(wrong, case), whole, floors).passed


#: steps of a variant's first look (:func:`_knob_outcome`)
PREFIX_STEPS = 10


def _knob_outcome(case_id: str):
    """One default case's knobs: those seen, those whose planted float32 run fails the
    case, the weakest such ratio, and the knobs whose planted run passed (must be none).

    Each variant runs its first :data:`PREFIX_STEPS` steps first: a step's ratio depends
    on the steps up to it only (its floor on the float32 errors and magnitudes so far),
    so a ratio past the bound there is one of the whole run, and most knobs show at
    once. Only a variant the prefix leaves undecided runs every step. The weakest ratio
    is then at most the whole run's, so its bound is checked no less strictly."""
    case = _default_cases_by_id()[case_id]
    oracle = reference_trajectory(case.spec, case)
    floors = floor_trajectories(case.spec, case)
    n = min(PREFIX_STEPS, case.steps)
    first = FirstSteps(case, n)
    first_oracle, first_floors = oracle.first(n), [f.first(n) for f in floors]
    seen, detected, missed, weakest = set(), set(), [], np.inf
    known, first_known = {}, {}               # the float32 floors, computed once each

    def judged(variant, dtype, bound):
        """The comparison of the variant's run: its prefix's where that is past
        ``bound`` and fails, else the whole run's."""
        if n < case.steps:
            early = compare(reference_trajectory(variant, first, dtype), first_oracle,
                            first_floors, floors=first_known)
            if early.worst_ratio > bound and not early.passed:
                return early
        return compare(reference_trajectory(variant, case, dtype), oracle, floors,
                       floors=known)

    for description, variant in knob_variants(case.spec, case):
        seen.add(_knob(description))
        if judged(variant, "float64", 2 * K).worst_ratio <= 2 * K:
            continue                          # inert here, or within noise of it
        planted = judged(variant, "float32", K)
        if planted.passed:
            missed.append(description)
        detected.add(_knob(description))
        weakest = min(weakest, planted.worst_ratio)
    return seen, detected, missed, weakest


@pytest.mark.slow
def test_every_knob_of_every_default_case_changes_the_numbers(monkeypatch):
    """Each knob that changes a case's float64 trajectory changes it far beyond float32
    noise (so a backend that gets it wrong fails the case), and every knob changes the
    numbers in at least one case. A knob can be inert for a case in exact arithmetic
    (momentum_init without dampening, always_adapt with decay, a clamp that never
    bites): such variants are not required to fail. The cases run in two worker
    processes (numpy only; spawned, so that no framework this process loaded is
    forked; the rule's outcome does not depend on the thread count)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    ids = [case.id for case in default_cases()]
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.setenv(name, "1")          # one thread a worker: two workers, two cores
    with ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        outcomes = dict(zip(ids, pool.map(_knob_outcome, ids, chunksize=4)))
    assert {i: o[2] for i, o in outcomes.items() if o[2]} == {}     # planted runs that pass
    seen = set().union(*(o[0] for o in outcomes.values()))
    detected = set().union(*(o[1] for o in outcomes.values()))
    assert seen == detected, f"knobs never exercised by any case: {sorted(seen - detected)}"
    # flagged; the knobs of the native rows are held to 10 K by tests/test_descriptors.py
    # (the explainer's small trust_eps=1e-6 moves Lamb's numbers by only ~15 K)
    assert min(o[3] for o in outcomes.values()) > K


@pytest.mark.parametrize("storage", [None, "bfloat16"])
def test_the_float32_floor_is_the_masked_maximum_with_or_without_non_finite_values(storage):
    """float32_floor skips the finite masks where every difference is finite: the same
    bits as the masked maximum the module defines, non-finite values or not."""
    from unified_opt.conformance.compare import float32_floor
    from unified_opt.storage import round_to, spacing

    rng = np.random.default_rng(5)
    oracle = rng.standard_normal((6, 4, 3)) * 10.0 ** rng.integers(-30, 3, (6, 4, 3))
    references = [oracle + rng.standard_normal(oracle.shape) * 1e-6 for _ in range(3)]
    if storage is not None:
        oracle, references = round_to(oracle, storage), [round_to(r, storage)
                                                         for r in references]
    spoiled = [oracle.copy(), [r.copy() for r in references]]
    spoiled[0][2, 1, 0], spoiled[0][4, 0, 0] = np.inf, np.nan
    spoiled[1][1][3, 2, 2], spoiled[1][2][2, 1, 0] = -np.inf, np.inf
    for o, refs in ((oracle, references), spoiled):
        flat_o = o.reshape(6, -1)
        with np.errstate(invalid="ignore", over="ignore"):
            wanted = np.zeros(6)
            for r in refs:
                flat_r = r.reshape(6, -1)
                difference = np.abs(flat_r - flat_o)
                if storage is not None:
                    difference = difference / spacing(np.maximum(np.abs(flat_r),
                                                                 np.abs(flat_o)), storage)
                keep = np.isfinite(flat_o) & np.isfinite(flat_r)
                wanted = np.maximum(wanted, np.where(keep, difference, 0.0).max(axis=1))
        magnitude = np.maximum.accumulate(
            np.where(np.isfinite(flat_o), np.abs(flat_o), 0.0).max(axis=1))
        floor32, got_magnitude = float32_floor(o, refs, storage)
        assert floor32.tobytes() == wanted.tobytes() and wanted.max() > 0
        assert got_magnitude.tobytes() == magnitude.tobytes()
    assert np.isfinite(float32_floor(*spoiled, storage)[0]).all()


def test_a_run_nearer_the_update_in_full_precision_fails_precision():
    """Muon's bfloat16 iteration (``muon_bfloat16``, ``torch.optim.Muon``'s form): the
    same update computed in float32 sits within K of the bfloat16 oracle (the bfloat16
    floor holds it), so the ratio rule alone passes it; it is nearer the oracle of
    ``ns_dtype=None`` than its own, and fails "precision", naming that knob. The spec's
    float32 references (the plain one, and the one with every bfloat16 result an ulp
    nearer zero) pass."""
    from unified_opt.conformance.verdict import References, verdict

    case = _default_cases_by_id()["muon_bfloat16"]
    description, full = case.spec.full_precision()
    assert description == "ns_dtype=None" and full == case.spec.replace(ns_dtype=None)
    references = References()
    oracle = references.get(case, "float64")
    in_float32 = reference_trajectory(full, case, "float32")
    assert compare(in_float32, oracle, references.floors(case.spec, case)).passed
    result = verdict(case, "numpy", "own", in_float32, None, None, references)
    assert result["status"] == "fail", result["comparison"]
    assert result["comparison"]["failure"] == "precision"
    assert "ns_dtype=None" in result["comparison"]["detail"]
    assert result["explanation"]["matches"] == ["ns_dtype=None"]
    # the tests' judge applies the same rule
    judged = judge(in_float32, case)
    assert (judged.passed, judged.failure) == (False, "precision")
    for correct in (references.floors(case.spec, case)[0],
                    references.floors(case.spec, case)[-1]):
        assert verdict(case, "numpy", "own", correct, None, None, references)["status"] \
            == "pass"
        assert judge(correct, case).passed


def test_precision_is_judged_only_where_the_full_precision_trajectory_is_nearer():
    """``held_to_precision``: a tie (the two oracles the same numbers) and a run nearer
    its own oracle keep the comparison; a failing comparison stays as it failed."""
    from dataclasses import replace

    from unified_opt.conformance.compare import Comparison, held_to_precision

    own = Comparison(True, worst_ratio=2.5, worst_quantity="param:w", worst_step=3)
    assert held_to_precision(own, replace(own), "ns_dtype=None", "bfloat16") is own
    assert held_to_precision(own, replace(own, worst_ratio=5.0), "x", "bfloat16") is own
    failed = replace(own, passed=False, failure="ratio")
    assert held_to_precision(failed, replace(own, worst_ratio=0.1), "x", "bfloat16") \
        is failed
    nearer = held_to_precision(own, replace(own, worst_ratio=0.1), "ns_dtype=None",
                               "bfloat16")
    assert (nearer.passed, nearer.failure, nearer.failing_quantity,
            nearer.first_failing_step) == (False, "precision", "param:w", 3)
    # nearer by a floor or less: the floors cannot tell (torch.optim.Muon(ns_steps=6) on
    # optim_db's parameters: 1.06 floors from its oracle, 1.0 from the float32 one)
    for full_ratio in (1.5, 2.0):
        assert held_to_precision(own, replace(own, worst_ratio=full_ratio), "x",
                                 "bfloat16") is own
    level = replace(own, worst_ratio=1.06)
    assert held_to_precision(level, replace(own, worst_ratio=1.0), "x", "bfloat16") \
        is level
    assert not uo.Muon(lr=0.02).full_precision() and not uo.AdamW().full_precision()
