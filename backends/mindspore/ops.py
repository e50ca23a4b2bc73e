"""MindSpore binding of the spec ops interface (PyNative tensors)."""

import numpy as np
from mindspore import Tensor, ops
from mindspore import dtype as mstype

from unified_opt.ops import Ops, numpy_ops

_LOW = {"bfloat16": mstype.bfloat16}
_NUMPY_DTYPES = {mstype.float16: np.float16, mstype.float32: np.float32,
                 mstype.float64: np.float64}


def _reduced_shape(x, axis, keepdims) -> tuple:
    return np.sum(np.empty(x.shape, dtype=np.bool_), axis=axis, keepdims=keepdims).shape


def _sum(x, axis=None, keepdims=False):
    # ReduceSum/ReduceMean of an empty tensor return uninitialised memory on CPU
    # (measured on 2.10): the empty sum is 0, as numpy's
    if x.size == 0:
        return ops.zeros(_reduced_shape(x, axis, keepdims), dtype=x.dtype)
    return ops.sum(x, dim=axis, keepdim=keepdims)


def _nan_kept(result, x, y):
    """``result`` with NaN wherever ``x`` or ``y`` is NaN (``x + y`` is NaN there)."""
    if not isinstance(y, Tensor):
        return ops.where(ops.isnan(x), x, result)
    if not isinstance(x, Tensor):
        return ops.where(ops.isnan(y), y, result)
    return ops.where(ops.isnan(x) | ops.isnan(y), x + y, result)


class MindSporeOps(Ops):
    name = "mindspore"

    def zeros_like(self, x): return ops.zeros_like(x)
    def full_like(self, x, value): return ops.full_like(x, value)
    def scalar_like(self, x, value): return ops.full((), value, dtype=x.dtype)
    def sqrt(self, x): return ops.sqrt(x)
    def abs(self, x): return ops.abs(x)
    # MindSpore's sign(NaN) is 0, its maximum/minimum return the other operand and its
    # clamp the bound where one is NaN: keep the NaN, as numpy (see unified_opt.ops)
    def sign(self, x): return ops.where(ops.isnan(x), x, ops.sign(x))
    def maximum(self, x, y): return _nan_kept(ops.maximum(x, y), x, y)
    def minimum(self, x, y): return _nan_kept(ops.minimum(x, y), x, y)
    def where(self, condition, x, y): return ops.where(condition, x, y)
    def clip(self, x, low, high): return ops.where(ops.isnan(x), x, ops.clamp(x, low, high))
    # sqrt of the sum of squares, as the numpy binding computes it (0 for an empty tensor)
    def norm(self, x): return ops.sqrt(_sum(x * x))

    def mean(self, x, axis=None, keepdims=False):
        count = x.size if axis is None else x.shape[axis]
        return _sum(x, axis, keepdims) / float(count) if count else \
            ops.full(_reduced_shape(x, axis, keepdims), float("nan"), dtype=x.dtype)

    def numel(self, x): return int(x.size)
    def machine_eps(self, x): return float(np.finfo(_NUMPY_DTYPES[x.dtype]).eps)
    def all_finite(self, x): return bool(np.isfinite(x.asnumpy()).all())
    def stack(self, xs):
        # ops.stack takes one dtype; promote as torch and numpy do (mixed precisions)
        wide = mstype.float64 if any(x.dtype == mstype.float64 for x in xs) else xs[0].dtype
        return ops.stack([x.astype(wide) for x in xs])

    def matmul(self, a, b): return ops.matmul(a, b)
    def transpose(self, x): return ops.transpose(x, (1, 0))
    def reshape(self, x, shape): return ops.reshape(x, shape)
    def addmm(self, c, a, b, *, beta, alpha): return ops.addmm(c, a, b, beta=beta, alpha=alpha)
    # MindSpore's CPU kernels have no bfloat16 matrix product: the values, in x's dtype
    def rounded(self, x, dtype): return x.astype(_LOW[dtype]).astype(x.dtype)
    def cast_like(self, x, other): return x.astype(other.dtype)

    # MindSpore's sort/topk have no stable order for ties: select on the host with the
    # numpy binding (a stable descending sort, first k), the selection every binding makes
    def topk_mask(self, x, k): return Tensor(numpy_ops.topk_mask(x.asnumpy(), k))


mindspore_ops = MindSporeOps()

