"""DGC's exchange over a ``torch.distributed`` process group (gloo, NCCL): the tensor
operations of :class:`unified_opt.exchange.CollectiveExchange`, which says what is sent
and in which order it is summed."""

from __future__ import annotations

import torch
import torch.distributed as dist

from unified_opt.exchange import CollectiveExchange


class TorchExchange(CollectiveExchange):
    def __init__(self, group=None):
        super().__init__(dist.get_world_size(group))
        self.group = group

    def all_gather(self, tensor):
        out = [torch.empty_like(tensor) for _ in range(self.world_size)]
        dist.all_gather(out, tensor.contiguous(), group=self.group)
        return out

    def nbytes(self, tensor) -> int:
        return tensor.numel() * tensor.element_size()

    def pairs(self, flat, length=None):
        indices = torch.nonzero(flat, as_tuple=True)[0]
        index_dtype = torch.int32 if flat.numel() < 2 ** 31 else torch.int64
        if length is None:
            return indices, flat[indices]
        padded_indices = torch.zeros(length, dtype=index_dtype, device=flat.device)
        padded_values = torch.zeros(length, dtype=flat.dtype, device=flat.device)
        padded_indices[:indices.numel()] = indices.to(index_dtype)
        padded_values[:indices.numel()] = flat[indices]
        return padded_indices, padded_values

    def count(self, n: int):
        return torch.tensor([n], dtype=torch.int64)

    def zeros(self, flat):
        return torch.zeros_like(flat)

    def added(self, flat, indices, values):
        return flat.index_add(0, indices.long(), values)
