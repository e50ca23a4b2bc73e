"""Every algorithm (``uo.algorithms()``) on every backend, from the table in
``algorithms.py`` and the backends' descriptors:

* each sample spec follows the float64 oracle on the ``auto`` path and on the ``own``
  path (the conformance rule: K times the float32 noise floor, every step, the lr, the
  parameters and the spec state), over the conformance parameter set with its 0-size
  tensor and the conformance gradient stream;
* each planted deviation of a sample is flagged against each backend's run of it;
* ``uo.explain`` names the path and the reason (numpy only: descriptors import no
  framework);
* each native row ``uo.build`` makes follows the oracle and is bit-identical,
  parameters and state, to the class built by hand with the table's arguments (dense
  parameters: a network being ported; MindSpore's classes hold no 0-size parameter).

Backends run in this process (conftest imports mindspore first), one per test.
"""

from __future__ import annotations

import pytest
from algorithms import ALGORITHMS, HAND_PARAMS, STEPS
from conftest import require
from support import (
    PARAMS,
    Run,
    assert_bit_identical,
    assert_passes,
    case_of,
    follow,
    with_built_flags,
)

import unified_opt as uo
from unified_opt.backend import BACKENDS, load
from unified_opt.conformance.compare import compare
from unified_opt.conformance.trajectory import Recorder, floor_trajectories, reference_trajectory
from unified_opt.conformance.verdict import References, verdict
from unified_opt.records import records

NAMES = uo.algorithms()


def _table(name):
    return ALGORITHMS.get(name)


def _backend_param(backend):
    return pytest.param(backend, marks=require(backend), id=backend)


SAMPLES = [pytest.param(name, i, id=f"{name}-{i}")
           for name in NAMES if _table(name) for i in range(len(_table(name).samples))]
PLANTED = [pytest.param(name, i, id=f"{name}-{i}")
           for name in NAMES if _table(name) for i in range(len(_table(name).planted))]
EXPLAINED = [pytest.param(name, i, id=f"{name}-{e.backend}-{i}")
             for name in NAMES if _table(name)
             for i, e in enumerate(_table(name).explained)]
NATIVES = [pytest.param(name, i, id=f"{name}-{h.backend}-{h.row_class.rpartition('.')[2]}-{i}",
                        marks=require(h.backend))
           for name in NAMES if _table(name) for i, h in enumerate(_table(name).natives)]


def _sample_case(name, index):
    """A sample over the conformance parameter set, or the shapes the algorithm's record
    gives (Muon: matrices)."""
    entry = records().get(name)
    params = entry.params if entry is not None and entry.params is not None else PARAMS
    return case_of(f"{name}_sample_{index}", _table(name).samples[index], params)


# -- the table --------------------------------------------------------------------------

def test_the_table_has_every_algorithm_and_no_other():
    assert sorted(ALGORITHMS) == sorted(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_the_entries_are_the_algorithms(name):
    entry = ALGORITHMS[name]
    assert entry.samples, f"{name}: no sample spec"
    specs = [*entry.samples, *(p.spec for p in entry.planted),
             *(e.spec for e in entry.explained), *(h.spec for h in entry.natives)]
    assert {s.name for s in specs} == {name}
    for planted in entry.planted:
        assert planted.spec in entry.samples, "a planted deviation is one of a sample"
        assert planted.spec.replace(**planted.wrong) != planted.spec


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_native_row_has_a_class_built_by_hand(backend):
    def hands(algorithm):
        entry = ALGORITHMS.get(algorithm)
        return entry.natives if entry else ()

    missing = [f"{lowering.algorithm} -> {cls.name}" for cls, lowering in load(backend).rows()
               if not any(h.backend == backend and h.row_class == cls.name
                          for h in hands(lowering.algorithm))]
    assert not missing, f"algorithms.py: add a Hand entry for {missing}"
    rows = {(lowering.algorithm, cls.name) for cls, lowering in load(backend).rows()}
    for name, entry in ALGORITHMS.items():
        for hand in entry.natives:
            if hand.backend == backend:
                assert (name, hand.row_class) in rows, f"{hand.row_class} is no {name} row"


# -- the samples on every backend -----------------------------------------------------------

#: (backend, algorithm, planted index) -> the comparison of the sample's run with the
#: planted deviation's oracle, made where the sample ran
_PLANTED: dict = {}
#: the last auto run, when it took the own implementation (the own path repeats it)
_LAST_OWN: dict = {}


def _planted_comparisons(run, name):
    for k, planted in enumerate(_table(name).planted):
        if planted.spec == run.case.spec:
            wrong = planted.spec.replace(**planted.wrong)
            _PLANTED[(run.backend, name, k)] = compare(
                run.trajectory, reference_trajectory(wrong, run.case),
                floor_trajectories(wrong, run.case))


@pytest.mark.parametrize("path", ["auto", "own"])
@pytest.mark.parametrize("backend", [_backend_param(b) for b in BACKENDS])
@pytest.mark.parametrize("name, index", SAMPLES)
def test_sample_follows_the_oracle(name, index, backend, path):
    case = _sample_case(name, index)
    if path == "own" and _LAST_OWN.get("key") == (backend, case.id):
        run = _LAST_OWN.pop("run")          # auto took the own implementation already
    else:
        run = follow(backend, case, path)
    _LAST_OWN.clear()
    assert_passes(run)
    if path == "own":
        assert run.decision.path == "own"
    else:
        _planted_comparisons(run, name)
        if run.decision.path == "own":
            _LAST_OWN.update(key=(backend, case.id), run=run)


@pytest.mark.parametrize("backend", [_backend_param(b) for b in BACKENDS])
@pytest.mark.parametrize("name, index", PLANTED)
def test_planted_deviation_is_flagged(name, index, backend):
    planted = _table(name).planted[index]
    if (backend, name, index) not in _PLANTED:     # the sample's test did not run first
        sample = _table(name).samples.index(planted.spec)
        _planted_comparisons(assert_passes(follow(backend, _sample_case(name, sample))),
                             name)
    comparison = _PLANTED.pop((backend, name, index))
    assert not comparison.passed, (f"{planted.wrong} not flagged: worst ratio "
                                   f"{comparison.worst_ratio:.3g}")


# -- explain ----------------------------------------------------------------------------

@pytest.mark.parametrize("name, index", EXPLAINED)
def test_explain_names_the_path_and_the_reason(name, index):
    """The entry is the lowering table's row (``prefer="native"``); the default
    (``prefer="speed"``) builds that row or, where the own implementation was measured
    faster, the own implementation naming the row as the exact alternative."""
    entry = _table(name).explained[index]
    decision = uo.explain(entry.spec, entry.backend, prefer="native")
    assert (decision.path, decision.native) == ("native" if entry.native else "own",
                                                entry.native), str(decision)
    text = str(decision)
    assert (entry.native or decision.own_class) in text
    assert entry.phrase in text, text
    fastest = uo.explain(entry.spec, entry.backend)
    if fastest.path == "own" and entry.native:
        assert fastest.alternative == entry.native, str(fastest)
        assert f"prefer='native' builds {entry.native}" in str(fastest), str(fastest)
    else:
        assert (fastest.path, fastest.native) == (decision.path, decision.native)


# -- native rows against the class built by hand ------------------------------------------

@pytest.mark.parametrize("name, index", NATIVES)
def test_native_row_follows_the_oracle_and_the_class_built_by_hand(name, index):
    """``uo.build`` of the entry's spec is the row, follows the oracle, and keeps the
    parameters (every step) and the state (every tenth step and the last) of the class
    built by hand bit for bit."""
    from unified_opt.conformance.worker import driver_class

    hand = _table(name).natives[index]
    # an algorithm of some shapes only (Muon: matrices) gets its record's, dense
    dense = records()[name].dense_params() if name in records() else None
    params = HAND_PARAMS if dense is None else dense
    case = case_of(f"{name}_native_{index}", hand.spec, params)
    driver = driver_class(hand.backend)
    built = driver(hand.spec, case.initial_params(), options=hand.options,
                   total_steps=STEPS, prefer="native")
    if built.decision.native != hand.row_class:
        unmet = dict(built.decision.rejected).get(hand.row_class, ())
        if any(u.startswith("device in") for u in unmet):
            pytest.skip(f"{hand.row_class} has no kernel here: {unmet}")
        raise AssertionError(f"uo.build chose {built.decision.native}, not "
                             f"{hand.row_class}:\n{built.decision}")
    by_hand = driver(hand.spec, case.initial_params(), native=with_built_flags(hand.native, built),
                     total_steps=STEPS)
    assert by_hand.decision.path == "hand"
    recorder = Recorder()
    for t in range(case.steps):
        grads = case.gradients(t)
        lr = built.step(grads)
        by_hand.step(grads)
        params, state = built.params_numpy(), built.state_numpy()
        recorder.add(lr, params, state)
        assert_bit_identical(params, by_hand.params_numpy(), f"step {t}")
        if t % 10 == 9 or t == case.steps - 1:
            for n, plan in zip(built.names, built.record.plans):
                theirs = {k: by_hand.to_numpy(v) for k, v in by_hand.native_state(
                    by_hand.params[n], plan.spec, built.decision.native_class).items()}
                assert_bit_identical(state[n], theirs, f"step {t} state of {n}")
    run = Run(case, hand.backend, "auto", recorder.trajectory(), built.decision, None)
    run.result = verdict(case, hand.backend, "auto", run.trajectory, built.decision, None,
                         References())
    assert_passes(run)
