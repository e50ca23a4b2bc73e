"""The own update of CPU tensors on the kernel VM and its generated kernels
(:mod:`unified_opt.kernels`): the spec's update traced, run in place over the
parameter's and its accumulators' memory (``Tensor.data_ptr``). Paddle computes eagerly
on the CPU, so the memory holds every value when Python runs. A GPU parameter, another
dtype, and an update that does not trace run eagerly: the same update, written once in
the spec. The kernels' threads follow Paddle's setting (:meth:`PaddleKernels.threads`)."""

from __future__ import annotations

import os

import paddle

from unified_opt.kernels.runtime import Job, KernelPath

from .ops import paddle_ops


class PaddleKernels(KernelPath):
    """:class:`~unified_opt.kernels.runtime.KernelPath` over Paddle tensors."""

    def matrix_function(self, function, x, arguments: tuple, out) -> None:
        """A matrix call (Muon's iteration) in Paddle's operations, on a copy of ``x``
        (Paddle makes a tensor of a numpy array by copying it), into ``out``: its
        products in Paddle's matmul, as the eager update computes them."""
        out[...] = function(paddle.to_tensor(x), *arguments, ops=paddle_ops).numpy()

    def threads(self) -> int:
        """Paddle's CPU thread count: ``OMP_NUM_THREADS``, which Paddle writes into
        ``os.environ`` when it is imported (1 unless it was set) and its CPU kernels'
        OpenMP runtime reads. (``paddle.base.core.set_num_threads`` has no reader, so a
        count set only there is not seen: set ``OMP_NUM_THREADS`` before importing
        Paddle.) A value that is not a positive integer reads as 1, as Paddle reads it."""
        try:
            return max(1, int(os.environ.get("OMP_NUM_THREADS", "1")))
        except ValueError:
            return 1

    def job(self, param, grad, spec, state: dict, lr: float, step: int,
            keep: list) -> Job | None:
        """The VM job of one parameter's step, or None (then it runs eagerly). ``state``:
        the spec's accumulators by name; ``keep`` holds what the job's addresses point
        into until it has run."""
        dtype = str(param.dtype).removeprefix("paddle.")
        shape = tuple(param.shape)
        if not param.place.is_cpu_place() or not param.is_contiguous() or \
                grad.dtype != param.dtype or tuple(grad.shape) != shape or \
                not grad.place.is_cpu_place():
            return None       # the eager update does what Paddle does with such a gradient
        made = self.prepared(spec, shape, dtype, lr=lr, step=step)
        if made is None:
            return None
        order = made.order
        if not grad.is_contiguous():
            grad = grad.contiguous()
        keep.append(grad)
        return Job(spec, shape, dtype, lr, step,
                   [param.data_ptr(), grad.data_ptr(), *(state[k].data_ptr() for k in order)],
                   made)
