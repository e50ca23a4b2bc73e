"""Training-loop semantics on Paddle (issue 4): parameter groups, gradient clipping, loss
scale, skipped steps, gradient centralization, per-step weight decay and momentum,
on the native path (Paddle's own groups and ``grad_clip``) and the own path, against
the float64 reference; the native path bit for bit against Paddle built by hand; and
nothing left behind on the Parameter objects.

Paddle runs in this process (conftest imports mindspore first when it is installed).
"""

import numpy as np
import pytest
from conftest import require

import unified_opt as uo
from unified_opt import schedules
from unified_opt.conformance.compare import K, step_ratios
from unified_opt.native import import_native as native_class
from unified_opt.reference import with_float32_hyperparameters

pytestmark = require("paddle")
paddle = pytest.importorskip("paddle")

STEPS = 60
SHAPES = {"enc.weight": (4, 5), "enc.bias": (5,), "norm.gamma": (5,), "head.weight": (3, 4, 2),
          "empty.bias": (0,)}
BETAS = (0.875, 1.0 - 2.0 ** -10)   # 1-beta exact in float32 (see test_backend_paddle)
COSINE = schedules.Cosine(lr=0.05, T_max=30, eta_min=0.001)
# every kind of group: no decay, an lr factor with no clipping, another decay and lr
GROUPS = [uo.Group(match="*.bias", exclude_from=("weight_decay",)),
          uo.Group(match="norm.*", lr_scale=0.5, exclude_from=("grad_clip",)),
          uo.Group(match="head.*", lr_scale=2.0, weight_decay=0.03)]
GLOBAL = uo.ClipByGlobalNorm(max_norm=1.0, per_group=True)
UNCLIPPED = [uo.Group(match="norm.*", exclude_from=("grad_clip",))]   # need_clip only


def arrays_and_stream(steps=STEPS, scale=1.0, inf_at=()):
    rng = np.random.default_rng(0)
    arrays = {n: rng.normal(size=s).astype("float32") for n, s in SHAPES.items()}
    stream = []
    for t in range(steps):
        g = {n: (rng.normal(size=s) * rng.choice([0.0, 1e-30, 1.0, 50.0], size=s,
                                                 p=[.1, .1, .7, .1]) * scale
                 ).astype("float32") for n, s in SHAPES.items()}
        if t in inf_at:
            g["enc.weight"][1, 2] = np.inf
        stream.append(g)
    return arrays, stream


def run(spec, groups=GROUPS, path="auto", native=None, scale=1.0, inf_at=()):
    """STEPS steps through the Paddle driver; lr, skips, parameters and states checked
    at every step against the float64 reference within K x the float32 floor."""
    from unified_opt.conformance.drivers.paddle import PaddleDriver

    arrays, stream = arrays_and_stream(scale=scale, inf_at=inf_at)
    d = PaddleDriver(spec, arrays, path=path, groups=groups)
    assert d.decision.native == native, str(d.decision)
    oracle = uo.reference(spec, arrays, groups=groups)
    floors = [uo.reference(s, arrays, "float32", groups=groups)
              for s in (spec, with_float32_hyperparameters(spec))]
    for t, grads in enumerate(stream):
        assert d.step(grads) == oracle.step(grads), f"lr of step {t}"
        for r in floors:
            r.step(grads)
        params, state = d.params_numpy(), d.state_numpy()
        for n in arrays:
            pairs = [(n, params[n], oracle.params[n], [r.params[n] for r in floors])]
            pairs += [(f"{n}.{k}", v, oracle.state[n][k], [r.state[n][k] for r in floors])
                      for k, v in state[n].items()]
            for what, got, want, refs in pairs:
                ratio, nonfinite, error, floor = step_ratios(got[None], want[None],
                                                             [r[None] for r in refs])
                assert not nonfinite[0], f"step {t} {what}: NaN/Inf differ"
                assert ratio[0] <= K, f"step {t} {what}: {error[0]:.3g} = {ratio[0]:.3g} x floor"
    assert uo.skipped_steps(d.optimizer) == (oracle.skipped if d.decision.path == "own" else [])
    assert_nothing_left_behind(d.params.values())
    return d


def assert_nothing_left_behind(params):
    for p in params:
        assert p.regularizer is None and p.optimize_attr["learning_rate"] == 1.0 and \
            p.need_clip is True, (p.name, p.regularizer, p.optimize_attr, p.need_clip)


# -- groups and clips: native where Paddle computes them, and the own path ---------------

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
    (uo.Adam(lr=1e-2, betas=BETAS, weight_decay=0.01, grad_clip=uo.ClipByNorm(max_norm=0.5)),
     GROUPS, "Adam"),
    (uo.AdamW(lr=COSINE, betas=BETAS, weight_decay=0.1, grad_clip=GLOBAL), GROUPS, "AdamW"),
    (uo.Lamb(lr=1e-2, betas=BETAS, weight_decay=0.1, grad_clip=uo.ClipByNorm(max_norm=0.5)),
     GROUPS, "Lamb"),
    # one norm per uo.Group (Paddle's rule): a group of its own for enc.* though its lr
    # and decay are the others'
    (uo.SGD(lr=0.05, weight_decay=0.01, grad_clip=GLOBAL),
     [uo.Group(match="enc.*", weight_decay=0.01)], "SGD"),
    # one norm over every clipped parameter: they share one Paddle group here
    (uo.SGD(lr=0.05, weight_decay=0.01, grad_clip=uo.ClipByGlobalNorm(max_norm=1.0)),
     [uo.Group(match="norm.*", exclude_from=("grad_clip",), lr_scale=0.5)], "SGD"),
    # an absolute group lr Paddle's multiplier reaches exactly (0.5 x 0.5)
    (uo.SGD(lr=0.5, momentum=0.5), [uo.Group(match="*.bias", lr=0.25)], "Momentum"),
    (uo.RMSprop(lr=1e-2, eps=0.1, eps_placement="inside", lr_placement="inside",
                momentum=0.9, weight_decay=0.01), GROUPS, "RMSProp"),
]


@pytest.mark.parametrize("spec,groups,native", NATIVE,
                         ids=[f"{i}-{c[2]}" for i, c in enumerate(NATIVE)])
@pytest.mark.parametrize("path", ["auto", "own"])
def test_groups_and_clips_follow_the_reference(spec, groups, native, path):
    qualified = native if native.startswith("incubate") else f"optimizer.{native}"
    d = run(spec, groups, path, f"paddle.{qualified}" if path == "auto" else None)
    if path == "auto":
        assert isinstance(d.optimizer, native_class(f"paddle.{qualified}"))
        grouped = any(g.lr_scale or g.lr or g.weight_decay for g in groups)
        assert isinstance(d.optimizer._param_groups[0], dict) is grouped


@pytest.mark.parametrize("spec,groups,phrase", [
    (uo.SGD(lr=0.05, grad_clip=uo.ClipByGlobalNorm(max_norm=1.0)), GROUPS,
     "ClipGradByGlobalNorm takes one norm per group"),
    (uo.SGD(lr=0.05, grad_clip=uo.ClipByGlobalNorm(max_norm=1.0, eps=1e-6)), None,
     "a grad_clip with eps=0"),
    (uo.SGD(lr=0.1), [uo.Group(match="*.bias", lr=0.03)], "group lr=0.03 to be lr=0.1"),
    (uo.Rprop(lr=1e-2, step_sizes=(1e-4, 0.05)), GROUPS[1:2], "ignores a group's learning_rate"),
    (uo.Adam(lr=1e-2, weight_decay=0.01, loss_scale=64.0), None, "loss_scale=1"),
])
def test_what_paddle_cannot_compute_runs_the_own_update(spec, groups, phrase):
    d = run(spec, groups, scale=getattr(spec, "loss_scale", 1.0))
    assert d.decision.path == "own" and phrase in str(d.decision), str(d.decision)
    with pytest.raises(ValueError, match="path='native'"):
        uo.build(spec, make_params(), groups=groups, path="native")


def test_clip_by_norm_on_float64_runs_the_own_update():
    # Paddle's clip_by_norm CPU kernel is float32 only (paddle.md §12)
    spec = uo.Adam(lr=1e-2, grad_clip=uo.ClipByNorm(max_norm=0.5))
    (_, p), = make_params({"w": np.ones(3, "float64")})
    assert "float32 parameters for ClipByNorm" in str(uo.explain(uo.build(spec, [("w", p)])))
    assert uo.explain(uo.build(spec, make_params())).native == "paddle.optimizer.Adam"


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
    np.testing.assert_allclose(w.numpy(), 1 - 0.1 * 2.0 * scale, rtol=1e-6)
    # the float32 norm enters the float64 sum rounded to float32
    np.testing.assert_allclose(b.numpy(), 1 - 0.1 * 2.0 * scale, rtol=1e-6)


# -- the rest of the pre-step and per-step hyperparameters: the own update -----------------

OWN = [  # (spec, gradient scale, steps with an inf gradient)
    (uo.Adam(lr=1e-2, weight_decay=0.01, loss_scale=1024.0), 1024.0, ()),
    (uo.SGD(lr=COSINE, momentum=0.9, loss_scale=256.0, skip_nonfinite=True, grad_clip=GLOBAL),
     256.0, (3, 4, 17)),
    (uo.AdamW(lr=1e-2, weight_decay=0.1, grad_centralization=True), 1.0, ()),
    (uo.SGD(lr=0.05, momentum=0.9,
            weight_decay=schedules.Exponential(lr=0.05, gamma=0.95)), 1.0, ()),
    (uo.SGD(lr=schedules.OneCycle(max_lr=0.1, total_steps=STEPS, start_lr=0.004,
                                  end_lr=1e-4, cycle_momentum=True), momentum=0.9), 1.0, ()),
    (uo.AdamW(lr=schedules.OneCycle(max_lr=0.01, total_steps=STEPS, start_lr=4e-4,
                                    end_lr=1e-6, cycle_momentum=True),
              betas=BETAS, weight_decay=0.1), 1.0, ()),
]


@pytest.mark.parametrize("spec,scale,inf_at", OWN, ids=[
    "loss_scale", "skip_nonfinite", "centralization", "decay_schedule", "one_cycle_momentum",
    "one_cycle_adamw"])
def test_own_update_follows_the_reference(spec, scale, inf_at):
    d = run(spec, GROUPS, scale=scale, inf_at=inf_at)
    assert type(d.optimizer).__name__ == "SpecOptimizer"
    assert uo.skipped_steps(d.optimizer) == [t in inf_at for t in range(STEPS)]
    with pytest.raises(ValueError, match="path='native'"):
        uo.build(spec, make_params(), groups=GROUPS, path="native")


def test_skipped_step_keeps_the_schedule_position():
    spec = uo.SGD(lr=schedules.Step(lr=0.1, step_size=1, gamma=0.5), skip_nonfinite=True)
    d = run(spec, None, inf_at=(0, 2))
    scheduler = uo.lr_scheduler(d.optimizer)
    assert scheduler.skipped_steps == 2 and scheduler.last_epoch == STEPS
    assert d.current_lr() == 0.1 * 0.5 ** (STEPS - 2)


# -- the native path is Paddle's own groups and grad_clip, bit for bit --------------------

def make_params(arrays=None):
    arrays = arrays or arrays_and_stream()[0]
    out = []
    for name, a in arrays.items():
        p = paddle.create_parameter(list(a.shape), str(a.dtype),
                                    default_initializer=paddle.nn.initializer.Constant(0.0))
        p.set_value(a)
        out.append((name, p))
    return out


def hand_built_momentum(named):
    p = dict(named)
    p["norm.gamma"].need_clip = False
    return paddle.optimizer.Momentum(
        learning_rate=0.05, momentum=0.9, grad_clip=paddle.nn.ClipGradByGlobalNorm(1.0),
        parameters=[{"params": [p["enc.weight"]], "learning_rate": 1.0, "weight_decay": 0.01},
                    {"params": [p["enc.bias"], p["empty.bias"]], "learning_rate": 1.0,
                     "weight_decay": None},
                    {"params": [p["norm.gamma"]], "learning_rate": 0.5, "weight_decay": 0.01},
                    {"params": [p["head.weight"]], "learning_rate": 2.0,
                     "weight_decay": 0.03}]), None


def hand_built_adamw(named):
    p = dict(named)
    p["norm.gamma"].need_clip = False
    decayed = {p[n].name for n in ("enc.weight", "norm.gamma", "head.weight")}
    scheduler = paddle.optimizer.lr.LambdaDecay(learning_rate=1.0, lr_lambda=COSINE)
    return paddle.optimizer.AdamW(
        learning_rate=scheduler, beta1=BETAS[0], beta2=BETAS[1], weight_decay=0.1,
        apply_decay_param_fun=lambda name: name in decayed,
        grad_clip=paddle.nn.ClipGradByValue(max=0.5, min=-0.25),
        parameters=[{"params": [p["enc.weight"], p["enc.bias"], p["empty.bias"]],
                     "learning_rate": 1.0, "weight_decay": 0.1},
                    {"params": [p["norm.gamma"]], "learning_rate": 0.5, "weight_decay": 0.1},
                    {"params": [p["head.weight"]], "learning_rate": 2.0,
                     "weight_decay": 0.03}]), scheduler


def hand_built_lamb(named):
    p = dict(named)
    excluded = {p[n].name for n in ("enc.bias", "empty.bias")}
    return paddle.optimizer.Lamb(
        learning_rate=0.01, lamb_weight_decay=0.1, beta1=BETAS[0], beta2=BETAS[1],
        exclude_from_weight_decay_fn=lambda q: q.name in excluded,
        grad_clip=paddle.nn.ClipGradByNorm(0.5), parameters=list(p.values())), None


@pytest.mark.parametrize("spec,groups,by_hand", [
    (uo.preset("paddle.optimizer.Momentum", learning_rate=0.05, momentum=0.9,
               weight_decay=0.01, grad_clip=paddle.nn.ClipGradByGlobalNorm(1.0)),
     GROUPS, hand_built_momentum),
    (uo.AdamW(lr=COSINE, betas=BETAS, weight_decay=0.1,
              grad_clip=uo.ClipByValue(max=0.5, min=-0.25)), GROUPS, hand_built_adamw),
    (uo.preset("paddle.optimizer.Lamb", learning_rate=0.01, lamb_weight_decay=0.1,
               beta1=BETAS[0], beta2=BETAS[1], grad_clip=paddle.nn.ClipGradByNorm(0.5)),
     GROUPS[:1], hand_built_lamb),
], ids=["Momentum", "AdamW", "Lamb"])
def test_native_path_is_paddle_built_by_hand(spec, groups, by_hand):
    _, stream = arrays_and_stream()
    ours, theirs = make_params(), make_params()
    built = uo.build(spec, ours, groups=groups)
    assert_nothing_left_behind(p for _, p in ours)
    reference, scheduler = by_hand(theirs)
    for optimizer, named, sched in ((built, ours, uo.lr_scheduler(built)),
                                    (reference, theirs, scheduler)):
        for grads in stream:
            for name, p in named:
                p.grad = paddle.to_tensor(grads[name])
            optimizer.step()
            optimizer.clear_grad(set_to_zero=False)
            if sched is not None:
                sched.step()
    for (name, a), (_, b) in zip(ours, theirs):
        assert np.array_equal(a.numpy(), b.numpy()), name
    assert_nothing_left_behind(p for _, p in ours)
    uo.build(spec, ours, groups=groups)   # the next build finds the Parameters clean
    if isinstance(reference._param_groups[0], dict):
        # ... where Paddle's own group optimizer leaves its attributes behind (paddle.md §3)
        gamma = dict(theirs)["norm.gamma"]
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


# -- the order: clip, then the coupled weight decay (paddle.md §7) ----------------------

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
    np.testing.assert_allclose(p.numpy(), oracle.params["w"], rtol=1e-6)   # [2.75, 4.25]
    assert uo.skipped_steps(optimizer) == [False]


def test_resume_keeps_the_count_of_skipped_steps():
    spec = uo.SGD(lr=schedules.Step(lr=0.1, step_size=1, gamma=0.5), momentum=0.9,
                  skip_nonfinite=True)
    _, stream = arrays_and_stream(steps=8, inf_at=(1, 2))

    def run_steps(optimizer, named, grads_list):
        for grads in grads_list:
            for name, p in named:
                p.grad = paddle.to_tensor(grads[name])
            optimizer.step()
            optimizer.clear_grad(set_to_zero=False)
            uo.lr_scheduler(optimizer).step()

    whole = make_params()
    uninterrupted = uo.build(spec, whole)
    run_steps(uninterrupted, whole, stream)
    first = make_params()
    optimizer = uo.build(spec, first)
    run_steps(optimizer, first, stream[:4])
    saved = optimizer.state_dict()
    assert saved["LR_Scheduler"]["skipped_steps"] == 2
    resumed = make_params({n: p.numpy() for n, p in first})
    fresh = uo.build(spec, resumed)
    fresh.set_state_dict({k.replace(p.name, q.name): v for (_, p), (_, q) in
                          zip(first, resumed) for k, v in saved.items() if p.name in k}
                         | {"LR_Scheduler": saved["LR_Scheduler"]})
    run_steps(fresh, resumed, stream[4:])
    for (name, a), (_, b) in zip(whole, resumed):
        assert np.array_equal(a.numpy(), b.numpy()), name
    assert fresh.get_lr() == uninterrupted.get_lr() == 0.1 * 0.5 ** 6
