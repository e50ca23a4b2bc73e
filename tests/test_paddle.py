"""What is particular to the Paddle backend (the algorithms themselves: test_algorithms.py):
the native classes as built (thin subclasses scoping group attributes to ``step()``),
float64, float32-held betas, NAdam's parameter-shaped ``mu_product``, GradScaler's
``found_inf``, parameter forms and names, state_dict round trips, bad input, and the
training loop: Paddle's own groups and ``grad_clip`` (native, bit for bit against Paddle
built by hand, nothing left on the Parameters) and the own update around them.

Paddle runs in this process (conftest imports mindspore first when it is installed).
"""

import numpy as np
import pytest
from conftest import require
from support import (
    PARAMS,
    UntraceableSGD,
    assert_bit_identical,
    assert_passes,
    case_of,
    follow,
    judge,
    record,
)

import unified_opt as uo
from unified_opt import schedules
from unified_opt.conformance.compare import compare
from unified_opt.conformance.trajectory import reference_trajectory
from unified_opt.native import import_native as native_class

pytestmark = require("paddle")
paddle = pytest.importorskip("paddle")

STEPS = 60
#: betas whose 1-beta float32 keeps exactly (Paddle's float32 Adam kernel forms 1-beta
#: from float32(beta); test_native_adam_rounds_betas_to_float32 covers the defaults)
EXACT_BETAS = (0.875, 1.0 - 2.0 ** -10)
COSINE = schedules.Cosine(lr=0.05, T_max=30, eta_min=0.001)


def driver(spec, arrays, **kwargs):
    from unified_opt.conformance.drivers.paddle import PaddleDriver

    return PaddleDriver(spec, arrays, **kwargs)


def make_params(arrays):
    """(name, Parameter) pairs holding ``arrays``."""
    out = []
    for name, a in arrays.items():
        p = paddle.create_parameter(list(a.shape), str(a.dtype),
                                    default_initializer=paddle.nn.initializer.Constant(0.0))
        p.set_value(a)
        out.append((name, p))
    return out


def run_paddle(optimizer, named, case, steps, start=0, scheduler=None):
    """``steps`` steps of ``case``'s gradients, the usual Paddle loop."""
    for t in range(start, start + steps):
        grads = case.gradients(t)
        for name, p in named:
            p.grad = paddle.to_tensor(grads[name])
        optimizer.step()
        optimizer.clear_grad(set_to_zero=False)
        if scheduler is not None:
            scheduler.step()


def assert_nothing_left_behind(params):
    for p in params:
        assert p.regularizer is None and p.optimize_attr["learning_rate"] == 1.0 and \
            p.need_clip is True, (p.name, p.regularizer, p.optimize_attr, p.need_clip)


# -- the native classes as built --------------------------------------------------------

@pytest.mark.parametrize("spec, native", [
    (uo.SGD(lr=COSINE, momentum=0.9), "paddle.optimizer.Momentum"),
    (uo.SGD(lr=0.01, weight_decay=0.1, no_decay_names=("*gamma*",)), "paddle.optimizer.SGD"),
    (uo.AdamW(lr=schedules.Exponential(lr=1e-2, gamma=0.98), betas=EXACT_BETAS),
     "paddle.optimizer.AdamW"),
    (uo.Adagrad(lr=COSINE, eps=0.0, initial_accumulator_value=0.1), "paddle.optimizer.Adagrad"),
    (uo.Adam(lr=1e-2, maximize=True, amsgrad=True), None),
    (uo.Rprop(lr=COSINE), None),
])
def test_the_optimizer_is_the_class_and_a_schedule_an_lr_scheduler(spec, native):
    """Exactly the class, or the thin subclass that scopes group attributes to step();
    the own implementation's SpecOptimizer otherwise; an LRScheduler for a scheduled lr."""
    d = driver(spec, case_of("built", spec).initial_params())
    assert d.decision.native == native
    if native:
        cls = native_class(native)
        assert type(d.optimizer) is cls or (isinstance(d.optimizer, cls)
                                            and type(d.optimizer).__name__ == cls.__name__)
    else:
        assert type(d.optimizer).__name__ == "SpecOptimizer"
    assert (uo.native_scheduler(d.optimizer) is not None) == isinstance(spec.lr, schedules.Schedule)


def test_own_path_float64_is_the_reference():
    """float64 parameters run in float64: the numpy float64 oracle to float64 rounding."""
    spec = uo.AdamW(lr=1e-2, weight_decay=0.1, amsgrad=True)
    case = case_of("paddle_float64", spec)
    arrays = {n: a.astype("float64") for n, a in case.initial_params().items()}
    d = driver(spec, arrays, path="own")
    oracle = uo.reference(spec, arrays, dtype="float64")
    for t in range(20):
        grads = {n: g.astype("float64") for n, g in case.gradients(t).items()}
        d.step(grads)
        oracle.step(grads)
    # float64 on both sides, operation for operation: measured bit-identical on x86 with
    # AVX-512 and without; a margin still, as a kernel compiled with multiply-adds
    # contracted (GCC's default on Arm) may round one operation differently: an ulp
    # (1.1e-16) per operation and step stays far below 1e-13 in 20 steps
    for name, value in d.params_numpy().items():
        np.testing.assert_allclose(value, oracle.params[name], rtol=1e-13, atol=0)


def test_native_adam_rounds_betas_to_float32():
    """The note in the Adam rows: with beta2=0.999 the float32 kernel's exp_avg_sq is
    the spec's with float32(beta) (within the plain float32 floor), not the spec's (far
    outside it); the conformance floor holds the betas in float32 too."""
    spec = uo.Adam(lr=1e-2)
    case = case_of("paddle_adam_betas", spec)
    run = follow("paddle", case)
    assert run.decision.native == "paddle.optimizer.Adam"
    rounded = spec.replace(betas=tuple(float(np.float32(b)) for b in spec.betas))
    plain = [reference_trajectory(rounded, case, "float32")]
    assert compare(run.trajectory, reference_trajectory(rounded, case), plain).passed
    against_spec = compare(run.trajectory, reference_trajectory(spec, case),
                           [reference_trajectory(spec, case, "float32")])
    assert not against_spec.passed and against_spec.failing_quantity.endswith("exp_avg_sq")
    assert_passes(run)


def test_nadam_mu_product_is_read_from_a_parameter_shaped_accumulator():
    """The note on the NAdam row: Paddle keeps mu_product with the parameter's shape, every
    element equal; the spec's 0-d value is one element, and a zero-size parameter (which
    Paddle's step skips) reads it from a non-empty one. With no non-empty parameter at
    all, the build runs the own update."""
    from unified_opt.backends.paddle.native import native_state

    arrays = {"w": np.ones((2, 3), "float32"), "empty": np.ones((0,), "float32")}
    named = make_params(arrays)
    optimizer = uo.build(uo.NAdam(lr=0.1), named, prefer="native")
    for _ in range(3):
        for name, p in named:
            p.grad = paddle.to_tensor(np.ones_like(arrays[name]))
        optimizer.step()
        optimizer.clear_grad(set_to_zero=False)
    w = named[0][1]
    accumulator = optimizer._accumulators["mu_product"][w.name].numpy()
    assert accumulator.shape == (2, 3) and (accumulator == accumulator.flat[0]).all()
    row = uo.explain(optimizer).native_class
    for _, p in named:
        value = native_state(row, optimizer, p, uo.NAdam(lr=0.1))["mu_product"].numpy()
        assert value.shape == () and value == accumulator.flat[0]

    (_, empty), = make_params({"empty": np.ones((0,), "float32")})
    decision = uo.explain(uo.build(uo.NAdam(lr=0.1), [("empty", empty)]))
    assert decision.path == "own" and "when every parameter has zero size" in str(decision)
    with pytest.raises(ValueError, match="every parameter has zero size"):
        uo.build(uo.NAdam(lr=0.1), [("empty", empty)], path="native")


@pytest.mark.parametrize("path", ["native", "own"])
def test_step_is_skipped_when_grad_scaler_found_inf(path):
    (_, p), = make_params({"w": np.ones(3, "float32")})
    optimizer = uo.build(uo.Adam(lr=0.1), [p], path=path)
    for found_inf, moved in ((paddle.to_tensor(True), False), (paddle.to_tensor(False), True)):
        optimizer._set_auxiliary_var("found_inf", found_inf)   # as GradScaler.step does
        p.grad = paddle.to_tensor(np.ones(3, "float32"))
        optimizer.step()
        assert optimizer._get_auxiliary_var("found_inf") is (not moved)
        assert np.array_equal(p.numpy(), np.ones(3, "float32")) is not moved


def test_adam_offload_keeps_its_state_on_the_host():
    d = driver(uo.AdamOffload(lr=0.01), case_of("offload", uo.AdamOffload()).initial_params())
    d.step(case_of("offload", uo.AdamOffload()).gradients(0))
    assert all(t.place.is_cpu_place() for t in d.spec_state("w").values())


# -- parameters: a Layer, pairs, bare parameters -----------------------------------------

def test_layer_pairs_and_bare_parameters():
    from unified_opt.build import record_of

    spec = uo.AdamW(lr=1e-2, weight_decay=0.5, no_decay_names=("*bias*",))
    case = case_of("paddle_layer", spec, {"weight": (3, 2), "bias": (2,)})

    def check(params_of, names_of):
        """Build over ``params_of(layer)``; the spec sees the parameters as ``names_of``."""
        layer = paddle.nn.Linear(3, 2)
        start = case.initial_params()
        layer.weight.set_value(start["weight"])
        layer.bias.set_value(start["bias"])
        assert names_of(layer) == ["weight", "bias"]
        optimizer = uo.build(spec, params_of(layer))
        assert record_of(optimizer).names == ["weight", "bias"]
        assert uo.explain(optimizer).native == "paddle.optimizer.AdamW"
        named = [("weight", layer.weight), ("bias", layer.bias)]

        def step(grads):
            lr = optimizer.get_lr()
            for name, p in named:
                p.grad = paddle.to_tensor(grads[name])
            optimizer.step()
            optimizer.clear_grad(set_to_zero=False)
            return lr

        trajectory = record(step, lambda: ({n: p.numpy() for n, p in named}, {}), case)
        comparison = judge(trajectory, case, state=False)
        assert comparison.passed, comparison.detail

    check(lambda layer: layer, lambda layer: ["weight", "bias"])
    check(lambda layer: list(layer.named_parameters()), lambda layer: ["weight", "bias"])
    # bare parameters are named by param.name ("linear_N.b_0"): the rule matches none
    with pytest.raises(ValueError, match=r"no_decay_names=\('\*bias\*',\) matches no parameter"):
        uo.build(spec, paddle.nn.Linear(3, 2).parameters())
    (_, single), = make_params({"w": np.ones(3, "float32")})
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
    case = case_of("paddle_state_dict", spec)

    def run(optimizer, named, steps, start=0):
        run_paddle(optimizer, named, case, steps, start, uo.native_scheduler(optimizer))

    uninterrupted = make_params(case.initial_params())
    run(uo.build(spec, uninterrupted, path=path), uninterrupted, 8)

    named = make_params(case.initial_params())
    first = uo.build(spec, named, path=path)
    run(first, named, 3)
    saved = {k: v if isinstance(v, dict) else v.clone()      # Paddle's own form
             for k, v in paddle.optimizer.Optimizer.state_dict(first).items()}
    saved_params = [p.numpy() for _, p in named]
    run(first, named, 2, start=3)          # move on, then go back to step 3
    for (_, p), value in zip(named, saved_params):
        p.set_value(value)
    fresh = uo.build(spec, named, path=path)
    # same keys in every build
    assert sorted(paddle.optimizer.Optimizer.state_dict(fresh)) == sorted(saved)
    fresh.set_state_dict(saved)
    run(fresh, named, 5, start=3)
    assert_bit_identical({n: p.numpy() for n, p in named},
                         {n: p.numpy() for n, p in uninterrupted})


# -- bad input -------------------------------------------------------------------------

def test_bad_input_is_refused_before_anything_changes():
    (_, p), (_, q) = make_params({"w": np.ones(3, "float32"), "v": np.ones(3, "float64")})
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
    with pytest.raises(ValueError, match="parameter 'b' is the same parameter as parameter 'a'"):
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


# -- the training loop: Paddle's groups and grad_clip ----------------------------------

# every kind of group: no decay, an lr factor with no clipping, another decay and lr
GROUPS = [uo.Group(match=("bias", "empty"), exclude_from=("weight_decay",)),
          uo.Group(match="ln.*", lr_scale=0.5, exclude_from=("grad_clip",)),
          uo.Group(match="w3d", lr_scale=2.0, weight_decay=0.03)]
GLOBAL = uo.ClipByGlobalNorm(max_norm=1.0, per_group=True)
UNCLIPPED = [uo.Group(match="ln.*", exclude_from=("grad_clip",))]   # need_clip only
#: steps with an inf or NaN gradient element, where a case skips non-finite steps
SKIPS = (3, 4, 17)


def _loop(case_id, spec, groups, path="auto"):
    """``spec`` with ``groups`` on Paddle, against the oracle; nothing is left on the
    Parameters."""
    case = case_of(f"paddle_{case_id}", spec, PARAMS, steps=STEPS, groups=tuple(groups or ()),
                   nonfinite_steps=SKIPS if spec.skip_nonfinite else ())
    run = assert_passes(follow("paddle", case, path))
    assert_nothing_left_behind(run.driver.params.values())
    if run.decision.path == "native":
        assert uo.skipped_steps(run.driver.optimizer) == []
    return run


NATIVE = [  # (spec, groups, native class)
    (uo.SGD(lr=0.05, momentum=0.9, weight_decay=0.01, grad_clip=GLOBAL), GROUPS, "Momentum"),
    (uo.NAdam(lr=1e-2, weight_decay=0.01, grad_clip=GLOBAL), GROUPS, "NAdam"),
    (uo.Rprop(lr=1e-2, step_sizes=(1e-4, 0.05), grad_clip=uo.ClipByValue(max=0.5)),
     UNCLIPPED, "Rprop"),
    (uo.preset("paddle.incubate.optimizer.LarsMomentumOptimizer", learning_rate=0.1,
               momentum=0.9, lars_weight_decay=0.01, exclude_from_weight_decay=["bias"],
               grad_clip=paddle.nn.ClipGradByNorm(1.0)), UNCLIPPED,
     "incubate.optimizer.LarsMomentumOptimizer"),
    (uo.SGD(lr=COSINE, weight_decay=0.01, grad_clip=uo.ClipByValue(max=0.5, min=-0.25)),
     GROUPS, "SGD"),
    (uo.Adam(lr=1e-2, betas=EXACT_BETAS, weight_decay=0.01,
             grad_clip=uo.ClipByNorm(max_norm=0.5)), GROUPS, "Adam"),
    (uo.AdamW(lr=COSINE, betas=EXACT_BETAS, weight_decay=0.1, grad_clip=GLOBAL), GROUPS,
     "AdamW"),
    (uo.Lamb(lr=1e-2, betas=EXACT_BETAS, weight_decay=0.1,
             grad_clip=uo.ClipByNorm(max_norm=0.5)), GROUPS, "Lamb"),
    # one norm per uo.Group (Paddle's rule): a group of its own for w though its lr and
    # decay are the others'
    (uo.SGD(lr=0.05, weight_decay=0.01, grad_clip=GLOBAL),
     [uo.Group(match="w", weight_decay=0.01)], "SGD"),
    # one norm over every clipped parameter: they share one Paddle group here
    (uo.SGD(lr=0.05, weight_decay=0.01, grad_clip=uo.ClipByGlobalNorm(max_norm=1.0)),
     [uo.Group(match="ln.*", exclude_from=("grad_clip",), lr_scale=0.5)], "SGD"),
    # an absolute group lr Paddle's multiplier reaches exactly (0.5 x 0.5)
    (uo.SGD(lr=0.5, momentum=0.5), [uo.Group(match=("bias", "empty"), lr=0.25)], "Momentum"),
    (uo.RMSprop(lr=1e-2, eps=0.1, eps_placement="inside", lr_placement="inside",
                momentum=0.9, weight_decay=0.01), GROUPS, "RMSProp"),
]


@pytest.mark.parametrize("spec,groups,native", NATIVE,
                         ids=[f"{i}-{c[2]}" for i, c in enumerate(NATIVE)])
@pytest.mark.parametrize("path", ["auto", "native", "own"])
def test_groups_and_clips_follow_the_reference(spec, groups, native, path):
    qualified = native if native.startswith("incubate") else f"optimizer.{native}"
    run = _loop(f"groups_{native}", spec, groups, path)
    if path == "auto":      # the class, or the own update measured faster (prefer="speed")
        assert (run.decision.native or run.decision.alternative) == f"paddle.{qualified}", \
            str(run.decision)
    else:
        assert run.decision.native == (f"paddle.{qualified}" if path == "native" else None)
    if run.decision.path == "native":
        optimizer = run.driver.optimizer
        assert isinstance(optimizer, native_class(f"paddle.{qualified}"))
        grouped = any(g.lr_scale or g.lr or g.weight_decay for g in groups)
        assert isinstance(optimizer._param_groups[0], dict) is grouped


@pytest.mark.parametrize("spec,groups,phrase", [
    (uo.SGD(lr=0.05, grad_clip=uo.ClipByGlobalNorm(max_norm=1.0)), GROUPS,
     "ClipGradByGlobalNorm takes one norm per group"),
    (uo.SGD(lr=0.05, grad_clip=uo.ClipByGlobalNorm(max_norm=1.0, eps=1e-6)), None,
     "a grad_clip with eps=0"),
    (uo.SGD(lr=0.1), [uo.Group(match="bias", lr=0.03)], "group lr=0.03 to be lr=0.1"),
    (uo.Rprop(lr=1e-2, step_sizes=(1e-4, 0.05)), GROUPS[1:2], "ignores a group's learning_rate"),
    (uo.Adam(lr=1e-2, weight_decay=0.01, loss_scale=64.0), None, "loss_scale=1"),
])
def test_what_paddle_cannot_compute_runs_the_own_update(spec, groups, phrase):
    run = _loop("cannot", spec, groups)
    assert run.decision.path == "own" and phrase in str(run.decision), str(run.decision)
    with pytest.raises(ValueError, match="path='native'"):
        uo.build(spec, make_params(case_of("x", spec).initial_params()), groups=groups,
                 path="native")


def test_clip_by_norm_on_float64_runs_the_own_update():
    # Paddle's clip_by_norm CPU kernel is float32 only
    spec = uo.Adam(lr=1e-2, grad_clip=uo.ClipByNorm(max_norm=0.5))
    (_, p), = make_params({"w": np.ones(3, "float64")})
    assert "float32 parameters for ClipByNorm" in str(uo.explain(uo.build(spec, [("w", p)])))
    assert uo.explain(uo.build(spec, make_params(case_of("x", spec).initial_params()))) \
        .native == "paddle.optimizer.Adam"


def test_global_norm_clip_over_mixed_precisions_on_the_own_update():
    """float32 and float64 parameters clipped together: their norms are promoted to
    float64 before the global norm (paddle.stack takes one dtype)."""
    spec = uo.SGD(lr=0.1, grad_clip=uo.ClipByGlobalNorm(max_norm=0.5), skip_nonfinite=True)
    (_, w), = make_params({"w": np.ones(3, "float32")})
    (_, b), = make_params({"b": np.ones(2, "float64")})
    opt = uo.build(spec, [("w", w), ("b", b)])
    w.grad = paddle.to_tensor(np.full(3, 2.0, "float32"))
    b.grad = paddle.to_tensor(np.full(2, 2.0, "float64"))
    opt.step()
    scale = 0.5 / np.sqrt(5 * 4.0)
    # one step: an exact sum of squares, a sqrt, a division and a multiply-subtract,
    # each rounded once (FMA or not, any vector width): a few float32 ulps on any CPU;
    # rtol=1e-6 is 8
    np.testing.assert_allclose(w.numpy(), 1 - 0.1 * 2.0 * scale, rtol=1e-6)
    # the float32 norm enters the float64 sum rounded to float32
    np.testing.assert_allclose(b.numpy(), 1 - 0.1 * 2.0 * scale, rtol=1e-6)


OWN = [  # the rest of the pre-step and per-step hyperparameters: the own update
    uo.Adam(lr=1e-2, weight_decay=0.01, loss_scale=1024.0),
    uo.SGD(lr=COSINE, momentum=0.9, loss_scale=256.0, skip_nonfinite=True, grad_clip=GLOBAL),
    uo.AdamW(lr=1e-2, weight_decay=0.1, grad_centralization=True),
    uo.SGD(lr=0.05, momentum=0.9, weight_decay=schedules.Exponential(lr=0.05, gamma=0.95)),
    uo.SGD(lr=schedules.OneCycle(max_lr=0.1, total_steps=STEPS, start_lr=0.004, end_lr=1e-4,
                                 cycle_momentum=True), momentum=0.9),
    uo.AdamW(lr=schedules.OneCycle(max_lr=0.01, total_steps=STEPS, start_lr=4e-4,
                                   end_lr=1e-6, cycle_momentum=True),
             betas=EXACT_BETAS, weight_decay=0.1),
]


@pytest.mark.parametrize("spec", OWN, ids=[
    "loss_scale", "skip_nonfinite", "centralization", "decay_schedule", "one_cycle_momentum",
    "one_cycle_adamw"])
def test_own_update_follows_the_reference(spec):
    run = _loop("own", spec, GROUPS)
    assert type(run.driver.optimizer).__name__ == "SpecOptimizer"
    skips = SKIPS if spec.skip_nonfinite else ()
    assert uo.skipped_steps(run.driver.optimizer) == [t in skips for t in range(STEPS)]
    with pytest.raises(ValueError, match="path='native'"):
        uo.build(spec, make_params(case_of("x", spec).initial_params()), groups=GROUPS,
                 path="native")


def test_skipped_step_keeps_the_schedule_position():
    spec = uo.SGD(lr=schedules.Step(lr=0.1, step_size=1, gamma=0.5), skip_nonfinite=True)
    case = case_of("paddle_skip_position", spec, steps=STEPS, nonfinite_steps=(0, 2))
    run = assert_passes(follow("paddle", case))
    scheduler = uo.native_scheduler(run.driver.optimizer)
    assert scheduler.skipped_steps == 2 and scheduler.last_epoch == STEPS
    assert run.driver.current_lr() == 0.1 * 0.5 ** (STEPS - 2)


# -- the native path is Paddle's own groups and grad_clip, bit for bit --------------------

def hand_built_momentum(p):
    p["ln.gamma"].need_clip = p["ln.beta"].need_clip = False
    return paddle.optimizer.Momentum(
        learning_rate=0.05, momentum=0.9, grad_clip=paddle.nn.ClipGradByGlobalNorm(1.0),
        parameters=[{"params": [p["w"], p["scale"]], "learning_rate": 1.0,
                     "weight_decay": 0.01},
                    {"params": [p["bias"], p["empty"]], "learning_rate": 1.0,
                     "weight_decay": None},
                    {"params": [p["ln.gamma"], p["ln.beta"]], "learning_rate": 0.5,
                     "weight_decay": 0.01},
                    {"params": [p["w3d"]], "learning_rate": 2.0, "weight_decay": 0.03}]), None


def hand_built_adamw(p):
    p["ln.gamma"].need_clip = p["ln.beta"].need_clip = False
    decayed = {p[n].name for n in ("w", "ln.gamma", "ln.beta", "w3d", "scale")}
    scheduler = paddle.optimizer.lr.LambdaDecay(learning_rate=1.0, lr_lambda=COSINE)
    return paddle.optimizer.AdamW(
        learning_rate=scheduler, beta1=EXACT_BETAS[0], beta2=EXACT_BETAS[1], weight_decay=0.1,
        apply_decay_param_fun=lambda name: name in decayed,
        grad_clip=paddle.nn.ClipGradByValue(max=0.5, min=-0.25),
        parameters=[{"params": [p["w"], p["bias"], p["scale"], p["empty"]],
                     "learning_rate": 1.0, "weight_decay": 0.1},
                    {"params": [p["ln.gamma"], p["ln.beta"]], "learning_rate": 0.5,
                     "weight_decay": 0.1},
                    {"params": [p["w3d"]], "learning_rate": 2.0,
                     "weight_decay": 0.03}]), scheduler


def hand_built_lamb(p):
    excluded = {p[n].name for n in ("bias", "empty")}
    return paddle.optimizer.Lamb(
        learning_rate=0.01, lamb_weight_decay=0.1, beta1=EXACT_BETAS[0], beta2=EXACT_BETAS[1],
        exclude_from_weight_decay_fn=lambda q: q.name in excluded,
        grad_clip=paddle.nn.ClipGradByNorm(0.5), parameters=list(p.values())), None


@pytest.mark.parametrize("spec,groups,by_hand", [
    (uo.preset("paddle.optimizer.Momentum", learning_rate=0.05, momentum=0.9,
               weight_decay=0.01, grad_clip=paddle.nn.ClipGradByGlobalNorm(1.0)),
     GROUPS, hand_built_momentum),
    (uo.AdamW(lr=COSINE, betas=EXACT_BETAS, weight_decay=0.1,
              grad_clip=uo.ClipByValue(max=0.5, min=-0.25)), GROUPS, hand_built_adamw),
    (uo.preset("paddle.optimizer.Lamb", learning_rate=0.01, lamb_weight_decay=0.1,
               beta1=EXACT_BETAS[0], beta2=EXACT_BETAS[1],
               grad_clip=paddle.nn.ClipGradByNorm(0.5)),
     GROUPS[:1], hand_built_lamb),
], ids=["Momentum", "AdamW", "Lamb"])
def test_native_path_is_paddle_built_by_hand(spec, groups, by_hand):
    """Paddle's own group dicts, need_clip and clip objects, written by hand (attributes
    on the Parameters: not a Native's keyword arguments), against uo.build."""
    case = case_of("paddle_groups_by_hand", spec, PARAMS, steps=STEPS)
    ours, theirs = make_params(case.initial_params()), make_params(case.initial_params())
    built = uo.build(spec, ours, groups=groups)
    assert_nothing_left_behind(p for _, p in ours)
    reference, scheduler = by_hand(dict(theirs))
    run_paddle(built, ours, case, STEPS, scheduler=uo.native_scheduler(built))
    run_paddle(reference, theirs, case, STEPS, scheduler=scheduler)
    assert_bit_identical({n: p.numpy() for n, p in ours}, {n: p.numpy() for n, p in theirs})
    assert_nothing_left_behind(p for _, p in ours)
    uo.build(spec, ours, groups=groups)   # the next build finds the Parameters clean
    if isinstance(reference._param_groups[0], dict):
        # ... where Paddle's own group optimizer leaves its attributes behind
        gamma = dict(theirs)["ln.gamma"]
        assert (gamma.optimize_attr["learning_rate"], gamma.need_clip) == (0.5, False)
        with pytest.raises(ValueError, match="carries optimize_attr"):
            uo.build(spec, theirs, groups=groups)


# -- presets take Paddle's clips ----------------------------------------------------------

def test_presets_convert_paddle_clips():
    nn = paddle.nn
    q = "paddle.optimizer.Adam"
    assert uo.preset(q, grad_clip=nn.ClipGradByGlobalNorm(2.0, auto_skip_clip=True)) \
        .grad_clip == uo.ClipByGlobalNorm(max_norm=2.0, per_group=True)
    assert uo.preset(q, grad_clip=nn.ClipGradByNorm(0.5)).grad_clip == \
        uo.ClipByNorm(max_norm=0.5)
    assert uo.preset(q, grad_clip=nn.ClipGradByValue(0.5)).grad_clip == \
        uo.ClipByValue(max=0.5, min=-0.5)
    assert uo.preset("paddle.optimizer.Lamb", learning_rate=COSINE).lr == COSINE

    class Halve(nn.ClipGradByNorm):
        pass

    with pytest.raises(NotImplementedError, match="Halve has no spec clip"):
        uo.preset(q, grad_clip=Halve(1.0))
    with pytest.raises(TypeError, match="grad_clip must be None or a paddle.nn"):
        uo.preset(q, grad_clip=1.0)
    with pytest.raises(TypeError, match=r"uo.schedules.preset\('paddle.optimizer.lr.StepDecay'"):
        uo.preset(q, learning_rate=paddle.optimizer.lr.StepDecay(0.1, step_size=3))
    with pytest.raises(NotImplementedError, match=r"uo.Group\(match=.*exclude_from=\('weight"):
        uo.preset("paddle.optimizer.AdamW", apply_decay_param_fun=lambda n: "bias" not in n)
    with pytest.raises(NotImplementedError, match=r"uo.Group\(match=.*no_decay_names"):
        uo.preset("paddle.optimizer.Lamb", exclude_from_weight_decay_fn=lambda p: True)


def test_need_clip_false_on_a_parameter_is_refused_with_a_clip():
    (name, p), = make_params({"w": np.ones(3, "float32")})
    p.need_clip = False
    with pytest.raises(ValueError, match=r"need_clip=False.*exclude_from=\('grad_clip',\)"):
        uo.build(uo.SGD(lr=0.1, grad_clip=GLOBAL), [(name, p)])
    uo.build(uo.SGD(lr=0.1), [(name, p)])
    p.need_clip = True


# -- the order: clip, then the coupled weight decay -------------------------------------

@pytest.mark.parametrize("spec", [
    uo.SGD(lr=0.5, weight_decay=0.25, grad_clip=uo.ClipByGlobalNorm(max_norm=0.5)),
    uo.SGD(lr=0.5, momentum=0.9, weight_decay=0.25, grad_clip=uo.ClipByNorm(max_norm=0.5)),
], ids=["SGD", "Momentum"])
def test_paddle_clips_before_adding_the_coupled_decay(spec):
    (_, p), = make_params({"w": np.array([3.0, 4.0], "float32")})
    optimizer = uo.build(spec, [("w", p)], path="native")
    p.grad = paddle.to_tensor(np.array([0.6, 0.8], "float32"))   # norm 1: clipped to 0.5
    optimizer.step()
    oracle = uo.reference(spec, {"w": np.array([3.0, 4.0])})
    oracle.step({"w": np.array([0.6, 0.8])})
    # one float32 step (a norm of two values, a clip, a decay, a multiply-subtract): a
    # few ulps from the float64 oracle on any CPU; rtol=1e-6 is 8
    np.testing.assert_allclose(p.numpy(), oracle.params["w"], rtol=1e-6)   # [2.475, 3.3]
    decay_then_clip = np.array([3.0, 4.0]) - 0.5 * np.array([0.3, 0.4])      # [2.85, 3.8]
    assert np.abs(p.numpy() - decay_then_clip).min() > 0.3


def test_own_minimize_runs_the_pre_step():
    spec = uo.SGD(lr=0.5, loss_scale=4.0, grad_clip=uo.ClipByValue(max=0.5))
    (_, p), = make_params({"w": np.array([3.0, 4.0], "float32")})
    optimizer = uo.build(spec, [("w", p)])
    loss = (p * paddle.to_tensor(np.array([4.0, -8.0], "float32"))).sum()
    loss.backward()
    optimizer.minimize(loss)
    oracle = uo.reference(spec, {"w": np.array([3.0, 4.0])})
    oracle.step({"w": np.array([4.0, -8.0])})
    # one float32 step of exact values (1/4, 0.5, powers of two): a few ulps at most on
    # any CPU; rtol=1e-6 is 8
    np.testing.assert_allclose(p.numpy(), oracle.params["w"], rtol=1e-6)   # [2.75, 4.25]
    assert uo.skipped_steps(optimizer) == [False]


def test_resume_keeps_the_count_of_skipped_steps():
    spec = uo.SGD(lr=schedules.Step(lr=0.1, step_size=1, gamma=0.5), momentum=0.9,
                  skip_nonfinite=True)
    case = case_of("paddle_resume_skips", spec, nonfinite_steps=(1, 2))

    def run_steps(optimizer, named, steps, start=0):
        run_paddle(optimizer, named, case, steps, start, uo.native_scheduler(optimizer))

    whole = make_params(case.initial_params())
    uninterrupted = uo.build(spec, whole)
    run_steps(uninterrupted, whole, 8)
    first = make_params(case.initial_params())
    optimizer = uo.build(spec, first)
    run_steps(optimizer, first, 4)
    saved = paddle.optimizer.Optimizer.state_dict(optimizer)
    assert saved["LR_Scheduler"]["skipped_steps"] == 2
    resumed = make_params({n: p.numpy() for n, p in first})
    fresh = uo.build(spec, resumed)
    fresh.set_state_dict({k.replace(p.name, q.name): v for (_, p), (_, q) in
                          zip(first, resumed) for k, v in saved.items() if p.name in k}
                         | {"LR_Scheduler": saved["LR_Scheduler"]})
    run_steps(fresh, resumed, 4, start=4)
    assert_bit_identical({n: p.numpy() for n, p in whole}, {n: p.numpy() for n, p in resumed})
    assert fresh.get_lr() == uninterrupted.get_lr() == 0.1 * 0.5 ** 6


def test_a_parameter_saved_for_backward_and_stepped_on_the_vm_makes_backward_raise():
    """As after Paddle's own in-place step: autograd's version check sees the VM's write."""
    layer = paddle.nn.Linear(4, 4)
    opt = uo.build(uo.Lion(lr=0.1), layer)
    before = layer.weight.numpy().copy()
    loss = (layer.weight * layer.weight).sum()          # saves the weight for backward
    layer.weight.sum().backward()
    opt.step()
    assert not np.array_equal(before, layer.weight.numpy())
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_compile_true_refuses_at_build_an_update_that_would_run_eagerly():
    layer = paddle.nn.Linear(4, 4)
    with pytest.raises(ValueError, match=r"options compile=True, but the sgd update of "
                                         r"\S+ cannot run on the kernels: .*truth value"):
        uo.build(UntraceableSGD(lr=0.1), layer, path="own", options={"compile": True})
    uo.build(UntraceableSGD(lr=0.1), layer, path="own")          # "auto": eagerly
