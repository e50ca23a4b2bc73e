"""Presets: native argument names and defaults, errors, and the acceptance check that a
preset built on the other two backends (and in the reference) follows the native
optimizer run by hand in its own framework, over 100 steps, within the fp32 noise floor.

Each framework runs in its own worker process (``tests/workers/run_jobs.py``).
"""

import importlib.util
import json
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import unified_opt as uo
from helpers import gradient_stream, initial_params

FRAMEWORKS = ("torch", "paddle", "mindspore")
STEPS = 100
FACTOR = 10.0
# Parameter names exercise MindSpore's default decay filter ("gamma"/"beta" skipped,
# "bias" decayed).
SHAPES = {"w": (8, 6), "bias": (6,), "ln.gamma": (6,), "ln.beta": (6,), "w3d": (3, 4, 5)}

# (id, qualified name, native kwargs, documented CPU defect of the native class or None)
CASES = [
    ("torch-sgd", "torch.optim.SGD",
     dict(lr=0.05, momentum=0.9, dampening=0.2, weight_decay=0.01), None),
    ("torch-sgd-nesterov", "torch.optim.SGD", dict(lr=0.05, momentum=0.9, nesterov=True), None),
    ("torch-adam", "torch.optim.Adam",
     dict(lr=0.01, eps=1e-3, weight_decay=0.01, amsgrad=True), None),
    ("torch-adamw", "torch.optim.AdamW", dict(lr=0.01, eps=1e-3, weight_decay=0.1), None),
    ("paddle-sgd", "paddle.optimizer.SGD", dict(learning_rate=0.05, weight_decay=0.01), None),
    ("paddle-momentum", "paddle.optimizer.Momentum",
     dict(learning_rate=0.05, momentum=0.9, use_nesterov=True, weight_decay=0.01), None),
    ("paddle-adam", "paddle.optimizer.Adam",
     dict(learning_rate=0.01, epsilon=1e-3, weight_decay=0.01, amsgrad=True), None),
    ("paddle-adamw", "paddle.optimizer.AdamW",
     dict(learning_rate=0.01, epsilon=1e-3, weight_decay=0.1), None),
    ("ms-nn-sgd", "mindspore.nn.SGD",
     dict(learning_rate=0.05, momentum=0.9, dampening=0.2, weight_decay=0.01), None),
    ("ms-nn-momentum", "mindspore.nn.Momentum",
     dict(learning_rate=0.05, momentum=0.9, weight_decay=0.01), None),
    ("ms-nn-momentum-nesterov", "mindspore.nn.Momentum",
     dict(learning_rate=0.05, momentum=0.9, use_nesterov=True),
     "use_nesterov=True runs plain momentum on CPU"),
    ("ms-nn-adam", "mindspore.nn.Adam",
     dict(learning_rate=0.01, eps=1e-3, weight_decay=0.01, use_amsgrad=True), None),
    ("ms-nn-adam-nesterov", "mindspore.nn.Adam",
     dict(learning_rate=0.01, eps=1e-3, use_nesterov=True), None),
    ("ms-nn-adamweightdecay", "mindspore.nn.AdamWeightDecay",
     dict(learning_rate=0.01, eps=1e-3, weight_decay=0.1), None),
    ("ms-exp-sgd", "mindspore.experimental.optim.SGD",
     dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01), None),
    ("ms-exp-adam", "mindspore.experimental.optim.Adam",
     dict(lr=0.01, eps=1e-3, weight_decay=0.01), None),
    ("ms-exp-adam-amsgrad", "mindspore.experimental.optim.Adam",
     dict(lr=0.01, eps=1e-3, amsgrad=True), "amsgrad=True is ignored"),
    ("ms-exp-adamw", "mindspore.experimental.optim.AdamW",
     dict(lr=0.01, eps=1e-3, weight_decay=0.1, amsgrad=True), None),
]


# -- argument names, defaults and errors (no framework needed) -------------------------

def test_every_listed_class_has_a_preset():
    listed = {"torch.optim.SGD", "torch.optim.Adam", "torch.optim.AdamW",
              "paddle.optimizer.SGD", "paddle.optimizer.Momentum", "paddle.optimizer.Adam",
              "paddle.optimizer.AdamW", "mindspore.nn.SGD", "mindspore.nn.Momentum",
              "mindspore.nn.Adam", "mindspore.nn.AdamWeightDecay",
              "mindspore.experimental.optim.SGD", "mindspore.experimental.optim.Adam",
              "mindspore.experimental.optim.AdamW"}
    assert listed <= set(uo.presets())


def test_native_defaults():
    assert uo.preset("torch.optim.Adam") == uo.Adam()
    assert uo.preset("torch.optim.AdamW") == uo.AdamW(weight_decay=1e-2)
    assert uo.preset("torch.optim.Adam", decoupled_weight_decay=True, weight_decay=0.1) == \
        uo.AdamW(weight_decay=0.1)
    assert uo.preset("paddle.optimizer.Momentum") == uo.SGD(lr=1e-3, momentum=0.9,
                                                            momentum_init="zeros")
    assert uo.preset("paddle.optimizer.AdamW").weight_decay == 0.01
    ms_adam = uo.preset("mindspore.nn.Adam", weight_decay=0.1)
    assert (ms_adam.eps_placement, ms_adam.no_decay_names) == ("eps_hat", ("beta", "gamma"))
    awd = uo.preset("mindspore.nn.AdamWeightDecay", weight_decay=0.01)
    assert (awd.bias_correction, awd.eps, awd.decay_form) == (False, 1e-6, "in_update")
    assert uo.preset("mindspore.nn.SGD").lr == 0.1
    assert uo.preset("mindspore.experimental.optim.AdamW").no_decay_names == ()


def test_preset_errors_name_the_argument():
    with pytest.raises(ValueError, match="no preset for 'torch.optim.Adamm'"):
        uo.preset("torch.optim.Adamm")
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['learning_rate'\]"
                                        r"; valid: \['lr', 'betas'"):
        uo.preset("torch.optim.Adam", learning_rate=0.1)
    with pytest.raises(TypeError, match=r"missing required argument\(s\) \['momentum'\]"):
        uo.preset("mindspore.nn.Momentum", learning_rate=0.1)
    with pytest.raises(ValueError, match=r"betas\[1\] must be >= 0 and < 1, got 1\.5"):
        uo.preset("paddle.optimizer.Adam", beta2=1.5)
    with pytest.raises(NotImplementedError, match="rescale_grad=0.5"):
        uo.preset("paddle.optimizer.Momentum", rescale_grad=0.5)
    with pytest.raises(NotImplementedError, match="loss_scale=8"):
        uo.preset("mindspore.nn.Adam", loss_scale=8)
    with pytest.raises(TypeError, match="weight_decay must be a float or L2Decay, got the int"):
        uo.preset("paddle.optimizer.SGD", weight_decay=1)
    with pytest.raises(TypeError, match="lr must be a float here"):
        uo.preset("torch.optim.SGD", lr=[0.1, 0.2])


def test_implementation_flags_warn_and_do_not_change_the_spec():
    with pytest.warns(UserWarning, match="foreach=True chooses an implementation"):
        spec = uo.preset("torch.optim.Adam", foreach=True)
    assert spec == uo.Adam()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        uo.preset("torch.optim.Adam", foreach=None)


# -- the acceptance check: native by hand vs the preset everywhere ---------------------

def _installed():
    return [f for f in FRAMEWORKS if importlib.util.find_spec(f) is not None]


@pytest.fixture(scope="module")
def trajectories(tmp_path_factory):
    installed = _installed()
    if len(installed) < 2:
        pytest.skip("needs at least two frameworks")
    out = tmp_path_factory.mktemp("presets")
    jobs = {f: [] for f in installed}
    for case_id, qualified, kwargs, _ in CASES:
        native_fw = qualified.split(".")[0]
        if native_fw not in installed:
            continue
        common = {"steps": STEPS, "shapes": SHAPES}
        jobs[native_fw].append({"id": f"{case_id}@native", "mode": "native",
                                "qualified": qualified, "kwargs": kwargs, **common})
        spec = uo.preset(qualified, **kwargs)
        for fw in installed:
            if fw != native_fw:
                jobs[fw].append({"id": f"{case_id}@{fw}", "mode": "build",
                                 "spec": spec.to_dict(), **common})
    worker = Path(__file__).parent / "workers" / "run_jobs.py"
    procs = []
    for fw, fw_jobs in jobs.items():
        path = out / f"{fw}.json"
        path.write_text(json.dumps(fw_jobs))
        procs.append(subprocess.Popen([sys.executable, str(worker), fw, str(path), str(out)],
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    for proc in procs:
        output = proc.communicate(timeout=600)[0]
        assert proc.returncode == 0, output.decode()[-3000:]
    return out


def _oracle(spec):
    arrays = initial_params(shapes=SHAPES)
    r64 = uo.reference(spec, arrays, "float64")
    r32 = uo.reference(spec, arrays, "float32")
    p64, p32 = {n: [] for n in arrays}, {n: [] for n in arrays}
    for g in gradient_stream(shapes=SHAPES, steps=STEPS):
        r64.step(g)
        r32.step(g)
        for n in arrays:
            p64[n].append(r64.params[n].copy())
            p32[n].append(r32.params[n].copy())
    return ({n: np.stack(v) for n, v in p64.items()}, {n: np.stack(v) for n, v in p32.items()})


def _worst_ratio(got, p64, p32):
    """Largest (error / fp32 noise floor) over steps and parameters."""
    worst = 0.0
    for n in p64:
        error = np.abs(got[n].astype(np.float64) - p64[n]).reshape(STEPS, -1).max(axis=1)
        floor = np.maximum(np.abs(p32[n] - p64[n]).reshape(STEPS, -1).max(axis=1),
                           4 * np.finfo(np.float32).eps * np.abs(p64[n]).reshape(STEPS, -1)
                           .max(axis=1))
        worst = max(worst, float((error / np.maximum(floor, 1e-37)).max()))
    return worst


def _load(path):
    error = path.with_suffix(".error")
    assert not error.exists(), error.read_text()
    with np.load(path) as data:
        return {k: data[k] for k in data.files}


@pytest.mark.parametrize("case_id, qualified, kwargs, defect", CASES,
                         ids=[c[0] for c in CASES])
def test_preset_follows_the_native_class_everywhere(trajectories, case_id, qualified, kwargs,
                                                    defect):
    native_fw = qualified.split(".")[0]
    if native_fw not in _installed():
        pytest.skip(f"{native_fw} is not installed")
    p64, p32 = _oracle(uo.preset(qualified, **kwargs))
    native = _load(trajectories / f"{case_id}@native.npz")
    native_ratio = _worst_ratio(native, p64, p32)
    if defect:
        # The native class does not do what its documentation says (the preset's math).
        assert native_ratio > 1e3, f"{qualified} {defect}: expected a large deviation"
    else:
        assert native_ratio <= FACTOR, f"native {qualified}: {native_ratio:.1f} x fp32 floor"
    for fw in _installed():
        if fw == native_fw:
            continue
        built = _load(trajectories / f"{case_id}@{fw}.npz")
        ratio = _worst_ratio(built, p64, p32)
        assert ratio <= FACTOR, f"{qualified} preset on {fw}: {ratio:.1f} x fp32 floor"
        if not defect:
            gap = max(np.abs(built[n] - native[n]).max() for n in p64)
            spread = max(np.abs(p32[n] - p64[n]).max() + 4 * np.finfo(np.float32).eps *
                         np.abs(p64[n]).max() for n in p64)
            assert gap <= 2 * FACTOR * spread, f"{fw} vs native {qualified}: {gap:.3e}"
