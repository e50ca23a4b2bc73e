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


paddle_ops = PaddleOps()
