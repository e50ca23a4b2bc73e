"""DGC's exchange over MindSpore's collectives (``mindspore.communication.init()``, e.g.
under ``msrun``; ``ops.AllGather`` runs on CPU): the tensor operations of
:class:`unified_opt.exchange.CollectiveExchange`, which says what is sent and in which
order it is summed. ``AllGather`` concatenates along axis 0: tensors travel flat and
are split back per rank.

The operations take MindSpore tensors, or numpy arrays: on the CPU the own optimizer
runs DGC's local math in numpy over the tensors' memory (a MindSpore eager operation
costs about 0.5 ms), and only the gathers go through MindSpore."""

from __future__ import annotations

import numpy as np
from mindspore import Tensor, ops
from mindspore.communication import get_group_size

from unified_opt.exchange import CollectiveExchange

from .kernels import host_copy


class MindSporeExchange(CollectiveExchange):
    def __init__(self):
        super().__init__(get_group_size())
        self._all_gather = ops.AllGather()

    def all_gather(self, tensor):
        if isinstance(tensor, np.ndarray):
            flat = np.ascontiguousarray(tensor).reshape(-1)
            gathered = host_copy(self._all_gather(Tensor.from_numpy(flat)))
            return [part.reshape(tensor.shape) for part in np.split(gathered, self.world_size)]
        flat = tensor.reshape((-1,))
        parts = ops.split(self._all_gather(flat), int(flat.shape[0]), axis=0)
        return [part.reshape(tensor.shape) for part in parts]

    def nbytes(self, tensor) -> int:
        return int(tensor.size) * int(tensor.itemsize)

    def pairs(self, flat, length=None):
        host = isinstance(flat, np.ndarray)
        if host:
            indices = np.flatnonzero(flat)
            values = flat[indices]
        else:
            indices = ops.nonzero(flat).reshape((-1,))
            values = ops.gather(flat, indices, 0) if indices.shape[0] else flat[:0]
        if length is None:
            return indices, values
        wide = flat.size >= 2 ** 31
        padded_indices = np.zeros(length, dtype=np.int64 if wide else np.int32)
        taken = int(indices.shape[0])
        padded_indices[:taken] = indices if host else indices.asnumpy()
        values = values if host else values.asnumpy()
        padded_values = np.zeros(length, dtype=values.dtype)
        padded_values[:taken] = values
        if host:
            return padded_indices, padded_values
        return Tensor(padded_indices), Tensor(padded_values)

    def count(self, n: int):
        return Tensor(np.array([n], dtype=np.int64))

    def zeros(self, flat):
        return np.zeros_like(flat) if isinstance(flat, np.ndarray) else ops.zeros_like(flat)

    def added(self, flat, indices, values):
        if indices.shape[0] == 0:
            return flat
        if isinstance(flat, np.ndarray):
            out = flat.copy()
            out[indices] += values          # distinct indices: one addition each
            return out
        return ops.tensor_scatter_add(flat, indices.reshape((-1, 1)), values)
