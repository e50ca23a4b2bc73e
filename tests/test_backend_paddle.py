"""The Paddle backend against the numpy reference and against Paddle's own optimizers.

Paddle runs in this process (conftest imports mindspore first when it is installed).
"""

import numpy as np
import pytest
from conftest import require

import unified_opt as uo
from unified_opt import schedules
from unified_opt.conformance.compare import K, step_ratios
from unified_opt.reference import with_float32_hyperparameters

pytestmark = require("paddle")

paddle = pytest.importorskip("paddle")

STEPS = 100
# betas whose 1-beta float32 keeps exactly (Paddle's float32 Adam kernel forms 1-beta
# from float32(beta); test_native_adam_rounds_betas_to_float32 covers the defaults).
EXACT_BETAS = (0.875, 1.0 - 2.0 ** -10)
SHAPES = {"conv.weight": (2, 3, 4), "ln.gamma": (22,), "empty.bias": (0,)}


def initial_arrays(dtype="float32", seed=0):
    rng = np.random.default_rng(seed)
    return {name: rng.normal(size=shape).astype(dtype) for name, shape in SHAPES.items()}


def gradient_stream(arrays, steps=STEPS, seed=1):
    """Normal gradients scaled entry-wise by 0, 1e-30, 1 or 500."""
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        yield {name: (rng.normal(size=a.shape) *
                      rng.choice([0.0, 1e-30, 1.0, 500.0], size=a.shape, p=[.1, .1, .7, .1])
                      ).astype(a.dtype)
               for name, a in arrays.items()}


def driver(spec, arrays, **kwargs):
    from unified_opt.conformance.drivers.paddle import PaddleDriver

    return PaddleDriver(spec, arrays, **kwargs)


def assert_close(name, got, oracle, float32_refs):
    """The conformance suite's rule (conformance/compare.py): the error against the
    float64 oracle is at most K times the float32 floor, and NaN/Inf sit where the
    oracle's do. ``float32_refs``: the float32 reference values making the floor."""
    assert got.shape == oracle.shape, name
    ratio, nonfinite, error, floor = step_ratios(got[None], oracle[None],
                                                 [r[None] for r in float32_refs])
    assert not nonfinite[0], f"{name}: NaN/Inf positions differ from the oracle's"
    assert ratio[0] <= K, f"{name}: error {error[0]:.3g} = {ratio[0]:.3g} x floor {floor[0]:.3g}"


def run_against_reference(spec, path="auto", reference_spec=None, hyperparameters32=True):
    """100 steps through the driver; every step's lr, parameters and states checked.
    The floor comes from the float32 reference and, with ``hyperparameters32``, the
    float32 reference with float32-held hyperparameters (as the conformance suite's)."""
    arrays = initial_arrays()
    d = driver(spec, arrays, path=path)
    reference_spec = reference_spec or spec
    oracle = uo.reference(reference_spec, arrays, dtype="float64")
    float32_refs = [uo.reference(reference_spec, arrays, dtype="float32")]
    if hyperparameters32:
        float32_refs.append(uo.reference(with_float32_hyperparameters(reference_spec), arrays,
                                         dtype="float32"))
    for t, grads in enumerate(gradient_stream(arrays)):
        lr = d.step(grads)
        assert lr == oracle.step(grads), f"lr of step {t}"
        for r in float32_refs:
            r.step(grads)
        params, state = d.params_numpy(), d.state_numpy()
        for name in arrays:
            assert_close(f"step {t} {name}", params[name], oracle.params[name],
                         [r.params[name] for r in float32_refs])
            assert sorted(state[name]) == sorted(oracle.state[name]), name
            for key, value in state[name].items():
                assert_close(f"step {t} {name}.{key}", value, oracle.state[name][key],
                             [r.state[name][key] for r in float32_refs])
    return d


COSINE = schedules.Cosine(lr=0.05, T_max=30, eta_min=0.001)
CASES = [  # (spec, path, native class or None for the own implementation)
    (uo.SGD(lr=0.05), "auto", "paddle.optimizer.SGD"),
    (uo.SGD(lr=0.05, weight_decay=0.01), "auto", "paddle.optimizer.SGD"),
    (uo.SGD(lr=0.01, momentum=0.9, weight_decay=0.01), "auto", "paddle.optimizer.Momentum"),
    (uo.SGD(lr=0.01, momentum=0.9, nesterov=True), "auto", "paddle.optimizer.Momentum"),
    (uo.SGD(lr=COSINE, momentum=0.9), "auto", "paddle.optimizer.Momentum"),
    (uo.SGD(lr=0.01, momentum=0.9, dampening=0.5), "auto", None),
    (uo.SGD(lr=COSINE, momentum=0.9, lr_placement="inside"), "auto", None),
    # per-parameter decay: Paddle groups (scoped to step(), nothing left on the Parameters)
    (uo.SGD(lr=0.01, weight_decay=0.1, no_decay_names=("*gamma*",)), "auto",
     "paddle.optimizer.SGD"),
    (uo.Adam(lr=1e-2, betas=EXACT_BETAS, eps=1e-3), "auto", "paddle.optimizer.Adam"),
    (uo.Adam(lr=1e-2, betas=EXACT_BETAS, amsgrad=True, weight_decay=0.01), "auto",
     "paddle.optimizer.Adam"),
    (uo.Adam(lr=1e-2), "own", None),
    (uo.Adam(lr=schedules.Step(lr=1e-2, step_size=10, gamma=0.5), eps_placement="eps_hat",
             eps=1e-3), "auto", None),
    (uo.Adam(lr=1e-2, maximize=True, amsgrad=True), "auto", None),
    (uo.AdamW(lr=1e-2, betas=EXACT_BETAS, eps=1e-3, weight_decay=0.1,
              no_decay_names=("*gamma*",)),
     "auto", "paddle.optimizer.AdamW"),
    (uo.AdamW(lr=schedules.Exponential(lr=1e-2, gamma=0.98), betas=EXACT_BETAS), "auto",
     "paddle.optimizer.AdamW"),
    (uo.preset("mindspore.nn.AdamWeightDecay", learning_rate=1e-2, weight_decay=0.1),
     "auto", None),
    # the rest of the catalogue
    (uo.NAdam(lr=1e-2, weight_decay=0.01, momentum_decay=0.01), "auto", "paddle.optimizer.NAdam"),
    (uo.NAdam(lr=COSINE), "auto", "paddle.optimizer.NAdam"),
    (uo.NAdam(lr=1e-2, weight_decay=0.01, decoupled_weight_decay=True), "auto", None),
    (uo.RAdam(lr=1e-2, betas=(0.8, 0.99), weight_decay=0.01), "auto", "paddle.optimizer.RAdam"),
    (uo.RAdam(lr=1e-2, rectify_threshold=4.0), "auto", None),
    (uo.preset("paddle.optimizer.Adamax", learning_rate=1e-2, epsilon=0.1, weight_decay=0.01),
     "auto", "paddle.optimizer.Adamax"),
    (uo.Adamax(lr=1e-2, eps=0.1), "auto", None),
    (uo.preset("paddle.optimizer.Adagrad", learning_rate=1e-2, initial_accumulator_value=0.1,
               weight_decay=0.01), "auto", "paddle.optimizer.Adagrad"),
    (uo.Adagrad(lr=COSINE, eps=0.0, initial_accumulator_value=0.1), "auto",
     "paddle.optimizer.Adagrad"),
    (uo.Adagrad(lr=1e-2, lr_decay=0.01), "auto", None),
    (uo.Adadelta(lr=COSINE, rho=0.95, weight_decay=0.01), "auto", "paddle.optimizer.Adadelta"),
    (uo.Adadelta(lr=0.5, maximize=True), "auto", None),
    (uo.preset("paddle.optimizer.RMSProp", learning_rate=1e-2, epsilon=0.1, momentum=0.9,
               centered=True, weight_decay=0.01), "auto", "paddle.optimizer.RMSProp"),
    (uo.RMSprop(lr=COSINE, eps=0.1, eps_placement="inside", lr_placement="inside",
                momentum=0.9), "auto", "paddle.optimizer.RMSProp"),
    (uo.RMSprop(lr=1e-2, eps=0.1), "auto", None),
    (uo.preset("paddle.optimizer.Rprop", learning_rate=1e-2, learning_rate_range=(1e-4, 0.05),
               etas=(0.3, 1.5)), "auto", "paddle.optimizer.Rprop"),
    (uo.Rprop(lr=COSINE), "auto", None),
    (uo.Rprop(lr=1e-2, step_sizes=(0.02, 50.0)), "auto", None),   # lr outside the range
    (uo.Lion(lr=1e-3, weight_decay=0.1), "auto", None),
]


@pytest.mark.parametrize("spec,path,native", CASES, ids=[
    f"{i}-{s.name}-{n or 'own'}" for i, (s, _, n) in enumerate(CASES)])
def test_matches_reference(spec, path, native):
    d = run_against_reference(spec, path)
    assert d.decision.path == ("native" if native else "own")
    assert d.decision.native == native
    if native:
        # exactly the class, or the thin subclass that scopes group attributes to step()
        cls = getattr(paddle.optimizer, native.rpartition(".")[2])
        assert type(d.optimizer) is cls or (isinstance(d.optimizer, cls)
                                            and type(d.optimizer).__name__ == cls.__name__)
    else:
        assert type(d.optimizer).__name__ == "SpecOptimizer"
    assert (uo.lr_scheduler(d.optimizer) is not None) == isinstance(spec.lr, schedules.Schedule)


@pytest.mark.parametrize("spec,wrong", [
    (uo.Adam(lr=1e-2, betas=EXACT_BETAS, eps=1e-3), {"eps_placement": "inside"}),
    (uo.AdamW(lr=1e-2, betas=EXACT_BETAS, weight_decay=0.1, no_decay_names=("*gamma*",)),
     {"no_decay_names": ()}),
    (uo.SGD(lr=0.01, momentum=0.9, nesterov=True), {"nesterov": False}),
    (uo.SGD(lr=COSINE, momentum=0.9), {"lr": schedules.Cosine(lr=0.05, T_max=31,
                                                               eta_min=0.001)}),
    # each native row of the rest of the catalogue against its nearest other knob value
    (uo.NAdam(lr=1e-2, weight_decay=0.1), {"decoupled_weight_decay": True}),
    (uo.RAdam(lr=1e-2, betas=(0.8, 0.99)), {"rectify_threshold": 4.0}),
    (uo.Adamax(lr=1e-2, eps=0.1, eps_placement="on_decayed_norm"), {"eps_placement": "on_grad"}),
    (uo.Adagrad(lr=1e-2, eps=1e-6), {"lr_decay": 1e-3}),
    (uo.Adadelta(lr=0.5), {"rho": 0.91}),
    (uo.RMSprop(lr=1e-2, eps=0.1, eps_placement="inside", lr_placement="inside"),
     {"eps_placement": "outside"}),
    (uo.RMSprop(lr=COSINE, eps_placement="inside", lr_placement="inside", momentum=0.9),
     {"lr_placement": "outside"}),
    (uo.Rprop(lr=1e-2, step_sizes=(1e-4, 0.05)), {"step_sizes": (1e-4, 0.04)}),
])
def test_comparison_flags_a_planted_deviation(spec, wrong):
    with pytest.raises(AssertionError, match="x floor|lr of step"):
        run_against_reference(spec, reference_spec=spec.replace(**wrong))


@pytest.mark.parametrize("name", ["sgd", "adam", "adamw", "nadam", "radam", "adamax", "adagrad",
                                  "adadelta", "rmsprop", "rprop", "lion"])
def test_own_path_of_every_algorithm(name):
    # nadam's mu_product is 0-d state: it must advance for the zero-size parameter too
    spec = uo.get(name) if name == "adadelta" else uo.get(name, lr=1e-2)
    d = run_against_reference(spec, "own")
    assert type(d.optimizer).__name__ == "SpecOptimizer"


def test_own_path_float64_is_the_reference():
    arrays = initial_arrays("float64")
    spec = uo.AdamW(lr=1e-2, weight_decay=0.1, amsgrad=True)
    d = driver(spec, arrays, path="own")
    oracle = uo.reference(spec, arrays, dtype="float64")
    for grads in gradient_stream(arrays, steps=20):
        d.step(grads)
        oracle.step(grads)
    for name, value in d.params_numpy().items():
        np.testing.assert_allclose(value, oracle.params[name], rtol=1e-13, atol=0)


def test_native_adam_rounds_betas_to_float32():
    """The note in the Adam rows: with beta2=0.999 the float32 kernel's exp_avg_sq is
    the spec's with float32(beta) (within the floor), not the spec's (far outside)."""
    spec = uo.Adam(lr=1e-2)
    rounded = spec.replace(betas=tuple(float(np.float32(b)) for b in spec.betas))
    run_against_reference(spec, reference_spec=rounded, hyperparameters32=False)
    with pytest.raises(AssertionError, match=r"exp_avg_sq: error"):
        run_against_reference(spec, hyperparameters32=False)
    run_against_reference(spec)   # the conformance floor holds the betas in float32 too


# -- the native path is Paddle's own optimizer, bit for bit -----------------------------

def hand_built(name, params, **arguments):
    return getattr(paddle.optimizer, name)(parameters=params, **arguments)


def run_paddle(optimizer, params, grads_stream, scheduler=None):
    for grads in grads_stream:
        for p, g in zip(params, grads.values()):
            p.grad = paddle.to_tensor(g)
        optimizer.step()
        optimizer.clear_grad(set_to_zero=False)
        if scheduler is not None:
            scheduler.step()


def make_params(arrays):
    out = []
    for a in arrays.values():
        p = paddle.create_parameter(list(a.shape), str(a.dtype),
                                    default_initializer=paddle.nn.initializer.Constant(0.0))
        p.set_value(a)
        out.append(p)
    return out


NATIVE_CASES = [  # (spec, options, hand-built class, its arguments but parameters)
    (uo.SGD(lr=0.05, weight_decay=0.01), {}, "SGD",
     {"learning_rate": 0.05, "weight_decay": 0.01}),
    (uo.SGD(lr=0.01, momentum=0.9, nesterov=True, weight_decay=0.01), {}, "Momentum",
     {"learning_rate": 0.01, "momentum": 0.9, "use_nesterov": True, "weight_decay": 0.01}),
    (uo.SGD(lr=0.01, momentum=0.9), {"use_multi_tensor": True}, "Momentum",
     {"learning_rate": 0.01, "momentum": 0.9, "use_multi_tensor": True}),
    (uo.Adam(lr=1e-2, amsgrad=True, weight_decay=0.01), {}, "Adam",
     {"learning_rate": 1e-2, "amsgrad": True, "weight_decay": 0.01}),
    (uo.Adam(lr=1e-2, betas=(0.8, 0.99), eps=1e-6), {"use_multi_tensor": True}, "Adam",
     {"learning_rate": 1e-2, "beta1": 0.8, "beta2": 0.99, "epsilon": 1e-6,
      "use_multi_tensor": True}),
    (uo.AdamW(lr=1e-2, weight_decay=0.1, no_decay_names=("*gamma*",)), {}, "AdamW",
     {"learning_rate": 1e-2, "weight_decay": 0.1}),
    (uo.SGD(lr=COSINE, momentum=0.9), {}, "Momentum", {"momentum": 0.9}),
    (uo.NAdam(lr=1e-2, weight_decay=0.01, momentum_decay=0.01), {}, "NAdam",
     {"learning_rate": 1e-2, "weight_decay": 0.01, "momentum_decay": 0.01}),
    (uo.RAdam(lr=1e-2, betas=(0.8, 0.99), eps=1e-6), {}, "RAdam",
     {"learning_rate": 1e-2, "beta1": 0.8, "beta2": 0.99, "epsilon": 1e-6}),
    (uo.Adamax(lr=1e-2, eps=0.1, weight_decay=0.01, eps_placement="on_decayed_norm"), {},
     "Adamax", {"learning_rate": 1e-2, "epsilon": 0.1, "weight_decay": 0.01}),
    (uo.Adagrad(lr=COSINE, eps=1e-6, initial_accumulator_value=0.1), {}, "Adagrad",
     {"epsilon": 1e-6, "initial_accumulator_value": 0.1}),
    (uo.Adadelta(lr=0.5, rho=0.95, weight_decay=0.01), {}, "Adadelta",
     {"learning_rate": 0.5, "rho": 0.95, "weight_decay": 0.01}),
    (uo.RMSprop(lr=COSINE, eps=0.1, eps_placement="inside", lr_placement="inside",
                momentum=0.9, centered=True, weight_decay=0.01), {}, "RMSProp",
     {"rho": 0.99, "epsilon": 0.1, "momentum": 0.9, "centered": True, "weight_decay": 0.01}),
    (uo.Rprop(lr=1e-2, etas=(0.3, 1.5), step_sizes=(1e-4, 0.05)), {"multi_precision": False},
     "Rprop", {"learning_rate": 1e-2, "learning_rate_range": (1e-4, 0.05), "etas": (0.3, 1.5)}),
]


@pytest.mark.parametrize("spec,options,name,arguments", NATIVE_CASES,
                         ids=[f"{i}-{c[2]}" for i, c in enumerate(NATIVE_CASES)])
def test_native_path_is_bit_identical_to_hand_built(spec, options, name, arguments):
    arrays = initial_arrays()
    ours = make_params(arrays)
    built = uo.build(spec, list(zip(arrays, ours)), options=options)
    assert uo.explain(built).native == f"paddle.optimizer.{name}"
    run_paddle(built, ours, gradient_stream(arrays), uo.lr_scheduler(built))

    theirs = make_params(arrays)
    scheduler = None
    if isinstance(spec.lr, schedules.Schedule):
        scheduler = paddle.optimizer.lr.LambdaDecay(learning_rate=1.0, lr_lambda=spec.lr)
        arguments = {**arguments, "learning_rate": scheduler}
    if spec.no_decay_names:
        decayed = {p.name for n, p in zip(arrays, theirs) if "gamma" not in n}
        arguments = {**arguments, "apply_decay_param_fun": lambda n: n in decayed}
    reference = hand_built(name, theirs, **arguments)
    run_paddle(reference, theirs, gradient_stream(arrays), scheduler)

    for a, b in zip(ours, theirs):
        assert np.array_equal(a.numpy(), b.numpy()), a.name
    for accumulator, per_param in reference._accumulators.items():
        for a, b in zip(ours, theirs):
            assert np.array_equal(built._accumulators[accumulator][a.name].numpy(),
                                  per_param[b.name].numpy()), accumulator


def test_nadam_mu_product_is_read_from_a_parameter_shaped_accumulator():
    """The note on the NAdam row: Paddle keeps mu_product with the parameter's shape, every
    element equal; the spec's 0-d value is one element, and a zero-size parameter (which
    Paddle's step skips) reads it from a non-empty one. With no non-empty parameter at
    all, the build runs the own update."""
    from unified_opt.backends.paddle.native import native_state

    arrays = {"w": np.ones((2, 3), "float32"), "empty": np.ones((0,), "float32")}
    params = make_params(arrays)
    optimizer = uo.build(uo.NAdam(lr=0.1), list(zip(arrays, params)))
    run_paddle(optimizer, params, ({"w": np.ones((2, 3), "float32"),
                                    "empty": np.ones((0,), "float32")} for _ in range(3)))
    accumulator = optimizer._accumulators["mu_product"][params[0].name].numpy()
    assert accumulator.shape == (2, 3) and (accumulator == accumulator.flat[0]).all()
    oracle = uo.reference(uo.NAdam(lr=0.1), {"w": arrays["w"]}, dtype="float32")
    for _ in range(3):
        oracle.step({"w": np.ones((2, 3), "float32")})
    row = uo.explain(optimizer).native_class
    for p in params:
        value = native_state(row, optimizer, p, uo.NAdam(lr=0.1))["mu_product"].numpy()
        assert value.shape == () and value == accumulator.flat[0]
        assert value == pytest.approx(oracle.state["w"]["mu_product"], rel=1e-6)

    empty, = make_params({"empty": np.ones((0,), "float32")})
    decision = uo.explain(uo.build(uo.NAdam(lr=0.1), [("empty", empty)]))
    assert decision.path == "own" and "when every parameter has zero size" in str(decision)
    with pytest.raises(ValueError, match="every parameter has zero size"):
        uo.build(uo.NAdam(lr=0.1), [("empty", empty)], path="native")


@pytest.mark.parametrize("path", ["native", "own"])
def test_step_is_skipped_when_grad_scaler_found_inf(path):
    p, = make_params({"w": np.ones(3, "float32")})
    optimizer = uo.build(uo.Adam(lr=0.1), [p], path=path)
    for found_inf, moved in ((paddle.to_tensor(True), False), (paddle.to_tensor(False), True)):
        optimizer._set_auxiliary_var("found_inf", found_inf)   # as GradScaler.step does
        p.grad = paddle.to_tensor(np.ones(3, "float32"))
        optimizer.step()
        assert optimizer._get_auxiliary_var("found_inf") is (not moved)
        assert np.array_equal(p.numpy(), np.ones(3, "float32")) is not moved


# -- explain ----------------------------------------------------------------------------

@pytest.mark.parametrize("spec,native,phrase", [
    (uo.SGD(lr=0.1), "paddle.optimizer.SGD", "computes exactly"),
    (uo.SGD(lr=0.1, momentum=0.9), "paddle.optimizer.Momentum", "computes exactly"),
    (uo.AdamW(no_decay_names=("*bias*",)), "paddle.optimizer.AdamW", "apply_decay_param_fun"),
    (uo.SGD(lr=0.1, momentum=0.9, dampening=0.1), None, "dampening=0"),
    (uo.SGD(lr=0.1, weight_decay=0.1, no_decay_names=("*bias*",)), "paddle.optimizer.SGD",
     "computes exactly"),
    (uo.Adam(eps_placement="eps_hat"), None, "eps_placement='outside'"),
    (uo.Adam(maximize=True), None, "maximize=False"),
    (uo.preset("mindspore.nn.AdamWeightDecay", weight_decay=0.1), None,
     "decay_form='before_update'"),
    (uo.NAdam(), "paddle.optimizer.NAdam", "mu_product parameter-shaped"),
    (uo.NAdam(weight_decay=0.1, decoupled_weight_decay=True), None,
     "decoupled_weight_decay=False"),
    (uo.RAdam(rectify_threshold=4.0), None, "rectify_threshold=5"),
    (uo.Adamax(), None, "eps_placement='on_decayed_norm'"),
    (uo.Adagrad(lr_decay=0.1), None, "lr_decay=0 (paddle.optimizer.Adagrad has no lr_decay)"),
    (uo.Adadelta(maximize=True), None, "maximize=False"),
    (uo.RMSprop(), None, "eps_placement='inside'"),
    (uo.RMSprop(eps_placement="inside", momentum=0.9), None,
     "lr_placement='inside' or momentum=0"),
    (uo.RMSprop(eps_placement="inside", initial_square_avg=1.0), None, "initial_square_avg=0"),
    (uo.Rprop(lr=COSINE), None, "a constant lr (paddle.optimizer.Rprop takes no LRScheduler"),
    (uo.Rprop(lr=1e-2, step_sizes=(0.0, 50.0)), None, "0 < step_sizes[0] <= lr <= step_sizes[1]"),
    (uo.Rprop(weight_decay=0.1), None, "weight_decay=0 (paddle.optimizer.Rprop has no weight"),
    (uo.Lion(), None, "paddle has no native optimizer for 'lion'"),
])
def test_explain_names_path_and_reason(spec, native, phrase):
    decision = uo.explain(spec, "paddle")
    assert decision.path == ("native" if native else "own")
    assert decision.native == native
    text = str(decision)
    assert (native or "SpecOptimizer") in text
    assert phrase in text


# -- parameters: a Layer, pairs, bare parameters -----------------------------------------

def test_layer_pairs_and_bare_parameters():
    from unified_opt.build import record_of

    spec = uo.AdamW(lr=1e-2, weight_decay=0.5, no_decay_names=("*bias*",))
    rng = np.random.default_rng(3)
    grads = [{"weight": rng.normal(size=(3, 2)).astype("float32"),
              "bias": rng.normal(size=(2,)).astype("float32")} for _ in range(5)]

    def check(params_of, names_of):
        """Build over ``params_of(layer)``; the spec sees the parameters as ``names_of``."""
        layer = paddle.nn.Linear(3, 2)
        layer.bias.set_value(np.array([1.0, -2.0], "float32"))
        names = names_of(layer)
        start = {names[0]: layer.weight.numpy(), names[1]: layer.bias.numpy()}
        optimizer = uo.build(spec, params_of(layer))
        assert record_of(optimizer).names == names
        assert uo.explain(optimizer).native == "paddle.optimizer.AdamW"
        run_paddle(optimizer, [layer.weight, layer.bias], grads)
        oracle = uo.reference(spec, start)
        float32_ref = uo.reference(spec, start, dtype="float32")
        for g in grads:
            renamed = dict(zip(names, g.values()))
            oracle.step(renamed)
            float32_ref.step(renamed)
        for name, p in zip(names, (layer.weight, layer.bias)):
            assert_close(name, p.numpy(), oracle.params[name], [float32_ref.params[name]])

    check(lambda layer: layer, lambda layer: ["weight", "bias"])
    check(lambda layer: list(layer.named_parameters()), lambda layer: ["weight", "bias"])
    # bare parameters are named by param.name ("linear_N.b_0"): the rule matches none
    with pytest.raises(ValueError, match=r"no_decay_names=\('\*bias\*',\) matches no parameter"):
        uo.build(spec, paddle.nn.Linear(3, 2).parameters())
    single = make_params({"w": np.ones(3, "float32")})[0]
    assert record_of(uo.build(uo.SGD(lr=0.1), single)).names == [single.name]


# -- state_dict round trip and repeated builds ---------------------------------------------

@pytest.mark.parametrize("spec,path", [
    (uo.Adam(lr=schedules.Step(lr=1e-2, step_size=2, gamma=0.5), eps_placement="eps_hat"),
     "auto"),
    (uo.SGD(lr=0.01, momentum=0.9, weight_decay=0.1, no_decay_names=("*gamma*",)), "auto"),
    (uo.Adam(lr=1e-2, amsgrad=True), "auto"),
    (uo.get("nadam", lr=1e-2), "own"),
])
def test_state_dict_round_trip(spec, path):
    arrays = initial_arrays()
    grads = list(gradient_stream(arrays, steps=8))

    def run(optimizer, params, stream):
        run_paddle(optimizer, params, stream, uo.lr_scheduler(optimizer))

    uninterrupted = make_params(arrays)
    run(uo.build(spec, list(zip(arrays, uninterrupted)), path=path), uninterrupted, grads)

    params = make_params(arrays)
    first = uo.build(spec, list(zip(arrays, params)), path=path)
    run(first, params, grads[:3])
    saved = {k: v if isinstance(v, dict) else v.clone() for k, v in first.state_dict().items()}
    saved_params = [p.numpy() for p in params]
    run(first, params, grads[3:5])          # move on, then go back to step 3
    for p, value in zip(params, saved_params):
        p.set_value(value)
    fresh = uo.build(spec, list(zip(arrays, params)), path=path)
    assert sorted(fresh.state_dict()) == sorted(saved)   # same keys in every build
    fresh.set_state_dict(saved)
    run(fresh, params, grads[3:])
    for a, b in zip(params, uninterrupted):
        assert np.array_equal(a.numpy(), b.numpy())


# -- bad input -------------------------------------------------------------------------

def test_bad_input_is_refused_before_anything_changes():
    p, q = make_params({"w": np.ones(3, "float32"), "v": np.ones(3, "float64")})
    with pytest.raises(TypeError, match="leaf"):
        uo.build(uo.SGD(lr=0.1), [("x", p * 2.0)])
    with pytest.raises(ValueError, match="options.*own implementation"):
        uo.build(uo.Adam(maximize=True), [p], options={"use_multi_tensor": True})
    with pytest.raises(ValueError, match="'foreach'.*allowed"):
        uo.build(uo.Adam(), [p], options={"foreach": True})
    with pytest.raises(ValueError, match="'grad_clip'.*not an implementation flag"):
        uo.build(uo.Adam(), [p], options={"grad_clip": None})
    with pytest.raises(TypeError, match="'use_multi_tensor' must be a bool"):
        uo.build(uo.Adam(), [p], options={"use_multi_tensor": 1})
    with pytest.raises(ValueError, match="use_multi_tensor=True needs float32"):
        uo.build(uo.Adam(), [q], options={"use_multi_tensor": True})
    with pytest.raises(ValueError, match="unique"):
        uo.build(uo.Adam(), [("a", p), ("b", p)])
    p.regularizer = paddle.regularizer.L2Decay(0.5)
    with pytest.raises(ValueError, match="regularizer"):
        uo.build(uo.Adam(), [p])
    p.regularizer = None
    p.optimize_attr["learning_rate"] = 0.5
    with pytest.raises(ValueError, match="optimize_attr"):
        uo.build(uo.Adam(), [p])
    p.optimize_attr["learning_rate"] = 1.0

    d = driver(uo.Adam(lr=0.1), {"w": np.ones((2, 3), "float32")})
    before = d.params_numpy()["w"]
    for bad in (np.ones((3, 2), "float32"), np.ones((2, 3), "float64")):
        with pytest.raises(ValueError, match=r"grads\['w'\]"):
            d.step({"w": bad})
    assert np.array_equal(d.params_numpy()["w"], before)
    assert np.array_equal(d.state_numpy()["w"]["exp_avg"], np.zeros((2, 3), "float32"))
