"""Paddle binding of the spec ops interface."""

import paddle

from unified_opt.ops import Ops


class PaddleOps(Ops):
    name = "paddle"

    def zeros_like(self, x): return paddle.zeros_like(x)
    def full_like(self, x, value): return paddle.full_like(x, value)
    def scalar_like(self, x, value): return paddle.full([], value, dtype=x.dtype)
    def sqrt(self, x): return paddle.sqrt(x)
    def abs(self, x): return paddle.abs(x)
    def sign(self, x): return paddle.sign(x)
    def maximum(self, x, y): return paddle.maximum(x, y)
    def minimum(self, x, y): return paddle.minimum(x, y)
    def where(self, condition, x, y): return paddle.where(condition, x, y)
    def clip(self, x, low, high): return paddle.clip(x, low, high)
    def norm(self, x): return paddle.linalg.vector_norm(x)
    def mean(self, x, axis=None, keepdims=False): return paddle.mean(x, axis=axis, keepdim=keepdims)
    def numel(self, x): return int(x.size)
    def machine_eps(self, x): return float(paddle.finfo(x.dtype).eps)
    def all_finite(self, x): return bool(paddle.isfinite(x).all())
    def matmul(self, a, b): return paddle.matmul(a, b)
    def transpose(self, x): return paddle.transpose(x, [1, 0])
    def reshape(self, x, shape): return paddle.reshape(x, list(shape))
    def addmm(self, c, a, b, *, beta, alpha): return paddle.addmm(c, a, b, beta=beta, alpha=alpha)
    # Paddle's CPU kernels have no bfloat16 matrix product: the values, in x's dtype
    def rounded(self, x, dtype): return x.astype(dtype).astype(x.dtype)
    def cast_like(self, x, other): return x.astype(other.dtype)
    def stack(self, xs):
        # paddle.stack takes one dtype; promote as torch and numpy do (mixed precisions)
        wide = paddle.float64 if any(x.dtype == paddle.float64 for x in xs) else xs[0].dtype
        return paddle.stack([x.astype(wide) for x in xs])

    def topk_mask(self, x, k):
        flat = x.reshape([-1])
        chosen = paddle.zeros(flat.shape, dtype=paddle.float32)
        if k > 0:
            # a stable descending sort: ties keep the lower index first, as numpy's binding
            order = paddle.argsort(flat, descending=True, stable=True)[:k]
            # scatter into float32 and compare: Paddle has no CPU kernel to scatter bools
            chosen = paddle.scatter(chosen, order, paddle.ones([order.shape[0]], "float32"))
        return (chosen > 0).reshape(x.shape)


paddle_ops = PaddleOps()
