"""One framework's run of ``uo.lr_scheduler`` on an optimizer ``uo.build`` made
(``test_lr_scheduler_frameworks.py``), run as ``python lr_scheduler_worker.py FRAMEWORK`` in
a process of its own (one framework per process): every case on every path it lists.
Prints one JSON line: per ``"case/path"``, the lr of each group at each step and the
parameters after the last step, or the error.

The cases, the parameters and the gradients are :mod:`lr_scheduler_cases`'s; Paddle
gets its gradients by ``backward`` of ``(p * g).sum()`` and steps with ``opt.step()``,
MindSpore passes them to the optimizer Cell.
"""

import json
import sys

import numpy as np
from lr_scheduler_cases import CASES, STEPS, gradient, group_lrs, initial

import unified_opt as uo


def main(framework: str, case: str, path: str) -> dict:
    spec, make_scheduler = CASES[case][0], CASES[case][1]
    if framework == "paddle":
        import paddle
        params = []
        for i, value in enumerate(initial()):
            p = paddle.create_parameter(list(value.shape), "float32")
            p.set_value(value)
            params.append(p)
    else:
        import mindspore as ms
        params = [ms.Parameter(ms.Tensor(value), name=f"p{i}")
                  for i, value in enumerate(initial())]
    lrs = group_lrs(framework, path)
    groups = ([{"params": params}] if len(lrs) == 1 else      # the spec's lr, 0.1
              [{"params": [p], "lr": lr} for p, lr in zip(params, lrs)])
    opt = uo.build(spec, groups, path=path)
    sched = make_scheduler(uo.lr_scheduler, opt)
    lrs = []
    for t in range(STEPS):
        lrs.append([g["lr"] for g in opt.param_groups])
        grads = [gradient(t, i) for i in range(len(params))]
        if framework == "paddle":
            loss = sum((p * paddle.to_tensor(g)).sum() for p, g in zip(params, grads))
            loss.backward()
            opt.step()
            opt.clear_grad()
        else:
            opt(tuple(ms.Tensor(g) for g in grads))
        sched.step()
    values = [p.numpy() if framework == "paddle" else p.asnumpy() for p in params]
    return {"lrs": lrs, "params": [np.asarray(x, np.float64).tolist() for x in values]}


def experimental(steps: int = 10) -> dict:
    """MindSpore's ``experimental.optim.AdamW`` (the class ``uo.build`` takes for AdamW on
    MindSpore's native path, which keeps each group's lr as a float32 Parameter) driven by
    ``uo.lr_scheduler.StepLR``, beside the same class built by hand and driven by
    MindSpore's own ``StepLR``: each step's lr as the class holds it, and the
    parameters after ``steps`` steps, of both."""
    import mindspore as ms
    from mindspore.experimental import optim

    runs = {}
    for who in ("uo", "mindspore"):
        params = [ms.Parameter(ms.Tensor(value), name=f"p{i}")
                  for i, value in enumerate(initial())]
        if who == "uo":
            opt = uo.build(uo.AdamW(lr=0.1, weight_decay=0.01), params, path="native")
            assert type(opt).__module__.startswith("mindspore.experimental"), type(opt)
            sched = uo.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
        else:
            opt = optim.AdamW(params, lr=0.1, weight_decay=0.01)
            sched = optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
        lrs = []
        for t in range(steps):
            lrs.append(float(opt.param_groups[0]["lr"].asnumpy()))
            opt(tuple(ms.Tensor(gradient(t, i)) for i in range(len(params))))
            sched.step()
        runs[who] = {"lrs": lrs, "params": [p.asnumpy().tolist() for p in params]}
    return runs


if __name__ == "__main__":
    framework = sys.argv[1]
    if framework == "mindspore-experimental":
        print(json.dumps(experimental()))
        sys.exit(0)
    out = {}
    for case, row in CASES.items():
        for path in row[3]:
            try:
                out[f"{case}/{path}"] = main(framework, case, path)
            except Exception as error:      # reported per run, by the test
                out[f"{case}/{path}"] = {"error": f"{type(error).__name__}: {error}"}
    print(json.dumps(out))
