"""Communication: dgc_momentum's spec. The sparsity schedule, the compressed steps
worked out by hand, the simulated workers of the reference and its pluggable exchange,
the presets, and the power of its conformance cases (``conformance/cases/communication.py``).
The backends: test_algorithms.py."""

import numpy as np
import pytest
from support import assert_planted_deviation_fails

import unified_opt as uo
from unified_opt.conformance.cases import communication
from unified_opt.exchange import LOCAL, Exchange, SimulatedExchange

# Margins (rtol from 1e-15 to 1e-12, numpy's default rtol=1e-7, pytest.approx): the
# reference computes in float64 and the expected numbers are its formulas worked out in
# float64, mostly the same operations in the same order. +, -, *, / and sqrt round
# correctly whatever vector code numpy runs (SSE, AVX2, AVX-512, NEON) and numpy's sums
# keep their order; exp, log and power may move by an ulp or so from one CPU to another.
# The two sides agree to a few ulps (2.2e-16 each) on every CPU, within these margins.

P0 = [1.0, 1.0, 1.0, 1.0]


def dgc(**kw):
    base = dict(lr=0.1, momentum=0.5, rampup_begin_step=0, sparsity=(0.5,), min_numel=1)
    return uo.DGCMomentum(**{**base, **kw})


def test_sparsity_schedule_follows_paddles_example():
    # paddle docs: S = [0.75, 0.9375, 0.984375, 0.996, 0.999], rampup_step 100: 0.75 for
    # the first 20 steps after rampup_begin_step, then 0.9375, ...; 0.999 at the end
    spec = uo.DGCMomentum(rampup_begin_step=1252, rampup_step=100,
                          sparsity=[0.75, 0.9375, 0.984375, 0.996, 0.999])
    at = lambda t: spec.sparsity_at(t + 1)        # noqa: E731  (Paddle's 0-based step)
    assert at(1251) is None
    assert [at(t) for t in (1252, 1271, 1272, 1291, 1292, 1331, 1332, 5000)] == [
        0.75, 0.75, 0.9375, 0.9375, 0.984375, 0.996, 0.999, 0.999]
    assert spec.sent_count(100_000, 1253) == 25_000 and spec.sent_count(100, 1) == 100


def test_default_schedule_compresses_a_large_tensor_a_thousandfold():
    spec = uo.DGCMomentum()                      # sparsity [0.999] from step 1
    numel = 4096 * 4096
    sent = spec.sent_count(numel, 1)
    assert sent == 16777 and numel / sent == pytest.approx(1000.0, rel=1e-4)
    assert spec.sent_count(16383, 1) == 16383   # below min_numel: dense momentum


def test_one_worker_sends_the_top_half_and_masks_the_momentum():
    ref = uo.reference(dgc(), {"p": P0})
    ref.step({"p": [4.0, -1.0, 3.0, 2.0]})
    # u = v = g; the two largest |v| (4 and 3) are sent and cleared from u and v
    np.testing.assert_array_equal(ref.params["p"], [1 - 0.4, 1.0, 1 - 0.3, 1.0])
    np.testing.assert_array_equal(ref.state["p"]["u"], [0.0, -1.0, 0.0, 2.0])
    np.testing.assert_array_equal(ref.state["p"]["v"], [0.0, -1.0, 0.0, 2.0])
    ref.step({"p": [1.0, 1.0, 1.0, 1.0]})
    # u = 0.5 u + g = (1, 0.5, 1, 2); v = (1, -0.5, 1, 4): 4, then the tie at 1 goes to
    # the lower index 0
    np.testing.assert_array_equal(ref.params["p"], [0.6 - 0.1, 1.0, 0.7, 1 - 0.4])
    np.testing.assert_array_equal(ref.state["p"]["u"], [0.0, 0.5, 1.0, 0.0])
    np.testing.assert_array_equal(ref.state["p"]["v"], [0.0, -0.5, 1.0, 0.0])


def test_nesterov_correction_and_warm_up_steps():
    ref = uo.reference(dgc(use_nesterov=True), {"p": P0})
    ref.step({"p": [4.0, -1.0, 3.0, 2.0]})
    # u = 0.5 (0 + g); v = u + g = 1.5 g: sends 6 and 4.5
    np.testing.assert_allclose(ref.params["p"], [1 - 0.6, 1.0, 1 - 0.45, 1.0])
    np.testing.assert_allclose(ref.state["p"]["v"], [0.0, -1.5, 0.0, 3.0])
    warm = uo.reference(dgc(rampup_begin_step=1, weight_decay=0.5), {"p": P0})
    warm.step({"p": [4.0, -1.0, 3.0, 2.0]})          # dense momentum on g + 0.5 p
    np.testing.assert_allclose(warm.params["p"], [1 - 0.45, 1 + 0.05, 1 - 0.35, 1 - 0.25])
    np.testing.assert_allclose(warm.state["p"]["u"], [4.5, -0.5, 3.5, 2.5])
    np.testing.assert_array_equal(warm.state["p"]["v"], [0.0] * 4)


def test_local_clipping_scales_the_norm_by_num_trainers():
    ref = uo.reference(dgc(sparsity=(0.0,), local_grad_clip_norm=2.0, num_trainers=1),
                       {"p": P0})
    ref.step({"p": [3.0, 4.0, 0.0, 0.0]})           # norm 5 > 2: scaled to norm 2
    np.testing.assert_allclose(ref.params["p"], [1 - 0.12, 1 - 0.16, 1.0, 1.0])


def test_two_simulated_workers_sum_their_sparse_messages():
    ref = uo.reference(dgc(), {"p": P0}, workers=2)
    ref.step([{"p": [4.0, -1.0, 3.0, 2.0]}, {"p": [0.0, 0.0, 0.0, 8.0]}])
    # each worker works on g / 2 then scales back by 2: worker 0 sends (4, 3) at 0, 2;
    # worker 1 sends 8 at 3 (and the tie at 0 there); the sum is divided by 2
    np.testing.assert_allclose(ref.params["p"], [1 - 0.2, 1.0, 1 - 0.15, 1 - 0.4])
    np.testing.assert_allclose(ref.states[0]["p"]["u"], [0.0, -1.0, 0.0, 2.0])
    np.testing.assert_allclose(ref.states[1]["p"]["u"], [0.0] * 4)
    assert ref.state is ref.states[0]


def test_warm_up_over_workers_is_momentum_on_the_mean_gradient():
    rng = np.random.default_rng(0)
    params = {"w": rng.normal(size=(4, 5))}
    grads = [[{"w": rng.normal(size=(4, 5))} for _ in range(3)] for _ in range(6)]
    spec = dgc(rampup_begin_step=100, momentum=0.9)
    workers = uo.reference(spec, params, workers=3)
    momentum = uo.reference(uo.SGD(lr=0.1, momentum=0.9, momentum_init="zeros"), params)
    for step in grads:
        workers.step(step)
        momentum.step({"w": sum(g["w"] for g in step) / 3})
    np.testing.assert_allclose(workers.params["w"], momentum.params["w"], rtol=1e-13)


def test_a_custom_exchange_is_used_and_checked():
    calls = []

    class Recording(SimulatedExchange):
        def sum_sparse(self, tensors):
            calls.append(len(tensors))
            return super().sum_sparse(tensors)

    ref = uo.reference(dgc(), {"p": P0}, workers=2, exchange=Recording(2))
    ref.step([{"p": P0}, {"p": P0}])
    assert calls == [2]
    assert isinstance(LOCAL, Exchange) and LOCAL.world_size == 1
    with pytest.raises(ValueError, match="world_size=3"):
        uo.reference(dgc(), {"p": P0}, workers=2, exchange=SimulatedExchange(3))
    with pytest.raises(ValueError, match="num_trainers=2"):
        uo.reference(dgc(num_trainers=2), {"p": P0}).step({"p": P0})


@pytest.mark.parametrize("make, error, words", [
    (lambda: uo.reference(uo.Adam(), {"p": P0}, workers=2), ValueError, "data-parallel"),
    (lambda: uo.reference(dgc(), {"p": P0}, workers=0), ValueError, "workers"),
    (lambda: uo.reference(dgc(), {"p": P0}, workers=2).step({"p": P0}), ValueError,
     "list of 2"),
    (lambda: dgc(sparsity=[]), ValueError, "sparsity"),
    (lambda: dgc(sparsity=[1.0]), ValueError, "sparsity\\[0\\]"),
    (lambda: dgc(local_grad_clip_norm=1.0), ValueError, "num_trainers"),
    (lambda: dgc(rampup_begin_step=-1), ValueError, "rampup_begin_step"),
])
def test_bad_input_is_refused_with_its_name(make, error, words):
    with pytest.raises(error, match=words):
        make()


def test_paddle_presets_map_the_clip_and_the_regularizer():
    class ClipGradByNorm:                       # duck-typed: the core imports no paddle
        clip_norm = 4.0

    class L2Decay:
        _coeff = 0.01

    spec = uo.preset("paddle.distributed.fleet.meta_optimizers.DGCMomentumOptimizer",
                     learning_rate=0.1, momentum=0.9, rampup_begin_step=3, sparsity=[0.9, 0.99],
                     num_trainers=2, grad_clip=ClipGradByNorm(), regularization=L2Decay())
    assert (spec.local_grad_clip_norm, spec.dense_clip_norm, spec.weight_decay,
            spec.min_numel, spec.sparsity) == (4.0, 4.0, 0.01, 16384, (0.9, 0.99))
    fluid = uo.preset("paddle.fluid.optimizer.DGCMomentumOptimizer", learning_rate=0.1,
                      momentum=0.9, rampup_begin_step=0, local_grad_clip_norm=1.0,
                      num_trainers=4)
    assert (fluid.local_grad_clip_norm, fluid.dense_clip_norm) == (1.0, None)


def test_presets_refuse_a_clip_that_is_not_clip_grad_by_norm():
    with pytest.raises(TypeError, match="ClipGradByNorm"):
        uo.preset("paddle.distributed.fleet.meta_optimizers.DGCMomentumOptimizer",
                  learning_rate=0.1, momentum=0.9, rampup_begin_step=0, grad_clip=1.0)


def test_the_spec_round_trips_through_json():
    spec = uo.DGCMomentum(sparsity=[0.5, 0.9])
    assert uo.spec_from_dict(spec.to_dict()) == spec


def test_a_planted_deviation_fails_its_case():
    """The default case tells use_nesterov apart."""
    assert_planted_deviation_fails(communication.cases(), "dgc_default", "use_nesterov")
