"""The MindSpore backend against the numpy reference and against MindSpore's own classes.

Each case runs 100 steps through the conformance driver: the lr, parameters and states
must stay within a small multiple of the float32 reference's own error (the noise floor)
of the float64 reference at every step, and a native path must be bit-identical to the
same MindSpore class built by hand with the same arguments. The floor is the conformance
suite's (conformance/compare.py): the float32 reference and the float32 reference with
float32-held hyperparameters, since MindSpore's kernels hold the betas in float32 (the
table's note says so; a test measures what that changes against the plain floor).
"""

import numpy as np
import pytest
from conftest import require

import unified_opt as uo
from unified_opt.conformance.compare import K, step_ratios
from unified_opt.reference import with_float32_hyperparameters

pytestmark = require("mindspore")

STEPS = 100
EPS32 = float(np.finfo(np.float32).eps)
SHAPES = {"w": (3, 4, 2), "ln.gamma": (22,), "empty": (0,), "bias": (5,)}


def arrays_of(shapes, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return {name: rng.normal(size=shape).astype(dtype) for name, shape in shapes.items()}


def gradient_stream(arrays, steps, seed=1):
    """Normal gradients with adversarial steps: all zeros, +-1e-30, +-500, zeroed entries."""
    rng = np.random.default_rng(seed)
    for step in range(steps):
        grads = {}
        for name, a in arrays.items():
            g = rng.normal(size=a.shape)
            if step % 10 == 3:
                g = np.zeros_like(g)
            elif step % 10 == 5:
                g = np.sign(g) * 1e-30
            elif step % 10 == 7:
                g = np.sign(g) * 500.0
            g[rng.random(a.shape) < 0.2] = 0.0
            grads[name] = g.astype(a.dtype)
        yield grads


def assert_within_floor(got, ref64, refs32, what):
    """The conformance rule: |got - ref64| <= K x the floor made by ``refs32`` (float32
    reference values) and a few float32 ulps; NaN/Inf exactly where the oracle has them."""
    for key, exact in ref64.items():
        value = np.asarray(got[key])
        assert value.shape == exact.shape, (what, key)
        ratio, nonfinite, error, floor = step_ratios(value[None], exact[None],
                                                     [r[key][None] for r in refs32])
        assert not nonfinite[0], f"{what}[{key}]: NaN/Inf positions differ from the oracle's"
        assert ratio[0] <= K, (f"{what}[{key}]: error {error[0]:.3g} = {ratio[0]:.3g} x "
                               f"floor {floor[0]:.3g}")


def mindspore_tuple(grads):
    from mindspore import Tensor
    return tuple(Tensor(g) for g in grads.values())


def run(spec, arrays, *, path="auto", by_hand=None, steps=STEPS, total_steps=None,
        reference_spec=None):
    """Drive ``spec`` ``steps`` times, checking every step; with ``by_hand(params)`` also
    run that native optimizer on copies of the non-empty parameters and demand
    bit-identical parameters and states."""
    from mindspore import Parameter, Tensor

    from unified_opt.backends.mindspore.native import native_state
    from unified_opt.conformance.drivers.mindspore import MindSporeDriver

    driver = MindSporeDriver(spec, arrays, path=path, total_steps=total_steps)
    reference_spec = reference_spec or spec
    ref64 = uo.reference(reference_spec, arrays, dtype="float64")
    refs32 = [uo.reference(reference_spec, arrays, dtype="float32"),
              uo.reference(with_float32_hyperparameters(reference_spec), arrays,
                           dtype="float32")]
    hand = copies = None
    if by_hand is not None:
        copies = {name: Parameter(Tensor(a.copy()), name=name)
                  for name, a in arrays.items() if a.size}
        hand = by_hand(list(copies.values()))
    for step, grads in enumerate(gradient_stream(arrays, steps)):
        lr = driver.step(grads)
        expected_lr = ref64.step(grads)
        for ref32 in refs32:
            ref32.step(grads)
        if driver.decision.path == "own":
            assert lr == expected_lr, (step, lr, expected_lr)
        else:   # MindSpore holds a native lr in float32
            assert lr == pytest.approx(expected_lr, rel=EPS32, abs=0.0), (step, lr)
        assert_within_floor(driver.params_numpy(), ref64.params, [r.params for r in refs32],
                            f"step {step} params")
        states = driver.state_numpy()
        for name in arrays:
            assert sorted(states[name]) == sorted(ref64.state[name]), (name, states[name])
            assert_within_floor(states[name], ref64.state[name],
                                [r.state[name] for r in refs32], f"step {step} state of {name}")
        if hand is not None:
            hand(mindspore_tuple({name: grads[name] for name in copies}))
            row = driver.decision.native_class
            for name, p in copies.items():
                mine = driver.params[name]
                assert np.array_equal(p.asnumpy(), mine.asnumpy()), (step, name)
                theirs = native_state(row, hand, p, spec.for_parameter(name))
                for key, value in driver.spec_state(name).items():
                    assert np.array_equal(theirs[key].asnumpy(), value.asnumpy()), (step, key)
    return driver


def _nn(name):
    import mindspore.nn as nn
    return getattr(nn, name)


def _experimental(name):
    from mindspore.experimental import optim
    return getattr(optim, name)


def _grouped(decays):
    """nn groups by weight decay, as build makes them, with order_params."""
    def groups(ps):
        by = {}
        for p, decay in zip(ps, decays):
            by.setdefault(decay, []).append(p)
        return [{"params": v, "weight_decay": k} for k, v in by.items()] + [{"order_params": ps}]
    return groups


COSINE = uo.schedules.Cosine(lr=0.05, T_max=40, eta_min=0.001)

# (id, spec, native class or "own", the native class built by hand over the parameters)
CASES = [
    ("sgd", uo.SGD(lr=0.1), "mindspore.nn.SGD",
     lambda ps: _nn("SGD")(ps, learning_rate=0.1)),
    ("sgd-momentum", uo.SGD(lr=0.05, momentum=0.9), "mindspore.nn.SGD",
     lambda ps: _nn("SGD")(ps, learning_rate=0.05, momentum=0.9)),
    ("sgd-nesterov", uo.SGD(lr=0.05, momentum=0.9, nesterov=True), "mindspore.nn.SGD",
     lambda ps: _nn("SGD")(ps, learning_rate=0.05, momentum=0.9, nesterov=True)),
    ("sgd-dampening", uo.SGD(lr=0.05, momentum=0.9, dampening=0.3), "mindspore.nn.SGD",
     lambda ps: _nn("SGD")(ps, learning_rate=0.05, momentum=0.9, dampening=0.3)),
    # every parameter decays, "ln.gamma" too: explicit groups switch nn's name rule off
    ("sgd-wd", uo.SGD(lr=0.05, momentum=0.9, weight_decay=0.1), "mindspore.nn.SGD",
     lambda ps: _nn("SGD")(_grouped([0.1] * 3)(ps), learning_rate=0.05, momentum=0.9)),
    ("sgd-maximize", uo.SGD(lr=0.05, momentum=0.9, weight_decay=0.1, maximize=True),
     "mindspore.experimental.optim.SGD",
     lambda ps: _experimental("SGD")(ps, lr=0.05, momentum=0.9, weight_decay=0.1,
                                     maximize=True)),
    ("nn-momentum", uo.preset("mindspore.nn.Momentum", learning_rate=0.1, momentum=0.9),
     "mindspore.nn.Momentum",
     lambda ps: _nn("Momentum")(ps, learning_rate=0.1, momentum=0.9)),
    # nn.Momentum ignores use_nesterov on CPU; nn.SGD computes this spec exactly
    ("nn-momentum-nesterov", uo.preset("mindspore.nn.Momentum", learning_rate=0.1,
                                       momentum=0.9, use_nesterov=True), "mindspore.nn.SGD",
     lambda ps: _nn("SGD")(ps, learning_rate=0.1, momentum=0.9, nesterov=True)),
    ("adam-eps-hat", uo.Adam(lr=0.01, eps=1e-3, eps_placement="eps_hat"), "mindspore.nn.Adam",
     lambda ps: _nn("Adam")(ps, learning_rate=0.01, eps=1e-3)),
    ("adam-amsgrad", uo.Adam(lr=0.01, eps_placement="eps_hat", amsgrad=True),
     "mindspore.nn.Adam", lambda ps: _nn("Adam")(ps, learning_rate=0.01, use_amsgrad=True)),
    ("adam-nesterov-wd", uo.Adam(lr=0.01, eps_placement="eps_hat", nesterov=True,
                                 weight_decay=0.1), "mindspore.nn.Adam",
     lambda ps: _nn("Adam")(_grouped([0.1] * 3)(ps), learning_rate=0.01, use_nesterov=True)),
    ("adam-eps-hat-maximize", uo.Adam(lr=0.01, eps_placement="eps_hat", maximize=True,
                                      weight_decay=0.1), "mindspore.experimental.optim.Adam",
     lambda ps: _experimental("Adam")(ps, lr=0.01, weight_decay=0.1, maximize=True)),
    ("adam-outside", uo.Adam(lr=0.01, amsgrad=True), "mindspore.experimental.optim.AdamW",
     lambda ps: _experimental("AdamW")(ps, lr=0.01, weight_decay=0.0, amsgrad=True)),
    ("adam-outside-wd", uo.Adam(lr=0.01, weight_decay=0.1), "own", None),
    ("adamw", uo.AdamW(lr=0.01, weight_decay=0.1, maximize=True),
     "mindspore.experimental.optim.AdamW",
     lambda ps: _experimental("AdamW")(ps, lr=0.01, weight_decay=0.1, maximize=True)),
    # nn's name rule (no decay for *gamma*) by hand, the spec's no_decay_names in build
    ("adamw-nn", uo.preset("mindspore.nn.AdamWeightDecay", learning_rate=0.01,
                           weight_decay=0.1), "mindspore.nn.AdamWeightDecay",
     lambda ps: _nn("AdamWeightDecay")(ps, learning_rate=0.01, weight_decay=0.1)),
    ("adamw-no-decay-names", uo.AdamW(lr=0.01, weight_decay=0.1, no_decay_names=("*bias*",)),
     "mindspore.experimental.optim.AdamW",
     lambda ps: _experimental("AdamW")([{"params": ps[:2]},
                                        {"params": ps[2:], "weight_decay": 0.0}],
                                       lr=0.01, weight_decay=0.1)),
    ("sgd-scheduled", uo.SGD(lr=COSINE, momentum=0.9, weight_decay=0.01), "mindspore.nn.SGD",
     lambda ps: _nn("SGD")(_grouped([0.01] * 3)(ps), momentum=0.9,
                           learning_rate=[COSINE(t) for t in range(STEPS)])),
    ("adam-scheduled", uo.Adam(lr=COSINE, eps_placement="eps_hat"), "mindspore.nn.Adam",
     lambda ps: _nn("Adam")(ps, learning_rate=[COSINE(t) for t in range(STEPS)])),
    ("adamw-scheduled", uo.AdamW(lr=COSINE), "own", None),
    # the rest of the catalogue
    ("nadam", uo.NAdam(lr=0.01, weight_decay=0.1), "mindspore.experimental.optim.NAdam",
     lambda ps: _experimental("NAdam")(ps, lr=0.01, weight_decay=0.1)),
    ("nadam-no-decay-names", uo.NAdam(lr=0.01, weight_decay=0.1, momentum_decay=0.01,
                                      no_decay_names=("*bias*",)),
     "mindspore.experimental.optim.NAdam",
     lambda ps: _experimental("NAdam")([{"params": ps[:2]},
                                        {"params": ps[2:], "weight_decay": 0.0}],
                                       lr=0.01, weight_decay=0.1, momentum_decay=0.01)),
    ("nadam-decoupled", uo.NAdam(lr=0.01, weight_decay=0.1, decoupled_weight_decay=True),
     "own", None),
    ("radam", uo.RAdam(lr=0.01, betas=(0.8, 0.99), weight_decay=0.1),
     "mindspore.experimental.optim.RAdam",
     lambda ps: _experimental("RAdam")(ps, lr=0.01, betas=(0.8, 0.99), weight_decay=0.1)),
    ("adamax-nn", uo.preset("mindspore.nn.AdaMax", learning_rate=0.01, eps=0.1,
                            weight_decay=0.1), "mindspore.nn.AdaMax",
     lambda ps: _nn("AdaMax")(ps, learning_rate=0.01, eps=0.1, weight_decay=0.1)),
    ("adamax-nn-scheduled", uo.Adamax(lr=COSINE, eps_placement="outside_max"),
     "mindspore.nn.AdaMax",
     lambda ps: _nn("AdaMax")(ps, learning_rate=[COSINE(t) for t in range(STEPS)])),
    ("adamax", uo.Adamax(lr=0.01, eps=0.1, weight_decay=0.1, maximize=True),
     "mindspore.experimental.optim.Adamax",
     lambda ps: _experimental("Adamax")(ps, lr=0.01, eps=0.1, weight_decay=0.1,
                                        maximize=True)),
    ("adagrad-nn", uo.preset("mindspore.nn.Adagrad", learning_rate=0.01, weight_decay=0.1),
     "mindspore.nn.Adagrad",
     lambda ps: _nn("Adagrad")(ps, learning_rate=0.01, weight_decay=0.1)),
    ("adagrad", uo.Adagrad(lr=0.01, lr_decay=0.01, initial_accumulator_value=0.1,
                           weight_decay=0.1, maximize=True),
     "mindspore.experimental.optim.Adagrad",
     lambda ps: _experimental("Adagrad")(ps, lr=0.01, lr_decay=0.01,
                                         initial_accumulator_value=0.1, weight_decay=0.1,
                                         maximize=True)),
    ("adagrad-scheduled", uo.Adagrad(lr=COSINE), "own", None),
    ("adadelta-nn", uo.Adadelta(lr=COSINE, rho=0.95, weight_decay=0.1), "mindspore.nn.Adadelta",
     lambda ps: _nn("Adadelta")(_grouped([0.1] * 3)(ps), rho=0.95,
                                learning_rate=[COSINE(t) for t in range(STEPS)])),
    ("adadelta", uo.Adadelta(lr=0.5, weight_decay=0.1, maximize=True),
     "mindspore.experimental.optim.Adadelta",
     lambda ps: _experimental("Adadelta")(ps, lr=0.5, weight_decay=0.1, maximize=True)),
    ("rmsprop-nn", uo.preset("mindspore.nn.RMSProp", learning_rate=0.01, momentum=0.9,
                             centered=True, weight_decay=0.1), "mindspore.nn.RMSProp",
     lambda ps: _nn("RMSProp")(ps, learning_rate=0.01, momentum=0.9, centered=True,
                               weight_decay=0.1)),
    ("rmsprop", uo.RMSprop(lr=0.01, momentum=0.9, centered=True, weight_decay=0.1,
                           maximize=True), "mindspore.experimental.optim.RMSprop",
     lambda ps: _experimental("RMSprop")(ps, lr=0.01, momentum=0.9, centered=True,
                                         weight_decay=0.1, maximize=True)),
    ("rmsprop-paddle", uo.preset("paddle.optimizer.RMSProp", learning_rate=0.01, momentum=0.9),
     "own", None),
    ("rprop-nn", uo.preset("mindspore.nn.Rprop", learning_rate=0.01, weight_decay=0.1),
     "mindspore.nn.Rprop", lambda ps: _nn("Rprop")(ps, learning_rate=0.01, weight_decay=0.1)),
    ("rprop-nn-scheduled", uo.Rprop(lr=COSINE, etas=(0.3, 1.5), step_sizes=(1e-4, 0.05)),
     "mindspore.nn.Rprop",
     lambda ps: _nn("Rprop")(ps, learning_rate=[COSINE(t) for t in range(STEPS)],
                             etas=(0.3, 1.5), step_sizes=(1e-4, 0.05))),
    ("rprop", uo.Rprop(lr=0.01, maximize=True), "mindspore.experimental.optim.Rprop",
     lambda ps: _experimental("Rprop")(ps, lr=0.01, maximize=True)),
    ("lion", uo.Lion(lr=1e-3, weight_decay=0.1), "own", None),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_auto_path_matches_reference_and_native_by_hand(case):
    _, spec, expected, by_hand = case
    decision = uo.explain(spec, "mindspore")
    assert (decision.native or "own") == expected, str(decision)
    driver = run(spec, arrays_of(SHAPES), by_hand=by_hand, total_steps=STEPS)
    assert (driver.decision.path, driver.decision.native) == (decision.path, decision.native)


@pytest.mark.parametrize("case", CASES[::3], ids=[c[0] for c in CASES[::3]])
def test_own_path_matches_reference(case):
    _, spec, _, _ = case
    driver = run(spec, arrays_of(SHAPES), path="own", total_steps=STEPS)
    assert driver.decision.path == "own"


@pytest.mark.parametrize("name", ["nadam", "radam", "adamax", "adagrad", "adadelta", "rmsprop",
                                  "rprop", "lion"])
def test_own_path_of_every_new_algorithm(name):
    # nadam's 0-d mu_product must advance for the zero-size parameter too; rprop needs the
    # binding's clip/where/sign, nadam its scalar_like
    driver = run(uo.get(name, lr=1e-2), arrays_of(SHAPES), path="own")
    assert type(driver.optimizer).__name__ == "SpecOptimizer"


@pytest.mark.parametrize("spec,wrong", [
    (uo.NAdam(lr=0.01, weight_decay=0.1), {"decoupled_weight_decay": True}),
    (uo.RAdam(lr=0.01, betas=(0.8, 0.99)), {"rectify_threshold": 4.0}),
    (uo.Adamax(lr=0.01, eps=0.1, eps_placement="outside_max"), {"eps_placement": "on_grad"}),
    (uo.Adamax(lr=0.01, eps=0.1), {"eps_placement": "outside_max"}),
    (uo.Adagrad(lr=0.01, eps=0.0, initial_accumulator_value=0.1), {"eps": 1e-3}),
    (uo.Adagrad(lr=0.01, eps=1e-6), {"lr_decay": 1e-3}),
    (uo.Adadelta(lr=0.5), {"rho": 0.91}),
    (uo.RMSprop(lr=0.01, eps=0.1, eps_placement="inside", lr_placement="inside",
                initial_square_avg=1.0, centered=True), {"initial_square_avg": 0.0}),
    (uo.RMSprop(lr=0.01, eps=0.1), {"eps_placement": "inside"}),
    (uo.Rprop(lr=0.01), {"etas": (0.5, 1.25)}),
], ids=lambda x: x.name if hasattr(x, "name") else str(sorted(x)))
def test_comparison_flags_a_planted_deviation(spec, wrong):
    """Each native row of the rest of the catalogue, against its nearest other knob value."""
    assert uo.explain(spec, "mindspore").path == "native"
    with pytest.raises(AssertionError, match="x floor"):
        run(spec, arrays_of(SHAPES), steps=30, reference_spec=spec.replace(**wrong))


def test_zero_size_parameters_are_left_out_of_a_native_optimizer():
    from mindspore import Parameter, Tensor
    spec = uo.Adam(lr=0.01, eps_placement="eps_hat")
    empty = Parameter(Tensor(np.zeros((0,), np.float32)), name="empty")
    full = Parameter(Tensor(np.ones((3,), np.float32)), name="full")
    opt = uo.build(spec, [("empty", empty), ("full", full)])
    assert list(opt.parameters) == [full]
    assert "zero-size parameters ['empty'] are left out" in uo.explain(opt).reason
    only_empty = uo.build(spec, [("empty", empty)])
    assert uo.explain(only_empty).path == "own"
    only_empty((Tensor(np.zeros((0,), np.float32)),))
    with pytest.raises(ValueError, match=r"a parameter with elements \(mindspore.nn.Adam cannot "
                                         r"hold none\)"):
        uo.build(spec, [("empty", empty)], path="native")


def test_explain_states_the_reasons():
    spec = uo.preset("mindspore.nn.Momentum", learning_rate=0.1, momentum=0.9,
                     use_nesterov=True)
    text = str(uo.explain(spec, "mindspore"))
    assert "-> native mindspore.nn.SGD" in text
    assert "not mindspore.nn.Momentum: needs nesterov=False (nn.Momentum(use_nesterov=True) " \
           "runs plain momentum on CPU, measured)" in text
    text = str(uo.explain(uo.Adam(lr=0.01, eps_placement="eps_hat", amsgrad=True,
                                  maximize=True), "mindspore"))
    assert "own implementation" in text
    assert "experimental.optim.Adam ignores amsgrad on CPU" in text
    from unified_opt.backend import Context, load
    on_gpu = load("mindspore").decide(uo.SGD(lr=0.1), "auto", Context(device="GPU"))
    assert on_gpu.path == "own"
    assert dict(on_gpu.rejected)["mindspore.nn.SGD"] == (
        "device in ('CPU',) (where mindspore.nn.SGD was measured exact; this is GPU)",)
    assert "betas rounded to float32" in str(uo.explain(uo.AdamW(lr=0.01), "mindspore"))


@pytest.mark.parametrize("spec,native,phrase", [
    (uo.NAdam(), "mindspore.experimental.optim.NAdam", "unregistered list"),
    (uo.NAdam(lr=COSINE), None, "a constant lr"),
    (uo.NAdam(lr=0.0), None, "lr > 0 (the constructors of experimental.optim NAdam"),
    (uo.NAdam(maximize=True), None, "maximize=False"),
    (uo.RAdam(rectify_threshold=4.0), None, "rectify_threshold=5"),
    (uo.Adamax(eps_placement="on_decayed_norm"), None, "eps_placement='outside_max'"),
    (uo.Adamax(betas=(0.0, 0.999), eps_placement="outside_max"), None,
     "betas > 0 (the nn constructor refuses"),
    (uo.Adamax(lr=COSINE), None, "a constant lr"),
    (uo.Adagrad(eps=0.0, initial_accumulator_value=0.1), "mindspore.nn.Adagrad",
     "computes exactly"),
    (uo.Adagrad(eps=0.0), None, "initial_accumulator_value >= 2**-126"),
    (uo.Adagrad(eps=0.0), None, "eps > 0 (experimental.optim.Adagrad's constructor refuses"),
    (uo.Adagrad(), "mindspore.experimental.optim.Adagrad", "on float64 it does nothing"),
    (uo.Adadelta(lr=COSINE), "mindspore.nn.Adadelta", "computes exactly"),
    (uo.Adadelta(lr=COSINE, maximize=True), None, "maximize=False"),
    (uo.RMSprop(eps_placement="inside"), None, "initial_square_avg=1"),
    (uo.RMSprop(eps_placement="inside", initial_square_avg=1.0, momentum=0.9), None,
     "lr_placement='inside' or momentum=0"),
    (uo.RMSprop(eps_placement="inside", initial_square_avg=1.0, centered=True),
     "mindspore.nn.RMSProp", "computes exactly"),
    (uo.RMSprop(eps_placement="inside", initial_square_avg=1.0), None,
     "centered=True or eps=0"),
    (uo.Rprop(lr=COSINE, weight_decay=0.1), "mindspore.nn.Rprop", "computes exactly"),
    (uo.Rprop(lr=0.01, weight_decay=0.1, maximize=True), None, "weight_decay=0"),
    (uo.Lion(), None, "mindspore has no native optimizer for 'lion'"),
    (uo.Adam(betas=(0.0, 0.999), eps_placement="eps_hat"), "mindspore.experimental.optim.Adam",
     "not mindspore.nn.Adam: needs betas > 0"),
])
def test_explain_names_path_and_reason(spec, native, phrase):
    decision = uo.explain(spec, "mindspore")
    assert (decision.path, decision.native) == ("native" if native else "own", native)
    assert phrase in str(decision)


def test_nn_adagrad_skips_elements_whose_sum_is_zero():
    """The measurement behind nn.Adagrad's initial_accumulator_value condition: where the
    sum is 0 (or subnormal, flushed to 0) the kernel leaves the element unchanged, while
    the spec's eps=0 form divides by it (NaN/Inf) or by a tiny sqrt (a real step)."""
    from mindspore import Parameter, Tensor
    w = np.array([1.0, 2.0, 3.0], np.float32)
    for accum, grad in ((0.0, [0.0, 1e-30, 1.0]), (1e-40, [1e-22, 0.0, 1.0])):
        grad = np.array(grad, np.float32)
        p = Parameter(Tensor(w.copy()), name=f"w{accum}")
        _nn("Adagrad")([p], accum=accum, learning_rate=1.0)((Tensor(grad),))
        ref = uo.reference(uo.Adagrad(lr=1.0, eps=0.0, initial_accumulator_value=accum),
                           {"w": w}, dtype="float32")
        ref.step({"w": grad})
        assert np.array_equal(p.asnumpy()[:2], w[:2])        # left unchanged
        assert not np.isclose(ref.params["w"][0], w[0])    # NaN; 0.99 from 1e-40
        assert p.asnumpy()[2] == ref.params["w"][2] == np.float32(2.0)
    assert uo.explain(uo.Adagrad(eps=0.0, initial_accumulator_value=1e-40),
                      "mindspore").path == "own"


def test_nn_momentum_ignores_use_nesterov_on_cpu():
    """The measurement behind the nn.Momentum condition: with use_nesterov=True it
    computes plain momentum, not the spec's Nesterov form."""
    from mindspore import Parameter, Tensor
    arrays = arrays_of({"w": (6,)})
    grads = list(gradient_stream(arrays, 5))
    results = []
    for nesterov in (False, True):
        p = Parameter(Tensor(arrays["w"].copy()), name="w")
        opt = _nn("Momentum")([p], learning_rate=0.1, momentum=0.9, use_nesterov=nesterov)
        for g in grads:
            opt(mindspore_tuple(g))
        results.append(p.asnumpy())
    ref = uo.reference(uo.SGD(lr=0.1, momentum=0.9, nesterov=True), arrays)
    for g in grads:
        ref.step(g)
    assert np.array_equal(results[0], results[1])
    assert np.abs(results[1] - ref.params["w"]).max() > 1e-3


def test_native_adam_runs_the_spec_with_float32_betas():
    """What the note on the Adam rows means: against the plain float32 floor (betas not
    held in float32) the second moment is off by far more than the float32 noise, the
    parameters are not; ``run`` checks both within the conformance floor."""
    spec = uo.Adam(lr=0.01, eps_placement="eps_hat")
    arrays = arrays_of(SHAPES)
    driver = run(spec, arrays, steps=20)
    ref64, ref32 = uo.reference(spec, arrays), uo.reference(spec, arrays, dtype="float32")
    for grads in gradient_stream(arrays, 20):
        ref64.step(grads)
        ref32.step(grads)
    assert_within_floor(driver.params_numpy(), ref64.params, [ref32.params], "params")
    got, want, floor = (driver.state_numpy()["w"]["exp_avg_sq"], ref64.state["w"]["exp_avg_sq"],
                        ref32.state["w"]["exp_avg_sq"])
    relative = np.abs(got - want).max() / np.abs(want).max()
    assert relative > 20 * np.abs(floor - want).max() / np.abs(want).max()
    assert 1e-6 < relative < 1e-4


def _three_ways():
    """The same two parameters as a Cell, as (name, parameter) pairs and bare."""
    from mindspore import Parameter, Tensor, nn

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.dense = nn.Dense(3, 2)
            self.dense.weight.set_data(Tensor(arrays["dense.weight"]))
            self.dense.bias.set_data(Tensor(arrays["dense.bias"]))

    arrays = arrays_of({"dense.weight": (2, 3), "dense.bias": (2,)})
    net = Net()
    pairs = [(n, Parameter(Tensor(a), name=n)) for n, a in arrays.items()]
    bare = [Parameter(Tensor(a)) for a in arrays.values()]
    return arrays, {"cell": net, "pairs": pairs, "bare": bare}


@pytest.mark.parametrize("spec", [uo.SGD(lr=0.1, momentum=0.9, weight_decay=0.1),
                                  uo.AdamW(lr=0.01, no_decay_names=("*bias*",))],
                         ids=["native", "native-groups"])
@pytest.mark.parametrize("path", ["auto", "own"])
def test_cell_pairs_and_bare_parameters(spec, path):
    arrays, forms = _three_ways()
    ref = uo.reference(spec, arrays)
    grads = list(gradient_stream(arrays, 5))
    for g in grads:
        ref.step(g)
    for form, params in forms.items():
        if form == "bare" and spec.no_decay_names:
            with pytest.raises(ValueError, match="no_decay_names"):
                uo.build(spec, params, path=path)
            continue
        opt = uo.build(spec, params, path=path)
        assert uo.explain(opt).path == ("own" if path == "own" else "native")
        assert uo.lr_scheduler(opt) is None
        for g in grads:
            opt(mindspore_tuple(g))
        held = opt.parameters
        for p, (name, want) in zip(held, ref.params.items()):
            np.testing.assert_allclose(p.asnumpy(), want, rtol=1e-5, atol=1e-6,
                                       err_msg=f"{form} {name}")


def test_own_optimizer_in_model_train_and_train_one_step_cell():
    import mindspore as ms
    from mindspore import Tensor, nn
    from mindspore.dataset import NumpySlicesDataset

    spec = uo.AdamW(lr=0.01, weight_decay=0.1)
    rng = np.random.default_rng(3)
    x = rng.normal(size=(8, 3)).astype(np.float32)
    y = rng.normal(size=(8, 2)).astype(np.float32)
    finals = []
    for way in ("model", "one-step", "value-and-grad"):
        ms.set_seed(0)
        net = nn.Dense(3, 2)
        opt = uo.build(spec, net, path="own")
        loss_fn = nn.MSELoss()
        if way == "model":
            data = NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(4)
            ms.Model(net, loss_fn, optimizer=opt).train(2, data, dataset_sink_mode=False)
        elif way == "one-step":
            step = nn.TrainOneStepCell(nn.WithLossCell(net, loss_fn), opt)
            for _ in range(2):
                for i in (0, 4):
                    step(Tensor(x[i:i + 4]), Tensor(y[i:i + 4]))
        else:
            grad_fn = ms.value_and_grad(lambda a, b: loss_fn(net(a), b), None, opt.parameters)
            for _ in range(2):
                for i in (0, 4):
                    _, grads = grad_fn(Tensor(x[i:i + 4]), Tensor(y[i:i + 4]))
                    opt(grads)
        assert int(opt.global_step.asnumpy()[0]) == 4
        finals.append([p.asnumpy() for p in net.trainable_params()])
    for other in finals[1:]:
        for a, b in zip(finals[0], other):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    assert not np.allclose(finals[0][0], nn.Dense(3, 2).weight.asnumpy())


def test_own_optimizer_does_not_run_in_graph_mode():
    import mindspore as ms
    spec = uo.Adam(lr=0.01, weight_decay=0.1)
    p = ms.Parameter(ms.Tensor(np.ones(3, np.float32)), name="w")
    opt = uo.build(spec, [p])
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        with pytest.raises(ValueError, match="PyNative mode only"):
            uo.build(spec, [p])
        with pytest.raises(RuntimeError, match="GRAPH_MODE"):
            opt((ms.Tensor(np.ones(3, np.float32)),))
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    assert np.array_equal(p.asnumpy(), np.ones(3, np.float32))


def test_own_state_round_trips_through_a_checkpoint(tmp_path):
    import mindspore as ms
    spec = uo.Adam(lr=0.01, weight_decay=0.1, amsgrad=True)
    arrays = arrays_of({"w": (4, 5), "b": (3,)})
    grads = [mindspore_tuple(g) for g in gradient_stream(arrays, 6)]

    def fresh():
        return uo.build(spec, [(n, ms.Parameter(ms.Tensor(a.copy()), name=n))
                               for n, a in arrays.items()])

    straight, resumed = fresh(), fresh()
    for g in grads[:3]:
        straight(g)
    ms.save_checkpoint(straight, str(tmp_path / "opt.ckpt"))
    saved = ms.load_checkpoint(str(tmp_path / "opt.ckpt"))
    assert {"global_step", "learning_rate", "exp_avg.w", "max_exp_avg_sq.b"} <= set(saved)
    ms.load_param_into_net(resumed, saved)
    for g in grads[3:]:
        straight(g)
        resumed(g)
    for a, b in zip(straight.parameters, resumed.parameters):
        assert np.array_equal(a.asnumpy(), b.asnumpy())


def test_bad_input_is_refused_before_any_change():
    import mindspore as ms
    arrays = arrays_of({"w": (4,)})
    p = ms.Parameter(ms.Tensor(arrays["w"].copy()), name="w")
    with pytest.raises(ValueError, match="total_steps.*constant"):
        uo.build(uo.SGD(lr=0.1), [p], options={"total_steps": 10})
    with pytest.raises(TypeError, match="total_steps"):
        uo.build(uo.SGD(lr=COSINE), [p], options={"total_steps": 10.0})
    with pytest.raises(ValueError, match="not implementation flags.*use_locking"):
        uo.build(uo.Adam(lr=0.1, eps_placement="eps_hat"), [p], options={"loss_scale": 2.0})
    with pytest.raises(ValueError, match="apply to native classes"):
        uo.build(uo.Adam(lr=0.1, weight_decay=0.1), [p], options={"use_locking": True})
    double = ms.Parameter(ms.Tensor(arrays["w"].astype(np.float64)), name="double")
    with pytest.raises(TypeError, match="float32 parameters"):
        uo.build(uo.SGD(lr=0.1), [double])
    frozen = ms.Parameter(ms.Tensor(arrays["w"].copy()), name="frozen", requires_grad=False)
    with pytest.raises(ValueError, match="requires_grad=False"):
        uo.build(uo.SGD(lr=0.1), [frozen])

    opt = uo.build(uo.Adam(lr=COSINE, weight_decay=0.1), [p], options={"total_steps": 2})
    good = ms.Tensor(np.ones(4, np.float32))
    with pytest.raises(TypeError, match="tuple"):
        opt([good])
    with pytest.raises(ValueError, match="1 parameters"):
        opt((good, good))
    with pytest.raises(TypeError, match="Float64"):
        opt((ms.Tensor(np.ones(4)),))
    with pytest.raises(ValueError, match="shape"):
        opt((ms.Tensor(np.ones(5, np.float32)),))
    assert np.array_equal(p.asnumpy(), arrays["w"])
    assert int(opt.global_step.asnumpy()[0]) == 0
    opt((good,))
    ms.ops.assign(opt.learning_rate, ms.Tensor(0.5, ms.float32))
    with pytest.raises(RuntimeError, match="learning_rate was set"):
        opt((good,))
    ms.ops.assign(opt.learning_rate, ms.Tensor(COSINE(1), ms.float32))
    opt((good,))
    with pytest.raises(RuntimeError, match=r"options=\{'total_steps': 2\}: step 3 is past"):
        opt((good,))
