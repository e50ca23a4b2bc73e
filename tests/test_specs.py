"""The spec core: validation, registry, JSON round trip, and the reference's numbers."""

import math

import numpy as np
import pytest

import unified_opt as uo

# Margins (rtol from 1e-15 to 1e-12, numpy's default rtol=1e-7, pytest.approx): the
# reference computes in float64 and the expected numbers are its formulas worked out in
# float64, mostly the same operations in the same order. +, -, *, / and sqrt round
# correctly whatever vector code numpy runs (SSE, AVX2, AVX-512, NEON) and numpy's sums
# keep their order; exp, log and power may move by an ulp or so from one CPU to another.
# The two sides agree to a few ulps (2.2e-16 each) on every CPU, within these margins.


def test_registry_lists_the_algorithms():
    assert {"sgd", "adam", "adamw"} <= set(uo.algorithms())
    assert uo.get("adamw", lr=0.5) == uo.AdamW(lr=0.5)
    with pytest.raises(ValueError, match="unknown algorithm 'adamx'"):
        uo.get("adamx")


@pytest.mark.parametrize("cls, kwargs, error, text", [
    (uo.SGD, {"lr": -0.1}, ValueError, r"lr must be >= 0, got -0\.1"),
    (uo.Adam, {"lr": float("nan")}, ValueError, r"lr must be finite, got nan"),
    (uo.Adam, {"lr": "0.1"}, TypeError, r"lr must be a real number, got '0\.1'"),
    (uo.Adam, {"betas": (1.0, 0.999)}, ValueError, r"betas\[0\] must be >= 0 and < 1, got 1\.0"),
    (uo.AdamW, {"betas": (0.9, -0.1)}, ValueError, r"betas\[1\] must be >= 0 and < 1, got -0\.1"),
    (uo.Adam, {"betas": (0.9,)}, ValueError, r"betas must have 2 values, got \(0\.9,\)"),
    (uo.Adam, {"betas": "ab"}, TypeError, r"betas must be a list or tuple"),
    (uo.Adam, {"eps": 0.0}, ValueError, r"eps must be > 0, got 0\.0"),
    (uo.AdamW, {"eps": -1e-8}, ValueError, r"eps must be > 0, got -1e-08"),
    (uo.Adam, {"weight_decay": -0.01}, ValueError, r"weight_decay must be >= 0, got -0\.01"),
    (uo.SGD, {"momentum": -0.5}, ValueError, r"momentum must be >= 0, got -0\.5"),
    (uo.SGD, {"nesterov": True}, ValueError, r"nesterov=True requires momentum > 0"),
    (uo.SGD, {"nesterov": True, "momentum": 0.9, "dampening": 0.1}, ValueError,
     r"nesterov=True requires momentum > 0 and dampening = 0, got momentum=0\.9, "
     r"dampening=0\.1"),
    (uo.Adam, {"amsgrad": 1}, TypeError, r"amsgrad must be a bool, got 1"),
    (uo.Adam, {"eps_placement": "hat"}, ValueError, r"eps_placement must be one of"),
    (uo.SGD, {"lr_placement": None}, TypeError, r"lr_placement must be one of"),
    (uo.SGD, {"no_decay_names": "bias"}, TypeError, r"no_decay_names must be a list or tuple"),
    (uo.Adam, {"learning_rate": 0.1}, TypeError,
     r"unexpected keyword argument\(s\) \['learning_rate'\]; valid: \['lr', 'betas'"),
])
def test_bad_hyperparameters_raise_naming_argument_and_value(cls, kwargs, error, text):
    with pytest.raises(error, match=text):
        cls(**kwargs)


def test_positional_arguments_are_refused():
    with pytest.raises(TypeError, match="keyword arguments only"):
        uo.Adam(0.1)


def test_sequences_accepted_as_list_or_tuple():
    assert uo.Adam(betas=[0.8, 0.9]).betas == (0.8, 0.9)
    assert uo.Adam(betas=[0.8, 0.9]) == uo.Adam(betas=(0.8, 0.9))


@pytest.mark.parametrize("spec", [
    uo.SGD(lr=0.1, momentum=0.9, nesterov=True, no_decay_names=["*bias*"], weight_decay=0.1),
    uo.Adam(eps_placement="eps_hat", amsgrad=True),
    uo.AdamW(lr=uo.schedules.LinearWarmup(after=uo.schedules.Cosine(lr=0.1, T_max=10),
                                          warmup_steps=3), decay_form="in_update"),
])
def test_json_round_trip(spec):
    import json

    again = uo.spec_from_dict(json.loads(spec.to_json()))
    assert again == spec
    assert again.lr_at(4) == spec.lr_at(4)


def test_spec_from_dict_rejects_other_versions():
    d = uo.Adam().to_dict()
    d["format_version"] = 99
    with pytest.raises(ValueError, match="format_version 99"):
        uo.spec_from_dict(d)


def _run(spec, p0, grads, dtype="float64"):
    ref = uo.reference(spec, {"w": np.array(p0)}, dtype=dtype)
    for g in grads:
        ref.step({"w": np.array(g)})
    return ref


def test_adam_first_step_is_lr_times_sign():
    g = np.array([2.0, -3.0, 0.5])
    ref = _run(uo.Adam(lr=0.1, eps=1e-8), [1.0, 1.0, 1.0], [g])
    np.testing.assert_allclose(ref.params["w"], 1.0 - 0.1 * g / (np.abs(g) + 1e-8), rtol=1e-15)


@pytest.mark.parametrize("placement", ["outside", "eps_hat", "inside"])
def test_adam_eps_placements_by_hand(placement):
    grads, eps, lr, b1, b2 = [0.3, -0.2, 0.1], 1e-2, 0.1, 0.9, 0.999
    p = m = v = 0.0
    for t, g in enumerate(grads, start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        c1, c2 = 1 - b1 ** t, 1 - b2 ** t
        p -= {"outside": lr / c1 * m / (math.sqrt(v) / math.sqrt(c2) + eps),
              "eps_hat": lr * math.sqrt(c2) / c1 * m / (math.sqrt(v) + eps),
              "inside": lr / c1 * m / math.sqrt(v / c2 + eps)}[placement]
    ref = _run(uo.Adam(lr=lr, eps=eps, eps_placement=placement), [0.0], [[g] for g in grads])
    assert ref.params["w"][0] == pytest.approx(p, rel=1e-12)
    assert ref.state["w"]["exp_avg"][0] == pytest.approx(m, rel=1e-12)


def test_adamw_decay_forms_agree_and_differ_from_l2():
    grads = [np.array([0.5, -1.0]), np.array([0.25, 2.0])]
    a = _run(uo.AdamW(lr=0.1, weight_decay=0.5), [1.0, -2.0], grads).params["w"]
    b = _run(uo.AdamW(lr=0.1, weight_decay=0.5, decay_form="in_update"), [1.0, -2.0],
             grads).params["w"]
    c = _run(uo.Adam(lr=0.1, weight_decay=0.5), [1.0, -2.0], grads).params["w"]
    np.testing.assert_allclose(a, b, rtol=1e-14)
    assert np.abs(a - c).max() > 1e-3
    # one step by hand: p(1 - lr wd) - lr g/|g|
    one = _run(uo.AdamW(lr=0.1, weight_decay=0.5, eps=1e-12), [1.0, -2.0], grads[:1])
    np.testing.assert_allclose(one.params["w"], np.array([1.0, -2.0]) * 0.95 - 0.1 * np.sign(
        grads[0]), rtol=1e-10)


def test_sgd_momentum_forms_by_hand():
    g1, g2, lr, mu, d = 1.0, 2.0, 0.1, 0.9, 0.5
    grad_init = _run(uo.SGD(lr=lr, momentum=mu, dampening=d), [0.0], [[g1], [g2]])
    b1 = g1
    b2 = mu * b1 + (1 - d) * g2
    assert grad_init.params["w"][0] == pytest.approx(-lr * b1 - lr * b2, rel=1e-15)
    zeros = _run(uo.SGD(lr=lr, momentum=mu, dampening=d, momentum_init="zeros"), [0.0],
                 [[g1], [g2]])
    z1 = (1 - d) * g1
    z2 = mu * z1 + (1 - d) * g2
    assert zeros.params["w"][0] == pytest.approx(-lr * z1 - lr * z2, rel=1e-15)
    nesterov = _run(uo.SGD(lr=lr, momentum=mu, nesterov=True), [0.0], [[g1], [g2]])
    n2 = mu * g1 + g2
    assert nesterov.params["w"][0] == pytest.approx(-lr * (g1 + mu * g1) - lr * (g2 + mu * n2),
                                                    rel=1e-15)


def test_lr_inside_the_buffer_differs_only_when_the_lr_changes():
    grads = [[1.0], [2.0], [-1.0]]
    const = dict(lr=0.1, momentum=0.9)
    a = _run(uo.SGD(**const), [0.0], grads).params["w"]
    b = _run(uo.SGD(**const, lr_placement="inside"), [0.0], grads).params["w"]
    np.testing.assert_allclose(a, b, rtol=1e-14)
    sched = uo.schedules.Step(lr=0.1, step_size=1, gamma=0.5)
    a = _run(uo.SGD(lr=sched, momentum=0.9), [0.0], grads).params["w"]
    b = _run(uo.SGD(lr=sched, momentum=0.9, lr_placement="inside"), [0.0], grads).params["w"]
    # by hand, lr inside: b1 = 0.1*1; b2 = .9*b1 + .05*2; b3 = .9*b2 + .025*(-1)
    b1 = 0.1
    b2 = 0.9 * b1 + 0.05 * 2
    b3 = 0.9 * b2 - 0.025
    assert b[0] == pytest.approx(-(b1 + b2 + b3), rel=1e-14)
    assert abs(a[0] - b[0]) > 1e-3


def test_no_decay_names_by_parameter_name():
    spec = uo.SGD(lr=0.1, weight_decay=0.5, no_decay_names=("*gamma*",))
    ref = uo.reference(spec, {"ln.gamma": np.ones(2), "w": np.ones(2)})
    ref.step({"ln.gamma": np.zeros(2), "w": np.zeros(2)})
    np.testing.assert_array_equal(ref.params["ln.gamma"], np.ones(2))
    np.testing.assert_allclose(ref.params["w"], np.full(2, 0.95), rtol=1e-15)


def test_reference_float32_stays_float32_and_records_lrs():
    spec = uo.Adam(lr=uo.schedules.Step(lr=0.1, step_size=2, gamma=0.5))
    ref = uo.reference(spec, {"w": np.ones(3)}, dtype="float32")
    for _ in range(5):
        ref.step({"w": np.ones(3, np.float32)})
    assert ref.params["w"].dtype == np.float32
    assert ref.state["w"]["exp_avg"].dtype == np.float32
    assert ref.lrs == [0.1, 0.1, 0.05, 0.05, 0.025]


def test_reference_rejects_mismatched_gradients():
    ref = uo.reference(uo.SGD(lr=0.1), {"w": np.ones(3)})
    with pytest.raises(ValueError, match=r"grads\['w'\] has shape \(2,\)"):
        ref.step({"w": np.ones(2)})
    with pytest.raises(ValueError, match="exactly the parameter names"):
        ref.step({"b": np.ones(3)})
    with pytest.raises(ValueError, match="dtype must be one of"):
        uo.reference(uo.SGD(), {"w": np.ones(1)}, dtype="float16")


def test_backends_stays_callable_after_a_backend_package_is_imported():
    import importlib

    before = uo.backends()
    importlib.import_module("unified_opt.backends.torch.classes")
    assert uo.backends() == before
