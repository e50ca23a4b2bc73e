"""State files of Paddle's native optimizers (``uo.build`` on path="auto" with prefer="native", and
``paddle.optimizer`` classes built by hand): a resumed native run is bit-identical to the
uninterrupted one, beta powers included; a run switching native <-> own within Paddle
follows the oracle by the conformance rule; a hand-built AdamW + CosineAnnealingDecay continues
through ``uo.resume``; ``uo.convert_checkpoint`` reads a real ``paddle.save`` file
without running code; what cannot be mapped is refused by name, nothing changed."""

import pickle

import numpy as np
import pytest
from conftest import require
from support import judge

import unified_opt as uo
from unified_opt.backend import record_of
from unified_opt.conformance.cases import DENSE_PARAMS, Case
from unified_opt.conformance.trajectory import Recorder
from unified_opt.porting.state import read_state

pytestmark = require("paddle")

COSINE = uo.schedules.Cosine(lr=0.01, T_max=40)
SPEC = uo.AdamW(lr=COSINE, weight_decay=0.1)
GROUPS = [uo.Group(match="bias", weight_decay=0.0)]
#: the groups are the drivers' (``_driver``): the oracle of ``judge`` applies them too
CASE = Case(id="state_native_paddle", spec=SPEC, params=DENSE_PARAMS, steps=50,
            groups=GROUPS)

#: id -> (spec, groups, the native class uo.build picks)
CONFIGS = {
    "adamw_cosine_groups": (SPEC, GROUPS, "paddle.optimizer.AdamW"),
    "adam": (uo.preset("paddle.optimizer.Adam", learning_rate=0.01, beta1=0.8), None,
             "paddle.optimizer.Adam"),
    "momentum_cosine": (uo.preset("paddle.optimizer.Momentum", learning_rate=COSINE,
                                  momentum=0.9, use_nesterov=True), None,
                        "paddle.optimizer.Momentum"),
    "lamb": (uo.preset("paddle.optimizer.Lamb", learning_rate=0.01, lamb_weight_decay=0.01),
             [uo.Group(match=("bias", "ln.*"), exclude_from=("weight_decay",))],
             "paddle.optimizer.Lamb"),
    # momentum=0, uncentered: RMSProp's momentum and mean_grad are not the spec's state
    "rmsprop_cosine": (uo.preset("paddle.optimizer.RMSProp", learning_rate=COSINE), None,
                       "paddle.optimizer.RMSProp"),
}
#: the spec's state names, where not exp_avg and exp_avg_sq
STATE = {"momentum_cosine": ["momentum_buffer"], "rmsprop_cosine": ["square_avg"]}
DEAD = {"rmsprop_cosine": {"momentum", "mean_grad"}}


@pytest.fixture(scope="module")
def paddle():
    import paddle

    return paddle


def _driver(spec=SPEC, groups=GROUPS, arrays=None, path="auto"):
    from unified_opt.conformance.worker import driver_class

    # "auto" with prefer="native": the class wherever one is exact (the default, "speed",
    # may take the faster own path)
    return driver_class("paddle")(spec, CASE.initial_params() if arrays is None else arrays,
                                  path=path, groups=groups, total_steps=CASE.steps,
                                  prefer="native")


def _steps(driver, steps):
    for t in steps:
        driver.step(CASE.gradients(t))


def _accumulators(optimizer, params) -> dict:
    """Every accumulator (beta powers included) by (name, parameter index)."""
    index = {p.name: i for i, p in enumerate(params)}
    return {(name, index[pn]): t.numpy().copy()
            for name, per in optimizer._accumulators.items() for pn, t in per.items()}


def _assert_same(a: dict, b: dict):
    assert sorted(a) == sorted(b)
    for key, value in a.items():
        np.testing.assert_array_equal(b[key], value, err_msg=str(key))


# -- uo.build's native optimizers ------------------------------------------------------------

@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_a_resumed_native_run_is_bit_identical(tmp_path, paddle, config):
    spec, groups, native = CONFIGS[config]
    decision = uo.explain(spec, backend="paddle", prefer="native")
    assert (decision.path, decision.native) == ("native", native)
    whole = _driver(spec, groups)
    _steps(whole, range(30))
    first = _driver(spec, groups)
    _steps(first, range(15))
    uo.save_state(first.optimizer, tmp_path / "run.safetensors")
    second = _driver(spec, groups, first.params_numpy())
    assert type(second.optimizer).__name__ == native.rpartition(".")[2]
    uo.load_state(second.optimizer, tmp_path / "run.safetensors")
    assert second.current_lr() == first.current_lr() == spec.lr_at(15)
    # an accumulator the spec lacks (RMSProp's momentum holds the last update, which
    # momentum=0 multiplies by 0) is written back as zeros; the next step overwrites it
    dead = DEAD.get(config, set())
    _assert_same(*({k: v for k, v in _accumulators(run.optimizer, list(run.params.values()))
                    .items() if k[0] not in dead} for run in (first, second)))
    _steps(second, range(15, 30))
    _assert_same(whole.params_numpy(), second.params_numpy())
    _assert_same(_accumulators(whole.optimizer, list(whole.params.values())),
                 _accumulators(second.optimizer, list(second.params.values())))
    assert second.current_lr() == whole.current_lr() == spec.lr_at(30)
    saved = read_state(tmp_path / "run.safetensors")
    scheduled = isinstance(spec.lr, uo.schedules.Schedule)
    assert (saved.steps, saved.position) == (15, 15 if scheduled else None)
    assert set(saved.param_steps.values()) == {15}
    expected = STATE.get(config, ["exp_avg", "exp_avg_sq"])
    assert sorted(saved.arrays["w"]) == expected
    held = first.optimizer._accumulators
    mapping = record_of(first.optimizer).decision.native_class.state
    for key in expected:
        np.testing.assert_array_equal(
            saved.arrays["w"][key], held[mapping[key]][first.params["w"].name].numpy())


def test_beta_powers_are_paddle_s_float32_running_products(paddle):
    """beta^(t+1) is held as the product rounded at every step, which a closed form
    (float32(beta ** (t + 1))) misses at most steps: the file's writer reproduces the
    product; float64 Lamb multiplies by float32(beta), float64 Adam by beta."""
    from unified_opt.backends.paddle.state import power_after

    beta = np.float32(0.9)
    product = [beta]
    for _ in range(40):
        product.append(np.float32(product[-1] * beta))
    closed = [np.float32(0.9 ** (t + 1)) for t in range(41)]
    assert sum(a != b for a, b in zip(product, closed)) > 30
    for name, dtype in [("Adam", "float32"), ("Lamb", "float32"), ("Adam", "float64"),
                        ("Lamb", "float64"), ("Adamax", "float64")]:
        p = paddle.create_parameter(shape=[3], dtype=dtype)
        optimizer = getattr(paddle.optimizer, name)(learning_rate=1e-3, beta1=0.87,
                                                    parameters=[p])
        for _ in range(40):
            p.grad = paddle.to_tensor(np.array([0.1, -0.2, 0.3], dtype))
            optimizer.step()
        held = optimizer._accumulators["beta1_pow_acc"][p.name].numpy()
        assert held.dtype == np.dtype(dtype)
        assert held[0] == power_after(f"paddle.optimizer.{name}", optimizer, "beta1_pow_acc",
                                      dtype, 40), (name, dtype)
    assert power_after("paddle.optimizer.Lamb", optimizer, "beta1_pow_acc", "float64", 40) \
        != 0.87 ** 41


@pytest.mark.parametrize("source, target", [("auto", "own"), ("own", "auto")])
def test_native_and_own_paths_load_each_other(tmp_path, paddle, source, target):
    """A run that switches between the native kernel and the own update at step 15
    follows the oracle by the conformance rule (the float64 oracle, the float32 floors,
    K) at every one of CASE's steps, the steps before the switch included; the same
    switch without load_state breaks it. The two paths round differently, and how the
    native kernel rounds depends on the CPU (docs/backends.md: FMA code with AVX-512, the
    plain C++ loop without), so no fixed margin between the runs holds everywhere."""
    def switched(load: bool):
        recorder = Recorder()
        first = _driver(path=source)
        for t in range(15):
            recorder.add(first.step(CASE.gradients(t)), first.params_numpy(),
                         first.state_numpy())
        uo.save_state(first.optimizer, tmp_path / "run.safetensors")
        second = _driver(arrays=first.params_numpy(), path=target)
        assert record_of(second.optimizer).decision.path == ("native" if target == "auto"
                                                              else "own")
        if load:
            uo.load_state(second.optimizer, tmp_path / "run.safetensors")
            assert second.current_lr() == SPEC.lr_at(15)
        for t in range(15, CASE.steps):
            recorder.add(second.step(CASE.gradients(t)), second.params_numpy(),
                         second.state_numpy())
        return second, recorder.trajectory()

    second, trajectory = switched(load=True)
    comparison = judge(trajectory, CASE)
    assert comparison.passed, comparison.detail
    uo.save_state(second.optimizer, tmp_path / "after.safetensors")
    after = read_state(tmp_path / "after.safetensors")
    assert (after.steps, after.position) == (CASE.steps, CASE.steps)
    # the rule tells a resumed state from a fresh one (a restarted bias correction)
    comparison = judge(switched(load=False)[1], CASE)
    assert not comparison.passed and comparison.first_failing_step == 16, comparison.detail


# -- native optimizers built by hand ----------------------------------------------------------

_X = np.random.default_rng(0).standard_normal((30, 8, 5)).astype(np.float32)


def _net(paddle):
    paddle.seed(3)
    return paddle.nn.Sequential(paddle.nn.Linear(5, 4), paddle.nn.LayerNorm(4),
                                paddle.nn.Linear(4, 1))


def _by_hand(paddle, layer):
    scheduler = paddle.optimizer.lr.CosineAnnealingDecay(learning_rate=0.01, T_max=40)
    return paddle.optimizer.AdamW(learning_rate=scheduler, parameters=layer.parameters(),
                                  weight_decay=0.05)


def _train(paddle, layer, optimizer, steps, scheduler=None):
    scheduler = optimizer._learning_rate if scheduler is None else scheduler
    for t in steps:
        (layer(paddle.to_tensor(_X[t])) ** 2).mean().backward()
        optimizer.step()
        optimizer.clear_grad()
        scheduler.step()


@pytest.fixture(scope="module")
def hand_runs(paddle):
    """A hand-built AdamW + CosineAnnealingDecay: 30 steps, and one stopped at 15."""
    whole = _net(paddle)
    whole_optimizer = _by_hand(paddle, whole)
    _train(paddle, whole, whole_optimizer, range(30))
    half = _net(paddle)
    half_optimizer = _by_hand(paddle, half)
    _train(paddle, half, half_optimizer, range(15))
    return whole, whole_optimizer, half, half_optimizer


def _continued(paddle, tmp_path, half, state_file):
    """uo.resume of ``state_file`` over a copy of ``half``, trained to step 30."""
    layer = _net(paddle)
    layer.set_state_dict(half.state_dict())
    optimizer = uo.resume(state_file, layer, prefer="native")
    assert type(optimizer).__name__ == "AdamW"
    assert record_of(optimizer).decision.path == "native"
    _train(paddle, layer, optimizer, range(15, 30), uo.native_scheduler(optimizer))
    return layer, optimizer


def test_a_hand_built_adamw_resumes_through_uo_resume(tmp_path, paddle, hand_runs):
    whole, whole_optimizer, half, half_optimizer = hand_runs
    uo.save_state(half_optimizer, tmp_path / "hand.safetensors", names=half)
    saved = read_state(tmp_path / "hand.safetensors")
    assert saved.names == ["0.weight", "0.bias", "1.weight", "1.bias", "2.weight", "2.bias"]
    assert (saved.steps, saved.position) == (15, 15)
    assert saved.spec.lr == uo.schedules.preset("paddle.optimizer.lr.CosineAnnealingDecay",
                                                learning_rate=0.01, T_max=40)
    assert saved.groups == ()
    layer, optimizer = _continued(paddle, tmp_path, half, tmp_path / "hand.safetensors")
    for (name, p), q in zip(whole.named_parameters(), layer.parameters()):
        np.testing.assert_array_equal(q.numpy(), p.numpy(), err_msg=name)
    # Paddle's CosineAnnealingDecay is recursive, the schedule closed-form: the lrs agree
    # to the last bits of a float64 (the kernels take them as float32: same parameters)
    assert optimizer.get_lr() == pytest.approx(whole_optimizer.get_lr(), rel=1e-14)


def test_a_hand_built_optimizer_without_a_step_saves_the_initial_state(tmp_path, paddle):
    layer = _net(paddle)
    optimizer = _by_hand(paddle, layer)
    uo.save_state(optimizer, tmp_path / "fresh.safetensors", names=layer)
    saved = read_state(tmp_path / "fresh.safetensors")
    assert (saved.steps, saved.position) == (0, 0)
    assert not saved.arrays["0.weight"]["exp_avg"].any()
    assert not optimizer._accumulators       # nothing was created


def test_convert_checkpoint_reads_a_real_pdopt_file(tmp_path, paddle, hand_runs):
    whole, _, half, half_optimizer = hand_runs
    paddle.save(half_optimizer.state_dict(), str(tmp_path / "opt.pdopt"))
    uo.save_state(half_optimizer, tmp_path / "live.safetensors", names=half)
    rebuilt = _by_hand(paddle, half)           # as the script builds it, not stepped
    uo.convert_checkpoint(tmp_path / "opt.pdopt", tmp_path / "converted.safetensors",
                          optimizer=rebuilt, names=half)
    assert rebuilt._learning_rate.last_epoch == 15
    converted, live = (read_state(tmp_path / f) for f in ("converted.safetensors",
                                                         "live.safetensors"))
    assert (converted.steps, converted.position, converted.spec) == (15, 15, live.spec)
    for name in live.names:
        _assert_same(live.arrays[name], converted.arrays[name])
    layer, _ = _continued(paddle, tmp_path, half, tmp_path / "converted.safetensors")
    for (name, p), q in zip(whole.named_parameters(), layer.parameters()):
        np.testing.assert_array_equal(q.numpy(), p.numpy(), err_msg=name)
    # an already loaded dict works too
    again = _by_hand(paddle, half)
    uo.convert_checkpoint(paddle.load(str(tmp_path / "opt.pdopt")),
                          tmp_path / "dict.safetensors", optimizer=again, names=half)
    assert read_state(tmp_path / "dict.safetensors").arrays["2.bias"]["exp_avg_sq"] \
        .tolist() == live.arrays["2.bias"]["exp_avg_sq"].tolist()


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os

        return (os.system, (f"touch {self.marker}",))


def test_a_malicious_pdopt_runs_nothing(tmp_path, paddle, hand_runs):
    half = hand_runs[2]
    marker = tmp_path / "ran"
    bad = tmp_path / "evil.pdopt"
    bad.write_bytes(pickle.dumps({"0.weight_moment1_0": np.zeros((5, 4), np.float32),
                                  "LR_Scheduler": {"last_epoch": _Payload(marker)}}))
    optimizer = _by_hand(paddle, half)
    with pytest.raises(ValueError, match=r"names the global (posix|os|nt)\.system.*refused.*"
                                         r"evil\.pdopt"):
        uo.convert_checkpoint(bad, tmp_path / "x.safetensors", optimizer=optimizer,
                              names=half)
    assert not marker.exists()
    assert not optimizer._accumulators and optimizer._learning_rate.last_epoch == 0
    assert not (tmp_path / "x.safetensors").exists()


def test_a_truncated_or_garbage_pdopt_is_refused(tmp_path, paddle, hand_runs):
    half, half_optimizer = hand_runs[2:]
    paddle.save(half_optimizer.state_dict(), str(tmp_path / "opt.pdopt"))
    cut = tmp_path / "cut.pdopt"
    cut.write_bytes((tmp_path / "opt.pdopt").read_bytes()[:-40])
    garbage = tmp_path / "garbage.pdopt"
    garbage.write_bytes(b"\x00not a pickle at all")
    for path in (cut, garbage):
        optimizer = _by_hand(paddle, half)
        with pytest.raises(ValueError, match=f"{path.name}' is not a readable paddle.save"):
            uo.convert_checkpoint(path, tmp_path / "x.safetensors", optimizer=optimizer,
                                  names=half)
        assert not optimizer._accumulators
    # another optimizer's scheduler (the one this optimizer holds is accepted: issue 22)
    with pytest.raises(ValueError, match="only the scheduler the optimizer holds"):
        uo.convert_checkpoint(tmp_path / "opt.pdopt", tmp_path / "x.safetensors",
                              optimizer=_by_hand(paddle, half), names=half,
                              lr_scheduler=half_optimizer._learning_rate)


# -- refusals: named, nothing changed -------------------------------------------------------

def test_radam_s_unmapped_state_is_refused_by_name(tmp_path, paddle):
    spec = uo.preset("paddle.optimizer.RAdam", learning_rate=0.01)
    assert uo.explain(spec, backend="paddle", prefer="native").native == \
        "paddle.optimizer.RAdam"
    native = _driver(spec, None)
    _steps(native, range(3))
    with pytest.raises(ValueError, match=r"paddle.optimizer.RAdam keeps \['beta1_pow', "
                                         r"'beta2_pow', 'rho'\].*path='own'"):
        uo.save_state(native.optimizer, tmp_path / "radam.safetensors")
    own = _driver(spec, None, path="own")
    _steps(own, range(5))
    uo.save_state(own.optimizer, tmp_path / "own.safetensors")
    params = list(native.params.values())
    before = _accumulators(native.optimizer, params)
    with pytest.raises(ValueError, match=r"load_state: paddle.optimizer.RAdam keeps .*'rho'"):
        uo.load_state(native.optimizer, tmp_path / "own.safetensors")
    _assert_same(before, _accumulators(native.optimizer, params))


def test_a_constant_lr_momentum_counts_its_steps_where_uo_built_it(tmp_path, paddle):
    """paddle.optimizer.Momentum keeps no step count: the class uo.build makes counts
    each parameter's updates; built by hand, or after Paddle's own form of a state dict
    was loaded, the count is unknown and a save is refused."""
    spec = uo.SGD(lr=0.05, momentum=0.9)
    run = _driver(spec, None)
    assert type(run.optimizer).__name__ == "Momentum"
    _steps(run, range(4))
    uo.save_state(run.optimizer, tmp_path / "m.safetensors")
    saved = read_state(tmp_path / "m.safetensors")
    assert saved.param_steps == {name: 4 for name in run.names}
    velocity = run.optimizer._accumulators["velocity"][run.params["w"].name].numpy()
    np.testing.assert_array_equal(saved.arrays["w"]["momentum_buffer"], velocity)
    # loaded into another: the state and the count, which its next save reads
    again = _driver(spec, None)
    uo.load_state(again.optimizer, tmp_path / "m.safetensors")
    np.testing.assert_array_equal(
        again.optimizer._accumulators["velocity"][again.params["w"].name].numpy(), velocity)
    uo.save_state(again.optimizer, tmp_path / "again.safetensors")
    assert read_state(tmp_path / "again.safetensors").param_steps["w"] == 4
    # Paddle's own form carries no count: unknown from there on
    paddle_form = type(run.optimizer).state_dict(run.optimizer)
    run.optimizer.set_state_dict(paddle_form)
    with pytest.raises(ValueError, match="paddle.optimizer.Momentum keeps no step count "
                                         r"\(its state is \['velocity'\]\) and its lr is "
                                         "constant"):
        uo.save_state(run.optimizer, tmp_path / "unknown.safetensors")
    # built by hand: the same refusal (nothing counted its steps)
    layer = _net(paddle)
    by_hand = paddle.optimizer.Momentum(learning_rate=0.05, momentum=0.9,
                                        parameters=layer.parameters())
    layer(paddle.ones([2, 5])).sum().backward()
    by_hand.step()
    with pytest.raises(ValueError, match="keeps no step count"):
        uo.save_state(by_hand, tmp_path / "hand.safetensors", names=layer)
    # loading into the own path works too (the own path keeps the count)
    own = _driver(spec, None, path="own")
    _steps(own, range(4))
    uo.save_state(own.optimizer, tmp_path / "own.safetensors")
    uo.load_state(run.optimizer, tmp_path / "own.safetensors")
    np.testing.assert_array_equal(
        run.optimizer._accumulators["velocity"][run.params["w"].name].numpy(),
        read_state(tmp_path / "own.safetensors").arrays["w"]["momentum_buffer"])


def test_beta_powers_no_step_reaches_are_refused(tmp_path, paddle):
    run = _driver()
    _steps(run, range(3))
    run.optimizer._accumulators["beta2_pow_acc"][run.params["bias"].name].set_value(
        np.array([0.5], np.float32))
    with pytest.raises(ValueError, match=r"beta2_pow_acc of parameter 'bias' holds 0.5, "
                                         "which is no power of beta2=0.999"):
        uo.save_state(run.optimizer, tmp_path / "x.safetensors")
    assert not (tmp_path / "x.safetensors").exists()


def test_a_named_adamax_with_parameter_groups(tmp_path, paddle):
    """name= prefixes Paddle's accumulator names; a group's learning_rate becomes a
    uo.Group lr_scale; the .pdopt and the live optimizer give the same file, and the
    resumed uo.build optimizer continues bit-identically."""
    def built(layer):
        params = list(layer.parameters())
        return paddle.optimizer.Adamax(
            learning_rate=0.01, name="opt",
            parameters=[{"params": params[:2]}, {"params": params[2:], "learning_rate": 0.5}])

    layer = _net(paddle)
    optimizer = built(layer)
    _train(paddle, layer, optimizer, range(7), scheduler=_NoScheduler())
    assert "opt_beta1_pow_acc" in optimizer._accumulators
    uo.save_state(optimizer, tmp_path / "live.safetensors", names=layer)
    live = read_state(tmp_path / "live.safetensors")
    assert (live.steps, live.position) == (7, None)
    assert live.groups == (uo.Group(match=("1.weight", "1.bias", "2.weight", "2.bias"),
                                    lr_scale=0.5),)
    paddle.save(optimizer.state_dict(), str(tmp_path / "opt.pdopt"))
    uo.convert_checkpoint(tmp_path / "opt.pdopt", tmp_path / "converted.safetensors",
                          optimizer=built(layer), names=layer)
    converted = read_state(tmp_path / "converted.safetensors")
    for name in live.names:
        _assert_same(live.arrays[name], converted.arrays[name])
    copy = _net(paddle)
    copy.set_state_dict(layer.state_dict())
    resumed = uo.resume(tmp_path / "converted.safetensors", copy, prefer="native")
    assert type(resumed).__name__ == "Adamax"
    _train(paddle, layer, optimizer, range(7, 20), scheduler=_NoScheduler())
    _train(paddle, copy, resumed, range(7, 20), scheduler=_NoScheduler())
    for (name, p), q in zip(layer.named_parameters(), copy.parameters()):
        np.testing.assert_array_equal(q.numpy(), p.numpy(), err_msg=name)


class _NoScheduler:
    def step(self):
        pass


def test_rprop_built_by_uo_counts_its_steps(tmp_path, paddle):
    spec = uo.preset("paddle.optimizer.Rprop", learning_rate=0.001)
    run = _driver(spec, None)
    assert type(run.optimizer).__name__ == "Rprop"
    _steps(run, range(2))
    uo.save_state(run.optimizer, tmp_path / "x.safetensors")
    assert set(read_state(tmp_path / "x.safetensors").param_steps.values()) == {2}


def test_underflowed_beta_powers_need_the_scheduler_s_position(tmp_path, paddle):
    """beta1=0.1 and beta2=0.3 underflow (the float32 product stops changing) after 45
    and about 85 steps: at step 100 the powers say only "85 or more"."""
    def run(learning_rate):
        p = paddle.create_parameter(shape=[3], dtype="float32")
        optimizer = paddle.optimizer.Adam(learning_rate=learning_rate, beta1=0.1, beta2=0.3,
                                          parameters=[p])
        for t in range(100):
            p.grad = paddle.to_tensor(np.array([0.1, -0.2, 0.3], np.float32))
            optimizer.step()
            if t == 59:
                uo.save_state(optimizer, tmp_path / "at60.safetensors", names=[("p", p)])
            if not isinstance(learning_rate, float):
                learning_rate.step()
        return optimizer, p

    optimizer, p = run(0.01)
    assert read_state(tmp_path / "at60.safetensors").steps == 60     # beta2 still moves
    assert optimizer._accumulators["beta1_pow_acc"][p.name].numpy()[0] == 0.0
    with pytest.raises(ValueError, match=r"beta powers of parameter 'p' stopped changing "
                                         r"\(underflow\) after 8\d steps"):
        uo.save_state(optimizer, tmp_path / "x.safetensors", names=[("p", p)])
    optimizer, p = run(paddle.optimizer.lr.StepDecay(0.01, step_size=1000))
    uo.save_state(optimizer, tmp_path / "scheduled.safetensors", names=[("p", p)])
    assert read_state(tmp_path / "scheduled.safetensors").steps == 100


def _conv_net(paddle):
    """A conv, a BatchNorm (its _mean and _variance are parameters that take no
    gradient) and a linear layer, seeded."""
    paddle.seed(3)
    return paddle.nn.Sequential(paddle.nn.Conv2D(3, 4, 3), paddle.nn.BatchNorm2D(4),
                                paddle.nn.ReLU(), paddle.nn.Flatten(),
                                paddle.nn.Linear(4 * 4 * 4, 2))


def _train_conv(paddle, layer, optimizer, steps, seed):
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        x = paddle.to_tensor(rng.standard_normal((4, 3, 6, 6)).astype(np.float32))
        layer(x).square().mean().backward()
        optimizer.step()
        optimizer.clear_grad()


def test_a_layer_with_batch_norm_statistics_saves_and_resumes_bit_identically(tmp_path,
                                                                              paddle):
    spec = uo.AdamW(lr=0.01, weight_decay=0.1)
    whole = _conv_net(paddle)
    optimizer = uo.build(spec, whole, path="native")
    statistics = [n for n, p in whole.named_parameters() if p.stop_gradient]
    assert statistics == ["1._mean", "1._variance"]
    _train_conv(paddle, whole, optimizer, 3, seed=0)
    uo.save_state(optimizer, tmp_path / "bn.safetensors")
    saved = read_state(tmp_path / "bn.safetensors")
    for name in statistics:       # Paddle keeps no accumulator for them: never stepped
        assert saved.param_steps[name] == 0
        assert not saved.arrays[name]["exp_avg"].any()
    assert saved.param_steps["0.weight"] == 3
    resumed = _conv_net(paddle)
    resumed.set_state_dict(whole.state_dict())
    again = uo.build(spec, resumed, path="native")
    uo.load_state(again, tmp_path / "bn.safetensors")
    _train_conv(paddle, whole, optimizer, 2, seed=1)
    _train_conv(paddle, resumed, again, 2, seed=1)
    for (name, p), q in zip(whole.named_parameters(), resumed.parameters()):
        np.testing.assert_array_equal(q.numpy(), p.numpy(), err_msg=name)


def test_a_stepped_state_of_a_frozen_parameter_is_refused_on_load(tmp_path, paddle):
    spec = uo.AdamW(lr=0.01)
    layer = _conv_net(paddle)
    optimizer = uo.build(spec, layer, path="native")
    _train_conv(paddle, layer, optimizer, 2, seed=0)
    uo.save_state(optimizer, tmp_path / "stepped.safetensors")
    frozen = _conv_net(paddle)
    frozen[0].weight.stop_gradient = True
    again = uo.build(spec, frozen, path="native")
    before = {n: p.numpy().copy() for n, p in frozen.named_parameters()}
    with pytest.raises(ValueError, match=r"parameter '0.weight' takes no gradient.*2 steps"):
        uo.load_state(again, tmp_path / "stepped.safetensors")
    assert all(not t.numpy().any() for per in again._accumulators.values()
               for t in per.values() if t.size > 1)
    for name, p in frozen.named_parameters():
        np.testing.assert_array_equal(p.numpy(), before[name], err_msg=name)


def test_group_lrs_no_one_paddle_lr_gives_are_refused_by_a_native_class_before_loading(
        tmp_path):
    """A file whose groups hold lrs no one Paddle lr gives (a per-group LambdaLR, a
    hand-written group lr) loads into the own path; the native class (one lr, times each
    group's factor) refuses it at load, naming path='own', with its state unchanged
    (before, the load wrote the state and the next step raised)."""
    spec = uo.preset("paddle.optimizer.Adam", learning_rate=0.05)
    groups = [uo.Group(match="bias", lr_scale=0.5)]     # Paddle's factor: 0.025 there
    source = _driver(spec, groups, path="own")
    _steps(source, range(3))
    source.optimizer.param_groups[1]["lr"] = 0.00625
    uo.save_state(source.optimizer, tmp_path / "run.safetensors")
    native = _driver(spec, groups, source.params_numpy(), path="native")
    assert record_of(native.optimizer).decision.native == "paddle.optimizer.Adam"
    _steps(native, range(2))
    before = native.state_numpy()
    with pytest.raises(ValueError, match=r"the groups' lrs \[0\.05, 0\.00625\], and "
                                         r"paddle\.optimizer\.Adam runs every group at one "
                                         r"lr .* path='own'"):
        uo.load_state(native.optimizer, tmp_path / "run.safetensors")
    for name, arrays in before.items():
        for key, value in arrays.items():
            np.testing.assert_array_equal(native.state_numpy()[name][key], value)
    own = _driver(spec, groups, source.params_numpy(), path="own")
    uo.load_state(own.optimizer, tmp_path / "run.safetensors")
    assert [g["lr"] for g in own.optimizer.param_groups] == [0.05, 0.00625]
    # a file whose lrs the factor gives loads into the class
    source.optimizer.param_groups[1]["lr"] = 0.025
    uo.save_state(source.optimizer, tmp_path / "factor.safetensors")
    uo.load_state(native.optimizer, tmp_path / "factor.safetensors")
