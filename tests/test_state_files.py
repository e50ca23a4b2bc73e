"""State files (``uo.save_state`` / ``uo.load_state`` / ``uo.resume``) within one
framework: a resumed run is bit-identical to the uninterrupted one; a damaged or
mismatched file is refused with an error naming the problem and leaves the optimizer
exactly as it was; loading runs no code. (Across frameworks: test_resume_across.py.)"""

import json
import struct

import numpy as np
import pytest
from conftest import require

import unified_opt as uo
from unified_opt.conformance.cases import DENSE_PARAMS, Case
from unified_opt.conformance.worker import driver_class
from unified_opt.porting.state import FORMAT, read_state

SPEC = uo.AdamW(lr=uo.schedules.Cosine(lr=0.01, T_max=40), weight_decay=0.1)
GROUPS = [uo.Group(match="bias", weight_decay=0.0)]
CASE = Case(id="state_files", spec=SPEC, params=DENSE_PARAMS, steps=50)


def _driver(framework, arrays=None, spec=SPEC, groups=GROUPS, path="own"):
    return driver_class(framework)(spec, CASE.initial_params() if arrays is None else arrays,
                                   path=path, groups=groups, total_steps=CASE.steps)


def _steps(driver, steps):
    for t in steps:
        driver.step(CASE.gradients(t))


def _everything(driver) -> dict:
    """Every state array and the lr of the next step, as numbers."""
    return {"state": driver.state_numpy(), "lr": driver.current_lr()}


@pytest.mark.parametrize("framework, path", [
    pytest.param("torch", "own", marks=require("torch")),
    pytest.param("torch", "auto", marks=require("torch")),        # torch.optim.AdamW
    pytest.param("paddle", "own", marks=require("paddle")),
    pytest.param("paddle", "auto", marks=require("paddle")),      # paddle.optimizer.AdamW
    pytest.param("mindspore", "own", marks=require("mindspore")),
    pytest.param("mindspore", "auto", marks=require("mindspore")),
])
def test_a_resumed_run_is_bit_identical(tmp_path, framework, path):
    whole = _driver(framework, path=path)
    _steps(whole, range(30))
    first = _driver(framework, path=path)
    _steps(first, range(15))
    uo.save_state(first.optimizer, tmp_path / "run.safetensors")
    second = _driver(framework, first.params_numpy(), path=path)
    uo.load_state(second.optimizer, tmp_path / "run.safetensors")
    assert second.current_lr() == first.current_lr() == SPEC.lr_at(15)
    _steps(second, range(15, 30))
    for name, value in whole.params_numpy().items():
        np.testing.assert_array_equal(second.params_numpy()[name], value, err_msg=name)
    saved = read_state(tmp_path / "run.safetensors")
    assert (saved.steps, saved.position, saved.framework) == (15, 15, framework)
    assert saved.names == list(DENSE_PARAMS) and saved.spec == SPEC
    assert sorted(saved.arrays["w"]) == ["exp_avg", "exp_avg_sq"]


@require("torch")
def test_resume_builds_the_saved_spec_and_groups(tmp_path):
    import torch

    first = _driver("torch")
    _steps(first, range(10))
    uo.save_state(first.optimizer, tmp_path / "run.safetensors")
    params = [(n, torch.nn.Parameter(torch.from_numpy(a))) for n, a in
              first.params_numpy().items()]
    optimizer = uo.resume(tmp_path / "run.safetensors", params, path_taken="own")
    from unified_opt.backend import record_of

    record = record_of(optimizer)
    assert record.spec == SPEC and list(record.groups) == GROUPS
    assert optimizer.param_groups[0]["steps_taken"] == 10
    np.testing.assert_array_equal(optimizer.state[params[0][1]]["exp_avg"].numpy(),
                                  first.state_numpy()["w"]["exp_avg"])


@require("torch")
@pytest.mark.parametrize("path", ["own", "auto"])
def test_a_build_over_model_parameters_is_saved_and_loaded_under_the_models_names(tmp_path,
                                                                                  path):
    """``uo.build(spec, model.parameters())`` holds no names: ``names=model`` names them in
    the file and ``model=`` on load, by identity; without them the refusal says so, and
    a module that does not hold the parameters is refused."""
    import torch

    def net():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))

    def run(model, opt, steps):
        for t in steps:
            torch.manual_seed(100 + t)
            opt.zero_grad()
            model(torch.randn(5, 4)).square().sum().backward()
            opt.step()

    whole = net()
    run(whole, uo.build(SPEC, whole.parameters(), path=path), range(6))
    model = net()
    opt = uo.build(SPEC, model.parameters(), path=path)
    run(model, opt, range(3))
    file = tmp_path / "run.safetensors"
    with pytest.raises(ValueError, match=r"parameters \[0, 1, 2, 3\] have no name; pass "
                                         r"names=<module>"):
        uo.save_state(opt, file)
    with pytest.raises(ValueError, match="names does not hold the optimizer's parameter 0"):
        uo.save_state(opt, file, names=torch.nn.Linear(4, 3))
    assert not file.exists()
    uo.save_state(opt, file, names=model)
    assert read_state(file).names == ["0.weight", "0.bias", "1.weight", "1.bias"]
    second = net()
    second.load_state_dict(model.state_dict())
    opt2 = uo.build(SPEC, second.parameters(), path=path)
    uo.load_state(opt2, file, model=second)
    run(second, opt2, range(3, 6))
    for (name, a), b in zip(whole.named_parameters(), second.parameters()):
        assert torch.equal(a, b), name


@require("torch")
def test_a_native_torch_optimizer_and_its_scheduler_are_saved(tmp_path):
    """A plain torch AdamW + OneCycleLR (no uo.build), read through uo.from_native."""
    import torch

    params = [(n, torch.nn.Parameter(torch.from_numpy(a))) for n, a in
              CASE.initial_params().items()]
    optimizer = torch.optim.AdamW([p for _, p in params], lr=1e-3, weight_decay=0.05)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.01, total_steps=50)
    for t in range(7):
        for n, p in params:
            p.grad = torch.from_numpy(CASE.gradients(t)[n])
        optimizer.step()
        scheduler.step()
    uo.save_state(optimizer, tmp_path / "native.safetensors", lr_scheduler=scheduler,
                  names=params)
    saved = read_state(tmp_path / "native.safetensors")
    assert saved.spec.lr.cycle_momentum and (saved.steps, saved.position) == (7, 7)
    np.testing.assert_array_equal(saved.arrays["w"]["exp_avg_sq"],
                                  optimizer.state[params[0][1]]["exp_avg_sq"].numpy())


# -- faults: each refused before anything changes ------------------------------------------

@pytest.fixture
def saved(tmp_path):
    pytest.importorskip("torch")
    run = _driver("torch")
    _steps(run, range(5))
    path = tmp_path / "run.safetensors"
    uo.save_state(run.optimizer, path)
    return path


@pytest.fixture
def target():
    """A torch optimizer 3 steps in: a failed load must leave exactly this."""
    pytest.importorskip("torch")
    run = _driver("torch")
    _steps(run, range(3))
    return run


def _refused(target, path, error, match, **kwargs):
    before = _everything(target)
    with pytest.raises(error, match=match):
        uo.load_state(target.optimizer, path, **kwargs)
    after = _everything(target)
    assert after["lr"] == before["lr"]
    for name, state in before["state"].items():
        for key, value in state.items():
            np.testing.assert_array_equal(after["state"][name][key], value)
    assert target.optimizer.param_groups[0]["steps_taken"] == 3


def _rewrite(path, out, change_header=None, change_tensors=None):
    """The file with its JSON header and/or tensor bytes changed (the digest kept)."""
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header, body = json.loads(raw[8:8 + size]), bytearray(raw[8 + size:])
    if change_header:
        change_header(header)
    if change_tensors:
        change_tensors(header, body)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    out.write_bytes(struct.pack("<Q", len(text)) + text + bytes(body))
    return out


def test_a_truncated_file(saved, target, tmp_path):
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(saved.read_bytes()[:-100])
    _refused(target, cut, ValueError, "not a readable state file")


def test_flipped_bytes_in_a_state_array(saved, target, tmp_path):
    def flip(header, body):
        begin, _ = header["state/w/exp_avg"]["data_offsets"]
        body[begin + 3] ^= 0x10
    damaged = _rewrite(saved, tmp_path / "flipped.safetensors", change_tensors=flip)
    _refused(target, damaged, ValueError, "does not match its sha256")


def test_a_changed_step_count_in_the_metadata(saved, target, tmp_path):
    def steps(header):
        header["__metadata__"]["steps"] = "4"
    _refused(target, _rewrite(saved, tmp_path / "steps.safetensors", steps), ValueError,
             "does not match its sha256")


def test_not_a_state_file(target, tmp_path):
    from safetensors.numpy import save_file

    other = tmp_path / "weights.safetensors"
    save_file({"w": np.zeros(3, np.float32)}, str(other), metadata={"format": "pt"})
    _refused(target, other, ValueError, f"has format 'pt', expected '{FORMAT}'")
    # a missing file is FileNotFoundError, as open() says it (issue 22)
    _refused(target, tmp_path / "absent.safetensors", FileNotFoundError, "no state file")


def test_a_wrong_spec(tmp_path, target):
    other = _driver("torch", spec=SPEC.replace(weight_decay=0.2))
    _steps(other, range(2))
    uo.save_state(other.optimizer, tmp_path / "other.safetensors")
    _refused(target, tmp_path / "other.safetensors", ValueError,
             # only the differing field, with both values (issue 22)
             r"another spec than the optimizer computes: weight_decay=0.2 in the file, "
             r"0\.1 in the optimizer$")


def test_other_groups(tmp_path, target):
    other = _driver("torch", groups=[uo.Group(match="w", weight_decay=0.0)])
    uo.save_state(other.optimizer, tmp_path / "groups.safetensors")
    _refused(target, tmp_path / "groups.safetensors", ValueError, "groups .* differ")


def test_a_missing_parameter(tmp_path, target):
    pytest.importorskip("torch")
    arrays = {n: a for n, a in CASE.initial_params().items() if n != "scale"}
    fewer = driver_class("torch")(SPEC, arrays, path="own", groups=GROUPS,
                                  total_steps=CASE.steps)
    uo.save_state(fewer.optimizer, tmp_path / "fewer.safetensors")
    _refused(target, tmp_path / "fewer.safetensors", ValueError,
             r"parameter names differ: not in the file \['scale'\]")


def test_a_wrong_shape_and_a_wrong_dtype(saved, target):
    _refused(target, saved, ValueError, "state 'exp_avg' of 'w' has shape",
             transform={"w": lambda a: a.reshape(-1)})
    _refused(target, saved, ValueError, "state 'exp_avg' of 'w' is float64 in the file",
             transform={"w": lambda a: a.astype(np.float64)})


def test_a_transform_applies_to_each_array(saved, target):
    uo.load_state(target.optimizer, saved, transform=lambda name: (
        (lambda a: a * 2) if name == "bias" else None))
    doubled = read_state(saved).arrays["bias"]["exp_avg"] * 2
    np.testing.assert_array_equal(target.state_numpy()["bias"]["exp_avg"], doubled)
    with pytest.raises(TypeError, match="transform must be a mapping"):
        uo.load_state(target.optimizer, saved, transform=3)


def test_loading_runs_no_code(target, tmp_path):
    """A pickle that would write a file if unpickled, under a state file's name: refused
    as not safetensors, and nothing ran."""
    import pickle

    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    bad = tmp_path / "evil.safetensors"
    bad.write_bytes(pickle.dumps(Payload()))
    _refused(target, bad, ValueError, "not a readable state file")
    assert not marker.exists()


def test_a_native_optimizer_is_refused_by_load_state(saved):
    torch = pytest.importorskip("torch")
    native = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(3))])
    with pytest.raises(TypeError, match="optimizer must be made by uo.build, got AdamW"):
        uo.load_state(native, saved)


def test_a_file_written_by_hand_without_its_names(tmp_path, target):
    """Complete in form (its own digest), not in content: a clear error, not KeyError."""
    from safetensors.numpy import save_file

    from unified_opt.porting.state import _digest

    metadata = {"format": FORMAT, "spec": json.dumps(SPEC.to_dict())}
    tensors = {"step/w": np.array([1], dtype=np.int64)}
    metadata["sha256"] = _digest(metadata, tensors)
    save_file(tensors, str(tmp_path / "hand.safetensors"), metadata=metadata)
    _refused(target, tmp_path / "hand.safetensors", ValueError,
             "is not a complete state file: KeyError: 'names'")


def test_a_state_file_has_the_umask_mode(saved):
    """As every other output: not safetensors' 0600 (issue 22)."""
    import os

    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(saved).st_mode & 0o777 == 0o666 & ~umask


# -- values changed outside uo: an lr over a constant spec lr kept, others refused ---------

def _torch_linear():
    import torch

    torch.manual_seed(0)
    return torch.nn.Linear(6, 5)


def _torch_steps(model, optimizer, scheduler, steps):
    import torch

    for _ in range(steps):
        for p in model.parameters():
            p.grad = torch.ones_like(p)
        optimizer.step()
        if scheduler is not None:
            scheduler.step()


def _group_values(path):
    return read_state(path).group_values


@require("torch")
@pytest.mark.parametrize("path", ["own", "native"])
def test_save_state_keeps_a_group_lr_a_torch_scheduler_changed(tmp_path, path):
    import torch

    model = _torch_linear()
    optimizer = uo.build(uo.Adam(lr=1e-2, weight_decay=0.1), model, path=path)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 2, 0.5)
    _torch_steps(model, optimizer, scheduler, 5)
    assert optimizer.param_groups[0]["lr"] == 0.0025
    uo.save_state(optimizer, tmp_path / "run.safetensors")
    recorded = {"lr": 0.0025, "initial_lr": 0.01}
    assert _group_values(tmp_path / "run.safetensors") == {"weight": recorded,
                                                           "bias": recorded}
    assert read_state(tmp_path / "run.safetensors").spec.lr == 1e-2   # the build's spec
    resumed = uo.build(uo.Adam(lr=1e-2, weight_decay=0.1), _torch_linear(), path=path)
    uo.load_state(resumed, tmp_path / "run.safetensors")
    assert {k: resumed.param_groups[0][k] for k in recorded} == recorded


@require("torch")
def test_save_state_records_a_hand_edited_weight_decay_on_the_native_path(tmp_path):
    # torch's Adam reads weight_decay from its group at every step: the run used 0.2
    model = _torch_linear()
    optimizer = uo.build(uo.Adam(lr=1e-2, weight_decay=0.1), model, path="native")
    _torch_steps(model, optimizer, None, 2)
    optimizer.param_groups[0]["weight_decay"] = 0.2
    uo.save_state(optimizer, tmp_path / "run.safetensors")
    recorded = {"lr": 0.01, "weight_decay": 0.2}
    assert _group_values(tmp_path / "run.safetensors") == {"weight": recorded,
                                                           "bias": recorded}
    resumed = uo.build(uo.Adam(lr=1e-2, weight_decay=0.1), _torch_linear(), path="native")
    uo.load_state(resumed, tmp_path / "run.safetensors")
    assert resumed.param_groups[0]["weight_decay"] == 0.2


@require("torch")
@pytest.mark.parametrize("path", ["own", "native"])
def test_save_state_takes_a_uo_schedule_and_group_lr_scale(tmp_path, path):
    schedule = uo.schedules.Step(lr=1e-2, step_size=2, gamma=0.5)
    model = _torch_linear()
    groups = [uo.Group(match="bias", lr_scale=0.5)]
    optimizer = uo.build(uo.Adam(lr=schedule), model, groups=groups, path=path)
    _torch_steps(model, optimizer, uo.native_scheduler(optimizer), 5)
    assert sorted(g["lr"] for g in optimizer.param_groups) == [0.00125, 0.0025]
    uo.save_state(optimizer, tmp_path / "run.safetensors")
    assert read_state(tmp_path / "run.safetensors").position == 5
    optimizer.param_groups[-1]["lr"] = 0.5
    with pytest.raises(ValueError, match=r"holds lr=0.5, but the spec's schedule"):
        uo.save_state(optimizer, tmp_path / "run.safetensors")


@require("paddle")
@pytest.mark.parametrize("path", ["own", "native"])
def test_save_state_keeps_a_paddle_set_lr_and_refuses_a_foreign_lr_scheduler(tmp_path, path):
    import paddle

    paddle.seed(0)
    model = paddle.nn.Linear(6, 5)
    optimizer = uo.build(uo.Adam(lr=1e-2), model, path=path)
    (model.weight.sum() + model.bias.sum()).backward()
    optimizer.step()
    optimizer.clear_grad()
    optimizer.set_lr(0.0025)
    uo.save_state(optimizer, tmp_path / "run.safetensors")
    assert _group_values(tmp_path / "run.safetensors") == {"weight": {"lr": 0.0025},
                                                           "bias": {"lr": 0.0025}}
    resumed = uo.build(uo.Adam(lr=1e-2), paddle.nn.Linear(6, 5), path=path)
    uo.load_state(resumed, tmp_path / "run.safetensors")
    assert resumed.get_lr() == 0.0025 and resumed.param_groups[0]["lr"] == 0.0025
    # its later lrs are the scheduler's, which the file cannot carry
    optimizer.set_lr_scheduler(paddle.optimizer.lr.StepDecay(0.01, step_size=2))
    with pytest.raises(ValueError, match=r"save_state: the optimizer's lr is a StepDecay, "
                       r"but the spec gives the constant lr 0.01"):
        uo.save_state(optimizer, tmp_path / "other.safetensors")
    assert not (tmp_path / "other.safetensors").exists()


@require("mindspore")
def test_save_state_keeps_a_mindspore_learning_rate_written_from_outside(tmp_path):
    from mindspore import Tensor, nn

    model = nn.Dense(6, 5)
    optimizer = uo.build(uo.Adam(lr=1e-2), model, path="own")
    optimizer(tuple(Tensor(np.ones(p.shape, np.float32)) for p in optimizer.parameters))
    optimizer.learning_rate.set_data(Tensor(np.array(0.0025, np.float32)))
    uo.save_state(optimizer, tmp_path / "run.safetensors")
    held = float(np.float32(0.0025))
    assert _group_values(tmp_path / "run.safetensors") == {"weight": {"lr": held},
                                                           "bias": {"lr": held}}
    resumed = uo.build(uo.Adam(lr=1e-2), nn.Dense(6, 5), path="own")
    uo.load_state(resumed, tmp_path / "run.safetensors")
    assert resumed.learning_rate.asnumpy() == np.float32(0.0025)
    assert resumed.param_groups[0]["lr"] == held


@require("mindspore")
@pytest.mark.parametrize("params", ["bare", "group dicts"])
def test_a_mindspore_build_over_bare_parameters_saves_each_under_its_own_name(tmp_path,
                                                                              params):
    """``uo.build(spec, net.trainable_params())`` (or group dicts of them) names each
    parameter by its own MindSpore name ("0.weight": the network's structure, the same
    in a rebuilt one). The file used to key all of them by "None", one state for four
    parameters; a resumed run is now the uninterrupted one, bit for bit."""
    from mindspore import Tensor, nn

    def net():
        model = nn.SequentialCell([nn.Dense(4, 3), nn.LayerNorm((3,))])
        for i, p in enumerate(model.trainable_params()):
            p.set_data(Tensor(np.linspace(-1, 1, p.size).reshape(p.shape).astype(np.float32)
                              * (i + 1)))
        return model

    def build(model):
        bare = model.trainable_params()
        if params == "bare":
            return uo.build(SPEC, bare, path="own")
        return uo.build(SPEC, [{"params": [p for p in bare if len(p.shape) > 1]},
                               {"params": [p for p in bare if len(p.shape) == 1],
                                "weight_decay": 0.0}], path="own")

    def run(opt, steps):
        for t in steps:
            rng = np.random.default_rng(t)
            opt(tuple(Tensor(rng.standard_normal(p.shape).astype(np.float32))
                      for p in opt.parameters))

    whole = net()
    run(build(whole), range(6))
    first = net()
    opt = build(first)
    run(opt, range(3))
    file = tmp_path / "run.safetensors"
    uo.save_state(opt, file)
    saved = read_state(file)
    assert saved.names == ["0.weight", "0.bias", "1.gamma", "1.beta"]
    assert not np.array_equal(saved.arrays["0.bias"]["exp_avg"],
                              saved.arrays["1.beta"]["exp_avg"])
    second = net()
    for a, b in zip(second.trainable_params(), first.trainable_params()):
        a.set_data(b.value().copy())
    opt2 = build(second)
    uo.load_state(opt2, file)
    run(opt2, range(3, 6))
    for a, b in zip(whole.trainable_params(), second.trainable_params()):
        np.testing.assert_array_equal(a.asnumpy(), b.asnumpy(), err_msg=a.name)


def test_a_state_file_refuses_parameters_without_a_name_of_their_own(tmp_path):
    """The file keys state by name: two parameters under one name (or none) would keep
    one's state for both. Refused before anything is written."""
    from unified_opt.porting.snapshot import Snapshot
    from unified_opt.porting.state_encoding import encoded

    arrays = {"exp_avg": np.zeros(2, np.float32)}
    for names, words in ((["w", "w"], r"the names \['w'\] are shared"),
                         ([None, "b"], r"parameters \[0\] have none")):
        snapshot = Snapshot(uo.Adam(), (), names, {n: (2,) for n in names}, 1, None,
                            {n: 1 for n in names}, {n: arrays for n in names}, "torch")
        with pytest.raises(ValueError, match="save_state: every parameter needs its own "
                                             "name in a state file; " + words):
            encoded(snapshot)


# -- low-precision state: stored exactly, checked against the storage dtype ----------------

def _low_precision_run(param_dtype, state_dtype, steps):
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(6, 5).to(param_dtype)
    spec = uo.Adam(lr=1e-2, state_dtype=state_dtype)
    optimizer = uo.build(spec, model, path="own")
    for t in range(steps):
        generator = torch.Generator().manual_seed(t)
        for p in model.parameters():
            p.grad = torch.randn(p.shape, generator=generator).to(param_dtype)
        optimizer.step()
    return model, optimizer


@require("torch")
@pytest.mark.parametrize("param_dtype, state_dtype, stored", [
    ("bfloat16", None, "BF16"), ("bfloat16", "float32", "F32"),
    ("float32", "bfloat16", "BF16"), ("float16", "float32", "F32"), ("float16", None, "F16")])
def test_low_precision_state_round_trips_exactly(tmp_path, param_dtype, state_dtype, stored):
    import torch

    dtype = getattr(torch, param_dtype)
    model, optimizer = _low_precision_run(dtype, state_dtype, 3)
    path = tmp_path / "run.safetensors"
    uo.save_state(optimizer, path)
    header = json.loads(path.read_bytes()[8:8 + struct.unpack("<Q", path.read_bytes()[:8])[0]])
    assert header["state/weight/exp_avg"]["dtype"] == stored
    # a second run from the saved parameters and state continues bit for bit
    whole_model, whole = _low_precision_run(dtype, state_dtype, 5)
    torch.manual_seed(0)
    again = torch.nn.Linear(6, 5).to(dtype)
    again.load_state_dict(model.state_dict())
    resumed = uo.build(uo.Adam(lr=1e-2, state_dtype=state_dtype), again, path="own")
    uo.load_state(resumed, path)
    for p, q in zip(model.parameters(), again.parameters()):
        for key in ("exp_avg", "exp_avg_sq"):
            assert resumed.state[q][key].dtype == optimizer.state[p][key].dtype
            assert torch.equal(resumed.state[q][key], optimizer.state[p][key])
    for t in range(3, 5):
        generator = torch.Generator().manual_seed(t)
        for p in again.parameters():
            p.grad = torch.randn(p.shape, generator=generator).to(dtype)
        resumed.step()
    for p, q in zip(whole_model.parameters(), again.parameters()):
        assert torch.equal(p, q)


@require("torch")
def test_a_bfloat16_state_file_is_refused_where_the_state_is_float32(tmp_path):
    import torch

    _, optimizer = _low_precision_run(torch.float32, "bfloat16", 2)
    uo.save_state(optimizer, tmp_path / "run.safetensors")
    saved = read_state(tmp_path / "run.safetensors")
    np.testing.assert_array_equal(   # the bits of the bfloat16 values, exactly
        saved.arrays["bias"]["exp_avg"].view(np.uint16),
        optimizer.state[optimizer.param_groups[0]["params"][1]]["exp_avg"]
        .view(torch.int16).numpy().view(np.uint16))
    # a file of float32 state whose one array was written as bfloat16 (digest recomputed)
    from pathlib import Path

    from unified_opt.porting.state import _write, bfloat16_bits
    from unified_opt.storage import round_to

    _, plain = _low_precision_run(torch.float32, None, 2)
    uo.save_state(plain, tmp_path / "plain.safetensors")
    edited = read_state(tmp_path / "plain.safetensors")
    edited.arrays["weight"]["exp_avg"] = bfloat16_bits(
        round_to(edited.arrays["weight"]["exp_avg"], "bfloat16"))
    _write(edited, Path(tmp_path / "edited.safetensors"))
    _, target = _low_precision_run(torch.float32, None, 1)
    before = {k: v.clone() for k, v in target.state[target.param_groups[0]["params"][0]].items()}
    with pytest.raises(ValueError, match="state 'exp_avg' of 'weight' is bfloat16 in the "
                       "file, expected float32"):
        uo.load_state(target, tmp_path / "edited.safetensors")
    after = target.state[target.param_groups[0]["params"][0]]
    assert all(torch.equal(before[k], after[k]) for k in before)


# -- a data-parallel spec's state is one rank's: the file says whose ----------------------

@require("torch")
def test_a_dgc_state_file_records_its_rank_and_loads_on_that_rank_only(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    worker = Path(__file__).parent / "dgc_state_rank.py"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           "--nproc_per_node=2", str(worker), str(tmp_path)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    for rank in (0, 1):
        assert read_state(tmp_path / f"rank{rank}.safetensors").ranks == (rank, 2)
        result = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert result[str(rank)] == {"loaded": True}
        other = 1 - rank
        assert result[str(other)]["refused"] == (
            f"load_state: the file holds rank {other}'s state of 2 ranks (dgc_momentum keeps "
            f"residuals per rank), and this optimizer is rank {rank} of 2: load each rank's "
            "own file (save_state on every rank, one file per rank, the same world size)")


# -- edited contents (digest recomputed): each refused, the optimizer untouched ------------

def _edited(saved, tmp_path, change):
    import dataclasses
    from pathlib import Path

    from unified_opt.porting.state import _write

    snapshot = read_state(saved)
    snapshot = change(snapshot) or snapshot
    _write(dataclasses.replace(snapshot), Path(tmp_path / "edited.safetensors"))
    return tmp_path / "edited.safetensors"


@pytest.mark.parametrize("label, change, match", [
    ("negative step", lambda s: s.param_steps.__setitem__("w", -4),
     "the step count of 'w' is -4, not a count"),
    ("more steps than the optimizer", lambda s: s.param_steps.__setitem__("w", 6),
     "parameter 'w' took 6 steps, more than the optimizer's 5"),
    ("bogus framework", lambda s: setattr(s, "framework", "jax"),
     "framework is 'jax', not one of"),
    ("negative position", lambda s: setattr(s, "position", -1), "position is -1"),
])
def test_edited_contents_are_refused(saved, target, tmp_path, label, change, match):
    _refused(target, _edited(saved, tmp_path, change), ValueError, match)


@require("torch")
def test_a_position_without_a_schedule_is_refused(tmp_path):
    import dataclasses
    from pathlib import Path

    from unified_opt.porting.state import _write

    constant = _driver("torch", spec=SPEC.replace(lr=0.01))
    _steps(constant, range(3))
    uo.save_state(constant.optimizer, tmp_path / "run.safetensors")
    snapshot = dataclasses.replace(read_state(tmp_path / "run.safetensors"), position=7)
    _write(snapshot, Path(tmp_path / "edited.safetensors"))
    target = _driver("torch", spec=SPEC.replace(lr=0.01))
    _steps(target, range(3))
    _refused(target, tmp_path / "edited.safetensors", ValueError,
             r"position is 7, but the spec's lr 0.01 is no schedule")


def test_a_step_count_beyond_torchs_float32_step_is_refused(saved, target, tmp_path):
    def change(s):
        s.steps = 2 ** 62
        s.param_steps["w"] = 2 ** 62
    _refused(target, _edited(saved, tmp_path, change), ValueError,
             r"parameter 'w' took 4611686018427387904 steps in the file, more than torch's "
             r"float32 step holds exactly \(16777216\)")
