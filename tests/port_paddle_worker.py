"""Runs a Paddle training-script shape for ``test_port_paddle_scripts.py``, as written
(framework "paddle") or as ``unified-opt port --to torch`` wrote it ("torch"), one
framework per process: ``python port_paddle_worker.py JOB.json``.

JOB.json: ``framework``, ``source`` (the script; it reads ``model``, ``steps``, calls
``feed(step)`` before each optimizer step and ``record(lr)`` after it), ``init`` (an npz
of the initial weights under torch's names and layouts), ``grads`` (an npz of
``"<step>/<name>"`` gradients, torch's layouts), ``steps`` and ``out`` (where the lr of
each step and the parameters after it are written, torch's layouts).

The model is ported by hand here (a Linear and a LayerNorm: weights that decay, a bias
and a norm that do not); a step's gradients reach the parameters through a backward of
``sum(p * g)``, whose gradient is ``g`` exactly, so the script's own ``step``,
``clear_grad``/``zero_grad``, scheduler and lr lines run as written.
"""

import json
import sys

import numpy as np

#: Paddle keeps a Linear's weight as (in, out)
TRANSPOSED = {"paddle": {"fc.weight"}, "torch": set()}


def _model(framework: str):
    if framework == "paddle":
        import paddle

        class Net(paddle.nn.Layer):
            def __init__(self):
                super().__init__()
                self.fc, self.norm = paddle.nn.Linear(4, 3), paddle.nn.LayerNorm(3)

        def assign(p, value):
            p.set_value(value)

        return Net(), paddle.to_tensor, assign
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc, self.norm = torch.nn.Linear(4, 3), torch.nn.LayerNorm(3)

    def assign(p, value):
        with torch.no_grad():
            p.copy_(torch.from_numpy(np.ascontiguousarray(value)))

    return Net(), torch.from_numpy, assign


def run(job: dict) -> None:
    framework = job["framework"]
    model, to_tensor, assign = _model(framework)
    flipped = TRANSPOSED[framework]
    init, grads = np.load(job["init"]), np.load(job["grads"])
    named = dict(model.named_parameters())
    for name, p in named.items():
        assign(p, init[name].T if name in flipped else init[name])
    lrs, params = [], {name: [] for name in named}

    def feed(step: int) -> None:
        loss = sum((p * to_tensor(np.ascontiguousarray(
            grads[f"{step}/{name}"].T if name in flipped else grads[f"{step}/{name}"]))).sum()
            for name, p in named.items())
        loss.backward()

    def record(lr) -> None:
        lrs.append(float(lr))
        for name, p in named.items():
            value = np.array(p.numpy() if framework == "paddle" else p.detach().numpy())
            params[name].append(value.T if name in flipped else value)

    source = job["source"]
    if framework == "torch":     # the port keeps the script's own paddle import
        source = source.replace("import paddle\n", "")
    exec(source, {"model": model, "steps": job["steps"], "feed": feed, "record": record})
    np.savez(job["out"], lr=np.array(lrs),
             **{name: np.stack(values) for name, values in params.items()})


if __name__ == "__main__":
    run(json.loads(open(sys.argv[1]).read()))
