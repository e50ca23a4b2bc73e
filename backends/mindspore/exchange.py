"""DGC's exchange over MindSpore's collectives (``mindspore.communication.init()``, e.g.
under ``msrun``; ``ops.AllGather`` runs on CPU): the tensor operations of
:class:`unified_opt.exchange.CollectiveExchange`, which says what is sent and in which
order it is summed. ``AllGather`` concatenates along axis 0: tensors travel flat and
are split back per rank."""

from __future__ import annotations

import numpy as np
from mindspore import Tensor, ops
from mindspore import dtype as mstype
from mindspore.communication import get_group_size

from unified_opt.exchange import CollectiveExchange


class MindSporeExchange(CollectiveExchange):
    def __init__(self):
        super().__init__(get_group_size())
        self._all_gather = ops.AllGather()

    def all_gather(self, tensor):
        flat = tensor.reshape((-1,))
        parts = ops.split(self._all_gather(flat), int(flat.shape[0]), axis=0)
        return [part.reshape(tensor.shape) for part in parts]

    def nbytes(self, tensor) -> int:
        return int(tensor.size) * int(tensor.itemsize)

    def pairs(self, flat, length=None):
        indices = ops.nonzero(flat).reshape((-1,))
        values = ops.gather(flat, indices, 0) if indices.shape[0] else flat[:0]
        if length is None:
            return indices, values
        index_dtype = mstype.int32 if flat.size < 2 ** 31 else mstype.int64
        pad = length - int(indices.shape[0])
        padded_indices = np.zeros(length, dtype=np.int32 if index_dtype == mstype.int32
                                  else np.int64)
        padded_indices[:int(indices.shape[0])] = indices.asnumpy()
        padded_values = np.zeros(length, dtype=values.asnumpy().dtype)
        padded_values[:length - pad] = values.asnumpy()
        return Tensor(padded_indices), Tensor(padded_values)

    def count(self, n: int):
        return Tensor(np.array([n], dtype=np.int64))

    def zeros(self, flat):
        return ops.zeros_like(flat)

    def added(self, flat, indices, values):
        if indices.shape[0] == 0:
            return flat
        return ops.tensor_scatter_add(flat, indices.reshape((-1, 1)), values)
