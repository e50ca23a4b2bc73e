"""Conformance driver for torch: backward-style ``p.grad``, ``step``, ``zero_grad``,
then ``scheduler.step()``."""

from __future__ import annotations

import numpy as np
import torch

from .base import Driver


class TorchDriver(Driver):
    backend = "torch"

    def make_param(self, name, array):
        return torch.nn.Parameter(torch.from_numpy(array.copy()))

    def current_lr(self):
        """The spec's lr for the next step, read from the optimizer: the lr of a param
        group whose parameters' lr factor is 1, else LambdaLR's factor (base lr 1.0:
        the schedule's value) or, for a constant lr, the spec's."""
        plan_of = {id(p): plan for p, plan in zip(self.record.params, self.record.plans)}
        for group in self.optimizer.param_groups:
            plan = plan_of[id(group["params"][0])]
            if plan.fixed_lr is None and plan.lr_scale == 1.0:
                return group["lr"]
        scheduler = self.record.lr_scheduler
        if scheduler is not None:
            return scheduler.lr_lambdas[0](scheduler.last_epoch)
        return self.spec.lr

    def apply(self, grads):
        for name, p in self.params.items():
            p.grad = torch.from_numpy(np.array(grads[name], dtype=array_dtype(p)))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.record.lr_scheduler is not None:
            self.record.lr_scheduler.step()

    def to_numpy(self, tensor):
        return tensor.detach().cpu().numpy()


def array_dtype(p) -> np.dtype:
    return np.dtype(str(p.dtype).removeprefix("torch."))
