"""``opt.state_dict()`` written on torch and loaded on Paddle and MindSpore with
``load_state_dict(..., model=)``, each framework in a process of its own
(``state_dict_worker.py``): the torch process writes the dict's tensors and metadata to a
safetensors file (no pickle), and what each target loads from it is, bit for bit, what
``uo.load_state`` loads from the state file of the same run: the same state under the
target's names (MindSpore's LayerNorm ``gamma``/``beta``) and layouts (Paddle's Linear
weight transposed), with a group rule written as a pattern on both sides."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import require
from safetensors.numpy import load_file

WORKER = Path(__file__).parent / "state_dict_worker.py"
#: the target's name of each torch parameter, and whether its state is transposed there
NAMES = {"paddle": {"0.weight": ("0.weight", True), "0.bias": ("0.bias", False),
                    "1.weight": ("1.weight", False), "1.bias": ("1.bias", False)},
         "mindspore": {"0.weight": ("0.weight", False), "0.bias": ("0.bias", False),
                       "1.weight": ("1.gamma", False), "1.bias": ("1.beta", False)}}


def _run(framework: str, out: Path) -> None:
    done = subprocess.run([sys.executable, str(WORKER), framework, str(out)],
                          cwd=WORKER.parent, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("state_dict_across")
    _run("torch", out)
    return out


@pytest.mark.parametrize("framework", [pytest.param(f, marks=require(f))
                                       for f in ("paddle", "mindspore")])
def test_a_torch_state_dict_loads_on_another_framework_as_its_state_file_does(
        written, framework):
    _run(framework, written)
    from_dict = dict(np.load(written / f"{framework}_dict.npz"))
    from_file = dict(np.load(written / f"{framework}_file.npz"))
    assert sorted(from_dict) == sorted(from_file)
    for key in from_dict:
        np.testing.assert_array_equal(from_dict[key], from_file[key], err_msg=key,
                                      strict=True)
    metadata = json.loads((written / f"{framework}.json").read_text())
    assert metadata["dict"] == metadata["file"]
    assert metadata["dict"]["framework"] == framework and metadata["dict"]["steps"] == "3"
    # the torch run's state, under the target's names and layouts
    torch_state = load_file(str(written / "dict.safetensors"))
    for name, (target, transposed) in NAMES[framework].items():
        for slot in ("exp_avg", "exp_avg_sq"):
            theirs = torch_state[f"state/{name}/{slot}"]
            assert np.abs(theirs).max() > 0
            np.testing.assert_array_equal(from_dict[f"state/{target}/{slot}"],
                                          theirs.T if transposed else theirs)
        np.testing.assert_array_equal(from_dict[f"step/{target}"], [3])
