"""Parameter names and layouts across frameworks (issue 22): ``uo.porting.name_map``
maps torch's names onto a MindSpore or Paddle model by module type (LayerNorm ``weight``
-> ``gamma``); ``uo.resume`` of a torch state file onto a MindSpore model with a LayerNorm
needs no hand-written names, and the run goes on within the conformance rule; onto a
Paddle model its square Linear weight's state is transposed by the module type, and
without the model (its module types unknown) that square weight is refused. Each
framework runs in a process of its own (``layout_worker.py``)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import require
from support import installed_frameworks

import unified_opt as uo
from unified_opt.conformance.cases import Case
from unified_opt.conformance.compare import compare
from unified_opt.conformance.trajectory import Trajectory, floor_trajectories, reference_trajectory
from unified_opt.porting import name_map
from unified_opt.porting.names import parameter_modules

WORKER = Path(__file__).parent / "layout_worker.py"
PARAMS = {"fc.weight": (4, 4), "fc.bias": (4,), "ln.weight": (4,), "ln.bias": (4,),
          "out.weight": (3, 4), "out.bias": (3,)}
STEPS, SWITCH = 50, 20
CASE = Case(id="layout_run", spec=uo.AdamW(lr=0.01, weight_decay=0.1), params=PARAMS,
            steps=STEPS, groups=(uo.Group(match=("*.bias", "ln.*"), weight_decay=0.0),))
TARGETS = [f for f in ("mindspore", "paddle") if f in installed_frameworks()]


@require("torch")
def test_name_map_and_module_types_of_a_torch_model():
    import torch

    net = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.LayerNorm(3),
                              torch.nn.Embedding(5, 3))
    assert parameter_modules(net) == {
        "0.weight": ("linear", "weight"), "0.bias": ("linear", "bias"),
        "1.weight": ("layer_norm", "weight"), "1.bias": ("layer_norm", "bias"),
        "2.weight": ("embedding", "weight")}
    assert name_map("mindspore", net) == {"0.weight": "0.weight", "0.bias": "0.bias",
                                          "1.gamma": "1.weight", "1.beta": "1.bias",
                                          "2.embedding_table": "2.weight"}
    assert uo.porting.name_map is name_map
    with pytest.raises(ValueError, match="source_framework must be one of"):
        name_map("jax", net)
    with pytest.raises(TypeError, match="model must be a torch Module"):
        name_map("torch", [torch.nn.Parameter(torch.zeros(2))])


def _run(framework, jobs, directory, case=CASE):
    done = {}
    for label, job in jobs.items():
        job.update(case=case.to_dict(), switch=SWITCH,
                   result=str(directory / f"{label}.json"))
        (directory / f"{label}.job.json").write_text(json.dumps(job))
    for label in jobs:
        done[label] = subprocess.run(
            [sys.executable, str(WORKER), framework, str(directory / f"{label}.job.json")],
            capture_output=True, text=True, timeout=600)
        assert done[label].returncode == 0, done[label].stdout[-2000:] + \
            done[label].stderr[-4000:]
    return {label: json.loads((directory / f"{label}.json").read_text()) for label in jobs}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    if "torch" not in installed_frameworks() or not TARGETS:
        pytest.skip("needs torch and another framework")
    directory = tmp_path_factory.mktemp("layouts")
    files = {"state": str(directory / "run.safetensors"),
             "params": str(directory / "params.npz")}
    out = {"train": _run("torch", {"train": {"phase": "train", **files, "trajectory": str(
        directory / "train.npz")}}, directory)["train"]}
    for target in TARGETS:
        jobs = {f"{target}": {"phase": "resume", **files,
                              "trajectory": str(directory / f"{target}.npz")}}
        if target == "paddle":
            jobs["refused"] = {"phase": "refused", **files, "trajectory": ""}
        out.update(_run(target, jobs, directory))
    return directory, out


def _judge(directory, target, case=CASE):
    first = Trajectory.load(directory / "train.npz")
    second = Trajectory.load(directory / f"{target}.npz")
    stitched = Trajectory(np.concatenate([first.lrs, second.lrs]),
                          {n: np.concatenate([first.params[n], second.params[n]])
                           for n in first.params}, {})
    oracle = reference_trajectory(case.spec, case, "float64")
    return compare(stitched, oracle, floor_trajectories(case.spec, case), state=False)


@pytest.mark.parametrize("target", TARGETS)
def test_a_torch_run_resumes_by_module_type_without_hand_written_names(runs, target):
    directory, out = runs
    # the state crossed exactly: under torch's names and layout again, the same numbers
    saved, loaded = out["train"]["state"], out[target]["state"]
    assert saved.keys() == loaded.keys() == PARAMS.keys()
    for name in PARAMS:
        for key in saved[name]:
            np.testing.assert_array_equal(np.asarray(loaded[name][key], np.float32),
                                          np.asarray(saved[name][key], np.float32),
                                          err_msg=f"{target} {name} {key}")
    result = _judge(directory, target)
    assert result.passed, f"torch -> {target}: {result.detail}"


def test_a_square_weight_of_unknown_layout_is_refused(runs):
    if "paddle" not in TARGETS:
        pytest.skip("needs paddle")
    _, out = runs
    message = out["refused"]["refused"]
    assert "parameter 'fc.weight' is a square (4, 4) weight saved on torch and loaded on " \
           "paddle" in message
    assert "pass model=<the module>" in message


#: factored second moments (row and column statistics of each 2-D weight), written on
#: one side of the layout change and resumed on the other
FACTORED = {"adafactor": ("torch", "paddle",
                          uo.Adafactor(lr=0.01, relative_step=False, beta1=0.9)),
            "came": ("paddle", "torch", uo.CAME(lr=0.01))}


@require("torch")
@require("paddle")
@pytest.mark.parametrize("name", FACTORED)
def test_factored_state_crosses_the_linear_layout_between_torch_and_paddle(tmp_path, name):
    source, target, spec = FACTORED[name]
    case = Case(id=f"layout_{name}", spec=spec, params=PARAMS, steps=STEPS)
    files = {"state": str(tmp_path / "run.safetensors"),
             "params": str(tmp_path / "params.npz")}
    saved = _run(source, {"train": {"phase": "train", **files,
                                    "trajectory": str(tmp_path / "train.npz")}},
                 tmp_path, case)["train"]["state"]
    loaded = _run(target, {target: {"phase": "resume", **files,
                                    "trajectory": str(tmp_path / f"{target}.npz")}},
                  tmp_path, case)[target]["state"]
    # under torch's names and layout both sides hold the same numbers: out.weight (3, 4)
    # keeps a (3, 1) row and a (1, 4) column statistic
    assert np.shape(saved["out.weight"]["exp_avg_sq_row"]) == (3, 1)
    for param in PARAMS:
        assert sorted(saved[param]) == sorted(loaded[param])
        for key in saved[param]:
            np.testing.assert_array_equal(np.asarray(loaded[param][key], np.float32),
                                          np.asarray(saved[param][key], np.float32),
                                          err_msg=f"{source} -> {target} {param} {key}")
    result = _judge(tmp_path, target, case)
    assert result.passed, f"{source} -> {target}: {result.detail}"
