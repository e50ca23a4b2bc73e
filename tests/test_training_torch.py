"""Training-loop semantics on torch (issue 4): parameter groups, the gradient pre-step
(clipping, loss scale, non-finite skip, centralisation) and per-step hyperparameters
(weight-decay schedules, momentum cycling), on the native path (torch.optim classes
with step hooks) and the own path, against the float64 oracle at every step; and
bit-identity with the hand-written torch loop where one exists."""

import io

import numpy as np
import pytest
from conftest import require
from helpers import SHAPES, assert_pairs_within_floor, gradient_stream, initial_params

import unified_opt as uo

pytestmark = require("torch")
torch = pytest.importorskip("torch")

from unified_opt.conformance.drivers.torch import TorchDriver  # noqa: E402

STEPS = 60
FACTOR = 10.0


def _one_cycle(total=STEPS, **kwargs):
    return uo.schedules.preset("torch.optim.lr_scheduler.OneCycleLR", max_lr=0.05,
                               total_steps=total, **kwargs)


def _follows_oracle(spec, groups, path, grads, arrays=None, factor=FACTOR):
    """Drive the torch build and the float64 oracle (with groups) side by side: lr,
    skipped flags, parameters and states within ``factor`` x the float32 floor."""
    arrays = initial_params() if arrays is None else arrays
    driver = TorchDriver(spec, arrays, path=path, groups=groups)
    oracle = uo.reference(spec, arrays, groups=groups)
    floor32 = uo.reference(spec, arrays, "float32", groups=groups)
    for t, g in enumerate(grads):
        lr = driver.step(g)
        assert lr == oracle.step(g), f"lr differs at step {t}"
        floor32.step(g)
        got, state = driver.params_numpy(), driver.state_numpy()
        pairs = [(f"param {n}", got[n], oracle.params[n], floor32.params[n]) for n in arrays]
        pairs += [(f"state {n}.{k}", state[n][k], want, floor32.state[n][k])
                  for n in arrays for k, want in oracle.state[n].items()]
        assert_pairs_within_floor(pairs, t, factor)
    assert uo.skipped_steps(driver.optimizer) == oracle.skipped
    return driver, oracle


CLIP = uo.ClipByGlobalNorm(max_norm=1.0, eps=1e-6)
NO_DECAY = uo.Group(match=("bias", "ln.*"), exclude_from=("weight_decay",))

# (id, spec, groups): every case has a native torch row on path="auto"
CASES = [
    ("groups-lr_scale-decay", uo.AdamW(lr=uo.schedules.Cosine(lr=0.02, T_max=40),
                                       weight_decay=0.1),
     [NO_DECAY, uo.Group(match="w3d", lr_scale=2.5, weight_decay=0.3),
      uo.Group(match="v22", lr_scale=0.5)]),
    ("groups-fixed-lr", uo.SGD(lr=0.05, momentum=0.9, weight_decay=0.01),
     [uo.Group(match="w", lr=0.01), uo.Group(match="v22", lr_scale=3.0, weight_decay=0.2),
      uo.Group(match="ln.*", weight_decay=0.0)]),
    ("clip-global-torch-eps", uo.Adam(lr=1e-2, grad_clip=CLIP), None),
    ("clip-global-excluded", uo.Adam(lr=1e-2, grad_clip=CLIP),
     [uo.Group(match="w3d", exclude_from=("grad_clip",))]),
    ("clip-global-per-group", uo.SGD(lr=0.05, momentum=0.9, grad_clip=uo.ClipByGlobalNorm(
        max_norm=0.5, per_group=True)), [uo.Group(match=("w", "w3d"), lr_scale=2.0)]),
    ("clip-norm", uo.RMSprop(lr=1e-2, grad_clip=uo.ClipByNorm(max_norm=0.5, eps=1e-6)),
     None),
    ("clip-value", uo.Adamax(lr=1e-2, grad_clip=uo.ClipByValue(max=0.2, min=-0.05)), None),
    ("loss-scale", uo.AdamW(lr=1e-2, weight_decay=0.1, loss_scale=1024.0), [NO_DECAY]),
    ("loss-scale-odd", uo.SGD(lr=0.05, momentum=0.9, weight_decay=0.01, loss_scale=3.0),
     None),
    ("centralization", uo.SGD(lr=0.05, momentum=0.9, grad_centralization=True), None),
    ("decay-schedule-adamw", uo.AdamW(lr=1e-2, weight_decay=uo.schedules.Cosine(
        lr=0.3, T_max=30)), [NO_DECAY]),
    ("decay-schedule-sgd", uo.SGD(lr=0.05, momentum=0.9, weight_decay=uo.schedules.Step(
        lr=0.1, step_size=7, gamma=0.5)), None),
    ("decay-schedule-adagrad", uo.Adagrad(lr=0.05, weight_decay=uo.schedules.Exponential(
        lr=0.1, gamma=0.95)), None),
    ("cycle-sgd-momentum", uo.SGD(lr=_one_cycle(), momentum=0.9), None),
    ("cycle-sgd-nesterov", uo.SGD(lr=_one_cycle(three_phase=True), momentum=0.9,
                                  nesterov=True, weight_decay=0.01), None),
    ("cycle-adamw-betas", uo.AdamW(lr=_one_cycle(), weight_decay=0.1), [NO_DECAY]),
    ("cycle-nadam-betas", uo.NAdam(lr=_one_cycle(anneal_strategy="linear")), None),
    ("cycle-radam-betas", uo.RAdam(lr=_one_cycle()), None),
    ("everything", uo.AdamW(lr=_one_cycle(), weight_decay=uo.schedules.Cosine(
        lr=0.2, T_max=50), grad_clip=CLIP, loss_scale=256.0, skip_nonfinite=True,
        grad_centralization=True),
     [NO_DECAY, uo.Group(match="w3d", lr_scale=0.5, exclude_from=("grad_clip",))]),
]


@pytest.mark.parametrize("path", ["auto", "own"])
@pytest.mark.parametrize("case_id, spec, groups", CASES, ids=[c[0] for c in CASES])
def test_feature_follows_the_oracle(case_id, spec, groups, path):
    grads = list(gradient_stream(steps=STEPS))
    driver, _ = _follows_oracle(spec, groups, path, grads)
    assert driver.decision.path == ("native" if path == "auto" else "own")


# the other native rows, with what the hooks do around them (Adafactor cannot take a
# zero-size parameter natively: these shapes leave it out)
ROW_CASES = [
    ("adafactor", uo.preset("torch.optim.Adafactor", lr=1e-2, weight_decay=0.01).replace(
        grad_clip=CLIP, loss_scale=8.0, grad_centralization=True), [NO_DECAY]),
    ("adam-offload", uo.get("adam_offload", lr=_one_cycle(), weight_decay=0.01, grad_clip=CLIP,
                            loss_scale=4.0, skip_nonfinite=True), [NO_DECAY]),
    ("adamax-cycle-decay-schedule", uo.Adamax(lr=_one_cycle(), weight_decay=uo.schedules.Cosine(
        lr=0.05, T_max=30)), None),
    ("rmsprop-cycle", uo.RMSprop(lr=_one_cycle(), momentum=0.9,
                                 grad_clip=uo.ClipByNorm(max_norm=1.0)), None),
    ("adadelta-decay-schedule", uo.Adadelta(lr=1.0, weight_decay=uo.schedules.Cosine(
        lr=0.05, T_max=30), grad_clip=CLIP), None),
]


@pytest.mark.parametrize("path", ["auto", "own"])
@pytest.mark.parametrize("case_id, spec, groups", ROW_CASES, ids=[c[0] for c in ROW_CASES])
def test_other_native_rows_follow_the_oracle(case_id, spec, groups, path):
    shapes = {n: s for n, s in SHAPES.items() if n != "empty"}
    driver, _ = _follows_oracle(spec, groups, path, list(gradient_stream(shapes, steps=STEPS)),
                                arrays=initial_params(shapes))
    assert driver.decision.path == ("native" if path == "auto" else "own")


def _with_overflow(grads, steps):
    """``grads`` with inf / NaN planted in one parameter at ``steps``."""
    out = [dict(g) for g in grads]
    for i, t in enumerate(steps):
        bad = out[t]["w"].copy()
        bad[1, 2] = np.inf if i % 2 == 0 else np.nan
        out[t]["w"] = bad
    return out


@pytest.mark.parametrize("path", ["auto", "own"])
def test_skipped_steps_change_nothing_and_keep_the_schedule(path):
    spec = uo.AdamW(lr=_one_cycle(), weight_decay=uo.schedules.Cosine(lr=0.2, T_max=50),
                    loss_scale=1024.0, skip_nonfinite=True)
    overflow = [3, 4, 17, 40]
    grads = _with_overflow([{n: g * 1024.0 for n, g in s.items()}
                            for s in gradient_stream(steps=STEPS)], overflow)
    arrays = initial_params()
    driver = TorchDriver(spec, arrays, path=path, groups=[NO_DECAY])
    scheduler = driver.record.lr_scheduler
    for t, g in enumerate(grads):
        before = driver.params_numpy()
        steps_before = {n: driver.optimizer.state[p].get("step") for n, p in
                        driver.params.items()}
        steps_before = {n: None if s is None else float(s) for n, s in steps_before.items()}
        lr = driver.step(g)
        taken = t - sum(1 for s in overflow if s < t)
        assert lr == spec.lr(taken)
        if t in overflow:
            after = driver.params_numpy()
            for n in arrays:
                np.testing.assert_array_equal(after[n], before[n])
                state = driver.optimizer.state[driver.params[n]].get("step")
                assert (None if state is None else float(state)) == steps_before[n]
        assert scheduler.last_epoch == t + 1
    skipped = uo.skipped_steps(driver.optimizer)
    assert skipped == [t in overflow for t in range(STEPS)]
    _follows_oracle(spec, [NO_DECAY], path, grads)


def test_explain_says_how_the_native_path_runs_it():
    spec = uo.AdamW(lr=_one_cycle(), grad_clip=CLIP, skip_nonfinite=True)
    decision = uo.explain(spec, "torch")
    assert (decision.path, decision.native) == ("native", "torch.optim.AdamW")
    assert "step pre-hook" in decision.reason and "register_step_pre_hook" in decision.reason
    assert "momentum / betas" in decision.reason and "LambdaLR" in decision.reason
    plain = uo.explain(uo.AdamW(), "torch")
    assert "pre-hook" not in plain.reason
    # RMSprop with the lr inside its buffer is exact only while momentum = 0
    cycled = uo.explain(uo.RMSprop(lr=_one_cycle(), lr_placement="inside"), "torch")
    assert cycled.path == "own" and "momentum-cycling" in str(cycled)


def test_group_lr_and_current_lr_read_the_spec_lr():
    spec = uo.SGD(lr=uo.schedules.Step(lr=0.1, step_size=2, gamma=0.5))
    driver = TorchDriver(spec, initial_params(), groups=[uo.Group(match="*", lr_scale=0.25)])
    for t, g in enumerate(gradient_stream(steps=6)):
        assert driver.step(g) == spec.lr(t)
        assert {group["lr"] for group in driver.optimizer.param_groups} == \
            {0.25 * spec.lr(t + 1)}
    fixed = TorchDriver(uo.SGD(lr=0.1), initial_params(), groups=[uo.Group(match="*", lr=0.3)])
    assert fixed.current_lr() == 0.1 and fixed.optimizer.param_groups[0]["lr"] == 0.3


def test_param_groups_have_the_group_values():
    spec = uo.AdamW(lr=0.01, weight_decay=0.1)
    opt = uo.build(spec, {n: torch.nn.Parameter(torch.zeros(2)) for n in
                          ("w", "bias", "v", "u")}.items(),
                   groups=[uo.Group(match="bias", weight_decay=0.0),
                           uo.Group(match="v", lr_scale=2.0)])
    got = [(len(g["params"]), g["lr"], g["weight_decay"]) for g in opt.param_groups]
    assert got == [(2, 0.01, 0.1), (1, 0.01, 0.0), (1, 0.02, 0.1)]


def test_float64_and_zero_size_parameters_with_every_feature():
    shapes = {"w": (4, 3), "empty": (0,), "e2": (0, 3), "bias": (3,)}
    arrays = {n: a.astype(np.float64) for n, a in initial_params(shapes).items()}
    spec = CASES[-1][1]
    grads = [{n: g.astype(np.float64) * 256.0 for n, g in s.items()}
             for s in gradient_stream(shapes, steps=STEPS)]
    for path in ("auto", "own"):
        driver = TorchDriver(spec, arrays, path=path, groups=[NO_DECAY])
        assert driver.params["w"].dtype == torch.float64
        oracle = uo.reference(spec, arrays, groups=[NO_DECAY])
        for g in grads:
            driver.step(g)
            oracle.step(g)
        for n in ("w", "bias"):
            np.testing.assert_allclose(driver.params_numpy()[n], oracle.params[n],
                                       rtol=1e-12, atol=1e-14)


def test_closure_runs_before_the_pre_step():
    spec = uo.SGD(lr=0.1, grad_clip=uo.ClipByValue(max=0.5))
    for path in ("auto", "own"):
        p = torch.nn.Parameter(torch.zeros(3))
        opt = uo.build(spec, [("p", p)], path=path)

        def closure():
            opt.zero_grad()
            loss = (p - torch.tensor([2.0, 0.1, -3.0])).pow(2).sum()
            loss.backward()
            return loss

        assert float(opt.step(closure).detach()) == pytest.approx(13.01)
        np.testing.assert_allclose(p.detach().numpy(), [0.05, 0.02, -0.05], rtol=1e-6)


def test_state_dict_resumes_steps_taken_and_schedule():
    spec = uo.AdamW(lr=_one_cycle(), weight_decay=0.1, skip_nonfinite=True)
    grads = _with_overflow(list(gradient_stream(steps=30)), [2, 5])
    for path in ("auto", "own"):
        whole = TorchDriver(spec, initial_params(), path=path)
        for g in grads:
            whole.step(g)
        first = TorchDriver(spec, initial_params(), path=path)
        for g in grads[:10]:
            first.step(g)
        buffer = io.BytesIO()
        torch.save({"opt": first.optimizer.state_dict(),
                    "sched": first.record.lr_scheduler.state_dict()}, buffer)
        buffer.seek(0)
        saved = torch.load(buffer, weights_only=True)
        assert saved["opt"]["param_groups"][0]["steps_taken"] == 8
        again = TorchDriver(spec, first.params_numpy(), path=path)
        again.optimizer.load_state_dict(saved["opt"])
        again.record.lr_scheduler.load_state_dict(saved["sched"])
        for g in grads[10:]:
            again.step(g)
        for n, value in whole.params_numpy().items():
            np.testing.assert_array_equal(again.params_numpy()[n], value)


def test_sparse_gradients_are_refused_by_the_pre_step():
    p = torch.nn.Parameter(torch.zeros(4))
    opt = uo.build(uo.SGD(lr=0.1, loss_scale=2.0), [("p", p)])
    p.grad = torch.zeros(4).to_sparse()
    with pytest.raises(RuntimeError, match="sparse gradients are not supported"):
        opt.step()
    assert uo.skipped_steps(opt) == []


# -- bit-identity with the hand-written torch loop --------------------------------------

def _params(arrays):
    return {n: torch.nn.Parameter(torch.from_numpy(a.copy())) for n, a in arrays.items()}


def _hand_adamw_loop(arrays, grads, clip):
    params = _params(arrays)
    no_decay = [p for n, p in params.items() if n in ("bias", "ln.gamma")]
    decay = [p for n, p in params.items() if n not in ("bias", "ln.gamma")]
    opt = torch.optim.AdamW([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=0.01, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.01, total_steps=len(grads))
    return params, opt, sched


def _drive(params, opt, sched, grads, clip=None):
    trajectory = []
    for g in grads:
        for n, p in params.items():
            p.grad = torch.from_numpy(g[n].copy())
        if clip is not None:
            clip(list(params.values()))
        opt.step()
        opt.zero_grad()
        sched.step()
        trajectory.append({n: p.detach().numpy().copy() for n, p in params.items()})
    return trajectory


def _built(spec, arrays, groups):
    params = _params(arrays)
    opt = uo.build(spec, params.items(), groups=groups)
    assert uo.explain(opt).path == "native"
    return params, opt, uo.lr_scheduler(opt)


ADAMW_ONE_CYCLE = uo.preset("torch.optim.AdamW", lr=0.01, weight_decay=0.1).replace(
    lr=uo.schedules.preset("torch.optim.lr_scheduler.OneCycleLR", max_lr=0.01,
                           total_steps=100))
TORCH_NO_DECAY = [uo.Group(match=("bias", "ln.gamma"), weight_decay=0.0)]


def test_adamw_groups_one_cycle_bit_identical_to_the_hand_loop():
    arrays, grads = initial_params(), list(gradient_stream(steps=100))
    theirs = _drive(*_hand_adamw_loop(arrays, grads, None), grads)
    ours = _drive(*_built(ADAMW_ONE_CYCLE, arrays, TORCH_NO_DECAY), grads)
    for t, (a, b) in enumerate(zip(ours, theirs)):
        for n in arrays:
            np.testing.assert_array_equal(a[n], b[n], err_msg=f"{n} at step {t}")


def test_adamw_groups_one_cycle_clip_bit_identical_to_the_hand_loop():
    arrays, grads = initial_params(), list(gradient_stream(steps=100))
    clip = lambda ps: torch.nn.utils.clip_grad_norm_(ps, 1.0)  # noqa: E731
    theirs = _drive(*_hand_adamw_loop(arrays, grads, clip), grads, clip)
    spec = ADAMW_ONE_CYCLE.replace(grad_clip=CLIP)
    ours = _drive(*_built(spec, arrays, TORCH_NO_DECAY), grads)
    for t, (a, b) in enumerate(zip(ours, theirs)):
        for n in arrays:
            np.testing.assert_array_equal(a[n], b[n], err_msg=f"{n} at step {t}")


def test_sgd_one_cycle_momentum_and_value_clip_bit_identical_to_the_hand_loop():
    arrays, grads = initial_params(), list(gradient_stream(steps=100))
    params = _params(arrays)
    opt = torch.optim.SGD(params.values(), lr=0.05, momentum=0.9, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=100,
                                                three_phase=True)
    clip = lambda ps: torch.nn.utils.clip_grad_value_(ps, 0.3)  # noqa: E731
    theirs = _drive(params, opt, sched, grads, clip)
    spec = uo.SGD(lr=uo.schedules.preset("torch.optim.lr_scheduler.OneCycleLR", max_lr=0.05,
                                         total_steps=100, three_phase=True),
                  momentum=0.9, weight_decay=0.01, grad_clip=uo.ClipByValue(max=0.3))
    ours = _drive(*_built(spec, arrays, None), grads)
    for t, (a, b) in enumerate(zip(ours, theirs)):
        for n in arrays:
            np.testing.assert_array_equal(a[n], b[n], err_msg=f"{n} at step {t}")


def test_a_group_decay_the_native_class_cannot_take_goes_own():
    """torch.optim.Rprop has no weight decay: a group's decay sends the build to the own
    path instead of being dropped."""
    spec = uo.get("rprop", lr=0.01)
    groups = [uo.Group(match="w", weight_decay=0.5)]
    _follows_oracle(spec, groups, "auto", list(gradient_stream(steps=STEPS)))
    driver = TorchDriver(spec, initial_params(), groups=groups)
    assert driver.decision.path == "own"
    assert "every parameter group" in str(driver.decision)
