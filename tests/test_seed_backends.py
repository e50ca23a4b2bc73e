"""The seed algorithms on Paddle and MindSpore: each native row bit-identical to its
class built by hand over 100 steps and within the conformance rule of the float64
oracle at every step; the own implementations likewise; explain gives the reasons.
(mindspore is imported first by conftest, so both frameworks share this process.)"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import require

import unified_opt as uo

pytestmark = [require("paddle"), require("mindspore")]

STEPS = 100
SHAPES = {"w": (3, 4, 2), "ln.gamma": (22,), "bias": (5,), "empty": (0,)}


# -- Paddle ------------------------------------------------------------------------------

def run_paddle(spec, by_hand=None, steps=STEPS):
    """``steps`` steps of ``spec`` through the Paddle driver, every step within the
    conformance rule of the oracle; with ``by_hand(copies)`` a native optimizer built by
    hand on copies of the parameters, whose parameters and states must be bit-identical."""
    import paddle
    from test_backend_mindspore import arrays_of, assert_within_floor, gradient_stream

    from unified_opt.backends.paddle.native import native_state
    from unified_opt.conformance.drivers.paddle import PaddleDriver
    from unified_opt.reference import with_float32_hyperparameters

    arrays = arrays_of(SHAPES)
    driver = PaddleDriver(spec, arrays)
    ref64 = uo.reference(spec, arrays, dtype="float64")
    refs32 = [uo.reference(spec, arrays, dtype="float32"),
              uo.reference(with_float32_hyperparameters(spec), arrays, dtype="float32")]
    hand = copies = None
    if by_hand is not None:
        copies = {name: paddle.create_parameter(list(a.shape), "float32") for name, a in
                  arrays.items()}
        for name, p in copies.items():
            p.set_value(arrays[name])
        hand = by_hand(copies)
    for step, grads in enumerate(gradient_stream(arrays, steps)):
        assert driver.step(grads) == ref64.step(grads), step
        for ref in refs32:
            ref.step(grads)
        assert_within_floor(driver.params_numpy(), ref64.params, [r.params for r in refs32],
                            f"step {step} params")
        states = driver.state_numpy()
        for name in arrays:
            assert sorted(states[name]) == sorted(ref64.state[name]), name
            assert_within_floor(states[name], ref64.state[name],
                                [r.state[name] for r in refs32], f"step {step} {name}")
        if hand is not None:
            for name, p in copies.items():
                p.grad = paddle.to_tensor(grads[name])
            hand.step()
            hand.clear_grad(set_to_zero=False)
            for name, p in copies.items():
                assert np.array_equal(p.numpy(), driver.params[name].numpy()), (step, name)
                theirs = native_state(driver.decision.native_class, hand, p,
                                      spec.for_parameter(name))
                for key, value in driver.spec_state(name).items():
                    assert np.array_equal(theirs[key].numpy(), value.numpy()), (step, key)
    return driver


def test_paddle_lamb_with_exclusion_is_native_and_bit_identical():
    import paddle

    spec = uo.preset("paddle.optimizer.Lamb", learning_rate=0.01,
                     lamb_weight_decay=0.05).replace(no_decay_names=("ln.gamma",))

    def by_hand(copies):
        gamma = copies["ln.gamma"].name
        return paddle.optimizer.Lamb(learning_rate=0.01, lamb_weight_decay=0.05,
                                     parameters=list(copies.values()),
                                     exclude_from_weight_decay_fn=lambda p: p.name == gamma)

    driver = run_paddle(spec, by_hand)
    assert driver.decision.native == "paddle.optimizer.Lamb"


def test_paddle_lamb_always_adapt_without_decay_is_native():
    import paddle

    spec = uo.preset("paddle.optimizer.Lamb", learning_rate=0.01, lamb_weight_decay=0.0,
                     always_adapt=True)
    driver = run_paddle(spec, lambda c: paddle.optimizer.Lamb(
        learning_rate=0.01, lamb_weight_decay=0.0, always_adapt=True,
        parameters=list(c.values())))
    assert driver.decision.native == "paddle.optimizer.Lamb"


def test_paddle_lars_with_eps_and_exclusion_is_native_and_bit_identical():
    # epsilon > 0: the kernel adds it to the denominator only (its docstring also shows it
    # in the gradient term, which the numbers refute)
    from paddle.incubate.optimizer import LarsMomentumOptimizer

    arguments = {"learning_rate": 0.5, "momentum": 0.9, "lars_coeff": 0.02,
                 "lars_weight_decay": 0.01, "epsilon": 0.5}
    spec = uo.preset("paddle.incubate.optimizer.LarsMomentumOptimizer", **arguments,
                     exclude_from_weight_decay=["bias"])
    driver = run_paddle(spec, lambda c: LarsMomentumOptimizer(
        **arguments, parameter_list=list(c.values()),
        exclude_from_weight_decay=[c["bias"].name]))
    assert driver.decision.native == "paddle.incubate.optimizer.LarsMomentumOptimizer"


# -- MindSpore -----------------------------------------------------------------------------

def _nn(name):
    from mindspore import nn
    return getattr(nn, name)


MINDSPORE_NATIVE = [
    ("nn_adafactor_relative_step", uo.preset("mindspore.nn.AdaFactor"),
     lambda ps: _nn("AdaFactor")(ps)),
    ("nn_adafactor_manual_no_beta1",
     uo.preset("mindspore.nn.AdaFactor", learning_rate=0.01, relative_step=False,
               scale_parameter=False, weight_decay=0.1, beta1=0.0),
     lambda ps: _nn("AdaFactor")(ps, learning_rate=0.01, relative_step=False,
                                 scale_parameter=False, weight_decay=0.1, beta1=0.0)),
    ("nn_adam_offload", uo.preset("mindspore.nn.AdamOffload", learning_rate=0.01, eps=1e-3,
                                  weight_decay=0.1),
     lambda ps: _nn("AdamOffload")(ps, learning_rate=0.01, eps=1e-3, weight_decay=0.1)),
    ("nn_adam_use_offload_nesterov",
     uo.preset("mindspore.nn.Adam", learning_rate=0.01, eps=1e-3, use_nesterov=True,
               use_offload=True),
     lambda ps: _nn("Adam")(ps, learning_rate=0.01, eps=1e-3, use_nesterov=True,
                            use_offload=True)),
]


@pytest.mark.parametrize("case_id, spec, by_hand", MINDSPORE_NATIVE,
                         ids=[c[0] for c in MINDSPORE_NATIVE])
def test_mindspore_native_rows_are_bit_identical_to_the_class(case_id, spec, by_hand):
    from test_backend_mindspore import run

    driver = run(spec, _arrays(), by_hand=by_hand)
    assert driver.decision.path == "native", driver.decision


def _arrays():
    from test_backend_mindspore import arrays_of
    return arrays_of(SHAPES)


# -- own implementations (the rest of each algorithm's knobs run in the conformance suite) --

OWN = [uo.Lamb(lr=0.01, weight_decay=0.05, weight_norm_clamp=2.0, always_adapt=True),
       uo.LARS(lr=0.5, weight_decay=0.01, trust_coefficient=0.02, eps=1e-5,
               zero_norm_rule="none", always_adapt=True),
       uo.Adafactor(lr=0.01, weight_decay=0.5),
       uo.CAME(lr=0.01, betas=(0.9, 0.999, 0.99), weight_decay=0.5),
       uo.AdamOffload(lr=0.01, eps=1e-3, amsgrad=True),
       uo.DGCMomentum(lr=0.05, rampup_begin_step=5, rampup_step=20, sparsity=(0.5, 0.9),
                      min_numel=1, local_grad_clip_norm=2.0, num_trainers=1)]


@pytest.mark.parametrize("spec", OWN, ids=[s.name for s in OWN])
def test_own_paths_follow_the_oracle(spec):
    from test_backend_mindspore import run

    assert run_paddle(spec, steps=60).decision.path == "own"
    assert run(spec, _arrays(), steps=60).decision.path == "own"


def test_own_adam_offload_keeps_its_state_on_the_host():
    driver = run_paddle(uo.AdamOffload(lr=0.01), steps=1)
    assert all(t.place.is_cpu_place() for t in driver.spec_state("w").values())


# -- explain ---------------------------------------------------------------------------------

def test_mindspore_lamb_and_lars_rows_know_the_device():
    from unified_opt.backend import Context, load

    backend = load("mindspore")

    lamb = uo.preset("mindspore.nn.Lamb", learning_rate=0.01, weight_decay=0.05)
    lars = uo.preset("mindspore.nn.LARS", coefficient=0.02, optimizer=uo.preset(
        "mindspore.nn.Momentum", learning_rate=0.5, momentum=0.9, weight_decay=0.01))
    for spec, native in ((lamb, "mindspore.nn.Lamb"), (lars, "mindspore.nn.LARS")):
        on_cpu = backend.decide(spec, "auto", Context(device="CPU"))
        assert on_cpu.path == "own"
        (rejected, unmet), = on_cpu.rejected
        assert rejected == native and unmet == (f"device in ('GPU', 'Ascend') ({native} has "
                                                "no CPU kernel in MindSpore 2.10; this is CPU)",)
        assert backend.decide(spec, "auto", Context(device="GPU")).native == native
    assert "has no CPU kernel" in str(uo.explain(lamb, backend="mindspore"))


@pytest.mark.parametrize("backend, spec, phrase", [
    ("paddle", uo.Lamb(weight_norm_clamp=10.0), "weight_norm_clamp=None"),
    ("paddle", uo.LARS(nesterov=True), "nesterov=False"),
    ("paddle", uo.Adafactor(), "paddle has no native optimizer for 'adafactor'"),
    ("paddle", uo.DGCMomentum(), "paddle has no native optimizer for 'dgc_momentum'"),
    ("mindspore", uo.Adafactor(), "eps_mode='add'"),
    ("mindspore", uo.AdamOffload(), "eps_placement='eps_hat'"),
    ("mindspore", uo.CAME(), "mindspore has no native optimizer for 'came'"),
])
def test_explain_says_why_a_seed_runs_its_own_update(backend, spec, phrase):
    text = str(uo.explain(spec, backend=backend))
    assert "own implementation" in text and phrase in text, text
