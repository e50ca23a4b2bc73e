"""The engines of MindSpore's own optimizer where Python calls it (PyNative;
:mod:`unified_opt.step_loop`): each runs a batch of parameters' updates in place and
hands back what it cannot run.

* :class:`Kernels`: the kernel VM and its generated kernels over the Parameters' host
  memory (:mod:`.kernels`).
* :class:`ExchangeOnHost`: a data-parallel spec's step on the CPU, its local math in
  numpy over the Parameters' memory, the gathers through MindSpore (:mod:`.exchange`).
* :class:`OnHost`: with ``compile="auto"``, an update the VM cannot run (it does not
  trace: Python reads a value) on the CPU, in numpy over the Parameters' memory. (Muon's
  matrix products trace as a matrix phase: the VM runs its update, the iteration in
  numpy between its phases.)
* :class:`Eager`: the spec's ``update`` with the MindSpore ops binding; runs anything
  (with an exchange: one worker of ``spec.exchange_step``).

A batch's gradients are MindSpore Tensors, or numpy arrays where the pre-step ran in
numpy over host memory; its states are the spec's state Parameters by name.
Compiled into a graph the same VM programs run through :mod:`.graph`.
"""

from __future__ import annotations

import numpy as np
from mindspore import Tensor, ops

from unified_opt.ops import numpy_ops
from unified_opt.step_loop import Batch, Engine

from .kernels import MindSporeKernels, host_view
from .ops import mindspore_ops


class Kernels(Engine):
    """The kernel VM (see the module); what it cannot run (another device or dtype, an
    update that does not trace) is handed on."""

    name = "vm"

    def __init__(self, kernels: MindSporeKernels):
        self.kernels = kernels

    def run(self, batch: Batch) -> list[int]:
        jobs, kept, rest = [], [], []
        for k, (p, grad, slots, step) in enumerate(zip(batch.params, batch.grads,
                                                       batch.states, batch.steps)):
            job = self.kernels.job(p, grad, batch.spec, slots, batch.lr, step, kept)
            if job is None:
                rest.append(k)
            else:
                jobs.append(job)
        if jobs:
            self.kernels.run(jobs)
        return rest


class OnHost(Engine):
    """An update the VM hands on, in numpy over the CPU Parameters' memory: one
    MindSpore operation in PyNative costs 0.4 to 1.5 ms on the CPU (a 65 x 65 product
    0.8 ms, a bfloat16 cast there and back 1.5 ms, measured with MindSpore 2.10), numpy's
    a few microseconds, and both compute the float32 operations as IEEE does. A
    parameter whose memory cannot be read so (another device) is handed on."""

    name = "on-host"

    def run(self, batch: Batch) -> list[int]:
        rest = []
        for k, (p, grad, slots, step) in enumerate(zip(batch.params, batch.grads,
                                                       batch.states, batch.steps)):
            value = host_view(p)
            state = {key: host_view(v) for key, v in slots.items()}
            gradient = grad if isinstance(grad, np.ndarray) else host_view(grad)
            if value is None or gradient is None or any(v is None for v in state.values()):
                rest.append(k)
                continue
            with np.errstate(all="ignore"):
                # the update returns new arrays (its contract), written back after it
                new_p, new_state = self.updated(batch, value, gradient, state, step)
            value[...] = new_p
            for key, array in new_state.items():
                state[key][...] = array
        return rest

    def updated(self, batch: Batch, value, gradient, state: dict, step: int):
        """One parameter's new value and state, numpy in and out."""
        return batch.spec.update(value, gradient, dict(state), lr=batch.lr, step=step,
                                 ops=numpy_ops)


class ExchangeOnHost(OnHost):
    """A data-parallel spec's step in numpy over the CPU Parameters' memory, as
    :class:`OnHost`, its exchange through MindSpore's collectives."""

    name = "exchange-on-host"

    def __init__(self, exchange):
        self.exchange = exchange

    def updated(self, batch: Batch, value, gradient, state: dict, step: int):
        new_p, (new_state,) = batch.spec.exchange_step(
            value, [gradient], [state], lr=batch.lr, step=step, ops=numpy_ops,
            exchange=self.exchange)
        return new_p, new_state


class Eager(Engine):
    """The spec's update with MindSpore operations (see the module)."""

    name = "eager"

    def __init__(self, exchange=None):
        self.exchange = exchange

    def run(self, batch: Batch) -> list[int]:
        for p, grad, slots, step in zip(batch.params, batch.grads, batch.states,
                                        batch.steps):
            if isinstance(grad, np.ndarray):         # a gradient the host pre-step made
                grad = Tensor.from_numpy(np.ascontiguousarray(grad))
            if self.exchange is None:
                new_p, new_state = batch.spec.update(p, grad, dict(slots), lr=batch.lr,
                                                     step=step, ops=mindspore_ops)
            else:       # one local worker; the exchange sums over the ranks
                new_p, (new_state,) = batch.spec.exchange_step(
                    p, [grad], [dict(slots)], lr=batch.lr, step=step, ops=mindspore_ops,
                    exchange=self.exchange)
            ops.assign(p, new_p)
            for key, value in new_state.items():
                ops.assign(slots[key], value)
        return []
