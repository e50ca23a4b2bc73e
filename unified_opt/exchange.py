"""The collective a data-parallel spec needs, kept pluggable.

A data-parallel spec (``spec.data_parallel``, e.g. ``dgc_momentum``) writes its step
once as ``spec.exchange_step(param, grads, states, ..., exchange=...)``: ``grads`` and
``states`` hold one entry per worker *in this process*, and ``exchange`` sums tensors
over *all* workers. Three exchanges share that contract:

* :data:`LOCAL` (world size 1): the sum is the tensor itself. The backends use it
  today, so a data-parallel spec runs as an ordinary single-process optimizer.
* :class:`SimulatedExchange`: every worker lives in this process; the sum runs over
  the list in worker order. ``uo.reference(spec, params, workers=N)`` uses it.
* a communicator: one local worker per process; ``sum_sparse`` all-gathers the
  (index, value) pairs and adds them in rank order, ``sum_dense`` all-gathers the
  tensors and adds them in rank order (so every rank, and the simulated sum, get the
  same bits): ``unified_opt.backends.torch.exchange.TorchExchange`` over a
  ``torch.distributed`` process group.
"""

from __future__ import annotations

from typing import Sequence


class Exchange:
    """Sums one tensor per worker over every worker of the job."""

    world_size: int = 1

    def sum_dense(self, tensors: Sequence):
        """The sum over all workers; ``tensors`` are this process's workers' tensors."""
        raise NotImplementedError

    def sum_sparse(self, tensors: Sequence):
        """As :meth:`sum_dense` for tensors that are zero outside a few positions (a
        communicator may send only the nonzero (index, value) pairs)."""
        raise NotImplementedError


class SimulatedExchange(Exchange):
    """All ``world_size`` workers in this process: the sum of the list, in worker order."""

    def __init__(self, world_size: int):
        if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
            raise ValueError(f"SimulatedExchange: world_size must be an int >= 1, got "
                             f"{world_size!r}")
        self.world_size = world_size

    def _sum(self, tensors):
        if len(tensors) != self.world_size:
            raise ValueError(f"SimulatedExchange: expected {self.world_size} tensors (one per "
                             f"worker), got {len(tensors)}")
        total = tensors[0]
        for tensor in tensors[1:]:
            total = total + tensor
        return total

    sum_dense = _sum
    sum_sparse = _sum


#: world size 1: every sum is the one local tensor
LOCAL = SimulatedExchange(1)
