"""Conformance driver for Paddle: ``p.grad = paddle.to_tensor(g)`` (``p.grad = None``
where the case has no gradient), ``step``, ``clear_grad(set_to_zero=False)``, then the
lr scheduler's ``step()``; a case with ``backward`` takes its gradients from a real
``backward()`` and clears them in that mode (``clear_grad(set_to_zero=True)`` keeps the
gradient tensors, zeroed in place). A native
optimizer built by hand gets its scheduler as ``learning_rate`` and its parameters as
``parameters=`` (``parameter_list=`` for the incubate classes that still take it).
Parameters and gradients go to Paddle's default place, which
:func:`..device.place` set to the run's device (``paddle.set_device("gpu:N")``)."""

from __future__ import annotations

import inspect

import numpy as np
import paddle

from unified_opt.native import import_native

from .base import Driver


class PaddleDriver(Driver):
    backend = "paddle"

    def make_param(self, name, array):
        # Paddle names parameters process-wide; the auto name keeps repeated drivers
        # apart, and build gets ``name`` through the (name, parameter) pairs.
        p = paddle.create_parameter(shape=list(array.shape), dtype=str(array.dtype),
                                    default_initializer=paddle.nn.initializer.Constant(0.0))
        p.set_value(array)
        return p

    def current_lr(self):
        # Paddle's get_lr() is the optimizer's lr or LRScheduler value, before any
        # group's learning_rate multiplier: the spec's lr (ScheduleLR: at the count of
        # steps taken).
        return float(self.optimizer.get_lr())

    def apply(self, grads):
        tensors = {}
        for name, p in self.params.items():
            if grads[name] is None:
                # no gradient at this step (Case.missing_gradients): the parameter keeps
                # none, as after a backward it took no part in
                tensors[name] = None
                continue
            g = np.asarray(grads[name])
            # Paddle accepts a wrong shape of the same size, and a wrong dtype fails
            # only inside step() (measured on Paddle 3.3): check here, before anything
            # changes.
            if g.shape != tuple(p.shape) or g.dtype != array_dtype(p):
                raise ValueError(f"grads[{name!r}] has shape {g.shape} and dtype {g.dtype}; "
                                 f"the parameter has {tuple(p.shape)} and {array_dtype(p)}")
            tensors[name] = paddle.to_tensor(g)
        if self.backward is None:
            for name, p in self.params.items():
                p.grad = tensors[name]
        else:
            # a real backward of sum(p * g): its gradient is g exactly, accumulated into
            # the gradient clear_grad left (none, or zeros in place: 0 + g is g)
            sum((p * tensors[name]).sum() for name, p in self.params.items()).backward()
        self.run_before_step()
        self.optimizer.step()
        self.clear_gradients("clear_grad", "set_to_zero", self.backward == "set_to_zero")
        if self.scheduler is not None:
            self.scheduler.step()

    def framework_name(self, param):
        return param.name

    def build_by_hand(self, native):
        kwargs = self.decode(native.kwargs)
        scheduler = None
        if native.scheduler is not None:
            scheduler = import_native(native.scheduler)(**self.decode(native.scheduler_kwargs))
            kwargs["learning_rate"] = scheduler
        cls = import_native(native.optimizer)
        keyword = ("parameter_list" if "parameter_list" in inspect.signature(cls).parameters
                   else "parameters")
        return cls(**{keyword: self.hand_params(native)}, **kwargs), scheduler

    def hand_lr(self):
        return float(self.optimizer.get_lr())

    def to_numpy(self, tensor):
        return tensor.numpy()


def array_dtype(p) -> np.dtype:
    return np.dtype(str(p.dtype).removeprefix("paddle."))
