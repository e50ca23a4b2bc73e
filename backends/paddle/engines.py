"""The engines of Paddle's own optimizer (:mod:`unified_opt.step_loop`): each runs a
batch of parameters' updates in place and hands back what it cannot run.

* :class:`Kernels`: CPU tensors on the kernel VM and its generated kernels
  (:mod:`.kernels`), over the parameters' and accumulators' memory.
* :class:`Eager`: the spec's ``update`` with the Paddle ops binding, one framework
  operation at a time; runs anything (with an exchange: one worker of a data-parallel
  spec's ``exchange_step``).

A batch's states are the parameter's accumulators by spec state name: both engines
write into them in place, so ``state_dict`` sees the new values.
"""

from __future__ import annotations

import paddle

from unified_opt.step_loop import Batch, Engine

from .kernels import PaddleKernels
from .ops import paddle_ops


class Eager(Engine):
    """The spec's update, eagerly (see the module)."""

    name = "eager"

    def __init__(self, exchange=None):
        self.exchange = exchange

    def run(self, batch: Batch) -> list[int]:
        for param, grad, state, step in zip(batch.params, batch.grads, batch.states,
                                            batch.steps):
            if self.exchange is None:
                new_param, new_state = batch.spec.update(param.detach(), grad, dict(state),
                                                         lr=batch.lr, step=step,
                                                         ops=paddle_ops)
            else:       # one local worker; the exchange sums over the ranks
                new_param, (new_state,) = batch.spec.exchange_step(
                    param.detach(), [grad], [dict(state)], lr=batch.lr, step=step,
                    ops=paddle_ops, exchange=self.exchange)
            paddle.assign(new_param, output=param)
            for key, value in new_state.items():
                paddle.assign(value, output=state[key])
        return []


class Kernels(Engine):
    """CPU tensors on the kernel VM (:mod:`.kernels`); what it cannot run (another
    place, a gradient of another dtype or shape, an update that does not trace) is
    handed on."""

    name = "vm"

    def __init__(self, kernels: PaddleKernels):
        self.kernels = kernels

    def run(self, batch: Batch) -> list[int]:
        jobs, kept, written, rest = [], [], [], []
        for k, (param, grad, state, step) in enumerate(zip(batch.params, batch.grads,
                                                           batch.states, batch.steps)):
            job = self.kernels.job(param, grad, batch.spec, state, batch.lr, step, kept)
            if job is None:
                rest.append(k)
                continue
            jobs.append(job)
            written.append(param)
        if jobs:
            self.kernels.run(jobs)
            for param in written:   # the VM wrote in place: autograd's version check sees it
                param._bump_inplace_version()
        return rest
