"""The engines of torch's own optimizer (:mod:`unified_opt.step_loop`): each runs a batch
of parameters' updates in place and hands back what it cannot run.

* :class:`Eager`: the spec's ``update`` with the torch ops binding, one framework
  operation at a time; runs anything (with an exchange: one worker of a data-parallel
  spec's ``exchange_step``; DTensor parameters through DTensor's operations). A
  bfloat16 or float16 parameter's update runs on float32 copies, and what is kept is
  rounded once at the end (:mod:`unified_opt.storage`).
* :class:`Kernels`: CPU tensors on the kernel VM and its generated kernels
  (:mod:`.kernels`).
* :class:`~.cuda.CudaKernels` (:mod:`.cuda`): CUDA tensors, one Triton launch per phase
  over the whole group.
* :class:`Inductor`: ``torch.compile``'s kernels, one per tensor (:mod:`.compiled`).
* :class:`Offload`: the state in host memory, the update there (its own engines on
  host copies), transfers overlapped (:class:`.pipeline.HostPipeline`).

Torch keeps each parameter's count of updates in its state dict under ``"step"``
(torch's own optimizers do); the engines touch only the spec's state names.
"""

from __future__ import annotations

import torch
from torch.autograd.graph import increment_version

from unified_opt.step_loop import Batch, Engine
from unified_opt.storage import math_dtype, rounds, state_storage

from .compiled import compilable, kernel
from .kernels import TorchKernels
from .loading import STEP
from .ops import is_dtensor, torch_ops
from .pipeline import HostPipeline
from .staging import HostStaging, StagingRing


def spec_arrays(state: dict) -> dict:
    """The spec's state arrays of a torch state dict (without the step count)."""
    return {k: a for k, a in state.items() if k != STEP}


class Eager(Engine):
    """The spec's update, eagerly (see the module)."""

    name = "eager"

    def __init__(self, exchange=None):
        self.exchange = exchange

    def run(self, batch: Batch) -> list[int]:
        for p, grad, state, step in zip(batch.params, batch.grads, batch.states, batch.steps):
            value = p.detach()
            arrays = spec_arrays(state)
            stored = dtype_name(value.dtype)
            kept = None
            if rounds(batch.spec, stored):      # compute in the math dtype, round at the end
                math = torch_dtype(math_dtype(stored))
                kept = torch_dtype(state_storage(batch.spec, stored))
                value_in, grad = value.to(math), grad.to(math)
                arrays = {key: array.to(math) for key, array in arrays.items()}
            else:
                value_in = value
            if self.exchange is None:
                new_p, new_state = batch.spec.update(value_in, grad, arrays, lr=batch.lr,
                                                     step=step, ops=torch_ops)
            else:       # one local worker; the exchange sums over the ranks
                new_p, (new_state,) = batch.spec.exchange_step(
                    value_in, [grad], [arrays], lr=batch.lr, step=step, ops=torch_ops,
                    exchange=self.exchange)
            value.copy_(_placed_as(new_p, value))          # copy_ rounds to nearest even
            for key, array in new_state.items():
                if kept is not None:
                    array = array.to(kept)
                _keep(state, key, array)
        return []


def _keep(state: dict, key: str, array) -> None:
    """``array`` (what ``update`` returned for state ``key``) kept in ``state``: copied
    into the state tensor the optimizer owns, never kept as is. ``update`` may return one
    of its inputs (SGD's first momentum step returns the gradient itself): a state tensor
    bound to it would be ``p.grad``, which ``zero_grad(set_to_none=False)`` and the next
    ``backward()`` change in place. A state tensor made here the first time (none yet, of
    another shape, dtype or placement, or one object under two names, as an ``init`` may
    return) is a copy too."""
    old = state.get(key)
    array = _placed_as(array, old)
    if old is array:                     # the update passed the state tensor through
        return
    if old is not None and type(old) is type(array) and old.shape == array.shape \
            and old.dtype == array.dtype and old.device == array.device \
            and getattr(old, "placements", None) == getattr(array, "placements", None) \
            and not any(other is old for name, other in state.items() if name != key):
        old.copy_(array)
    else:
        state[key] = array.clone(memory_format=torch.contiguous_format)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


class Kernels(Engine):
    """CPU tensors on the kernel VM (:mod:`.kernels`); the rest is handed on."""

    name = "vm"

    def __init__(self, kernels: TorchKernels):
        self.kernels = kernels

    def claims(self, param, spec) -> bool:
        return param.device.type == "cpu" and not is_dtensor(param)

    def run(self, batch: Batch) -> list[int]:
        jobs, kept, written, rest = [], [], [], []
        for k, (p, grad, state, step) in enumerate(zip(batch.params, batch.grads,
                                                       batch.states, batch.steps)):
            arrays = spec_arrays(state)
            job = self.kernels.job(p.detach(), grad, batch.spec, arrays, batch.lr, step, kept)
            if job is None:
                rest.append(k)
                continue
            state.update(arrays)          # copies made for the VM's in-place writes
            jobs.append(job)
            written.append(p.detach())
        if jobs:
            self.kernels.run(jobs)
            # the VM wrote through data_ptr: tell autograd, as an in-place op would (a
            # parameter saved for a pending backward then raises instead of misleading)
            increment_version(written)
        return rest


class Inductor(Engine):
    """``torch.compile``'s kernel of the spec's update per tensor (:mod:`.compiled`);
    what does not compile (:func:`.compiled.compilable`) is handed on, and a compiler
    failure is raised."""

    name = "inductor"

    def __init__(self):
        self._owned: set[int] = set()      # parameters whose state tensors own their memory

    def run(self, batch: Batch) -> list[int]:
        rest = []
        for k, (p, grad, state, step) in enumerate(zip(batch.params, batch.grads,
                                                       batch.states, batch.steps)):
            if not compilable(batch.spec, p):
                rest.append(k)
                continue
            if id(p) not in self._owned:
                # the eager update may have left a state tensor aliasing the gradient or
                # another state tensor (a previous gradient kept as is): the kernel writes
                # in place, so each gets memory of its own once
                for key, array in spec_arrays(state).items():
                    state[key] = array.clone(memory_format=torch.contiguous_format)
                self._owned.add(id(p))
            kernel(batch.spec)(p.detach(), grad, spec_arrays(state), batch.lr, step)
        return rest


class Offload(Engine):
    """The state in host memory and the update there: each batch of host copies runs on
    ``engines`` (the kernel VM, then eagerly); only the new values go back, while the
    next batch comes down (:class:`.pipeline.HostPipeline`)."""

    name = "offload"

    def __init__(self, engines: list[Engine],
                 staging: StagingRing | HostStaging | None = None):
        self.engines = engines
        self.pipeline = HostPipeline(split=False, staging=staging)

    def run(self, batch: Batch) -> list[int]:
        def update(pieces) -> None:
            positions = [piece.index for piece in pieces]
            host = Batch(batch.spec, batch.lr, [batch.indices[k] for k in positions],
                         [piece.value for piece in pieces], [piece.grad for piece in pieces],
                         [batch.states[k] for k in positions],
                         [batch.steps[k] for k in positions])
            for engine in self.engines:
                rest = engine.run(host)
                if not rest:
                    return
                host = host.subset(rest)
            raise RuntimeError("no host engine ran the offloaded updates")

        self.pipeline.run(batch.params, update)
        return []


def _placed_as(new, old):
    """``new`` with ``old``'s DTensor placements: DTensor's operations may leave a result
    replicated (a 1-row parameter's shard 0) or partial, where the parameter and its
    state stay sharded as they were made."""
    if is_dtensor(new) and is_dtensor(old) and \
            new.placements != old.placements:
        return new.redistribute(old.device_mesh, old.placements)
    return new
