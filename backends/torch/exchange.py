"""DGC's exchange over ``torch.distributed`` (an :class:`unified_opt.exchange.Exchange`
with one worker per process): what a data-parallel spec's ``exchange_step`` sums.

* ``sum_sparse``: each rank sends only the nonzero (index, value) pairs of its tensor: an
  ``all_gather`` of the pair counts, then of the pairs padded to the largest count
  (indices as int32 where the tensor has fewer than 2**31 elements); the sum is built by
  adding each rank's pairs into zeros *in rank order*, so every rank computes the same
  bits, and the same bits as :class:`~unified_opt.exchange.SimulatedExchange`'s sum over
  the list (a tensor is zero wherever it sent nothing: adding it changes nothing).
* ``sum_dense``: an ``all_gather`` of the tensors, summed in rank order (an all-reduce
  may add in another order on each backend; rank order keeps ranks and the reference
  bitwise in step).

``stats`` counts, for this rank: ``steps`` (optimizer steps), ``bytes_sent`` (what this
rank put into the collectives, padding and counts included) and ``dense_bytes`` (the
bytes of the same gradients as dense tensors: what a dense all-reduce would carry from
this rank).
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from unified_opt.exchange import Exchange


class TorchExchange(Exchange):
    def __init__(self, group=None):
        self.group = group
        self.world_size = dist.get_world_size(group)
        self.stats = {"steps": 0, "bytes_sent": 0, "dense_bytes": 0}

    def _gather(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        out = [torch.empty_like(tensor) for _ in range(self.world_size)]
        dist.all_gather(out, tensor.contiguous(), group=self.group)
        self.stats["bytes_sent"] += tensor.numel() * tensor.element_size()
        return out

    def sum_dense(self, tensors):
        (tensor,) = tensors          # one worker per process
        self.stats["dense_bytes"] += tensor.numel() * tensor.element_size()
        parts = self._gather(tensor)
        total = parts[0]
        for part in parts[1:]:
            total = total + part
        return total

    def sum_sparse(self, tensors):
        (tensor,) = tensors
        self.stats["dense_bytes"] += tensor.numel() * tensor.element_size()
        flat = tensor.reshape(-1)
        index_dtype = torch.int32 if flat.numel() < 2 ** 31 else torch.int64
        indices = torch.nonzero(flat, as_tuple=True)[0]
        counts = self._gather(torch.tensor([indices.numel()], dtype=torch.int64))
        longest = int(max(c.item() for c in counts))
        padded_indices = torch.zeros(longest, dtype=index_dtype, device=flat.device)
        padded_values = torch.zeros(longest, dtype=flat.dtype, device=flat.device)
        padded_indices[:indices.numel()] = indices.to(index_dtype)
        padded_values[:indices.numel()] = flat[indices]
        all_indices, all_values = self._gather(padded_indices), self._gather(padded_values)
        total = torch.zeros_like(flat)
        for count, where, values in zip(counts, all_indices, all_values):
            n = int(count.item())
            total.index_add_(0, where[:n].long(), values[:n])
        return total.reshape(tensor.shape)
