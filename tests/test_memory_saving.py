"""The memory-saving optimizers' specs (adafactor, came, adam_offload): the numpy
reference against numbers worked out by hand from each algorithm's formulas, argument
checks, the frameworks' presets and the power of their conformance cases
(``conformance/cases/memory_saving.py``). The backends: test_algorithms.py; adam_offload's
host-resident state: test_torch.py, test_paddle.py."""

import math

import numpy as np
import pytest
from support import assert_planted_deviation_fails, reference_steps

import unified_opt as uo
from unified_opt.conformance.cases import memory_saving

# Margins (rtol from 1e-15 to 1e-12, numpy's default rtol=1e-7, pytest.approx): the
# reference computes in float64 and the expected numbers are its formulas worked out in
# float64, mostly the same operations in the same order. +, -, *, / and sqrt round
# correctly whatever vector code numpy runs (SSE, AVX2, AVX-512, NEON) and numpy's sums
# keep their order; exp, log and power may move by an ulp or so from one CPU to another.
# The two sides agree to a few ulps (2.2e-16 each) on every CPU, within these margins.

P, G = [3.0, 4.0], [2.0, -1.0]          # ||p|| = 5; after step 1, m_hat = g, v_hat = g^2


# -- adafactor ----------------------------------------------------------------------
W = [[1.0, 2.0], [3.0, 4.0]]                 # RMS = sqrt(7.5)
WG = [[1.0, 0.0], [0.0, 2.0]]


def test_adafactor_torch_form_first_step_by_hand():
    # row means of g^2 (0.5, 2), column means (0.5, 2); V = R C / mean(R) = (R C) / 1.25
    v = np.array([[0.25, 1.0], [1.0, 4.0]]) / 1.25
    u = np.array(WG) / np.sqrt(v)
    u = u / max(1.0, np.sqrt(np.mean(u * u)))
    alpha = 0.01 * math.sqrt(7.5)                 # min(lr, 1/sqrt(1)) * RMS(p)
    ref = reference_steps(uo.Adafactor(lr=0.01), {"w": W}, {"w": WG})
    np.testing.assert_allclose(ref.params["w"], np.array(W) - alpha * u, rtol=1e-14)
    np.testing.assert_allclose(ref.state["w"]["exp_avg_sq_row"], [[0.5], [2.0]], rtol=1e-14)
    np.testing.assert_allclose(ref.state["w"]["exp_avg_sq_col"], [[0.5, 2.0]], rtol=1e-14)


def test_adafactor_vector_decay_forms_and_first_moment():
    # 1-D: V = g^2 at step 1, so U = sign(g), RMS 1 (no clipping)
    alpha = 0.01 * math.sqrt(12.5)
    raw = reference_steps(uo.Adafactor(lr=0.01, weight_decay=0.5), {"p": P}, {"p": [1.0, 2.0]})
    np.testing.assert_allclose(raw.params["p"], np.array(P) * (1 - 0.005) - alpha, rtol=1e-14)
    hf = uo.Adafactor(lr=0.01, weight_decay=0.5, decay_lr="scaled", beta1=0.9, eps_mode="add",
                      eps=(1e-30, 1e-3))
    scaled = reference_steps(hf, {"p": P}, {"p": [1.0, 2.0]})
    np.testing.assert_allclose(scaled.params["p"], np.array(P) * (1 - 0.5 * alpha) - 0.1 * alpha,
                               rtol=1e-12)
    np.testing.assert_allclose(scaled.state["p"]["exp_avg"], [0.1 * alpha] * 2, rtol=1e-12)


def test_adafactor_relative_step_beta2_schedule_and_clamp():
    spec = uo.Adafactor(lr=0.9, scale_parameter=False)          # rho = min(0.9, 1/sqrt(t))
    ref = reference_steps(spec, {"p": [0.0]}, {"p": [1.0]}, steps=4)
    # g = 1 every step: V stays 1 whatever beta2_t, so each step moves by rho_t
    np.testing.assert_allclose(ref.params["p"], [-(0.9 + 1 / math.sqrt(2) + 1 / math.sqrt(3)
                                                    + 0.5)], rtol=1e-14)
    clamp = reference_steps(uo.Adafactor(lr=0.01, eps=(0.5, 1e-3), scale_parameter=False),
                            {"p": [0.0, 0.0]}, {"p": [0.1, 2.0]})
    # V = max(g^2, eps1^2) = (0.25, 4): U = (0.2, 1), RMS = sqrt(0.52) < 1: not clipped
    np.testing.assert_allclose(clamp.params["p"], [-0.002, -0.01], rtol=1e-14)


# -- came ---------------------------------------------------------------------------
def test_came_vector_parameter_has_no_confidence_term():
    spec = uo.CAME(lr=0.1, betas=(0.9, 0.999, 0.9999), eps=(0.0, 1e-16))
    ref = reference_steps(spec, {"p": P}, {"p": G})
    # V = g^2 at step 1 -> U = sign(g); m = 0.1 U; p -= lr m
    np.testing.assert_allclose(ref.params["p"], [3 - 0.01, 4 + 0.01], rtol=1e-14)


def test_came_matrix_step_by_hand():
    beta1, beta3, eps2 = 0.9, 0.99, 1e-3
    spec = uo.CAME(lr=0.1, betas=(beta1, 0.999, beta3), eps=(0.0, eps2), weight_decay=0.5)
    ref = reference_steps(spec, {"w": W}, {"w": WG})
    u = np.array(WG) / np.sqrt(np.array([[0.25, 1.0], [1.0, 4.0]]) / 1.25)
    u = u / max(1.0, np.sqrt(np.mean(u * u)))
    m = (1 - beta1) * u
    s = (u - m) ** 2 + eps2
    rows = (1 - beta3) * s.mean(axis=1, keepdims=True)
    cols = (1 - beta3) * s.mean(axis=0, keepdims=True)
    step = m / np.sqrt(rows * cols / rows.mean())
    np.testing.assert_allclose(ref.params["w"], np.array(W) * (1 - 0.05) - 0.1 * step,
                               rtol=1e-13)
    np.testing.assert_allclose(ref.state["w"]["exp_avg_res_row"], rows, rtol=1e-14)


def test_came_mindformers_form_uses_the_beta2_schedule_and_scale():
    spec = uo.preset("mindformers.core.Came", learning_rate=0.1, scale_parameter=True,
                     eps=(0.0, 1e-3, 1e-16))
    ref = reference_steps(spec, {"p": P}, {"p": G}, steps=2)
    # beta2_1 = 0: V = g^2; beta2_2 = 1 - 2^-0.8; same g: V stays g^2, U = sign(g)
    rms1 = math.sqrt(12.5)
    p1 = np.array(P) - 0.1 * rms1 * 0.1 * np.array([1.0, -1.0])
    m2 = 0.9 * 0.1 + 0.1
    p2 = p1 - 0.1 * math.sqrt(np.mean(p1 * p1)) * m2 * np.array([1.0, -1.0])
    np.testing.assert_allclose(ref.params["p"], p2, rtol=1e-13)


# -- adam_offload -------------------------------------------------------------------
def test_adam_offload_is_adam_on_the_host():
    a = dict(lr=0.01, eps=1e-3, weight_decay=0.1, nesterov=True, eps_placement="eps_hat")
    rng = np.random.default_rng(0)
    params = {"w": rng.normal(size=(3, 4))}
    grads = [{"w": rng.normal(size=(3, 4))} for _ in range(5)]
    off, adam = uo.reference(uo.AdamOffload(**a), params), uo.reference(uo.Adam(**a), params)
    for g in grads:
        off.step(g)
        adam.step(g)
    np.testing.assert_array_equal(off.params["w"], adam.params["w"])
    assert uo.AdamOffload.state_device == "host" and uo.get("adam_offload").name == "adam_offload"



# -- argument checks, presets, JSON -----------------------------------------------------
@pytest.mark.parametrize("make, error, words", [
    (lambda: uo.Adafactor(beta2=0.9), ValueError, "exactly one of beta2"),
    (lambda: uo.Adafactor(eps=(None,)), ValueError, "eps"),
    (lambda: uo.Adafactor(relative_step=False, warmup_init=True), ValueError, "warmup_init"),
    (lambda: uo.CAME(betas=(0.9, None, 0.99)), ValueError, "decay_rate"),
    (lambda: uo.CAME(betas=(0.9, 0.999, 1.5)), ValueError, "betas\\[2\\]"),
    (lambda: uo.AdamOffload(eps_placement="host"), ValueError, "eps_placement"),
])
def test_bad_arguments_name_the_argument(make, error, words):
    with pytest.raises(error, match=words):
        make()


def test_state_names_need_the_shape_for_factored_specs():
    assert uo.Adafactor().state_names((4, 5)) == ("exp_avg_sq_row", "exp_avg_sq_col")
    assert uo.CAME().state_names((5,)) == ("exp_avg", "exp_avg_sq")
    with pytest.raises(ValueError, match="shape"):
        uo.CAME().state_names()


def test_presets_carry_each_frameworks_conventions():
    torch_af = uo.preset("torch.optim.Adafactor", beta2_decay=-0.5, d=2.0)
    assert (torch_af.decay_rate, torch_af.clip_threshold, torch_af.eps_mode) == (0.5, 2.0, "clamp")
    ms_af = uo.preset("mindspore.nn.AdaFactor")
    assert (ms_af.lr, ms_af.beta1, ms_af.eps_mode, ms_af.decay_lr) == (1e-2, 0.9, "add", "scaled")
    came = uo.preset("mindformers.core.Came", learning_rate=0.1)
    assert (came.betas, came.eps, came.eps_scale) == ((0.9, None, 0.99), (1e-30, 1e-16), 1e-3)
    # MindFormers' Came takes a dynamic lr as every MindSpore optimizer does
    cosine = uo.schedules.preset("mindspore.nn.CosineDecayLR", min_lr=0.0, max_lr=0.01,
                                 decay_steps=10)
    assert uo.preset("mindformers.core.Came", learning_rate=cosine).lr == cosine
    offload = uo.preset("mindspore.nn.Adam", use_offload=True, eps=1e-3)
    assert offload == uo.preset("mindspore.nn.AdamOffload", eps=1e-3)
    assert offload.eps_placement == "eps_hat"


@pytest.mark.parametrize("name, kwargs, error, words", [
    ("mindspore.nn.AdaFactor", {"learning_rate": 0.01}, ValueError, "relative_step"),
    ("mindspore.nn.Adam", {"use_offload": True, "use_amsgrad": True}, ValueError, "use_offload"),
    ("mindformers.core.Came", {"compression": True}, ValueError, "compression"),
    ("mindformers.core.Came", {"learning_rate": 0.1, "beta1": 1}, TypeError,
     "beta1 must be a float, got 1"),
    ("mindspore.nn.AdamOffload", {"beta1": 0.0}, ValueError, "beta1 must be > 0 and < 1"),
    ("mindspore.nn.AdamOffload", {"eps": 1}, TypeError, "eps must be a float, got 1"),
    ("mindspore.nn.AdamOffload", {"use_locking": 1}, TypeError, "use_locking must be a bool"),
    ("mindspore.nn.AdamWeightDecay", {"beta2": 1.0}, ValueError, "beta2 must be > 0 and < 1"),
    ("mindspore.nn.AdaFactor", {"learning_rate": uo.schedules.Cosine(lr=0.01, T_max=10),
                                "relative_step": False}, ValueError,
     "skips its relative step and parameter scaling"),
    ("torch.optim.Adafactor", {"d": 0.5}, ValueError, "d must be"),
])
def test_presets_refuse_what_a_spec_cannot_carry(name, kwargs, error, words):
    with pytest.raises(error, match=words):
        uo.preset(name, **kwargs)


def test_specs_round_trip_through_json():
    for spec in (uo.Adafactor(), uo.CAME(betas=(0.9, None, 0.99), decay_rate=0.8),
                 uo.AdamOffload()):
        assert uo.spec_from_dict(spec.to_dict()) == spec


# -- the conformance cases have power -------------------------------------------------
PLANTED = {"adafactor_eps1_clamp": "eps_mode", "adafactor_relative_step_cap": "relative_step",
           "came_default": "beta2 as the"}


@pytest.mark.parametrize("case_id, planted", sorted(PLANTED.items()))
def test_a_planted_deviation_fails_its_case(case_id, planted):
    assert_planted_deviation_fails(memory_saving.cases(), case_id, planted)

