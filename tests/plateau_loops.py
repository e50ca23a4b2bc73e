"""A ``uo.build`` optimizer of one framework driven by its native plateau scheduler, in
this process (the test imports one framework per test).

A job is ``{"spec": spec.to_dict(), "path", "metrics": [...], "tensor": bool}`` and
either ``"native": [qualified, native_kwargs]`` (the scheduler made by hand, the way a
user of that framework makes it, on the built optimizer) or ``"rule": rule.to_dict()``
(made by ``uo.plateau_scheduler``, with ``"monitor"`` for the MindSpore callback). The
parameter is one float32 zero ``w`` with gradient 1: a plain SGD step leaves ``-lr``
(``+lr`` with ``maximize``) in it, the float32 lr the optimizer applied; ``w`` is reset
to 0 before each step. Per metric: one optimizer step, then the report (``"tensor"``:
as a float32 Tensor of the framework instead of a Python float).

:func:`run` returns ``{"used": [...], "after": [...]}``: ``used[k]`` the lr step k
applied (before report k), ``after[k]`` the lr the optimizer holds after report k.
"""

from __future__ import annotations

import importlib

import numpy as np

import unified_opt as uo
from unified_opt.schedules.plateau import ReduceOnPlateau


def native(qualified):
    module, _, name = qualified.rpartition(".")
    return getattr(importlib.import_module(module), name)


class Torch:
    def __init__(self, job):
        import torch
        self.torch = torch
        self.w = torch.nn.Parameter(torch.zeros(1))

    def step(self, opt):
        with self.torch.no_grad():
            self.w.zero_()
        self.w.grad = self.torch.ones(1)
        opt.step()
        return abs(float(self.w.detach()[0]))

    def make(self, opt, qualified, kwargs):
        return native(qualified)(opt, **kwargs)

    def report(self, sched, metric, tensor):
        sched.step(self.torch.tensor(metric, dtype=self.torch.float32) if tensor else metric)

    def lr(self, opt):
        return opt.param_groups[0]["lr"]


class Paddle:
    def __init__(self, job):
        import paddle
        self.paddle = paddle
        self.w = paddle.create_parameter(shape=[1], dtype="float32",
                                         default_initializer=paddle.nn.initializer.Constant(0.))

    def step(self, opt):
        self.w.set_value(np.zeros(1, np.float32))
        self.w.grad = self.paddle.ones([1], dtype="float32")
        opt.step()
        opt.clear_grad(set_to_zero=False)
        return abs(float(self.w.numpy()[0]))

    def make(self, opt, qualified, kwargs):
        sched = native(qualified)(**kwargs)
        opt.set_lr_scheduler(sched)
        return sched

    def report(self, sched, metric, tensor):
        sched.step(self.paddle.to_tensor(metric, dtype="float32") if tensor else metric)

    def lr(self, opt):
        return opt.get_lr()


class MindSpore:
    def __init__(self, job):
        import mindspore as ms
        from mindspore.train.callback import RunContext, _InternalCallbackParam
        self.ms = ms
        self.w = ms.Parameter(ms.Tensor(np.zeros(1, np.float32)), name="w")
        self.monitor = job.get("monitor") or "eval_loss"
        self.cb_params = _InternalCallbackParam()     # what ms.Model hands its callbacks
        self.context = RunContext(self.cb_params)

    def step(self, opt):
        self.ms.ops.assign(self.w, self.ms.Tensor(np.zeros(1, np.float32)))
        opt((self.ms.Tensor(np.ones(1, np.float32)),))
        return abs(float(self.w.asnumpy()[0]))

    def make(self, opt, qualified, kwargs):
        if qualified.startswith("mindspore.experimental."):
            return native(qualified)(opt, **kwargs)
        return native(qualified)(**kwargs)

    def report(self, sched, metric, tensor):
        value = self.ms.Tensor(metric, self.ms.float32) if tensor else metric
        if hasattr(sched, "on_train_epoch_end"):      # the mindspore.train callback
            if not self.cb_params.get("optimizer"):
                self.cb_params.optimizer = self.opt
                sched.on_train_begin(self.context)
            if self.monitor == "loss":
                self.cb_params.net_outputs = self.ms.Tensor(metric, self.ms.float32)
            else:
                self.cb_params.eval_results = {self.monitor: value}
            sched.on_train_epoch_end(self.context)
        else:
            sched.step(value)

    def lr(self, opt):
        from mindspore.experimental.optim import Optimizer

        if isinstance(opt, Optimizer):      # its groups hold lr Parameters
            return float(opt.param_groups[0]["lr"].asnumpy())
        return float(opt.learning_rate.asnumpy())


FRAMEWORKS = {"torch": Torch, "paddle": Paddle, "mindspore": MindSpore}


def run(framework, job):
    """Drive one job (see the module docstring) in this process; return ``{"used",
    "after"}``. Exceptions propagate."""
    runner = FRAMEWORKS[framework](job)
    opt = uo.build(uo.spec_from_dict(job["spec"]), [("w", runner.w)], path=job["path"])
    runner.opt = opt
    if "native" in job:
        sched = runner.make(opt, *job["native"])
    else:
        sched = uo.plateau_scheduler(opt, ReduceOnPlateau.from_dict(job["rule"]),
                                     monitor=job.get("monitor"))
    used, after = [], []
    for metric in job["metrics"]:
        used.append(runner.step(opt))
        runner.report(sched, metric, job.get("tensor", False))
        after.append(float(runner.lr(opt)))
    return {"used": used, "after": after}
