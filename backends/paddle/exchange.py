"""DGC's exchange over Paddle's collectives (``paddle.distributed.init_parallel_env``;
gloo on CPU): the tensor operations of :class:`unified_opt.exchange.CollectiveExchange`,
which says what is sent and in which order it is summed."""

from __future__ import annotations

import paddle
import paddle.distributed as dist

from unified_opt.exchange import CollectiveExchange


class PaddleExchange(CollectiveExchange):
    def __init__(self, group=None):
        super().__init__(dist.get_world_size(group))
        self.group = group

    def all_gather(self, tensor):
        out: list = []
        dist.all_gather(out, tensor, group=self.group)
        return out

    def nbytes(self, tensor) -> int:
        return int(tensor.size) * tensor.element_size()

    def pairs(self, flat, length=None):
        indices = paddle.nonzero(flat).reshape([-1])
        index_dtype = paddle.int32 if flat.size < 2 ** 31 else paddle.int64
        values = paddle.gather(flat, indices)
        if length is None:
            return indices, values
        pad = length - int(indices.shape[0])
        return (paddle.concat([indices.astype(index_dtype),
                               paddle.zeros([pad], dtype=index_dtype)]),
                paddle.concat([values, paddle.zeros([pad], dtype=flat.dtype)]))

    def count(self, n: int):
        return paddle.to_tensor([n], dtype=paddle.int64)

    def zeros(self, flat):
        return paddle.zeros_like(flat)

    def added(self, flat, indices, values):
        return paddle.index_add(flat, indices, 0, values)
