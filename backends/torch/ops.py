"""torch binding of the spec ops interface."""

import torch

from unified_opt.ops import Ops


class TorchOps(Ops):
    name = "torch"

    def zeros_like(self, x): return torch.zeros_like(x)
    def full_like(self, x, value): return torch.full_like(x, value)
    def scalar_like(self, x, value): return torch.tensor(value, dtype=x.dtype, device=x.device)
    def sqrt(self, x): return torch.sqrt(x)
    def abs(self, x): return torch.abs(x)
    def sign(self, x): return torch.sign(x)
    def maximum(self, x, y): return torch.maximum(x, y)
    def minimum(self, x, y): return torch.minimum(x, y)
    def where(self, condition, x, y): return torch.where(condition, x, y)
    def clip(self, x, low, high): return torch.clamp(x, low, high)
    def norm(self, x): return torch.linalg.vector_norm(x)


torch_ops = TorchOps()
