"""Conformance driver for torch: backward-style ``p.grad`` (None where the case has no
gradient), ``step``, ``zero_grad``, then ``scheduler.step()``; a case with ``backward``
takes its gradients from a real ``backward()`` and zeroes them in that mode
(``zero_grad(set_to_none=False)`` keeps the gradient tensors, zeroed in place). A
native optimizer built by hand takes its parameters first, its scheduler is built on it,
and ``before_step`` functions (``clip_grad_norm_``) run between the gradients and the
step. Loading it
runs the backend's :func:`~unified_opt.backends.torch.ops.warm_up_cpu_sqrt` (a race in
torch's first CPU ``sqrt`` of a process), also before a native optimizer built by hand.
On a device (``cuda:N``, ``npu:N``) each parameter and gradient is moved there with
``.to()``."""

from __future__ import annotations

import numpy as np
import torch

from unified_opt.backends.torch.ops import warm_up_cpu_sqrt
from unified_opt.native import import_native
from unified_opt.ops import numpy_ops
from unified_opt.storage import LOW_PRECISION as LOW_PRECISION_NAMES

from .base import Driver

warm_up_cpu_sqrt()


class TorchDriver(Driver):
    backend = "torch"
    storage_dtypes = LOW_PRECISION_NAMES

    @property
    def torch_device(self) -> str:
        return "cpu" if self.device is None else self.device.framework_device

    def make_param(self, name, array):
        # .to() returns the CPU tensor itself, so on the CPU nothing changes; a case's
        # bfloat16 values convert exactly
        dtype = None if self.storage is None else getattr(torch, self.storage)
        return torch.nn.Parameter(torch.from_numpy(array.copy()).to(self.torch_device,
                                                                    dtype))

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
        if self.backward is None:
            for name, p in self.params.items():
                # None: no gradient at this step (Case.missing_gradients), as after a
                # backward the parameter took no part in
                p.grad = None if grads[name] is None else torch.from_numpy(
                    np.array(grads[name], dtype=array_dtype(p))).to(p.device, p.dtype)
        else:
            # a real backward of sum(p * g): its gradient is g exactly, accumulated into
            # the gradient zero_grad left (None, or zeros in place: 0 + g is g)
            loss = sum((p * torch.from_numpy(np.array(grads[name], dtype=array_dtype(p))
                                             ).to(p.device, p.dtype)).sum()
                       for name, p in self.params.items())
            loss.backward()
        self.run_before_step()
        self.optimizer.step()
        self.clear_gradients("zero_grad", "set_to_none", self.backward != "set_to_zero")
        if self.scheduler is not None:
            self.scheduler.step()

    def build_by_hand(self, native):
        optimizer = import_native(native.optimizer)(self.hand_params(native),
                                                    **self.decode(native.kwargs))
        scheduler = None
        if native.scheduler is not None:
            kwargs = self.decode(native.scheduler_kwargs, optimizer)
            if native.scheduler.endswith(".ChainedScheduler"):   # takes its members only
                scheduler = import_native(native.scheduler)(**kwargs)
            else:
                scheduler = import_native(native.scheduler)(optimizer, **kwargs)
        return optimizer, scheduler

    def hand_lr(self):
        p = self.lr_param()
        return next(g["lr"] for g in self.optimizer.param_groups
                    if any(q is p for q in g["params"]))

    def to_numpy(self, tensor):
        tensor = tensor.detach().cpu()
        return (tensor.float() if tensor.dtype in LOW_PRECISION else tensor).numpy()

    def spec_state(self, name):
        state = super().spec_state(name)
        if state or self.native is not None or self.factory is not None:
            return state
        # torch makes a parameter's state at its first update: until then (no gradient
        # at any step so far, Case.missing_gradients) it holds the spec's initial state
        p = self.params[name]
        spec = self.record.plans[self.names.index(name)].spec
        initial = spec.init(np.zeros(tuple(p.shape), dtype=array_dtype(p)), numpy_ops)
        return {k: torch.as_tensor(np.asarray(a)) for k, a in initial.items()}

    def optimizer_state(self, param):
        """``optimizer.state[param]``'s tensors (a user's torch optimizer)."""
        state = getattr(self.optimizer, "state", {})
        held = state.get(param, {}) if hasattr(state, "get") else {}
        return {k: v for k, v in held.items() if isinstance(v, torch.Tensor)}

    def optimizer_state_keys(self, param):
        state = getattr(self.optimizer, "state", {})
        held = state.get(param, {}) if hasattr(state, "get") else {}
        return [str(k) for k in held]


#: dtypes numpy has no (bfloat16) or a slow (float16) type for: read as float32, exactly
LOW_PRECISION = tuple(getattr(torch, name) for name in LOW_PRECISION_NAMES)


def array_dtype(p) -> np.dtype:
    """The numpy dtype of ``p``'s values (float32 for a bfloat16 or float16 ``p``)."""
    if p.dtype in LOW_PRECISION:
        return np.dtype(np.float32)
    return np.dtype(str(p.dtype).removeprefix("torch."))
