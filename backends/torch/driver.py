"""Conformance driver for torch: backward-style ``p.grad``, ``step``, ``zero_grad``,
then ``scheduler.step()``."""

from __future__ import annotations

import numpy as np
import torch

from unified_opt.conformance.driver import Driver

from .native import native_state


class TorchDriver(Driver):
    backend = "torch"

    def make_param(self, name, array):
        return torch.nn.Parameter(torch.from_numpy(array.copy()))

    def current_lr(self):
        return self.optimizer.param_groups[0]["lr"]

    def apply(self, grads):
        for name, p in self.params.items():
            p.grad = torch.from_numpy(np.array(grads[name], dtype=array_dtype(p)))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.record.lr_scheduler is not None:
            self.record.lr_scheduler.step()

    def to_numpy(self, tensor):
        return tensor.detach().cpu().numpy()

    def native_state(self, p, spec):
        return native_state(self.decision.lowering, self.optimizer, p)


def array_dtype(p) -> np.dtype:
    return np.dtype(str(p.dtype).removeprefix("torch."))
