"""What is particular to the MindSpore backend (the algorithms themselves:
test_algorithms.py): 0-size parameters left out of native classes, the device in the
decisions, measured CPU kernel behaviour behind the conditions (nn.Adagrad, nn.Momentum,
float32-held betas), parameter forms, ``ms.Model`` / ``TrainOneStepCell``, GRAPH_MODE,
checkpoints, bad input, and the training loop: groups with ``order_params``,
``loss_scale`` and weight-decay Cells on the native classes, bit for bit against the
class built by hand, and the own implementation around them.

MindSpore runs in this process (conftest imports it first).
"""

import dataclasses
import warnings

import numpy as np
import pytest
from conftest import require
from support import (
    LOOP_PARAMS,
    Run,
    UntraceableSGD,
    assert_bit_identical,
    assert_passes,
    case_of,
    follow,
    judge,
    record,
)

import unified_opt as uo
from unified_opt.conformance.compare import compare
from unified_opt.conformance.trajectory import Recorder, reference_trajectory
from unified_opt.conformance.verdict import References, verdict
from unified_opt.presets.mindspore_groups import mindspore_groups

pytestmark = require("mindspore")

STEPS = 50
COSINE = uo.schedules.Cosine(lr=0.05, T_max=30, eta_min=0.002)


def _nn(name):
    import mindspore.nn as nn
    return getattr(nn, name)


def _experimental(name):
    from mindspore.experimental import optim
    return getattr(optim, name)


def _tensors(grads, names):
    from mindspore import Tensor
    return tuple(Tensor(grads[n]) for n in names)


# -- 0-size parameters, the device, the measurements behind the conditions ----------------

def test_zero_size_parameters_are_left_out_of_a_native_optimizer():
    from mindspore import Parameter, Tensor
    spec = uo.Adam(lr=0.01, eps_placement="eps_hat")
    empty = Parameter(Tensor(np.zeros((0,), np.float32)), name="empty")
    full = Parameter(Tensor(np.ones((3,), np.float32)), name="full")
    opt = uo.build(spec, [("empty", empty), ("full", full)], prefer="native")
    assert list(opt.parameters) == [full]
    assert "zero-size parameters ['empty'] are left out" in uo.explain(opt).reason
    only_empty = uo.build(spec, [("empty", empty)])
    assert uo.explain(only_empty).path == "own"
    only_empty((Tensor(np.zeros((0,), np.float32)),))
    with pytest.raises(ValueError, match=r"a parameter with elements \(mindspore.nn.Adam cannot "
                                         r"hold none\)"):
        uo.build(spec, [("empty", empty)], path="native")


def test_decisions_know_the_device():
    from unified_opt.backend import Context, load

    backend = load("mindspore")
    on_gpu = backend.decide(uo.SGD(lr=0.1), "auto", Context(device="GPU"))
    assert on_gpu.path == "own"
    assert dict(on_gpu.rejected)["mindspore.nn.SGD"] == (
        "device in ('CPU',) (where mindspore.nn.SGD was measured exact; this is GPU)",)
    # nn.Lamb and nn.LARS have kernels on GPU and Ascend only
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
    computes plain momentum, not the spec's Nesterov form (which it fails by far)."""
    from mindspore import Parameter, Tensor
    spec = uo.SGD(lr=0.1, momentum=0.9, nesterov=True)
    case = case_of("nn_momentum_nesterov", spec, {"w": (6,)})
    trajectories = []
    for nesterov in (False, True):
        p = Parameter(Tensor(case.initial_params()["w"]), name="w")
        opt = _nn("Momentum")([p], learning_rate=0.1, momentum=0.9, use_nesterov=nesterov)

        def step(grads):
            opt(_tensors(grads, ["w"]))
            return 0.1

        trajectories.append(record(step, lambda: ({"w": p.asnumpy()}, {}), case))
    assert_bit_identical(trajectories[0].params, trajectories[1].params)
    assert judge(trajectories[1], case, state=False).worst_ratio > 1000


def test_native_adam_runs_the_spec_with_float32_betas():
    """What the note on the Adam rows means: against the plain float32 floor (betas not
    held in float32) the second moment is off by far more than the float32 noise; the
    conformance floor holds the betas in float32 too."""
    spec = uo.Adam(lr=0.01, eps_placement="eps_hat")
    case = case_of("mindspore_adam_betas", spec)
    run = assert_passes(follow("mindspore", case, "native"))
    assert run.decision.native == "mindspore.nn.Adam"
    plain = compare(run.trajectory, reference_trajectory(spec, case),
                    [reference_trajectory(spec, case, "float32")])
    assert not plain.passed and plain.failing_quantity.endswith("exp_avg_sq")
    rounded = spec.replace(betas=tuple(float(np.float32(b)) for b in spec.betas))
    assert compare(run.trajectory, reference_trajectory(rounded, case),
                   [reference_trajectory(rounded, case, "float32")]).passed


# -- parameter forms, ms.Model, GRAPH_MODE, checkpoints, bad input ------------------------

def _three_ways(arrays):
    """The same two parameters as a Cell, as (name, parameter) pairs and bare."""
    from mindspore import Parameter, Tensor, nn

    class Net(nn.Cell):
        def __init__(self):
            super().__init__()
            self.dense = nn.Dense(3, 2)
            self.dense.weight.set_data(Tensor(arrays["dense.weight"]))
            self.dense.bias.set_data(Tensor(arrays["dense.bias"]))

    net = Net()
    pairs = [(n, Parameter(Tensor(a), name=n)) for n, a in arrays.items()]
    bare = [Parameter(Tensor(a)) for a in arrays.values()]
    return {"cell": net, "pairs": pairs, "bare": bare}


@pytest.mark.parametrize("spec", [uo.SGD(lr=0.1, momentum=0.9, weight_decay=0.1),
                                  uo.AdamW(lr=0.01, no_decay_names=("*bias*",))],
                         ids=["native", "native-groups"])
@pytest.mark.parametrize("path", ["auto", "own", "native"])
def test_cell_pairs_and_bare_parameters(spec, path):
    case = case_of("cell_pairs_bare", spec, {"dense.weight": (2, 3), "dense.bias": (2,)})
    native = uo.explain(spec, "mindspore", prefer="native").native
    for form, params in _three_ways(case.initial_params()).items():
        if form == "bare" and spec.no_decay_names:
            with pytest.raises(ValueError, match="no_decay_names"):
                uo.build(spec, params, path=path)
            continue
        opt = uo.build(spec, params, path=path)
        decision = uo.explain(opt)
        if path == "auto":      # one of the two exact paths (prefer="speed": the faster)
            assert (decision.native or decision.alternative) == native, str(decision)
        else:
            assert (decision.path, decision.native) == (
                path, native if path == "native" else None), str(decision)
        assert uo.native_scheduler(opt) is None
        held = list(opt.parameters)

        def step(grads):
            opt(_tensors(grads, case.params))
            return spec.lr

        trajectory = record(step, lambda: ({n: p.asnumpy() for n, p in zip(case.params, held)},
                                           {}), case)
        comparison = judge(trajectory, case, state=False)
        assert comparison.passed, f"{form}: {comparison.detail}"


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
    # the same batches through the same forward, backward and update kernels (one
    # thread: conftest.py): the same bits whichever way drives them
    for other in finals[1:]:
        for a, b in zip(finals[0], other):
            np.testing.assert_array_equal(a, b)
    assert not np.allclose(finals[0][0], nn.Dense(3, 2).weight.asnumpy())


def test_own_state_round_trips_through_a_checkpoint(tmp_path):
    import mindspore as ms
    spec = uo.Adam(lr=0.01, weight_decay=0.1, amsgrad=True)
    case = case_of("mindspore_checkpoint", spec, {"w": (4, 5), "b": (3,)})

    def fresh():
        return uo.build(spec, [(n, ms.Parameter(ms.Tensor(a), name=n))
                               for n, a in case.initial_params().items()])

    straight, resumed = fresh(), fresh()
    for t in range(3):
        straight(_tensors(case.gradients(t), case.params))
    ms.save_checkpoint(straight, str(tmp_path / "opt.ckpt"))
    saved = ms.load_checkpoint(str(tmp_path / "opt.ckpt"))
    assert {"global_step", "learning_rate", "exp_avg.w", "max_exp_avg_sq.b"} <= set(saved)
    ms.load_param_into_net(resumed, saved)
    for t in range(3, 6):
        straight(_tensors(case.gradients(t), case.params))
        resumed(_tensors(case.gradients(t), case.params))
    assert_bit_identical({n: p.asnumpy() for n, p in zip(case.params, straight.parameters)},
                         {n: p.asnumpy() for n, p in zip(case.params, resumed.parameters)})


def test_bad_input_is_refused_before_any_change():
    import mindspore as ms
    w = np.arange(4, dtype=np.float32)
    p = ms.Parameter(ms.Tensor(w.copy()), name="w")
    with pytest.raises(ValueError, match="total_steps.*constant"):
        uo.build(uo.SGD(lr=0.1), [p], options={"total_steps": 10})
    with pytest.raises(TypeError, match="total_steps"):
        uo.build(uo.SGD(lr=COSINE), [p], options={"total_steps": 10.0})
    with pytest.raises(ValueError, match="not implementation flags.*use_locking"):
        uo.build(uo.Adam(lr=0.1, eps_placement="eps_hat"), [p], options={"loss_scale": 2.0})
    with pytest.raises(ValueError, match="apply to native classes"):
        uo.build(uo.Adam(lr=0.1, weight_decay=0.1), [p], options={"use_locking": True})
    double = ms.Parameter(ms.Tensor(w.astype(np.float64)), name="double")
    with pytest.raises(TypeError, match="float32 parameters"):
        uo.build(uo.SGD(lr=0.1), [double])
    frozen = ms.Parameter(ms.Tensor(w.copy()), name="frozen", requires_grad=False)
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
    assert np.array_equal(p.asnumpy(), w)
    assert int(opt.global_step.asnumpy()[0]) == 0
    opt((good,))
    ms.ops.assign(opt.learning_rate, ms.Tensor(0.5, ms.float32))
    with pytest.raises(RuntimeError, match="learning_rate was set"):
        opt((good,))
    ms.ops.assign(opt.learning_rate, ms.Tensor(COSINE(1), ms.float32))
    opt((good,))
    with pytest.raises(RuntimeError, match=r"options=\{'total_steps': 2\}: step 3 is past"):
        opt((good,))


# -- the training loop: groups, loss scale, weight-decay Cells ------------------------------

WD = uo.schedules.Cosine(lr=0.2, T_max=40, eta_min=0.01)          # a weight-decay schedule
ONE_CYCLE = uo.schedules.OneCycle(max_lr=0.05, total_steps=STEPS, start_lr=0.002, end_lr=2e-7,
                                  cycle_momentum=True)
#: steps with an inf or NaN gradient element, where a case skips non-finite steps
SKIPS = (4, 11, 12, 30)


def decay_cell(schedule):
    """MindSpore's dynamic weight decay, by hand: a Cell of global_step."""
    from mindspore import Tensor, nn, ops

    class Decay(nn.Cell):
        def __init__(self):
            super().__init__()
            self.values = Tensor(np.array([schedule(t) for t in range(STEPS)], np.float32))

        def construct(self, global_step):
            return ops.gather(self.values, global_step, 0).reshape(())

    return Decay()


def per_step(schedule, scale=1.0):
    return [scale * schedule(t) for t in range(STEPS)]


def ordered(ps, *groups):
    """nn group dicts (names -> the copies) plus order_params in parameter order."""
    return [{**g, "params": [ps[n] for n in g["params"]]} for g in groups] + \
        [{"order_params": list(ps.values())}]


def _loop_case(case_id, spec, groups=None):
    return case_of(f"mindspore_{case_id}", spec, LOOP_PARAMS, steps=STEPS,
                   groups=tuple(groups or ()),
                   nonfinite_steps=SKIPS if spec.skip_nonfinite else ())


def follow_and_match(case, by_hand=None, prefer="speed"):
    """``case`` through the MindSpore driver, judged against its oracle; with
    ``by_hand(params)`` (name -> a copy of each non-empty parameter) the native class
    built by hand, whose parameters and states must stay bit-identical at every step.
    ``prefer``: ``uo.build``'s ("native": the class wherever one is exact)."""
    from mindspore import Parameter, Tensor

    from unified_opt.conformance.drivers.mindspore import MindSporeDriver
    from unified_opt.conformance.worker import drive

    driver = MindSporeDriver(case.spec, case.initial_params(), total_steps=case.steps,
                             groups=case.groups or None, prefer=prefer)
    if by_hand is None:
        trajectory = drive(driver, case)
    else:
        copies = {n: Parameter(Tensor(a), name=n) for n, a in case.initial_params().items()
                  if a.size}
        hand = by_hand(copies)
        recorder = Recorder()
        for t in range(case.steps):
            grads = case.gradients(t)
            lr = driver.step(grads)
            params, state = driver.params_numpy(), driver.state_numpy()
            recorder.add(lr, params, state)
            hand(_tensors(grads, copies))
            assert_bit_identical({n: params[n] for n in copies},
                                 {n: p.asnumpy() for n, p in copies.items()}, f"step {t}")
            for name, p in copies.items():
                plan = driver.record.plans[driver.names.index(name)]
                theirs = {k: v.asnumpy() for k, v in load_state(driver, hand, p,
                                                                 plan.spec).items()}
                assert_bit_identical(state[name], theirs, f"step {t} state of {name}")
        trajectory = recorder.trajectory()
    result = verdict(case, "mindspore", "auto", trajectory, driver.decision, None,
                     References())
    return assert_passes(Run(case, "mindspore", "auto", trajectory, driver.decision, result,
                             driver))


def load_state(driver, optimizer, p, spec):
    """The state of ``p`` in ``optimizer`` (built by hand) under the spec's names, read
    through the descriptor of the class ``driver`` built."""
    from unified_opt.backends.mindspore.native import native_state

    return native_state(driver.decision.native_class, optimizer, p, spec)


NN_ALL = ["w", "bias", "ln.gamma", "w3d"]
# (id, spec, groups, expected native class or "own", by hand)
CASES = [
    # -- parameter groups -------------------------------------------------------------
    ("nn-groups-lr-scale", uo.SGD(lr=COSINE, momentum=0.9, momentum_init="zeros",
                                  weight_decay=0.01),
     [uo.Group(match="*bias", lr_scale=2.0, weight_decay=0.0), uo.Group(match="w*", lr_scale=0.5)],
     "mindspore.nn.Momentum",
     lambda ps: _nn("Momentum")(ordered(
         ps, {"params": ["w", "w3d"], "lr": per_step(COSINE, 0.5), "weight_decay": 0.01},
         {"params": ["bias"], "lr": per_step(COSINE, 2.0), "weight_decay": 0.0},
         {"params": ["ln.gamma"], "weight_decay": 0.01}),
         learning_rate=per_step(COSINE), momentum=0.9)),
    ("nn-groups-fixed-lr", uo.Adam(lr=0.01, eps_placement="eps_hat", weight_decay=0.1),
     [uo.Group(match="ln.*", lr=0.05, exclude_from=("weight_decay",))], "mindspore.nn.Adam",
     lambda ps: _nn("Adam")(ordered(
         ps, {"params": ["w", "bias", "w3d"], "weight_decay": 0.1},
         {"params": ["ln.gamma"], "lr": 0.05, "weight_decay": 0.0}), learning_rate=0.01)),
    ("experimental-groups", uo.AdamW(lr=0.01, weight_decay=0.1),
     [uo.Group(match="bias", lr_scale=3.0, exclude_from=("weight_decay",))],
     "mindspore.experimental.optim.AdamW",
     lambda ps: _experimental("AdamW")([
         {"params": [ps["w"]], "lr": 0.01, "weight_decay": 0.1},
         {"params": [ps["bias"]], "lr": 0.01 * 3.0, "weight_decay": 0.0},
         {"params": [ps["ln.gamma"], ps["w3d"]], "lr": 0.01, "weight_decay": 0.1}], lr=0.01)),
    # -- clipping (the train step's in MindSpore: own) -----------------------------------
    ("clip-global-exclude", uo.SGD(lr=0.05, momentum=0.9, weight_decay=0.01,
                                   grad_clip=uo.ClipByGlobalNorm(max_norm=1.0)),
     [uo.Group(match="bias", exclude_from=("grad_clip",))], "own", None),
    ("clip-global-per-group", uo.AdamW(lr=0.01, grad_clip=uo.ClipByGlobalNorm(
        max_norm=1.0, per_group=True)), [uo.Group(match="w*", lr_scale=0.5)], "own", None),
    ("clip-norm", uo.Adam(lr=0.01, weight_decay=0.1, grad_clip=uo.ClipByNorm(max_norm=0.5)),
     None, "own", None),
    ("clip-value", uo.SGD(lr=0.05, grad_clip=uo.ClipByValue(max=0.1, min=-0.2)), None, "own",
     None),
    # -- loss scale: natively where the class divides by it -----------------------------
    ("loss-scale-nn-sgd", uo.preset("mindspore.nn.SGD", learning_rate=0.05, momentum=0.9,
                                    weight_decay=0.01, loss_scale=1024), None,
     "mindspore.nn.SGD", lambda ps: _nn("SGD")(list(ps.values()), learning_rate=0.05,
                                               momentum=0.9, weight_decay=0.01,
                                               loss_scale=1024)),
    ("loss-scale-nn-momentum", uo.preset("mindspore.nn.Momentum", learning_rate=COSINE,
                                         momentum=0.9, weight_decay=0.01, loss_scale=3.0),
     None, "mindspore.nn.Momentum",
     lambda ps: _nn("Momentum")(list(ps.values()), learning_rate=per_step(COSINE),
                                momentum=0.9, weight_decay=0.01, loss_scale=3.0)),
    ("loss-scale-nn-adam", uo.preset("mindspore.nn.Adam", learning_rate=0.01, eps=1e-3,
                                     weight_decay=0.1, use_amsgrad=True, loss_scale=128.0),
     None, "mindspore.nn.Adam",
     lambda ps: _nn("Adam")(list(ps.values()), learning_rate=0.01, eps=1e-3,
                            weight_decay=0.1, use_amsgrad=True, loss_scale=128.0)),
    ("loss-scale-nn-adam-offload", uo.preset("mindspore.nn.Adam", learning_rate=0.01,
                                             weight_decay=0.1, use_offload=True,
                                             loss_scale=64.0), None, "mindspore.nn.Adam",
     lambda ps: _nn("Adam")(list(ps.values()), learning_rate=0.01, weight_decay=0.1,
                            use_offload=True, loss_scale=64.0)),
    ("loss-scale-nn-adamax", uo.preset("mindspore.nn.AdaMax", learning_rate=0.01, eps=0.1,
                                       weight_decay=0.1, loss_scale=10.0), None,
     "mindspore.nn.AdaMax",
     lambda ps: _nn("AdaMax")(list(ps.values()), learning_rate=0.01, eps=0.1,
                              weight_decay=0.1, loss_scale=10.0)),
    ("loss-scale-nn-adagrad", uo.preset("mindspore.nn.Adagrad", learning_rate=0.01,
                                        weight_decay=0.1, loss_scale=256.0), None,
     "mindspore.nn.Adagrad",
     lambda ps: _nn("Adagrad")(list(ps.values()), learning_rate=0.01, weight_decay=0.1,
                               loss_scale=256.0)),
    ("loss-scale-nn-adadelta", uo.preset("mindspore.nn.Adadelta", epsilon=1e-3,
                                         weight_decay=0.1, loss_scale=32.0), None,
     "mindspore.nn.Adadelta",
     lambda ps: _nn("Adadelta")(list(ps.values()), epsilon=1e-3, weight_decay=0.1,
                                loss_scale=32.0)),
    ("loss-scale-nn-rmsprop", uo.preset("mindspore.nn.RMSProp", learning_rate=0.01,
                                        momentum=0.9, centered=True, weight_decay=0.1,
                                        loss_scale=16.0), None, "mindspore.nn.RMSProp",
     lambda ps: _nn("RMSProp")(list(ps.values()), learning_rate=0.01, momentum=0.9,
                               centered=True, weight_decay=0.1, loss_scale=16.0)),
    ("loss-scale-own", uo.AdamW(lr=0.01, weight_decay=0.1, loss_scale=512.0), None, "own",
     None),
    ("loss-scale-nn-adamweightdecay-own", uo.preset(
        "mindspore.nn.AdamWeightDecay", learning_rate=0.01, weight_decay=0.1).replace(
        loss_scale=8.0), None, "own", None),
    # -- overflow skipping and centralization (own) --------------------------------------
    ("skip-nonfinite", uo.SGD(lr=COSINE, momentum=0.9, weight_decay=0.01, loss_scale=64.0,
                              skip_nonfinite=True), None, "own", None),
    ("grad-centralization", uo.Adam(lr=0.01, eps_placement="eps_hat", weight_decay=0.1,
                                    grad_centralization=True), None, "own", None),
    # -- dynamic weight decay: the Cell form -------------------------------------------
    ("wd-schedule-nn-momentum", uo.preset("mindspore.nn.Momentum", learning_rate=0.05,
                                          momentum=0.9, weight_decay=WD, loss_scale=4.0),
     None, "mindspore.nn.Momentum",
     lambda ps: _nn("Momentum")(list(ps.values()), learning_rate=0.05, momentum=0.9,
                                weight_decay=decay_cell(WD), loss_scale=4.0)),
    ("wd-schedule-nn-adam-groups", uo.Adam(lr=COSINE, eps_placement="eps_hat", weight_decay=WD),
     [uo.Group(match="bias", weight_decay=0.05), uo.Group(match="w3d", lr_scale=0.5)],
     "mindspore.nn.Adam",
     lambda ps: _nn("Adam")(ordered(
         ps, {"params": ["w", "ln.gamma"], "weight_decay": decay_cell(WD)},
         {"params": ["bias"], "weight_decay": 0.05},
         {"params": ["w3d"], "lr": per_step(COSINE, 0.5), "weight_decay": decay_cell(WD)}),
         learning_rate=per_step(COSINE))),
    ("wd-schedule-nn-adamweightdecay", uo.preset("mindspore.nn.AdamWeightDecay",
                                                 learning_rate=0.01, weight_decay=WD),
     None, "mindspore.nn.AdamWeightDecay",
     lambda ps: _nn("AdamWeightDecay")(list(ps.values()), learning_rate=0.01,
                                       weight_decay=decay_cell(WD))),
    ("wd-schedule-nn-adamax", uo.preset("mindspore.nn.AdaMax", learning_rate=0.01, eps=0.1,
                                        weight_decay=WD), None, "mindspore.nn.AdaMax",
     lambda ps: _nn("AdaMax")(list(ps.values()), learning_rate=0.01, eps=0.1,
                              weight_decay=decay_cell(WD))),
    ("wd-schedule-nn-adagrad", uo.preset("mindspore.nn.Adagrad", learning_rate=0.01,
                                         weight_decay=WD), None, "mindspore.nn.Adagrad",
     lambda ps: _nn("Adagrad")(list(ps.values()), learning_rate=0.01,
                               weight_decay=decay_cell(WD))),
    ("wd-schedule-nn-adadelta", uo.preset("mindspore.nn.Adadelta", epsilon=1e-3,
                                          weight_decay=WD), None, "mindspore.nn.Adadelta",
     lambda ps: _nn("Adadelta")(list(ps.values()), epsilon=1e-3,
                                weight_decay=decay_cell(WD))),
    ("wd-schedule-nn-rmsprop", uo.preset("mindspore.nn.RMSProp", learning_rate=0.01,
                                         centered=True, weight_decay=WD), None,
     "mindspore.nn.RMSProp",
     lambda ps: _nn("RMSProp")(list(ps.values()), learning_rate=0.01, centered=True,
                               weight_decay=decay_cell(WD))),
    ("wd-schedule-nn-rprop", uo.preset("mindspore.nn.Rprop", learning_rate=0.01,
                                       weight_decay=WD), None, "mindspore.nn.Rprop",
     lambda ps: _nn("Rprop")(list(ps.values()), learning_rate=0.01,
                             weight_decay=decay_cell(WD))),
    ("wd-schedule-own", uo.SGD(lr=0.05, momentum=0.9, weight_decay=WD), None, "own", None),
    ("wd-schedule-experimental-own", uo.AdamW(lr=0.01, weight_decay=WD), None, "own", None),
    # -- momentum cycling (own) ---------------------------------------------------------
    ("one-cycle-momentum", uo.SGD(lr=ONE_CYCLE, momentum=0.9, momentum_init="zeros"), None,
     "own", None),
    ("one-cycle-beta1", uo.Adam(lr=ONE_CYCLE, eps_placement="eps_hat", weight_decay=0.01),
     [uo.Group(match="bias", lr_scale=0.1)], "own", None),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_training_loop_feature_follows_the_oracle_and_the_class_by_hand(case):
    case_id, spec, groups, expected, by_hand = case
    # the class where one is exact (prefer="speed" may take the faster own path)
    run = follow_and_match(_loop_case(case_id, spec, groups), by_hand, prefer="native")
    assert (run.decision.native or "own") == expected, str(run.decision)


def test_skipped_steps_change_nothing_and_are_reported():
    spec = uo.SGD(lr=COSINE, momentum=0.9, loss_scale=64.0, skip_nonfinite=True)
    run = follow_and_match(_loop_case("skips", spec))
    optimizer = run.driver.optimizer
    assert [i for i, s in enumerate(uo.skipped_steps(optimizer)) if s] == list(SKIPS)
    # the schedule position is the number of steps taken
    assert int(optimizer.global_step.asnumpy()[0]) == STEPS - len(SKIPS)
    assert optimizer.next_lr() == COSINE(STEPS - len(SKIPS))
    assert all(np.isfinite(p).all() for p in run.driver.params_numpy().values())


@pytest.mark.parametrize("spec,groups,wrong,wrong_groups", [
    (uo.SGD(lr=COSINE, momentum=0.9, momentum_init="zeros", weight_decay=0.01),
     [uo.Group(match="*bias", lr_scale=2.0)], {}, [uo.Group(match="*bias", lr_scale=2.5)]),
    (uo.preset("mindspore.nn.Momentum", learning_rate=0.05, momentum=0.9, weight_decay=0.05,
               loss_scale=8.0), None, {"weight_decay": 0.05 / 8.0}, None),
    (uo.preset("mindspore.nn.Momentum", learning_rate=0.05, momentum=0.9, weight_decay=WD),
     None, {"weight_decay": uo.schedules.Cosine(lr=0.25, T_max=40, eta_min=0.01)}, None),
], ids=["group-lr", "loss-scale", "wd-schedule"])
def test_comparison_flags_a_planted_deviation(spec, groups, wrong, wrong_groups):
    """The checks have power: the oracle off by the feature under test fails the run."""
    case = _loop_case("planted", spec, groups)
    run = follow_and_match(case)
    wrong_case = dataclasses.replace(case, groups=tuple(wrong_groups or ()))
    assert not judge(run.trajectory, wrong_case, spec.replace(**wrong)).passed


@pytest.mark.parametrize("spec,groups,native,phrase", [
    (uo.SGD(lr=0.1, loss_scale=8.0), None, "mindspore.nn.SGD", "computes exactly"),
    (uo.SGD(lr=0.1, loss_scale=8.0, grad_clip=uo.ClipByNorm(max_norm=1.0)), None, None,
     "the native class divides by loss_scale; clipping and overflow skipping belong"),
    (uo.AdamW(lr=0.01, loss_scale=8.0), None, None,
     "grad_clip=None, loss_scale=1, skip_nonfinite=False"),
    (uo.SGD(lr=0.1, momentum=0.9, momentum_init="zeros", weight_decay=WD), None,
     "mindspore.nn.Momentum", "computes exactly"),
    (uo.SGD(lr=0.1, momentum=0.9, weight_decay=WD), None, None, "constant weight decay"),
    (uo.SGD(lr=ONE_CYCLE, momentum=0.9, momentum_init="zeros"), None, None,
     "no momentum-cycling lr schedule"),
    # a group's decay would be silently lost on experimental.AdamW(weight_decay=0) as Adam
    (uo.Adam(lr=0.01), [uo.Group(match="w", weight_decay=0.1)], None,
     "every parameter group's hyperparameters meet these conditions too"),
    (uo.Adam(lr=0.01), [uo.Group(match="w", lr_scale=2.0)],
     "mindspore.experimental.optim.AdamW", "computes exactly"),
    (uo.preset("mindspore.nn.AdaFactor"), [uo.Group(match="w", lr_scale=2.0)], None,
     "no group lr and one weight decay for every parameter"),
])
def test_explain_with_groups_names_path_and_reason(spec, groups, native, phrase):
    from unified_opt.backend import Context, load
    from unified_opt.groups import plan_parameters

    plans = tuple(plan_parameters(spec, list(LOOP_PARAMS), groups))
    decision = load("mindspore").decide(spec, "auto", Context(plans=plans))
    assert (decision.path, decision.native) == ("native" if native else "own", native)
    assert phrase in str(decision)


def test_group_decay_on_a_class_without_it_runs_the_own_implementation():
    # experimental.AdamW(weight_decay=0) computes uo.Adam without decay; a group's decay
    # there would be lost, so the build takes the own path and follows the reference
    run = follow_and_match(_loop_case("group_decay", uo.Adam(lr=0.01),
                                      [uo.Group(match="w*", weight_decay=0.1)]))
    assert run.decision.path == "own"


def test_current_lr_is_the_specs_when_every_group_is_scaled():
    """The verdict compared current_lr() with the oracle's lr at every step: read from a
    group whose lr is 0.5 x the spec's, divided by 0.5."""
    run = follow_and_match(_loop_case("scaled", uo.SGD(lr=COSINE, momentum=0.9,
                                                       momentum_init="zeros"),
                                      [uo.Group(match="*", lr_scale=0.5)]),
                           prefer="native")
    assert run.decision.native == "mindspore.nn.Momentum"
    assert {plan.lr_scale for plan in run.driver.record.plans} == {0.5}
    assert run.driver.optimizer.is_group_lr


def test_weight_decay_schedule_needs_no_total_steps_and_total_steps_limits_it():
    import mindspore as ms
    p = ms.Parameter(ms.Tensor(np.ones(3, np.float32)), name="w")
    momentum = uo.SGD(lr=0.1, momentum=0.9, momentum_init="zeros", weight_decay=WD)
    with pytest.raises(ValueError, match="is for a scheduled lr or weight decay"):
        uo.build(uo.SGD(lr=0.1), [("w", p)], options={"total_steps": 5})
    grad = (ms.Tensor(np.ones(3, np.float32)),)
    opt = uo.build(momentum, [("w", p)], prefer="native")   # a ScheduleCell, no step limit
    assert uo.explain(opt).native == "mindspore.nn.Momentum"
    for _ in range(STEPS + 5):                 # past the end of any table of STEPS
        opt(grad)
    assert int(opt.global_step.asnumpy()[0]) == STEPS + 5
    limited = uo.build(momentum, [("w", p)], options={"total_steps": 2},  # a step limit
                       prefer="native")
    limited(grad)
    limited(grad)
    before = p.asnumpy().copy()
    with pytest.raises(RuntimeError, match=r"mindspore.nn.Momentum was built with "
                                           r"options=\{'total_steps': 2\}: step 3 is past it"):
        limited(grad)
        p.asnumpy()
    assert np.array_equal(p.asnumpy(), before)
    assert int(limited.global_step.asnumpy()[0]) == 2


# -- presets ----------------------------------------------------------------------------

def test_presets_take_loss_scale_and_schedules():
    spec = uo.preset("mindspore.nn.Momentum", learning_rate=COSINE, momentum=0.9,
                     weight_decay=WD, loss_scale=128)
    assert (spec.lr, spec.weight_decay, spec.loss_scale) == (COSINE, WD, 128.0)
    assert spec.no_decay_names == ("*beta*", "*gamma*")
    assert uo.preset("mindspore.nn.Adam", loss_scale=4.0, use_offload=True).loss_scale == 4.0
    with pytest.raises(TypeError, match="loss_scale must be a float or an int, got True"):
        uo.preset("mindspore.nn.Adam", loss_scale=True)
    with pytest.raises(ValueError, match="loss_scale must be > 0, got 0"):
        uo.preset("mindspore.nn.SGD", loss_scale=0)
    with pytest.raises(TypeError, match="nn.SGD: weight_decay must be a float or int here"):
        uo.preset("mindspore.nn.SGD", weight_decay=WD)
    with pytest.raises(TypeError, match="lr must be a float here"):
        uo.preset("mindspore.experimental.optim.AdamW", lr=COSINE)
    with pytest.warns(UserWarning, match="loss_scale=8 is not applied by the class"):
        assert uo.preset("mindspore.nn.AdaFactor", loss_scale=8).loss_scale == 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        uo.preset("mindspore.nn.AdaFactor", loss_scale=1)


def test_mindspore_groups_reproduce_the_group_rule():
    spec = uo.preset("mindspore.nn.Momentum", learning_rate=COSINE, momentum=0.9,
                     weight_decay=5e-3)
    groups = mindspore_groups([
        {"params": ["conv[0].weight", "fc.w"], "weight_decay": 0.01,
         "lr": [0.25 * COSINE(t) for t in range(20)]},
        {"params": ["bn.gamma"], "weight_decay": 0.0},
        {"params": ["bn.beta", "fc.bias"]},
        {"order_params": ["fc.bias", "bn.beta", "bn.gamma", "conv[0].weight", "fc.w"]}], spec)
    assert groups == [
        uo.Group(match=("conv[[]0].weight", "fc.w"), weight_decay=0.01, lr_scale=0.25),
        uo.Group(match=("bn.gamma",), weight_decay=0.0),
        uo.Group(match=("bn.beta", "fc.bias"), weight_decay=5e-3)]
    from unified_opt.groups import plan_parameters
    # (every exact name of a rule must name a parameter: build refuses a rule read on
    # another model whose names differ)
    plans = plan_parameters(spec, ["bn.beta", "conv[0].weight", "conv0.weight", "bn.gamma",
                                   "fc.w", "fc.bias"], groups)
    # the beta/gamma rule is off in groups: bn.beta decays by the optimizer's weight decay
    assert [p.spec.weight_decay for p in plans] == [5e-3, 0.01, 5e-3, 0.0, 0.01, 5e-3]
    assert [p.group for p in plans] == [2, 0, None, 1, 0, 2]
    constant = uo.preset("mindspore.nn.Adam", learning_rate=0.01, weight_decay=0.1)
    assert mindspore_groups([{"params": ["a"], "lr": 0.5}], constant) == [
        uo.Group(match=("a",), lr=0.5, weight_decay=0.1)]


@pytest.mark.parametrize("group_params,spec,error,phrase", [
    ([{"params": ["a"], "lr": 0.1}], uo.SGD(lr=COSINE), NotImplementedError,
     "lr \\+ 1.0 - 1.0 in float32"),
    ([{"params": ["a"], "lr": [0.1, 0.2]}], uo.SGD(lr=0.1), NotImplementedError,
     "beside the optimizer's constant lr"),
    ([{"params": ["a"], "lr": [COSINE(0), 0.5 * COSINE(1)]}], uo.SGD(lr=COSINE), ValueError,
     r"not a multiple of the optimizer's schedule: lr\[1\]"),
    ([{"params": ["a"], "momentum": 0.9}], uo.SGD(lr=0.1), ValueError, "'momentum'"),
    ([{"params": ["a"]}, {"params": ["a"]}], uo.SGD(lr=0.1), ValueError,
     "'a' is in params\\[0\\] and params\\[1\\]"),
    ([{"params": ["a"]}, {"order_params": ["a", "b"]}], uo.SGD(lr=0.1), ValueError,
     "order_params must list every grouped parameter once"),
    ([{"params": ["a"], "grad_centralization": True}], uo.SGD(lr=0.1), NotImplementedError,
     "shape\\[1\\] % 16 == 0"),
    ([{"params": ["a"], "weight_decay": WD}], uo.SGD(lr=0.1), NotImplementedError,
     "per-group dynamic weight decay"),
    ([{"params": ["ln.gamma"]}], uo.preset("mindspore.nn.Momentum", learning_rate=0.1,
                                           momentum=0.9, weight_decay=WD),
     ValueError, "would spare \\['ln.gamma'\\]"),
    ([{"params": "a"}], uo.SGD(lr=0.1), TypeError, "non-empty list of parameter names"),
])
def test_mindspore_groups_refuse_what_has_no_exact_form(group_params, spec, error, phrase):
    with pytest.raises(error, match=phrase):
        mindspore_groups(group_params, spec)


def test_compile_true_refuses_at_build_an_update_that_would_run_eagerly():
    net = _nn("Dense")(4, 4)
    with pytest.raises(ValueError, match=r"options compile=True, but the sgd update of "
                                         r"\S+ cannot run on the kernels: .*truth value"):
        uo.build(UntraceableSGD(lr=0.1), net.trainable_params(), path="own",
                 options={"compile": True})
    uo.build(UntraceableSGD(lr=0.1), net.trainable_params(), path="own")   # "auto": eagerly
