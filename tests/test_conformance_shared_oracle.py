"""The float64 oracle a conformance worker shares with the run's other workers
(``verdict.References(shared)``): a worker that reads it holds the same arrays, bit for
bit, with the same storage map, and the verdict it gives is the one it gives computing
the oracle itself."""

import numpy as np

import unified_opt as uo
from unified_opt.conformance.cases import Case
from unified_opt.conformance.trajectory import FirstSteps, reference_trajectory
from unified_opt.conformance.verdict import References, verdict

PARAMS = {"w": (9, 5), "b": (7,), "empty": (0, 3)}


def _bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_a_shared_oracle_reads_back_bit_for_bit(tmp_path):
    cases = [Case(id="shared_adam", spec=uo.Adam(lr=0.01), params=PARAMS),
             Case(id="shared_bf16_adamw", spec=uo.AdamW(lr=0.01), params=PARAMS,
                  storage="bfloat16"),
             Case(id="shared_skip", spec=uo.SGD(lr=0.1, momentum=0.9, skip_nonfinite=True),
                  params=PARAMS, nonfinite_steps=(3, 7))]
    for case in cases:
        computed = reference_trajectory(case.spec, case, "float64")
        writer = References(tmp_path)
        written = writer.get(case, "float64")
        files = sorted(tmp_path.glob("*.oracle.npz"))
        assert files, case.id
        reader = References(tmp_path)
        read = reader.get(case, "float64")
        assert read is not written                  # read from the file, not computed
        assert read.storage == computed.storage
        assert list(read.quantities()) == list(computed.quantities())
        for name, values in computed.quantities().items():
            assert _bits(read.quantities()[name], values), (case.id, name)
        assert (read.skipped is None) == (computed.skipped is None)
    bf16 = References(tmp_path).get(cases[1], "float64")
    assert set(bf16.storage.values()) == {"bfloat16"}


def test_the_verdict_is_the_same_with_a_shared_oracle(tmp_path):
    case = Case(id="shared_verdict", spec=uo.AdamW(lr=0.01, weight_decay=0.1), params=PARAMS)
    # a run that is off by a planted deviation: its comparison numbers (ratios, steps)
    # depend on every oracle element
    run = reference_trajectory(uo.AdamW(lr=0.01, weight_decay=0.1, eps=1e-6), case, "float32")
    alone = verdict(case, "torch", "auto", run, None, None, References())
    References(tmp_path).get(case, "float64")             # another worker wrote it
    shared = References(tmp_path)
    assert sorted(tmp_path.glob("*.oracle.npz"))
    again = verdict(case, "torch", "auto", run, None, None, shared)
    assert alone["status"] == "fail" and again["comparison"] == alone["comparison"]
    assert again["series"] == alone["series"]


def test_a_case_cut_short_is_not_shared(tmp_path):
    case = Case(id="shared_cut", spec=uo.SGD(lr=0.1), params=PARAMS)
    short = References(tmp_path).of(case.spec, FirstSteps(case, 5), "float64")
    assert short.steps == 5
    assert not list(tmp_path.glob("*.oracle.npz"))
    assert References(tmp_path).get(case, "float64").steps == case.steps
