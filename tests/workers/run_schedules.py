"""Run native lr schedulers of ONE framework in this process and record the lr each
optimizer step actually used.

    python tests/workers/run_schedules.py FRAMEWORK JOBS.json OUT.json

A job is ``{"id", "qualified", "kwargs", "steps", "base_lr"}``. In ``kwargs``,
``{"$fn": name}`` is a callable of :data:`CALLABLES` and ``{"$scheduler": [qualified,
kwargs]}`` a native scheduler object (Paddle ``LinearWarmup``'s ``learning_rate``);
``schedulers`` of SequentialLR / ChainedScheduler is ``[[name, kwargs], ...]``, built on
the job's optimizer in that order. The loop is each framework's usual one: read the lr,
run an optimizer step, step the scheduler.

OUT.json maps each id to ``{"lr": [...]}`` (the lr the optimizer runs with at each step:
torch ``param_groups[0]["lr"]``, Paddle ``opt.get_lr()``, MindSpore the list entry, the
Cell's value at ``global_step = t`` or the experimental group lr), plus ``"momentum"``
(torch) and ``"used"`` (MindSpore: the lr the optimizer applied, read from the update
of a zero weight with gradient 1), or ``{"error": ...}``. ``"__natives__"`` lists the
framework's scheduler names, ``"__signatures__"`` their arguments and defaults. This
module imports no framework at import time: the tests import :data:`CALLABLES` and
:func:`decode` from it.
"""

from __future__ import annotations

import importlib
import inspect
import json
import sys
import traceback
from pathlib import Path


def _inverse(t):
    return 1.0 / (1.0 + 0.1 * t)


def _wobble(t):
    return 0.99 - 0.002 * (t % 5)


def _soft_scale(x):
    return 1.0 / (1.0 + 0.05 * x)


#: Callables the cases use by name (they accept an int or a MindSpore Tensor).
CALLABLES = {"inverse": _inverse, "wobble": _wobble, "soft_scale": _soft_scale}


def decode(value, make_scheduler):
    """Replace ``$fn`` / ``$scheduler`` markers (recursively)."""
    if isinstance(value, dict):
        if set(value) == {"$fn"}:
            return CALLABLES[value["$fn"]]
        if set(value) == {"$scheduler"}:
            qualified, kwargs = value["$scheduler"]
            return make_scheduler(qualified, decode(kwargs, make_scheduler))
        return {k: decode(v, make_scheduler) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v, make_scheduler) for v in value]
    return value


def native(qualified):
    module, _, name = qualified.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _with_subschedulers(qualified, kwargs, optimizer):
    """Build SequentialLR / ChainedScheduler's members on ``optimizer``, in order."""
    namespace = qualified.rpartition(".")[0]
    if "schedulers" in kwargs:
        kwargs = dict(kwargs, schedulers=[
            native(n if "." in n else f"{namespace}.{n}")(optimizer, **kw)
            for n, kw in kwargs["schedulers"]])
    if qualified.endswith(".ChainedScheduler"):
        return native(qualified)(**kwargs)
    return native(qualified)(optimizer, **kwargs)


def run_torch(job):
    import torch
    p = torch.nn.Parameter(torch.zeros(1, dtype=torch.float64))
    opt = torch.optim.SGD([p], lr=job["base_lr"] or 0.1, momentum=0.9)
    kwargs = decode(job["kwargs"], None)
    sched = _with_subschedulers(job["qualified"], kwargs, opt)
    lr, momentum = [], []
    for _ in range(job["steps"]):
        lr.append(opt.param_groups[0]["lr"])
        momentum.append(opt.param_groups[0]["momentum"])
        p.grad = torch.ones_like(p)
        opt.step()
        sched.step()
    return {"lr": lr, "momentum": momentum}


def run_paddle(job):
    import paddle
    kwargs = decode(job["kwargs"], lambda q, kw: native(q)(**kw))
    sched = native(job["qualified"])(**kwargs)
    p = paddle.create_parameter(shape=[1], dtype="float32")
    opt = paddle.optimizer.SGD(learning_rate=sched, parameters=[p])
    lr = []
    for _ in range(job["steps"]):
        lr.append(opt.get_lr())
        p.grad = paddle.ones([1], dtype="float32")
        opt.step()
        opt.clear_grad(set_to_zero=False)
        sched.step()
    return {"lr": lr}


class _ZeroWeight:
    """A MindSpore weight reset to 0 before each step: with gradient 1 the step leaves
    ``-lr`` in it, the float32 lr the optimizer applied."""

    def __init__(self):
        import mindspore as ms
        import numpy as np
        self.ms, self.np = ms, np
        self.w = ms.Parameter(ms.Tensor(np.zeros(1, np.float32)), name="w")
        self.grads = (ms.Tensor(np.ones(1, np.float32)),)

    def step(self, optimizer):
        self.ms.ops.assign(self.w, self.ms.Tensor(self.np.zeros(1, self.np.float32)))
        optimizer(self.grads)
        return -float(self.w.asnumpy()[0])


def run_mindspore(job):
    import mindspore as ms
    from mindspore import nn
    from mindspore.experimental import optim
    qualified, steps = job["qualified"], job["steps"]
    kwargs = decode(job["kwargs"], None)
    weight = _ZeroWeight()
    if qualified.startswith("mindspore.experimental."):
        opt = optim.SGD([weight.w], lr=job["base_lr"])
        sched = _with_subschedulers(qualified, kwargs, opt)
        lr, used = [], []
        for _ in range(steps):
            lr.append(float(opt.param_groups[0]["lr"].asnumpy()))
            used.append(weight.step(opt))
            sched.step()
        return {"lr": lr, "used": used}
    made = native(qualified)(**kwargs)
    if isinstance(made, list):
        lr = [float(x) for x in made[:steps]]
    else:   # a LearningRateSchedule Cell
        lr = [float(made(ms.Tensor(t, ms.int32)).asnumpy()) for t in range(steps)]
    opt = nn.SGD([weight.w], learning_rate=made)
    return {"lr": lr, "used": [weight.step(opt) for _ in range(steps)]}


def natives(framework):
    if framework == "torch":
        import torch.optim.lr_scheduler as m
        return [f"torch.optim.lr_scheduler.{n}" for n in m.__all__]
    if framework == "paddle":
        import paddle.optimizer.lr as m
        return [f"paddle.optimizer.lr.{n}" for n in m.__all__]
    from mindspore.experimental.optim import lr_scheduler
    from mindspore.nn import dynamic_lr, learning_rate_schedule
    names = [f"mindspore.nn.{n}" for n in dynamic_lr.__all__ + learning_rate_schedule.__all__]
    return (names + ["mindspore.nn.learning_rate_schedule.LearningRateSchedule"]
            + [f"mindspore.experimental.optim.lr_scheduler.{n}" for n in lr_scheduler.__all__])


def signatures(names):
    """Each native's arguments (not the optimizer) as [name, default or "<required>"]."""
    out = {}
    for qualified in names:
        params = inspect.signature(native(qualified)).parameters.values()
        out[qualified] = [[p.name, "<required>" if p.default is p.empty else p.default]
                          for p in params if p.name != "optimizer" or p.default is None]
    return out


RUN = {"torch": run_torch, "paddle": run_paddle, "mindspore": run_mindspore}


def main(argv):
    framework, jobs_file, out_file = argv
    out = {"__natives__": natives(framework)}
    out["__signatures__"] = signatures(out["__natives__"])
    for job in json.loads(Path(jobs_file).read_text()):
        try:
            out[job["id"]] = RUN[framework](job)
        except Exception as exc:  # reported per job; the test decides what it means
            out[job["id"]] = {"error": f"{type(exc).__name__}: {exc}\n"
                                       f"{traceback.format_exc(limit=3)}"}
    Path(out_file).write_text(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
