"""One framework's side of ``test_state_dict_across.py``, run in a process of its own:

* ``torch OUT``: a small model stepped 3 times; its ``opt.state_dict()`` written to
  ``OUT/dict.safetensors`` (the tensors, and the metadata as the file's metadata: no
  pickle) and its ``uo.save_state`` file to ``OUT/file.safetensors``;
* ``paddle OUT`` / ``mindspore OUT``: the same model on that framework; one optimizer
  loads the dict (read back as numpy arrays) with ``load_state_dict(..., model=)``,
  another the file with ``uo.load_state(..., model=)``; both state dicts, as numpy, go
  to ``OUT/<framework>_dict.npz`` and ``OUT/<framework>_file.npz`` (metadata as JSON in
  ``OUT/<framework>.json``).
"""

import json
import sys
from pathlib import Path

import numpy as np

import unified_opt as uo

SPEC = uo.AdamW(lr=0.01, weight_decay=0.1)
#: a rule written as a pattern: read on MindSpore, whose norm parameters are gamma and
#: beta, the file holds it as the exact names it took, the same rule as the pattern there
GROUPS = [uo.Group(match="1.*", weight_decay=0.0)]


def _torch(out: Path) -> None:
    import safetensors.torch
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    # torch's AdamW: the own path's default would compile CPU kernels in the background
    optimizer = uo.build(SPEC, model, groups=GROUPS, path="native")
    for t in range(3):
        generator = torch.Generator().manual_seed(t)
        model(torch.randn(5, 4, generator=generator)).square().sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    saved = optimizer.state_dict()
    safetensors.torch.save_file(saved["tensors"], str(out / "dict.safetensors"),
                                metadata=saved["metadata"])
    uo.save_state(optimizer, out / "file.safetensors")


def _model(framework: str):
    if framework == "paddle":
        import paddle

        return paddle.nn.Sequential(paddle.nn.Linear(4, 3), paddle.nn.LayerNorm(3))
    import mindspore as ms

    return ms.nn.SequentialCell([ms.nn.Dense(4, 3), ms.nn.LayerNorm((3,))])


def _numpy(tensor) -> np.ndarray:
    return np.array(tensor.asnumpy() if hasattr(tensor, "asnumpy") else tensor.numpy())


def _load(framework: str, out: Path) -> None:
    from safetensors import safe_open
    from safetensors.numpy import load_file

    with safe_open(str(out / "dict.safetensors"), "np") as handle:
        metadata = handle.metadata()
    written = {"format": metadata["format"], "metadata": metadata,
               "tensors": load_file(str(out / "dict.safetensors"))}
    results = {}
    for how in ("dict", "file"):
        model = _model(framework)
        optimizer = uo.build(SPEC, model, groups=GROUPS)
        if how == "dict":
            optimizer.load_state_dict(written, model=model)
        else:
            uo.load_state(optimizer, out / "file.safetensors", model=model)
        loaded = optimizer.state_dict()
        np.savez(out / f"{framework}_{how}.npz",
                 **{k: _numpy(t) for k, t in loaded["tensors"].items()})
        results[how] = loaded["metadata"]
    (out / f"{framework}.json").write_text(json.dumps(results))


if __name__ == "__main__":
    framework, folder = sys.argv[1], Path(sys.argv[2])
    _torch(folder) if framework == "torch" else _load(framework, folder)
