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
  same bits): :class:`CollectiveExchange`, with ``TorchExchange`` (a
  ``torch.distributed`` process group), ``PaddleExchange`` (Paddle's parallel env) and
  ``MindSporeExchange`` (``mindspore.communication``) in the backends.
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


class CollectiveExchange(Exchange):
    """One worker per process, summing over a framework's collectives (the framework's
    subclass gives the tensor operations below).

    * ``sum_sparse``: each rank sends only its tensor's nonzero (index, value) pairs: an
      all-gather of the pair counts, then of the pairs padded to the largest count
      (indices as int32 where the tensor has fewer than 2**31 elements); the sum adds
      each rank's pairs into zeros *in rank order*, so every rank gets the same bits, and
      the same bits as :class:`SimulatedExchange`'s sum over the list (a tensor is zero
      wherever it sent nothing: adding it there changes nothing).
    * ``sum_dense``: an all-gather of the tensors, summed in rank order (an all-reduce
      may add in another order per backend; rank order keeps the ranks and the simulated
      workers bitwise in step).

    ``stats`` counts, for this rank: ``steps`` (optimizer steps; the optimizer counts
    them), ``bytes_sent`` (what this rank put into the collectives: pairs, padding and
    counts) and ``dense_bytes`` (the bytes of the same gradients as dense tensors: what a
    dense all-reduce would carry from this rank)."""

    def __init__(self, world_size: int):
        self.world_size = world_size
        self.stats = {"steps": 0, "bytes_sent": 0, "dense_bytes": 0}

    # -- the framework's operations ------------------------------------------------
    def all_gather(self, tensor) -> list:
        raise NotImplementedError

    def nbytes(self, tensor) -> int:
        raise NotImplementedError

    def pairs(self, flat, length: int | None = None):
        """``(indices, values)`` of ``flat``'s nonzero elements, padded with zeros to
        ``length`` pairs (int32 indices below 2**31 elements)."""
        raise NotImplementedError

    def count(self, n: int):
        """``n`` as a one-element int64 tensor."""
        raise NotImplementedError

    def zeros(self, flat):
        """Zeros shaped like ``flat`` (not ``flat * 0``: an inf sent would make NaN)."""
        raise NotImplementedError

    def added(self, flat, indices, values):
        """``flat`` with ``values`` added at ``indices`` (distinct indices)."""
        raise NotImplementedError

    # -- the sums ------------------------------------------------------------------
    def _gather(self, tensor) -> list:
        if self.nbytes(tensor) == 0:      # every rank has the same shapes: nothing to send
            return [tensor] * self.world_size
        self.stats["bytes_sent"] += self.nbytes(tensor)
        return self.all_gather(tensor)

    def sum_dense(self, tensors):
        (tensor,) = tensors                     # one worker per process
        self.stats["dense_bytes"] += self.nbytes(tensor)
        parts = self._gather(tensor)
        total = parts[0]
        for part in parts[1:]:
            total = total + part
        return total

    def sum_sparse(self, tensors):
        (tensor,) = tensors
        self.stats["dense_bytes"] += self.nbytes(tensor)
        flat = tensor.reshape([-1])
        indices, _ = self.pairs(flat)
        counts = [int(c.item()) for c in self._gather(self.count(int(indices.shape[0])))]
        total = self.zeros(flat)
        if max(counts) == 0:        # nothing sent anywhere (gloo cannot gather nothing)
            return total.reshape(list(tensor.shape))
        indices, values = self.pairs(flat, max(counts))
        all_indices, all_values = self._gather(indices), self._gather(values)
        for n, where, what in zip(counts, all_indices, all_values):
            total = self.added(total, where[:n], what[:n])
        return total.reshape(list(tensor.shape))
