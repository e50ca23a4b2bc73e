"""torch binding of the spec ops interface, and :func:`warm_up_cpu_sqrt`."""

import os
import sys

import torch

from unified_opt.devices import cpu_info
from unified_opt.ops import Ops


def is_dtensor(value) -> bool:
    """Whether ``value`` is a DTensor (FSDP2, tensor parallel). Asked of the module
    already loaded, not imported here: a DTensor exists only once its module has been
    imported, and importing ``torch.distributed.tensor`` (with sympy) costs about 0.6 s
    in every process that never shards anything."""
    module = sys.modules.get("torch.distributed.tensor")
    return module is not None and isinstance(value, module.DTensor)


def _whole(reduced):
    """A reduction's whole-tensor value: a DTensor's (FSDP2, tensor parallel) is partial
    over the shards, and reading it (bool, or beside plain tensors) would take this
    rank's part only; gathered, it is a plain tensor."""
    return reduced.full_tensor() if is_dtensor(reduced) else reduced


def warm_up_cpu_sqrt() -> None:
    """Run one small CPU ``sqrt`` in this process (once; later calls do nothing).

    Measured with torch 2.13.0+cpu on 2 threads: the first ``sqrt`` of a process on a
    tensor large enough to be split over threads (4225 elements) computes, in about 1 in 5
    fresh processes, the other thread's half approximately (2110 elements off, up to
    3.1e-4 relative); later calls, and a first call on 1 thread, are exact. The first
    step of ``torch.optim.Adam``/``Adadelta``/``RMSprop``/... is often that first
    ``sqrt``. A first ``sqrt`` on 8 elements (one thread) keeps it out: measured 0 in 12
    processes afterwards, against 3 in 12 without. The backend runs it when it loads.
    """
    global _warmed_up
    if not _warmed_up:
        torch.ones(8).sqrt_()
        _warmed_up = True


_warmed_up = False
warm_up_cpu_sqrt()


_LOW = {"bfloat16": torch.bfloat16}


def cpu_multiplies_bfloat16() -> bool:
    """Whether this CPU has bfloat16 matrix instructions (x86's ``avx512_bf16`` or
    ``amx_bf16``, as ``/proc/cpuinfo`` lists them) and torch may use them: not where
    ``ONEDNN_MAX_CPU_ISA`` holds oneDNN, which runs torch's bfloat16 matrix products,
    below them, nor where ``ATEN_CPU_CAPABILITY`` holds ATen below AVX-512 (as
    ``.ci/without_avx512/run`` does to act as a CPU without AVX-512). torch's bfloat16
    matrix products run on them: Muon's iteration on a 1000 x 512 matrix took 32.7 ms
    in bfloat16 on such an AMD EPYC against 73.5 ms in float32 with each result rounded
    (one thread, torch 2.13); on a CPU without them it took 2.2 s for a 512 x 512
    matrix."""
    isa = os.environ.get("ONEDNN_MAX_CPU_ISA", "ALL").upper()
    if not (isa in ("ALL", "DEFAULT") or "BF16" in isa or "AMX" in isa or "AVX10" in isa):
        return False
    if os.environ.get("ATEN_CPU_CAPABILITY", "avx512").lower() not in ("avx512",):
        return False
    return bool({"avx512_bf16", "amx_bf16"} & set(cpu_info()[1]))


_CPU_BFLOAT16 = cpu_multiplies_bfloat16()


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
    # (a global clipping norm stacks the norms of sharded and plain gradients)
    def norm(self, x): return _whole(torch.linalg.vector_norm(x))

    def mean(self, x, axis=None, keepdims=False): return torch.mean(x, dim=axis, keepdim=keepdims)

    def numel(self, x): return x.numel()
    def machine_eps(self, x): return float(torch.finfo(x.dtype).eps)
    # (every rank then decides a non-finite skip alike)
    def all_finite(self, x): return bool(_whole(torch.isfinite(x).all()))
    def stack(self, xs): return torch.stack(xs)
    def matmul(self, a, b): return torch.matmul(a, b)
    def transpose(self, x): return x.T
    def reshape(self, x, shape): return x.reshape(shape)
    def addmm(self, c, a, b, *, beta, alpha): return torch.addmm(c, a, b, beta=beta, alpha=alpha)
    def rounded(self, x, dtype):
        # CUDA, and a CPU with bfloat16 instructions (cpu_multiplies_bfloat16): a
        # bfloat16 tensor, its matrix products on those units. Another CPU: the values in
        # x's dtype, every product in float32 (exact for bfloat16 inputs, summed in
        # float32 as a bfloat16 kernel sums), as Paddle's and MindSpore's bindings
        low = _LOW[dtype]
        if x.dtype == low:                # already rounded (a product of bfloat16 tensors)
            return x
        if x.device.type == "cpu" and not _CPU_BFLOAT16:
            return x.to(low).to(x.dtype)
        return x.to(low)
    def cast_like(self, x, other): return x.to(other.dtype)

    def topk_mask(self, x, k):
        flat = x.reshape(-1)
        if k <= 0 or k >= flat.numel() or bool(torch.isnan(flat).any()):
            # a stable descending sort: ties keep the lower index first, as numpy's
            # binding (and NaN first, where torch's sort puts it)
            order = torch.sort(flat, descending=True, stable=True).indices[:k]
            mask = torch.zeros(flat.shape, dtype=torch.bool, device=x.device)
            mask[order] = True
            return mask.reshape(x.shape)
        # the same selection without sorting everything: the k-th largest value, all
        # elements above it, then the lowest-index elements equal to it up to k
        # (DGC keeps 1 in 1000: a sort of 4M elements took 0.5 s of a 0.6 s step)
        threshold = torch.topk(flat, k, sorted=False).values.min()
        mask = flat > threshold
        missing = k - int(mask.sum())
        if missing:
            mask[torch.nonzero(flat == threshold).reshape(-1)[:missing]] = True
        return mask.reshape(x.shape)


torch_ops = TorchOps()
