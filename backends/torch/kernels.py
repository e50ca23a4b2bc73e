"""The own update of CPU tensors on the kernel VM and its generated kernels
(:mod:`unified_opt.kernels`): the spec's update traced, run in place over the tensors'
memory. What a tensor needs for it: the CPU, float32 or float64, contiguous parameter
(the gradient is made contiguous when it is not), and state tensors that own their
memory. Anything else (a DTensor's memory is one rank's shard), and an update that does
not trace, runs eagerly: the same update, written once in the spec."""

from __future__ import annotations

import torch

from unified_opt.kernels.runtime import Job, KernelPath
from unified_opt.storage import rounds

from .ops import TorchOps, is_dtensor


class _IntoArray(TorchOps):
    """torch's operations for a matrix call whose result is copied into the kernels'
    array: the cast back to the parameter's dtype (``cast_like``, after a bfloat16
    iteration) is left to that copy, which converts as exactly (a bfloat16 value is a
    float32 one), so that the result is read once, not cast and then copied."""

    def cast_like(self, x, other): return x


_into_array = _IntoArray()


class TorchKernels(KernelPath):
    """:class:`~unified_opt.kernels.runtime.KernelPath` over torch tensors."""

    def matrix_function(self, function, x, arguments: tuple, out) -> None:
        """A matrix call (Muon's iteration) in torch's operations over ``x``'s memory
        into ``out``'s: its products in torch's (bfloat16 ones where
        ``TorchOps.rounded`` keeps bfloat16 tensors), as the eager update computes
        them."""
        torch.from_numpy(out).copy_(function(torch.from_numpy(x), *arguments,
                                             ops=_into_array))

    def threads(self) -> int:
        """torch's intra-op thread count (``torch.get_num_threads()``, what
        ``torch.set_num_threads`` sets): the kernels' parallel phases use as many."""
        return torch.get_num_threads()

    def job(self, value: torch.Tensor, grad: torch.Tensor, spec, state: dict, lr: float,
            step: int, keep: list) -> Job | None:
        """The VM job of one parameter's step, or None (then it runs eagerly). ``state``:
        the spec's arrays by name (replaced by copies where they share memory);
        ``keep`` holds what the job's addresses point into until it has run."""
        dtype = str(value.dtype).removeprefix("torch.")
        shape = tuple(value.shape)
        if is_dtensor(value) or value.device.type != "cpu" or \
                not value.is_contiguous() or rounds(spec, dtype):
            return None     # (rounding to a storage dtype: the VM keeps one dtype)
        made = self.prepared(spec, shape, dtype, lr=lr, step=step)
        if made is None:
            return None
        order, sizes = made.order, made.sizes
        for key in order:      # torch's load_state_dict checks no shapes; the VM must
            if state[key].numel() != sizes[key]:
                raise ValueError(f"SpecOptimizer: state {key!r} of a parameter of shape "
                                 f"{list(shape)} has shape {list(state[key].shape)} "
                                 f"({state[key].numel()} elements, the spec's has "
                                 f"{sizes[key]}): a state_dict of another model?")
        grad = grad.contiguous()
        keep.append(grad)
        seen = {value.data_ptr(), grad.data_ptr()} if value.numel() else set()
        for key in order:
            array = state[key]
            # the eager update may have kept a gradient or another state tensor as this
            # state (a buffer that starts as the gradient): the VM writes in place
            if array.numel() and (array.data_ptr() in seen or not array.is_contiguous()
                                  or array.dtype != value.dtype):
                array = state[key] = array.to(value.dtype).clone(
                    memory_format=torch.contiguous_format)
            if array.numel():
                seen.add(array.data_ptr())
        return Job(spec, shape, dtype, lr, step,
                   [value.data_ptr(), grad.data_ptr(), *(state[k].data_ptr() for k in order)],
                   made)
