"""Conformance driver for MindSpore: the gradients go in as a tuple of Tensors in
parameter order, with the parameter's dtype: ``opt(grads)``. The optimizer steps its
own lr. A spec with a scheduled lr or weight decay is built with ``total_steps`` (the
case's step count) only on a device where the native form is the per-step list; on CPU
it is a schedule Cell with no step limit, and the case runs without one. A native
optimizer built by hand takes its parameters (or group dicts) first; an
``experimental.optim`` scheduler is built on it and stepped after each step (an ``nn``
class takes its lr list or Cell as ``learning_rate`` and steps it itself). The device is
the process's ``device_target``, which :func:`..device.place` set
(``ms.set_device("GPU", N)``)."""

from __future__ import annotations

import ctypes

import numpy as np
from mindspore import Parameter, Tensor

from unified_opt.backends.mindspore.kernels import drain, host_copy, numpy_dtype, on_cpu
from unified_opt.backends.mindspore.native import arguments_of, native_lr
from unified_opt.native import import_native
from unified_opt.schedules import Schedule

from .base import Driver


class MindSporeDriver(Driver):
    backend = "mindspore"

    def build_options(self, options):
        import mindspore as ms

        from unified_opt.backends.mindspore import SCHEDULE_CELL_DEVICES

        options = dict(options or {})
        decay = getattr(self.spec, "weight_decay", None)
        if (isinstance(self.spec.lr, Schedule) or isinstance(decay, Schedule)) \
                and self.total_steps is not None \
                and ms.get_context("device_target") not in SCHEDULE_CELL_DEVICES:
            options.setdefault("total_steps", self.total_steps)
        return options

    def make_param(self, name, array):
        return Parameter(Tensor(array.copy()), name=name)

    def current_lr(self):
        """The spec's lr of the next step, read from the optimizer: the lr of a parameter
        whose group keeps the spec's lr (or a scaled group's divided by its factor)."""
        if self.decision.path == "own":
            return self.optimizer.next_lr()
        if arguments_of(self.decision.lowering, self.spec).get("learning_rate", 0.0) is None:
            # nn.AdaFactor's relative step: its lr is the built-in cap (get_lr() says 0.0),
            # which the row's condition made equal to the spec's constant lr
            return float(self.spec.lr)
        held = [(p, plan) for p, plan in zip(self.params.values(), self.record.plans)
                if p.size > 0 and plan.fixed_lr is None and plan.lr_scale != 0.0]
        if not held:   # every parameter has a fixed group lr (a constant spec lr)
            return float(self.spec.lr)
        p, plan = next(((p, plan) for p, plan in held if plan.lr_scale == 1.0), held[0])
        lr = native_lr(self.decision.native_class, self.optimizer, p)
        return lr if plan.lr_scale == 1.0 else lr / plan.lr_scale

    def apply(self, grads):
        missing = sorted(name for name, g in grads.items() if g is None)
        if missing:    # the runner does not run such a case here (Case.refused_on)
            from ..cases.case import MISSING_GRADIENTS_REFUSED

            raise ValueError(f"no gradient for {missing}: "
                             f"{MISSING_GRADIENTS_REFUSED['mindspore']}")
        # the optimizer's parameters, in its order (a native one leaves zero-size ones out)
        names = {id(p): name for name, p in self.params.items()}
        self.optimizer(tuple(Tensor.from_numpy(np.array(grads[names[id(p)]],
                                                        dtype=numpy_dtype(p.dtype)))
                             for p in self.optimizer.parameters))
        if self.scheduler is not None:
            self.scheduler.step()

    def framework_name(self, param):
        return param.name

    def build_by_hand(self, native):
        optimizer = import_native(native.optimizer)(self.hand_params(native),
                                                    **self.decode(native.kwargs))
        scheduler = None
        if native.scheduler is not None:
            scheduler = import_native(native.scheduler)(
                optimizer, **self.decode(native.scheduler_kwargs, optimizer))
        return optimizer, scheduler

    def hand_lr(self):
        from mindspore.experimental.optim import Optimizer

        p = self.lr_param()
        if isinstance(self.optimizer, Optimizer):
            group = next(g for g in self.optimizer.param_groups
                         if any(q is p for q in g["params"]))
            return float(np.asarray(group["lr"].asnumpy() if hasattr(group["lr"], "asnumpy")
                                    else group["lr"]))
        lr = self.optimizer.get_lr()
        if self.optimizer.is_group_lr:
            lr = lr[next(i for i, q in enumerate(self.optimizer.parameters) if q is p)]
        return float(lr.asnumpy())

    def to_numpy(self, tensor):
        return host_copy(tensor)

    # A step's parameters and state are read after one drain of MindSpore's queue of
    # PyNative operations: host_copy drains before each tensor (about 30 us a call even
    # when the queue is empty, some 20 tensors a step), and every operation that makes
    # what is read (the step, the state's reads) is queued before the one drain.
    def params_numpy(self) -> dict[str, np.ndarray]:
        drain()
        return {n: _drained_copy(p) for n, p in self.params.items()}

    def state_numpy(self) -> dict[str, dict[str, np.ndarray]]:
        states = {n: self.spec_state(n) for n in self.names}
        drain()
        return {n: {k: _drained_copy(v) for k, v in state.items()}
                for n, state in states.items()}


def _drained_copy(tensor) -> np.ndarray:
    """A numpy copy of ``tensor`` once MindSpore's queue is drained: from its host memory
    where it is a contiguous CPU tensor of a numpy dtype, else ``host_copy``'s."""
    if not on_cpu() or not tensor.is_contiguous():
        return host_copy(tensor)
    try:
        dtype = numpy_dtype(tensor.dtype)
    except KeyError:
        return host_copy(tensor)
    shape = tuple(tensor.shape)
    if not tensor.size:
        return np.empty(shape, dtype=dtype)
    raw = (ctypes.c_char * (int(tensor.size) * dtype.itemsize)).from_address(tensor.data_ptr())
    return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
