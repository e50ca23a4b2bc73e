"""One framework's half of a run of a small model (a square Linear ``fc``, a LayerNorm
``ln``, a Linear ``out``) that moves between frameworks with ``uo.save_state`` and
``uo.resume`` (``test_names_layouts.py``), as ``python layout_worker.py FRAMEWORK
JOB.json`` in a process of its own.

The case's parameters and gradients are torch's (names and ``(out, in)`` weights); here
they go into the framework's own model through ``uo.porting.name_map`` and the layout
rule, and what is recorded (parameters, state) comes back to torch's names and layout,
so that one oracle judges the whole run. JOB.json: ``phase`` ("train": ``uo.build``
with the case's groups, steps ``0 .. switch-1``, then ``uo.save_state``; "resume":
``uo.resume`` of that file on the model, steps ``switch ..``; "refused": ``uo.resume``
on the parameters without the model, which must refuse), ``case``, ``switch``,
``state``, ``params`` (the weights, torch's names and layout), ``trajectory``,
``result`` (what the phase reports as JSON).
"""

import json
import sys
from pathlib import Path

import numpy as np

import unified_opt as uo
from unified_opt.conformance.cases import Case
from unified_opt.conformance.trajectory import Recorder
from unified_opt.porting import name_map
from unified_opt.porting.names import layout, parameter_modules


def model(framework: str):
    if framework == "torch":
        import torch

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc, self.ln = torch.nn.Linear(4, 4), torch.nn.LayerNorm(4)
                self.out = torch.nn.Linear(4, 3)
        return Net()
    if framework == "paddle":
        import paddle

        class Layer(paddle.nn.Layer):
            def __init__(self):
                super().__init__()
                self.fc, self.ln = paddle.nn.Linear(4, 4), paddle.nn.LayerNorm(4)
                self.out = paddle.nn.Linear(4, 3)
        return Layer()
    from mindspore import nn

    class Cell(nn.Cell):
        def __init__(self):
            super().__init__()
            self.fc, self.ln = nn.Dense(4, 4), nn.LayerNorm((4,))
            self.out = nn.Dense(4, 3)
    return Cell()


class Model:
    """The framework's model seen under torch's names and layout."""

    def __init__(self, framework: str):
        self.framework, self.net = framework, model(framework)
        self.names = name_map("torch", self.net)            # torch name -> own name
        modules = parameter_modules(self.net)
        self.flip = {t for t, own in self.names.items()
                     if layout("torch", modules[own][0]) != layout(framework, modules[own][0])}
        pairs = dict(self.own_pairs())
        self.params = {t: pairs[own] for t, own in self.names.items()}

    def own_pairs(self):
        if self.framework == "mindspore":
            return [(p.name, p) for p in self.net.trainable_params()]
        return list(self.net.named_parameters())

    def own(self, name, array):
        return np.ascontiguousarray(array.T) if name in self.flip else array

    def set(self, arrays):
        for name, p in self.params.items():
            value = self.own(name, np.asarray(arrays[name], dtype=np.float32))
            if self.framework == "torch":
                import torch

                with torch.no_grad():
                    p.copy_(torch.from_numpy(value))
            elif self.framework == "paddle":
                p.set_value(value)
            else:
                from mindspore import Tensor

                p.set_data(Tensor(value))

    def numpy(self, tensor):
        return tensor.asnumpy() if self.framework == "mindspore" else \
            tensor.detach().cpu().numpy() if self.framework == "torch" else tensor.numpy()

    def read(self):
        return {t: self.own(t, self.numpy(p)).copy() for t, p in self.params.items()}

    def step(self, optimizer, grads):
        own = {t: self.own(t, np.asarray(g, dtype=np.float32)) for t, g in grads.items()}
        if self.framework == "torch":
            import torch

            for t, p in self.params.items():
                p.grad = torch.from_numpy(own[t])
            optimizer.step()
        elif self.framework == "paddle":
            import paddle

            for t, p in self.params.items():
                p.grad = paddle.to_tensor(own[t])
            optimizer.step()
            optimizer.clear_grad(set_to_zero=False)
        else:
            from mindspore import Tensor

            by_id = {id(p): t for t, p in self.params.items()}
            optimizer(tuple(Tensor(own[by_id[id(p)]]) for p in optimizer.parameters))


def run(framework: str, job: dict) -> None:
    case = Case.from_dict(job["case"])
    net = Model(framework)
    result = {}
    if job["phase"] == "train":
        net.set(case.initial_params())
        optimizer = uo.build(case.spec, net.net, groups=list(case.groups) or None)
        steps = range(job["switch"])
    else:
        with np.load(job["params"], allow_pickle=False) as saved:
            net.set({name: saved[name] for name in case.params})
        if job["phase"] == "refused":          # the parameters alone: no module types
            try:
                uo.resume(job["state"], net.own_pairs())
            except ValueError as error:
                result["refused"] = str(error)
            Path(job["result"]).write_text(json.dumps(result))
            return
        optimizer = uo.resume(job["state"], net.net)
        result["state"] = {t: {k: np.asarray(v).tolist() for k, v in
                               _state(framework, optimizer, net, t).items()}
                           for t in net.params}
        steps = range(job["switch"], case.steps)
    recorder = Recorder()
    for t in steps:
        lr = float(case.spec.lr_at(t))
        net.step(optimizer, case.gradients(t))
        recorder.add(lr, net.read(), {})
    recorder.trajectory().save(job["trajectory"], compress=False)
    if job["phase"] == "train":
        np.savez(job["params"], **net.read())
        uo.save_state(optimizer, job["state"])
        result["state"] = {t: {k: np.asarray(v).tolist() for k, v in
                               _state(framework, optimizer, net, t).items()}
                           for t in net.params}
    Path(job["result"]).write_text(json.dumps(result))


def _state(framework, optimizer, net, name):
    """The spec's state of torch-named parameter ``name``, in torch's layout."""
    from unified_opt.backend import load, record_of

    record = record_of(optimizer)
    p = net.params[name]
    index = next(i for i, q in enumerate(record.params) if q is p)
    spec = record.plans[index].spec
    if record.decision.path == "native":
        state = load(framework).native_state(record, optimizer, p, spec)
    else:
        state = optimizer.spec_state(p)
    out = {}
    for key, value in state.items():
        partner = key[:-4] + {"_row": "_col", "_col": "_row"}.get(key[-4:], "")
        if name in net.flip and partner in state:
            # a factored moment: the rows of the transposed weight are torch's columns
            other = net.numpy(state[partner])
            out[key] = other.T if other.ndim == 2 else other
        elif tuple(value.shape) == tuple(p.shape):
            out[key] = net.own(name, net.numpy(value))
        else:
            out[key] = net.numpy(value)
    return out


if __name__ == "__main__":
    framework, job_file = sys.argv[1:]
    run(framework, json.loads(Path(job_file).read_text()))
