"""State files of MindSpore's native optimizers (``uo.save_state`` / ``uo.load_state`` /
``uo.resume`` / ``uo.convert_checkpoint``): the classes ``uo.build`` picks and optimizers
built by hand, their counters, beta powers and schedule positions, and ``.ckpt`` files
written by ``mindspore.save_checkpoint``. A resumed native run is bit-identical to the
uninterrupted one: every Parameter the optimizer holds, the parameters and the lr."""

import numpy as np
import pytest
from conftest import require
from support import Replay, judge

import unified_opt as uo
from unified_opt.backend import record_of
from unified_opt.conformance.cases import DENSE_PARAMS, Case
from unified_opt.conformance.trajectory import Recorder
from unified_opt.conformance.worker import driver_class
from unified_opt.porting.state import read_state

pytestmark = require("mindspore")

K = 6   # steps before and after the save

SPECS = {
    # uo.Adam() on path="auto": mindspore.experimental.optim.AdamW (state_step)
    "experimental.AdamW": uo.Adam(lr=0.01),
    "nn.Momentum": uo.preset("mindspore.nn.Momentum", learning_rate=0.1, momentum=0.9),
    # a ScheduleCell lr: the position is global_step; beta1_power / beta2_power
    "nn.Adam+cosine": uo.preset("mindspore.nn.Adam",
                                learning_rate=uo.schedules.Cosine(lr=0.01, T_max=40)),
    # nn.SGD's first-step flags ``stat``
    "nn.SGD": uo.SGD(lr=0.1, momentum=0.9),
    # the average ax and the 0-d eta and mu (experimental.optim keeps those in plain lists)
    "nn.ASGD": uo.preset("mindspore.nn.ASGD", learning_rate=0.05, lambd=0.5, t0=2.0,
                         weight_decay=0.1),
    "experimental.ASGD": uo.ASGD(lr=0.05, lambd=0.3, alpha=0.6, t0=2.0, maximize=True),
    # the accumulator and the linear term (moments, linear); the sum of proximal Adagrad
    "nn.FTRL": uo.preset("mindspore.nn.FTRL", learning_rate=0.1, l1=0.3, l2=0.05,
                         weight_decay=0.01),
    "nn.ProximalAdagrad": uo.preset("mindspore.nn.ProximalAdagrad", learning_rate=0.1,
                                    l1=0.05, l2=0.3),
}
NATIVE = {"experimental.AdamW": "mindspore.experimental.optim.AdamW",
          "nn.Momentum": "mindspore.nn.Momentum", "nn.Adam+cosine": "mindspore.nn.Adam",
          "nn.SGD": "mindspore.nn.SGD", "nn.ASGD": "mindspore.nn.ASGD",
          "experimental.ASGD": "mindspore.experimental.optim.ASGD",
          "nn.FTRL": "mindspore.nn.FTRL", "nn.ProximalAdagrad": "mindspore.nn.ProximalAdagrad"}


def _case(spec):
    return Case(id="state_native_mindspore", spec=spec, params=DENSE_PARAMS, steps=50)


def _driver(spec, arrays=None, path="auto"):
    """``uo.build`` through the conformance driver; "auto" with ``prefer="native"``: the
    class wherever one is exact (the default, "speed", may take the faster own path)."""
    return driver_class("mindspore")(spec, _case(spec).initial_params() if arrays is None
                                     else arrays, path=path, total_steps=None,
                                     prefer="native")


def _steps(driver, steps):
    for t in steps:
        driver.step(_case(driver.spec).gradients(t))


def _held(optimizer) -> dict:
    """Every Parameter the optimizer holds, by name (moments, counters, beta powers, lr)."""
    return {p.name: p.asnumpy().copy() for _, p in optimizer.parameters_and_names()}


def _assert_same(a: dict, b: dict):
    assert sorted(a) == sorted(b)
    for name, value in a.items():
        np.testing.assert_array_equal(b[name], value, err_msg=name)


@pytest.mark.parametrize("key", list(SPECS))
def test_a_resumed_native_run_is_bit_identical(tmp_path, key):
    spec = SPECS[key]
    whole = _driver(spec)
    assert whole.decision.native == NATIVE[key]
    _steps(whole, range(2 * K))
    first = _driver(spec)
    _steps(first, range(K))
    uo.save_state(first.optimizer, tmp_path / "run.safetensors")
    second = _driver(spec, first.params_numpy())
    uo.load_state(second.optimizer, tmp_path / "run.safetensors")
    _assert_same(_held(first.optimizer), _held(second.optimizer))   # what MindSpore holds
    assert second.current_lr() == first.current_lr()
    _steps(second, range(K, 2 * K))
    _assert_same(_held(whole.optimizer), _held(second.optimizer))
    assert second.current_lr() == whole.current_lr()
    saved = read_state(tmp_path / "run.safetensors")
    scheduled = key == "nn.Adam+cosine"
    assert (saved.steps, saved.position) == (K, K if scheduled else None)
    assert saved.names == list(DENSE_PARAMS) and saved.spec == spec
    np.testing.assert_array_equal(saved.arrays["w"][sorted(saved.arrays["w"])[0]],
                                  first.state_numpy()["w"][sorted(saved.arrays["w"])[0]])


def test_beta_powers_are_the_float32_products_mindspore_keeps(tmp_path):
    from unified_opt.backends.mindspore.state import _power

    beta = np.float32(0.9)
    assert _power(beta, 20) == np.float32(0.12157659)          # MindSpore's, multiplied
    assert np.float32(0.9 ** 20) == np.float32(0.12157665)     # not the power rounded once
    spec = SPECS["nn.Adam+cosine"]
    first = _driver(spec)
    _steps(first, range(K))
    assert first.optimizer.beta1_power.asnumpy() == _power(beta, K)
    assert first.optimizer.global_step.asnumpy()[0] == K


def test_native_to_own_within_mindspore(tmp_path):
    # nn.Momentum: the own update computes the same float32 operations: bit-identical
    spec = SPECS["nn.Momentum"]
    whole, first = _driver(spec), _driver(spec)
    _steps(whole, range(2 * K))
    _steps(first, range(K))
    uo.save_state(first.optimizer, tmp_path / "m.safetensors")
    own = _driver(spec, first.params_numpy(), path="own")
    uo.load_state(own.optimizer, tmp_path / "m.safetensors")
    _steps(own, range(K, 2 * K))
    for name, value in whole.params_numpy().items():
        np.testing.assert_array_equal(own.params_numpy()[name], value, err_msg=name)
    # experimental.optim.AdamW: the own Adam rounds differently from the first step, and
    # the native kernel's rounding may depend on the CPU (docs/backends.md): the run that
    # switches at step K is judged by the conformance rule over the case's steps
    spec = SPECS["experimental.AdamW"]
    case = _case(spec)

    def switched(load: bool):
        recorder = Recorder()
        first = _driver(spec)
        for t in range(K):
            recorder.add(first.step(case.gradients(t)), first.params_numpy(),
                         first.state_numpy())
        uo.save_state(first.optimizer, tmp_path / "a.safetensors")
        own = _driver(spec, first.params_numpy(), path="own")
        if load:
            uo.load_state(own.optimizer, tmp_path / "a.safetensors")
            assert np.float32(own.current_lr()) == np.float32(first.current_lr())
            np.testing.assert_array_equal(own.state_numpy()["w"]["exp_avg"],
                                          first.state_numpy()["w"]["exp_avg"])
        for t in range(K, case.steps):
            recorder.add(own.step(case.gradients(t)), own.params_numpy(), own.state_numpy())
        return recorder.trajectory()

    comparison = judge(switched(load=True), case)
    assert comparison.passed, comparison.detail
    # the rule tells a resumed state from a fresh one (a restarted bias correction)
    comparison = judge(switched(load=False), case)
    assert not comparison.passed and comparison.first_failing_step == K + 1, \
        comparison.detail


# -- native optimizers built by hand -----------------------------------------------------------

RNG = np.random.default_rng(0)
GRADS = [{"weight": RNG.standard_normal((3, 4)).astype(np.float32),
          "bias": RNG.standard_normal(3).astype(np.float32)} for _ in range(2 * K)]


def _net(values=None):
    from mindspore import Tensor, nn

    net = nn.Dense(4, 3)
    if values is None:
        values = {"weight": np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4),
                  "bias": np.array([0.1, -0.2, 0.3], np.float32)}
    for p in net.trainable_params():
        p.set_data(Tensor(values[p.name]))
    return net


def _values(net) -> dict:
    return {p.name: p.asnumpy().copy() for p in net.trainable_params()}


def _hand_steps(optimizer, steps, scheduler=None):
    from mindspore import Tensor

    for t in steps:
        optimizer(tuple(Tensor(GRADS[t][p.name]) for p in optimizer.parameters))
        if scheduler is not None:
            scheduler.step()


def _lr(kind):
    from mindspore import nn

    if kind == "constant":
        return 0.01
    if kind == "per-step list":
        return [0.01 * 0.9 ** t for t in range(20)]
    return nn.CosineDecayLR(0.001, 0.01, 10)


@pytest.mark.parametrize("kind", ["constant", "per-step list", "CosineDecayLR"])
def test_a_hand_built_nn_adam_resumes_on_its_trajectory(tmp_path, kind):
    from mindspore import nn

    whole_net = _net()
    whole = nn.Adam(whole_net.trainable_params(), learning_rate=_lr(kind))
    _hand_steps(whole, range(2 * K))
    net = _net()
    first = nn.Adam(net.trainable_params(), learning_rate=_lr(kind))
    _hand_steps(first, range(K))
    uo.save_state(first, tmp_path / "hand.safetensors")     # names: Parameter.name
    saved = read_state(tmp_path / "hand.safetensors")
    assert saved.names == ["weight", "bias"] and saved.steps == K
    assert saved.position == (None if kind == "constant" else K)
    np.testing.assert_array_equal(saved.arrays["weight"]["exp_avg_sq"],
                                  first.moment2[0].asnumpy())
    resumed_net = _net(_values(net))
    resumed = uo.resume(tmp_path / "hand.safetensors", resumed_net, prefer="native")
    assert record_of(resumed).decision.native == "mindspore.nn.Adam"
    lr, native_lr = resumed.get_lr().asnumpy(), first.get_lr().asnumpy()   # the next step's
    _hand_steps(resumed, range(K, 2 * K))
    if kind != "CosineDecayLR":
        assert lr == native_lr
        _assert_same(_values(whole_net), _values(resumed_net))
        for ours, theirs in ((resumed.moment1, whole.moment1),
                             (resumed.moment2, whole.moment2)):
            for a, b in zip(ours, theirs):
                np.testing.assert_array_equal(a.asnumpy(), b.asnumpy())
        return
    # MindSpore's LearningRateSchedule Cells compute in float32 graph ops; the spec read
    # from the Cell (uo.schedules.Cosine) runs in double and rounds once: the lr at the
    # resumed position is a few float32 ulps apart (measured 2, then 5, 7, 1, 0, 0 over
    # steps 6-11; the parameters stayed equal here, up to 1.2e-7 for other Cells)
    assert abs(int(lr.view(np.int32)) - int(native_lr.view(np.int32))) <= 8
    assert np.float32(uo.schedules.Cosine(lr=0.01, T_max=10, eta_min=0.001)(K)) == lr
    # so the resumed run is the uninterrupted one with the file's schedule from step K
    # on (float32 lrs in a list): the same kernel on the same numbers
    from mindspore import Tensor, int32, nn

    cell = _lr(kind)
    lrs = [float(cell(Tensor(t, int32)).asnumpy()) for t in range(K)] + \
        [float(np.float32(saved.spec.lr(t))) for t in range(K, 2 * K)]
    listed_net = _net()
    _hand_steps(nn.Adam(listed_net.trainable_params(), learning_rate=lrs), range(2 * K))
    _assert_same(_values(listed_net), _values(resumed_net))


def test_an_experimental_scheduler_position_round_trips(tmp_path):
    from mindspore.experimental import optim

    def built(net):
        optimizer = optim.AdamW(net.trainable_params(), lr=0.01)
        return optimizer, optim.lr_scheduler.StepLR(optimizer, 3, 0.5)

    recorder = Recorder()

    def steps(optimizer, net, steps, scheduler=None):
        for t in steps:
            _hand_steps(optimizer, [t], scheduler)
            recorder.add(0.0, _values(net), {})

    net = _net()
    first, scheduler = built(net)
    steps(first, net, range(K), scheduler)
    uo.save_state(first, tmp_path / "exp.safetensors", lr_scheduler=scheduler)
    saved = read_state(tmp_path / "exp.safetensors")
    assert (saved.steps, saved.position) == (K, K)
    assert saved.spec.lr == uo.schedules.Step(lr=0.01, step_size=3, gamma=0.5)
    resumed_net = _net(_values(net))
    resumed = uo.resume(tmp_path / "exp.safetensors", resumed_net)
    # a scheduled lr: the own implementation (experimental classes take a constant lr)
    assert record_of(resumed).decision.path == "own"
    assert np.float32(resumed.next_lr()) == first.param_groups[0]["lr"].asnumpy() \
        == np.float32(0.0025)
    steps(resumed, resumed_net, range(K, 2 * K))
    # native steps, then the own Adam's: they round differently (and the native kernel
    # by the CPU), so the run is judged by the conformance rule on its gradients
    replay = Replay(saved.spec, _values(_net()), tuple(GRADS))
    comparison = judge(recorder.trajectory(), replay, state=False, lr=False)
    assert comparison.passed, comparison.detail


# -- MindSpore's own checkpoints -----------------------------------------------------------------

def _listed_adam(net):
    """nn.Adam with a per-step lr list: the table is a Parameter in the checkpoint, the
    position is its global_step."""
    from mindspore import nn

    return nn.Adam(net.trainable_params(), learning_rate=_lr("per-step list"))


def test_convert_checkpoint_then_resume(tmp_path):
    import mindspore as ms

    whole_net = _net()
    whole = _listed_adam(whole_net)
    _hand_steps(whole, range(2 * K))
    net = _net()
    first = _listed_adam(net)
    _hand_steps(first, range(K))
    ms.save_checkpoint(first, str(tmp_path / "opt.ckpt"))
    rebuilt = _listed_adam(_net())            # as the script builds it, before loading
    uo.convert_checkpoint(tmp_path / "opt.ckpt", tmp_path / "run.safetensors",
                          optimizer=rebuilt)
    assert rebuilt.global_step.asnumpy()[0] == K
    assert rebuilt.beta2_power.asnumpy() == first.beta2_power.asnumpy()
    resumed_net = _net(_values(net))
    resumed = uo.resume(tmp_path / "run.safetensors", resumed_net, prefer="native")
    _hand_steps(resumed, range(K, 2 * K))
    _assert_same(_values(whole_net), _values(resumed_net))
    # an already-loaded dict of Parameters reads the same
    again = _listed_adam(_net())
    uo.convert_checkpoint(ms.load_checkpoint(str(tmp_path / "opt.ckpt")),
                          tmp_path / "dict.safetensors", optimizer=again)
    a, b = read_state(tmp_path / "dict.safetensors"), read_state(tmp_path / "run.safetensors")
    assert (a.spec, a.steps, a.position, a.names) == (b.spec, b.steps, K, b.names)
    for name in b.names:
        _assert_same(a.arrays[name], b.arrays[name])


def test_convert_checkpoint_leaves_the_weights_alone(tmp_path):
    """MindSpore's lenient load takes a Parameter it is not given (a trained weight) from a
    name ending with its name: nn.Adam's ``moment1.weight`` would overwrite ``weight``,
    nn.ASGD's 0-d ``mu_weight`` fails on the shape. The conversion loads strictly."""
    import mindspore as ms
    from mindspore import nn

    def adam(net):
        return nn.Adam(net.trainable_params(), learning_rate=0.01)

    def asgd(net):
        return nn.ASGD(net.trainable_params(), learning_rate=0.05, lambd=0.3, t0=1.0)

    for make in (adam, asgd):
        whole_net = _net()
        _hand_steps(make(whole_net), range(2 * K))
        net = _net()
        first = make(net)
        _hand_steps(first, range(K))
        ms.save_checkpoint(first, str(tmp_path / "opt.ckpt"))
        rebuilt_net = _net()
        uo.convert_checkpoint(tmp_path / "opt.ckpt", tmp_path / "run.safetensors",
                              optimizer=make(rebuilt_net))
        _assert_same(_values(_net()), _values(rebuilt_net))
        resumed_net = _net(_values(net))
        resumed = uo.resume(tmp_path / "run.safetensors", resumed_net, prefer="native")
        _hand_steps(resumed, range(K, 2 * K))
        _assert_same(_values(whole_net), _values(resumed_net))


def test_convert_a_training_cell_checkpoint(tmp_path):
    import mindspore as ms
    from mindspore import Tensor, nn

    net = _net()
    optimizer = nn.Adam(net.trainable_params(), learning_rate=0.01)
    train = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), optimizer)
    x, y = Tensor(np.ones((2, 4), np.float32)), Tensor(np.zeros((2, 3), np.float32))
    train(x, y)
    train(x, y)
    ms.save_checkpoint(train, str(tmp_path / "train.ckpt"))
    rebuilt = nn.Adam(_net().trainable_params(), learning_rate=0.01)
    uo.convert_checkpoint(str(tmp_path / "train.ckpt"), tmp_path / "run.safetensors",
                          optimizer=rebuilt)
    saved = read_state(tmp_path / "run.safetensors")
    assert saved.steps == 2
    np.testing.assert_array_equal(saved.arrays["weight"]["exp_avg"],
                                  optimizer.moment1[0].asnumpy())


def test_convert_an_experimental_adamw_checkpoint_with_names(tmp_path):
    import mindspore as ms
    from mindspore.experimental import optim

    whole_net = _net()
    whole = optim.AdamW(whole_net.trainable_params(), lr=0.01)
    _hand_steps(whole, range(2 * K))
    net = _net()
    first = optim.AdamW(net.trainable_params(), lr=0.01)
    _hand_steps(first, range(K))
    ms.save_checkpoint(first, str(tmp_path / "adamw.ckpt"))
    rebuilt_net = _net()
    rebuilt = optim.AdamW(rebuilt_net.trainable_params(), lr=0.01)
    names = [("fc.weight", rebuilt_net.weight), ("fc.bias", rebuilt_net.bias)]
    uo.convert_checkpoint(str(tmp_path / "adamw.ckpt"), tmp_path / "run.safetensors",
                          optimizer=rebuilt, names=names)
    saved = read_state(tmp_path / "run.safetensors")
    assert saved.names == ["fc.weight", "fc.bias"] and saved.steps == K   # state_step
    resumed_net = _net(_values(net))
    resumed = uo.resume(tmp_path / "run.safetensors",
                        [("fc.weight", resumed_net.weight), ("fc.bias", resumed_net.bias)],
                        prefer="native")
    assert record_of(resumed).decision.native == "mindspore.experimental.optim.AdamW"
    _hand_steps(resumed, range(K, 2 * K))
    _assert_same(_values(whole_net), _values(resumed_net))
    _assert_same(_held(whole), _held(resumed))


def _refused(optimizer, checkpoint, tmp_path, match):
    before = _held(optimizer)
    with pytest.raises(ValueError, match=match):
        uo.convert_checkpoint(checkpoint, tmp_path / "never.safetensors", optimizer=optimizer)
    _assert_same(before, _held(optimizer))
    assert not (tmp_path / "never.safetensors").exists()


def test_damaged_and_foreign_checkpoints_are_refused(tmp_path):
    import mindspore as ms
    from mindspore import Parameter, Tensor, nn

    first = _listed_adam(_net())
    _hand_steps(first, range(2))
    ms.save_checkpoint(first, str(tmp_path / "opt.ckpt"))
    data = (tmp_path / "opt.ckpt").read_bytes()
    (tmp_path / "cut.ckpt").write_bytes(data[: len(data) // 2])
    (tmp_path / "junk.ckpt").write_bytes(b"not a checkpoint " * 20)
    target = _listed_adam(_net())
    for name in ("cut.ckpt", "junk.ckpt"):
        path = str(tmp_path / name)
        _refused(target, path, tmp_path, f"{path!r} is not a readable MindSpore checkpoint")
    momentum = nn.Momentum(_net().trainable_params(), learning_rate=0.1, momentum=0.9)
    _refused(momentum, str(tmp_path / "opt.ckpt"), tmp_path,
             r"lacks mindspore.nn.Momentum's Parameters \['moments.bias', 'moments.weight', "
             r"'momentum'\]")
    loaded = ms.load_checkpoint(str(tmp_path / "opt.ckpt"))
    loaded["moment1.bias"] = Parameter(Tensor(np.zeros(4, np.float32)), name="moment1.bias")
    _refused(target, loaded, tmp_path, r"'moment1.bias' has shape \(4,\)")


# -- refused classes and states ----------------------------------------------------------------

def test_a_class_without_a_step_counter_is_refused_and_left_unchanged(tmp_path):
    spec = uo.preset("mindspore.experimental.optim.RMSprop", lr=0.01)
    native = _driver(spec)
    assert native.decision.native == "mindspore.experimental.optim.RMSprop"
    _steps(native, range(2))
    with pytest.raises(ValueError, match=r"mindspore.experimental.optim.RMSprop keeps no step "
                                         r"counter \(none of \['global_step', 'state_step', "
                                         r"'step_t'\]\)"):
        uo.save_state(native.optimizer, tmp_path / "x.safetensors")
    own = _driver(spec, path="own")
    _steps(own, range(2))
    uo.save_state(own.optimizer, tmp_path / "own.safetensors")
    before = _held(native.optimizer)
    with pytest.raises(ValueError, match="load_state: MindSpore's mindspore.experimental.optim"
                                         ".RMSprop keeps no step counter"):
        uo.load_state(native.optimizer, tmp_path / "own.safetensors")
    _assert_same(before, _held(native.optimizer))


def test_state_a_checkpoint_cannot_hold_is_refused_by_name(tmp_path):
    import mindspore as ms
    from mindspore.experimental import optim

    nadam = optim.NAdam(_net().trainable_params(), lr=0.01)
    ms.save_checkpoint(nadam, str(tmp_path / "nadam.ckpt"))
    _refused(nadam, str(tmp_path / "nadam.ckpt"), tmp_path,
             r"experimental.optim.NAdam keeps its state \['mu_product'\] in a plain list")


def test_a_changed_constant_lr_is_saved_and_loaded(tmp_path):
    """A constant learning_rate written from outside (a callback) is the groups' live lr:
    recorded in the file and written back into the loading optimizer's Parameter."""
    from mindspore import Tensor
    from mindspore import dtype as mstype

    run = _driver(SPECS["nn.Momentum"])
    _steps(run, range(1))
    assert run.optimizer.learning_rate.asnumpy() != np.float32(0.05)
    run.optimizer.learning_rate.set_data(Tensor(0.05, mstype.float32))
    uo.save_state(run.optimizer, tmp_path / "x.safetensors")
    recorded = uo.porting.state.read_state(tmp_path / "x.safetensors").group_values
    assert {v["lr"] for v in recorded.values()} == {float(np.float32(0.05))}
    again = _driver(SPECS["nn.Momentum"])
    uo.load_state(again.optimizer, tmp_path / "x.safetensors")
    assert again.optimizer.learning_rate.asnumpy() == np.float32(0.05)


def test_nn_adafactor_s_relative_step_lr_is_recorded_as_the_spec_s_and_resumes_on_own(
        tmp_path):
    """``nn.AdaFactor`` with ``relative_step`` is built with ``learning_rate=None`` and
    reports 0.0 as its lr; the file records the spec's lr (the relative step's cap), so a
    resume on the own path steps as the native run does (it wrote 0.0 over it before,
    4.3e-3 off after 2 steps)."""
    spec = uo.preset("mindspore.nn.AdaFactor")
    whole = _driver(spec, path="native")
    assert record_of(whole.optimizer).decision.native == "mindspore.nn.AdaFactor"
    _steps(whole, range(2 * K))
    first = _driver(spec, path="native")
    _steps(first, range(K))
    uo.save_state(first.optimizer, tmp_path / "run.safetensors")
    assert {v["lr"] for v in read_state(tmp_path / "run.safetensors").group_values.values()} \
        == {spec.lr}
    second = _driver(spec, first.params_numpy(), path="own")
    uo.load_state(second.optimizer, tmp_path / "run.safetensors")
    assert second.optimizer.param_groups[0]["lr"] == spec.lr
    _steps(second, range(K, 2 * K))
    for name, value in whole.params_numpy().items():
        # two implementations of one spec: float32 rounding apart
        np.testing.assert_allclose(second.params_numpy()[name], value, rtol=0, atol=1e-6,
                                   err_msg=name)


def test_group_lrs_the_one_lr_parameter_cannot_hold_are_refused_before_loading(tmp_path):
    """nn.Adam runs every group at its one learning_rate Parameter: a file whose groups
    hold different lrs is refused at load, naming path='own', its state unchanged
    (before, it loaded, and a compiled step ran every group at the first group's lr)."""
    spec = uo.preset("mindspore.nn.Adam", learning_rate=0.05, weight_decay=0.01)
    groups = [uo.Group(match="bias", weight_decay=0.0)]

    def driver(arrays=None, path="auto"):
        return driver_class("mindspore")(spec, _case(spec).initial_params() if arrays is None
                                         else arrays, path=path, groups=groups,
                                         total_steps=None, prefer="native")

    source = driver(path="own")
    _steps(source, range(3))
    source.optimizer.param_groups[1]["lr"] = 0.00625
    uo.save_state(source.optimizer, tmp_path / "run.safetensors")
    native = driver(source.params_numpy(), path="native")
    assert record_of(native.optimizer).decision.native == "mindspore.nn.Adam"
    before = _held(native.optimizer)
    # three groups: the bias rule's, and the rest split by the preset's beta/gamma rule
    with pytest.raises(ValueError, match=r"the groups' lrs \[0\.05, 0\.00625, 0\.05\], and "
                                         r"mindspore\.nn\.Adam runs every group at one lr"):
        uo.load_state(native.optimizer, tmp_path / "run.safetensors")
    for name, value in _held(native.optimizer).items():
        np.testing.assert_array_equal(value, before[name], err_msg=name)
