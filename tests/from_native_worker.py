"""The Paddle or MindSpore half of ``test_from_native_schedules.py``, run as
``python from_native_worker.py FRAMEWORK JOB.json`` in a process of its own.

JOB.json lists runs, each continuing a torch run that ``uo.from_native`` read and
``uo.save_state`` wrote (``state``) after ``first`` steps:

* the model is the test's small network in FRAMEWORK (an Embedding, a LayerNorm, a
  Linear / Dense), its weights set from ``params`` (torch names; MindSpore calls the
  Embedding's weight ``embedding_table`` and the LayerNorm's ``gamma``/``beta``, Paddle
  keeps the Linear's weight as ``(in, out)``: :func:`unified_opt.porting.name_map` and
  the layouts of :mod:`unified_opt.porting.names` say which);
* ``uo.resume(state, model)`` builds the optimizer and loads the state (Paddle's
  scheduler, ``uo.native_scheduler``, is stepped after each step, as a Paddle loop does);
* steps ``first .. steps-1`` take the gradients of ``grads`` (``"{t}/{torch name}"``),
  recording before each step the lr that step uses (:func:`next_lr`) and after it
  the parameters (torch names, torch layouts), into ``out`` (``.npz``).

With ``"rules"`` (the spec and groups ``from_native`` read, as JSON), it also records
in ``out``'s ``.json`` what ``uo.build`` said to those torch-named rules on this model,
and that ``uo.porting.map_rules`` renames them so that the build takes them.
"""

import json
import sys
from pathlib import Path

import numpy as np

import unified_opt as uo
from unified_opt.porting.names import layout, parameter_modules


def network(framework: str):
    if framework == "paddle":
        import paddle

        class Net(paddle.nn.Layer):
            def __init__(self):
                super().__init__()
                self.emb = paddle.nn.Embedding(5, 3)
                self.ln = paddle.nn.LayerNorm(3)
                self.fc = paddle.nn.Linear(3, 2)
        return Net()
    from mindspore import nn

    class Cell(nn.Cell):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(5, 3)
            self.ln = nn.LayerNorm((3,))
            self.fc = nn.Dense(3, 2)
    return Cell()


def named(framework: str, model) -> dict:
    if framework == "paddle":
        return dict(model.named_parameters())
    return dict(model.parameters_and_names())


def transposed(framework: str, model) -> set:
    """The target names of weights kept in another layout than torch's."""
    return {name for name, (kind, _) in parameter_modules(model).items()
            if kind is not None and layout("torch", kind) != layout(framework, kind)
            and name.endswith("weight")}


def set_values(framework: str, p, array: np.ndarray) -> None:
    if framework == "paddle":
        p.set_value(array)
    else:
        from mindspore import Tensor

        p.set_data(Tensor(array))


def step(framework: str, optimizer, params: dict, grads: dict) -> None:
    if framework == "paddle":
        import paddle

        for name, p in params.items():
            p.grad = paddle.to_tensor(grads[name])
        optimizer.step()
        optimizer.clear_grad()
    else:
        from mindspore import Tensor

        by_id = {id(p): name for name, p in params.items()}
        optimizer(tuple(Tensor(grads[by_id[id(p)]]) for p in optimizer.parameters))


def next_lr(framework: str, optimizer) -> float:
    """The lr the next step uses, as the framework reads it: Paddle's ``get_lr()``;
    MindSpore's own path's ``next_lr()``, a native class's lr Cell at ``global_step``."""
    if framework == "paddle":
        return float(optimizer.get_lr())
    if hasattr(optimizer, "next_lr"):
        return float(optimizer.next_lr())
    lr = optimizer.learning_rate
    if optimizer.dynamic_lr:
        lr = lr(optimizer.global_step)
    return float(lr.asnumpy().reshape(-1)[0])


def values(framework: str, p) -> np.ndarray:
    return np.array(p.numpy() if framework == "paddle" else p.asnumpy())


def check_rules(framework: str, model, rules: dict) -> dict:
    """What ``uo.build`` says to the torch-named rules here, before and after
    ``uo.porting.map_rules``."""
    spec = uo.spec_from_dict(rules["spec"])
    groups = [uo.Group.from_dict(g) for g in rules["groups"]]
    out = {}
    try:
        uo.build(spec, model, groups=groups)
        out["unmapped"] = "built"
    except ValueError as exc:
        out["unmapped"] = str(exc)
    mapped_spec, mapped = uo.porting.map_rules(spec, groups, "torch", model)
    uo.build(mapped_spec, model, groups=mapped)
    out["mapped"] = [g.to_dict() for g in mapped]
    return out


def run(framework: str, job: dict) -> None:
    model = network(framework)
    params = named(framework, model)
    to_target = uo.porting.name_map("torch", model)        # torch name -> name here
    flip = transposed(framework, model)

    def here(name, array):          # a torch-named array as this framework keeps it
        return np.ascontiguousarray(array.T) if to_target[name] in flip else array

    with np.load(job["params"], allow_pickle=False) as saved:
        for name in saved.files:
            set_values(framework, params[to_target[name]], here(name, saved[name]))
    if "rules" in job:
        Path(job["out"]).with_suffix(".json").write_text(
            json.dumps(check_rules(framework, model, job["rules"])))
    optimizer = uo.resume(job["state"], model)
    # Paddle's optimizer reads its LRScheduler, which the loop steps (MindSpore's steps
    # its own lr): resume set it at the saved position
    scheduler = uo.native_scheduler(optimizer)
    recorded = {}
    with np.load(job["grads"], allow_pickle=False) as grads:
        for t in range(job["first"], job["steps"]):
            recorded[f"lr/{t}"] = np.array(next_lr(framework, optimizer))
            step(framework, optimizer, params,
                 {to_target[n]: here(n, grads[f"{t}/{n}"]) for n in to_target})
            if scheduler is not None:
                scheduler.step()
            for name in to_target:
                recorded[f"{t}/{name}"] = here(name, values(framework,
                                                            params[to_target[name]]))
    np.savez(job["out"], **recorded)


def main(framework: str, job_file: str) -> None:
    for job in json.loads(Path(job_file).read_text()):
        run(framework, job)
        print(f"{framework}: {Path(job['out']).name}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
