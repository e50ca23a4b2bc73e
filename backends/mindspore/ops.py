"""MindSpore binding of the spec ops interface (PyNative tensors)."""

from mindspore import ops

from unified_opt.ops import Ops


class MindSporeOps(Ops):
    name = "mindspore"

    def zeros_like(self, x): return ops.zeros_like(x)
    def full_like(self, x, value): return ops.full_like(x, value)
    def scalar_like(self, x, value): return ops.full((), value, dtype=x.dtype)
    def sqrt(self, x): return ops.sqrt(x)
    def abs(self, x): return ops.abs(x)
    def sign(self, x): return ops.sign(x)
    def maximum(self, x, y): return ops.maximum(x, y)
    def minimum(self, x, y): return ops.minimum(x, y)
    def where(self, condition, x, y): return ops.where(condition, x, y)
    def clip(self, x, low, high): return ops.clamp(x, low, high)
    # sqrt of the sum of squares, as the numpy binding computes it (0 for an empty tensor)
    def norm(self, x): return ops.sqrt(ops.sum(x * x))


mindspore_ops = MindSporeOps()
