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
    # torch.sign(NaN) is 0: keep the NaN, as numpy (see unified_opt.ops)
    def sign(self, x): return torch.where(torch.isnan(x), x, torch.sign(x))
    def maximum(self, x, y): return torch.maximum(x, y)
    def minimum(self, x, y): return torch.minimum(x, y)
    def where(self, condition, x, y): return torch.where(condition, x, y)
    def clip(self, x, low, high): return torch.clamp(x, low, high)
    def norm(self, x): return torch.linalg.vector_norm(x)

    def mean(self, x, axis=None, keepdims=False): return torch.mean(x, dim=axis, keepdim=keepdims)

    def numel(self, x): return x.numel()
    def machine_eps(self, x): return float(torch.finfo(x.dtype).eps)
    def all_finite(self, x): return bool(torch.isfinite(x).all())
    def stack(self, xs): return torch.stack(xs)

    def topk_mask(self, x, k):
        flat = x.reshape(-1)
        # a stable descending sort: ties keep the lower index first, as numpy's binding
        order = torch.sort(flat, descending=True, stable=True).indices[:k]
        mask = torch.zeros(flat.shape, dtype=torch.bool, device=x.device)
        mask[order] = True
        return mask.reshape(x.shape)


torch_ops = TorchOps()
