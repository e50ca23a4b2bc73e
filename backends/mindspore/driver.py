"""Conformance driver for MindSpore: the gradients go in as a tuple of Tensors in
parameter order, with the parameter's dtype: ``opt(grads)``. The optimizer steps its
own lr, so a scheduled spec is built with ``total_steps``."""

from __future__ import annotations

import numpy as np
from mindspore import Parameter, Tensor, dtype_to_nptype

from unified_opt.conformance.driver import Driver
from unified_opt.schedules import Schedule

from .native import native_state


class MindSporeDriver(Driver):
    backend = "mindspore"

    def build_options(self, options):
        options = dict(options or {})
        if isinstance(self.spec.lr, Schedule) and self.total_steps is not None:
            options.setdefault("total_steps", self.total_steps)
        return options

    def make_param(self, name, array):
        return Parameter(Tensor(array.copy()), name=name)

    def current_lr(self):
        if self.decision.path == "own":
            return self.optimizer.next_lr()
        if self.decision.lowering.arguments(self.spec).get("learning_rate", 0.0) is None:
            # nn.AdaFactor's relative step: its lr is the built-in cap (get_lr() says 0.0),
            # which the row's condition made equal to the spec's constant lr
            return float(self.spec.lr)
        if self.decision.native.startswith("mindspore.experimental."):
            return float(self.optimizer.param_groups[0]["lr"].asnumpy())
        return float(self.optimizer.get_lr().asnumpy())

    def apply(self, grads):
        # the optimizer's parameters, in its order (a native one leaves zero-size ones out)
        names = {id(p): name for name, p in self.params.items()}
        self.optimizer(tuple(Tensor(np.asarray(grads[names[id(p)]],
                                               dtype=dtype_to_nptype(p.dtype)))
                             for p in self.optimizer.parameters))

    def to_numpy(self, tensor):
        return tensor.asnumpy()

    def native_state(self, p, spec):
        return native_state(self.decision.lowering, self.optimizer, p, spec)