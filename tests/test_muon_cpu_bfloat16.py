"""torch's own Muon with ``ns_dtype='bfloat16'`` on the CPU: bfloat16 tensors where the
CPU has bfloat16 matrix instructions (``backends/torch/ops.py``:
``cpu_multiplies_bfloat16``), float32 products with each result rounded elsewhere. Both
forms are run here on every CPU, by setting the switch (bfloat16 products on a CPU
without those instructions are slow but give bfloat16's numbers; the matrices are
small): each follows the oracle under the conformance rule, and in each a planted
deviation of the iteration fails."""

import pytest

torch = pytest.importorskip("torch")

from support import assert_passes, case_of, follow  # noqa: E402

import unified_opt as uo  # noqa: E402
from unified_opt.backends.torch import ops as torch_ops  # noqa: E402

MATRICES = {"w": (65, 65), "tall": (40, 24), "wide": (16, 48)}
SPEC = uo.Muon(lr=0.02, ns_dtype="bfloat16")


@pytest.mark.parametrize("bfloat16_units", [False, True], ids=["float32_products",
                                                               "bfloat16_products"])
def test_torch_own_muon_follows_the_oracle_with_either_product(bfloat16_units,
                                                                monkeypatch):
    monkeypatch.setattr(torch_ops, "_CPU_BFLOAT16", bfloat16_units)
    held = torch_ops.torch_ops.rounded(torch.tensor([1.0 + 2.0 ** -10]), "bfloat16")
    assert held.dtype == (torch.bfloat16 if bfloat16_units else torch.float32)
    assert float(held[0]) == 1.0                  # rounded to bfloat16's 8 bits either way
    case = case_of("muon_cpu_bfloat16_products", SPEC, params=MATRICES)
    run = assert_passes(follow("torch", case, "own"))
    assert run.decision.path == "own"
    planted = follow("torch", case, "own", spec=SPEC.replace(ns_steps=4))
    assert not planted.passed, planted.result["comparison"]


@pytest.mark.parametrize("limit", [("ONEDNN_MAX_CPU_ISA", "AVX2"),
                                   ("ATEN_CPU_CAPABILITY", "avx2")])
def test_a_limit_on_the_vector_code_keeps_the_float32_products(limit, monkeypatch):
    """Under ``.ci/without_avx512/run``'s limits torch's bfloat16 products do not run on
    bfloat16 instructions, whatever ``/proc/cpuinfo`` lists, so the switch is off."""
    monkeypatch.setenv(*limit)
    assert torch_ops.cpu_multiplies_bfloat16() is False


def test_the_iteration_in_float32_where_the_spec_says_bfloat16_fails(monkeypatch):
    """torch's own path with the rounding to bfloat16 taken out (the whole iteration in
    float32) on the suite's ``muon_bfloat16`` case: within K of the oracle, so only the
    precision rule tells it apart; it fails "precision" and names ``ns_dtype=None``."""
    from unified_opt.conformance.cases import default_cases
    from unified_opt.conformance.compare import K

    case = next(c for c in default_cases(["muon"]) if c.id == "muon_bfloat16")
    monkeypatch.setattr(torch_ops.TorchOps, "rounded", lambda self, x, dtype: x)
    run = follow("torch", case, "own")
    comparison = run.result["comparison"]
    assert run.result["status"] == "fail", comparison
    assert comparison["failure"] == "precision" and comparison["worst_ratio"] <= K
    assert run.result["explanation"]["matches"] == ["ns_dtype=None"]
