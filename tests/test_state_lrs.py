"""The portable state carries each group's live lr and its scheduler bookkeeping
(``group_values``), so a run driven by a scheduler or a hand loop over a constant spec lr
is saved and resumed: torch's ``torch.save(opt.state_dict())`` + scheduler workflow on
every backend and path, ``uo.save_state``/``uo.load_state``, ``uo.resume``, and across
frameworks. The framework runs are in processes of their own (``state_lrs_worker.py``);
the checks of the file's contents and of the refusals run here on torch."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import require

import unified_opt as uo
from unified_opt.porting.state_encoding import _digest

WORKER = Path(__file__).parent / "state_lrs_worker.py"
sys.path.insert(0, str(WORKER.parent))
from state_lrs_worker import SAVED_AT, STEPS, cases  # noqa: E402


def _run(which: str, out: Path) -> None:
    done = subprocess.run([sys.executable, str(WORKER), which, str(out)],
                          cwd=WORKER.parent, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]


@pytest.mark.parametrize("framework", [pytest.param(f, marks=require(f))
                                       for f in ("torch", "paddle", "mindspore")])
def test_a_scheduled_run_saved_and_resumed_steps_bit_for_bit_as_the_whole_run(
        tmp_path, framework):
    _run(framework, tmp_path)
    runs = dict(np.load(tmp_path / f"{framework}.npz"))
    for path, how, driver in cases(framework):
        case = f"{path}/{how}/{driver}"
        keys = sorted({k.rsplit("/", 1)[1] for k in runs if k.startswith(case + "/")})
        cycled = driver == "OneCycleLR-momentum"
        assert keys == ["b", *(["betas"] if cycled else []), "lrs", "w"], case
        for key in keys:
            np.testing.assert_array_equal(runs[f"{case}/resumed/{key}"],
                                          runs[f"{case}/whole/{key}"], err_msg=case,
                                          strict=True)
        lrs = runs[f"{case}/whole/lrs"]
        assert len(lrs) == STEPS
        # the lr at the save is not the spec's 0.1: the file had to carry it
        expected = {"StepLR": 0.05, "torch-StepLR": 0.05, "hand": 0.1 * 0.8 ** SAVED_AT,
                    "OneCycleLR": 0.28514539, "OneCycleLR-momentum": 0.28514539}[driver]
        assert np.float32(lrs[SAVED_AT]) == np.float32(expected), case
        assert np.abs(runs[f"{case}/whole/w"]).max() > 0
        if cycled:
            # the betas at the save are neither the spec's 0.9 nor OneCycleLR's first 0.95,
            # which a fresh build and scheduler hold: the state had to carry them
            betas = runs[f"{case}/whole/betas"]
            assert betas.shape == (STEPS, 2) and np.all(betas[:, 1] == 0.999), case
            np.testing.assert_allclose(betas[:SAVED_AT + 1, 0],
                                       [0.95, 0.9, 0.85, 0.854951556604879], rtol=1e-12)
    if framework == "paddle":
        refusal = json.loads((tmp_path / "paddle_refusal.json").read_text())
        assert refusal["saved_betas"] == [0.854951556604879, 0.999]
        assert refusal["unchanged"] is True
        assert refusal["message"].startswith(
            "AdamW.load_state_dict: the state dict records param_groups[0]['betas'] = "
            "(0.854951556604879, 0.999), written after the build"), refusal["message"]
        assert "uo.build(spec, params, path='own')" in refusal["message"]


@pytest.fixture(scope="module")
def across(tmp_path_factory):
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("state_lrs_across")
    _run("torch-across", out)
    return out


@pytest.mark.parametrize("framework", [pytest.param(f, marks=require(f))
                                       for f in ("paddle", "mindspore")])
def test_a_torch_run_with_its_scheduler_goes_on_with_the_same_lrs_on_another_framework(
        across, framework):
    _run(f"{framework}-across", across)
    torch_lrs = json.loads((across / "across_torch.json").read_text())
    runs = json.loads((across / f"across_{framework}.json").read_text())
    assert torch_lrs == [0.05, 0.025, 0.025, 0.0125]
    assert sorted(runs) == ["native", "own"]
    for path, theirs in runs.items():
        if framework == "mindspore":      # experimental.optim keeps the lr in float32
            assert np.array_equal(np.float32(theirs), np.float32(torch_lrs)), path
        else:
            assert theirs == torch_lrs, path


# -- what the state holds, and its refusals (torch, in process) -----------------------------

def _stepped(spec=None, lrs=(0.1,)):
    """A torch run of one or more groups (one per lr in ``lrs``, parameters
    ``w<i>``), stepped twice with its lrs halved after each step by hand."""
    import torch

    spec = spec or uo.AdamW(lr=0.1)
    params = [(f"w{i}", torch.nn.Parameter(torch.ones(2, 2))) for i in range(len(lrs))]
    groups = [{"params": [pair], "lr": lr} for pair, lr in zip(params, lrs)]
    opt = uo.build(spec, groups if len(lrs) > 1 else params, path="own")
    for _ in range(2):
        for _, p in params:
            p.grad = torch.full_like(p, 0.5)
        opt.step()
        for group in opt.param_groups:
            group["lr"] = group["lr"] / 2
    return params, opt


def _edited(state_dict, **metadata):
    """``state_dict`` with metadata keys replaced (None: removed) and its digest
    recomputed: a dict no run wrote, complete in form."""
    out = dict(state_dict)
    meta = {k: v for k, v in {**state_dict["metadata"], **metadata}.items() if v is not None}
    tensors = {k: t.numpy() for k, t in state_dict["tensors"].items()}
    meta["sha256"] = _digest(meta, tensors)
    out["metadata"] = meta
    return out


@require("torch")
def test_group_values_hold_the_live_lr_and_only_scheduler_numbers():
    import torch

    params, opt = _stepped()
    opt.param_groups[0]["max_lr"] = 0.3                # a scheduler's bookkeeping
    opt.param_groups[0]["note"] = "a string"           # not a scheduler's number
    values = json.loads(opt.state_dict()["metadata"]["group_values"])
    assert values == {"w0": {"lr": 0.025, "max_lr": 0.3}}
    native = uo.build(uo.AdamW(lr=0.1), [("w", torch.nn.Parameter(torch.ones(2)))],
                      path="native")
    # torch's own group keys (foreach, fused, ...) and uo's steps_taken are no bookkeeping
    assert json.loads(native.state_dict()["metadata"]["group_values"]) == {"w": {"lr": 0.1}}


@require("torch")
def test_each_group_gets_its_own_lr_back():
    import torch

    params, opt = _stepped(lrs=(0.1, 0.02))
    saved = opt.state_dict()
    fresh = [(n, torch.nn.Parameter(p.detach().clone())) for n, p in params]
    resumed = uo.build(uo.AdamW(lr=0.1), [{"params": [pair], "lr": lr} for pair, lr in
                                          zip(fresh, (0.1, 0.02))], path="own")
    resumed.load_state_dict(saved)
    assert [g["lr"] for g in resumed.param_groups] == [0.025, 0.005]


@require("torch")
def test_a_file_without_group_values_loads_as_before():
    params, opt = _stepped()
    old = _edited(opt.state_dict(), group_values=None)
    _, resumed = _stepped()
    resumed.param_groups[0]["lr"] = 0.1
    resumed.load_state_dict(old)
    assert resumed.param_groups[0]["lr"] == 0.1         # nothing recorded: nothing set


@require("torch")
def test_recorded_values_that_differ_within_a_target_group_are_refused_before_any_write():
    import torch

    params, opt = _stepped(lrs=(0.1, 0.02))
    saved = opt.state_dict()
    # the same names in one group: the file's two lrs cannot both be its lr
    fresh = [(n, torch.nn.Parameter(p.detach().clone())) for n, p in params]
    one = uo.build(uo.AdamW(lr=0.1), fresh, path="own")
    values = json.loads(saved["metadata"]["group_values"])
    # groups are rules over names; the target's single group is made to match
    edited = _edited(saved, groups=json.dumps([]))
    with pytest.raises(ValueError, match=r"load_state_dict: the state dict records different "
                       r"group values for the parameters of the optimizer's "
                       r"param_groups\[0\] \(\['w0'\]: .*0.025.*; \['w1'\]: .*0.005"):
        one.load_state_dict(edited)
    assert one.state == {} and one.param_groups[0]["lr"] == 0.1
    assert values["w0"]["lr"] == 0.025 and values["w1"]["lr"] == 0.005


@require("torch")
@pytest.mark.parametrize("bad, why", [
    ({"w0": {"lr": -1.0}}, r"group_values\['w0'\]\['lr'\] is -1.0, not an lr"),
    ({"w0": {"initial_lr": 0.1}}, r"group_values\['w0'\]\['lr'\] is None"),
    ({"w0": {"lr": 0.1, "x": "s"}}, r"group_values\['w0'\] must be a dict of names to finite"),
    ({"other": {"lr": 0.1}}, r"group_values must name every parameter")])
def test_group_values_no_run_writes_are_refused(bad, why):
    _, opt = _stepped()
    edited = _edited(opt.state_dict(), group_values=json.dumps(bad))
    _, target = _stepped()
    with pytest.raises(ValueError, match=r"load_state_dict: the state dict is not a complete "
                       r"state state dict: ValueError: " + why):
        target.load_state_dict(edited)


@require("torch")
@pytest.mark.parametrize("path", ["own", "native"])
def test_written_hyperparameters_are_recorded_and_written_back(path):
    import torch

    params = [("w", torch.nn.Parameter(torch.ones(2, 2)))]
    opt = uo.build(uo.AdamW(lr=0.1), params, path=path)
    opt.param_groups[0]["betas"] = (0.8, 0.99)
    opt.param_groups[0]["weight_decay"] = 0.5
    saved = opt.state_dict()
    assert json.loads(saved["metadata"]["group_values"]) == {
        "w": {"lr": 0.1, "betas": [0.8, 0.99], "weight_decay": 0.5}}
    target = uo.build(uo.AdamW(lr=0.1), [("w", torch.nn.Parameter(torch.ones(2, 2)))],
                      path=path)
    target.param_groups[0]["eps"] = 1e-3    # written on the target, not in the file
    target.load_state_dict(saved)
    group = target.param_groups[0]
    assert (group["betas"], group["weight_decay"], group["eps"]) == ((0.8, 0.99), 0.5, 1e-8)
    assert type(group["betas"]) is tuple


@require("torch")
@pytest.mark.parametrize("path", ["own", "native"])
def test_a_written_hyperparameter_that_changes_the_state_layout_is_still_refused(path):
    _, opt = _stepped() if path == "own" else (None, _native_stepped())
    opt.param_groups[0]["amsgrad"] = True
    with pytest.raises(ValueError, match=r"state_dict: param_groups\[0\] holds "
                       r"\{'amsgrad': True\}, which changes the state AdamW keeps"):
        opt.state_dict()


def _native_stepped():
    import torch

    opt = uo.build(uo.AdamW(lr=0.1), [("w0", torch.nn.Parameter(torch.ones(2, 2)))],
                   path="native")
    opt.param_groups[0]["params"][0].grad = torch.full((2, 2), 0.5)
    opt.step()
    return opt


@require("torch")
def test_a_recorded_hyperparameter_the_spec_refuses_is_refused_before_any_write():
    _, opt = _stepped()
    saved = opt.state_dict()
    values = json.loads(saved["metadata"]["group_values"])
    values["w0"]["betas"] = [1.5, 0.999]
    edited = _edited(saved, group_values=json.dumps(values))
    _, target = _stepped()
    before = {k: t.clone() for k, t in target.state[target.param_groups[0]["params"][0]]
              .items()}
    with pytest.raises(ValueError, match=r"load_state_dict: .*param_groups\[0\].*betas"):
        target.load_state_dict(edited)
    state = target.state[target.param_groups[0]["params"][0]]
    assert all(torch_equal(state[k], t) for k, t in before.items())
    assert target.param_groups[0]["betas"] == (0.9, 0.999)
    assert target.param_groups[0]["lr"] == 0.025


def torch_equal(a, b) -> bool:
    import torch

    return bool(torch.equal(a, b))
