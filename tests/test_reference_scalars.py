"""The reference's float32 arithmetic on 0-d values (unified_opt/reference.py,
``weak_python_scalars``): a Python float is a weak scalar, as in torch, Paddle,
MindSpore and numpy 2, whatever numpy 1.x's process-wide promotion rule says.

Under numpy 1.x's legacy rule a 0-d float32 array times a Python float is a float64, so
a 0-d parameter, a norm or a scalar state (NAdam's ``mu_product``) would be computed in
float64 by the float32 reference. Here a 0-d parameter must follow the same numbers as
a one-element vector, bit for bit, for every sample spec of every algorithm."""

import numpy as np
import pytest
from algorithms import ALGORITHMS

from unified_opt.records import records
from unified_opt.reference import Reference, weak_python_scalars

STEPS = 8
SAMPLES = [pytest.param(spec, id=f"{name}-{i}")
           for name, algorithm in ALGORITHMS.items()
           # an algorithm of some shapes only (Muon: matrices) takes no 0-d parameter
           if records()[name].params is None
           for i, spec in enumerate(algorithm.samples)]


def _trajectories(spec):
    """The 0-d parameter ``w`` and the vector ``v`` side by side in one reference (a
    third, ``x.gamma.bias``, is there for the samples' name rules)."""
    rng = np.random.default_rng(3)
    shapes = {"w": (), "v": (1,), "x.gamma.bias": (1,)}
    ref = Reference(spec, {n: np.full(s, 0.7, dtype=np.float32) for n, s in shapes.items()},
                    "float32")
    out = []
    for _ in range(STEPS):
        grad = np.float32(rng.standard_normal())
        ref.step({n: np.full(s, grad, dtype=np.float32) for n, s in shapes.items()})
        out.append({n: (ref.params[n].copy(),
                        {k: np.array(v, copy=True) for k, v in ref.state[n].items()})
                    for n in ("w", "v")})
    return out


@pytest.mark.parametrize("spec", SAMPLES)
def test_a_0d_parameter_follows_a_one_element_vector_in_float32(spec):
    for t, step in enumerate(_trajectories(spec)):
        (p0, s0), (p1, s1) = step["w"], step["v"]
        assert p0.dtype == np.float32 and p0.shape == ()
        assert p0.tobytes() == p1.tobytes(), f"step {t}: {p0!r} != {p1!r}"
        assert s0.keys() == s1.keys()
        for key in s0:
            assert s0[key].dtype == s1[key].dtype == np.float32, (t, key)
            assert s0[key].tobytes() == s1[key].tobytes(), (t, key)


@pytest.mark.skipif(not hasattr(np, "_set_promotion_state"),
                    reason="numpy 2.2 and later have NEP 50 as their only rule")
def test_numpys_own_rule_is_restored_after_each_call():
    before = np._get_promotion_state()
    with weak_python_scalars():
        assert np._get_promotion_state() == "weak"
        assert (np.array(1.5, dtype=np.float32) * 0.5).dtype == np.float32
    assert np._get_promotion_state() == before
    with pytest.raises(ZeroDivisionError), weak_python_scalars():
        1 / 0
    assert np._get_promotion_state() == before
