"""The own update of CPU tensors on the kernel VM and its generated kernels
(:mod:`unified_opt.kernels`): the spec's update traced, run in place over the tensors'
memory. What a tensor needs for it: the CPU, float32 or float64, contiguous parameter
(the gradient is made contiguous when it is not), and state tensors that own their
memory. Anything else, and an update that does not trace, runs eagerly: the same
update, written once in the spec."""

from __future__ import annotations

import warnings

import torch

from unified_opt.kernels.build import KernelUnavailable
from unified_opt.kernels.runtime import Job, KernelRunner
from unified_opt.kernels.trace import Untraceable


class TorchKernels:
    """One optimizer's use of the VM; ``mode`` is its ``compile`` option ("auto" or
    True): see :mod:`unified_opt.kernels.runtime` (``specialize``)."""

    def __init__(self, mode, owner: str):
        self.mode, self.owner = mode, owner
        self._runner: KernelRunner | None = None
        self._unavailable = False
        self._untraceable: set = set()

    def runner(self) -> KernelRunner | None:
        if self._runner is None and not self._unavailable:
            try:
                self._runner = KernelRunner(specialize=self.mode)
            except KernelUnavailable as error:
                if self.mode is True:
                    raise
                self._unavailable = True
                warnings.warn(f"{self.owner}: compile='auto' found no kernel VM ({error}); "
                              "the update runs eagerly, the same numbers", RuntimeWarning,
                              stacklevel=4)
        return self._runner

    def job(self, value: torch.Tensor, grad: torch.Tensor, spec, state: dict, lr: float,
            step: int, keep: list) -> Job | None:
        """The VM job of one parameter's step, or None (then it runs eagerly). ``state``:
        the spec's arrays by name (replaced by copies where they share memory);
        ``keep`` holds what the job's addresses point into until it has run."""
        dtype = str(value.dtype).removeprefix("torch.")
        shape = tuple(value.shape)
        if value.device.type != "cpu" or not value.is_contiguous() or \
                (spec, len(shape), dtype) in self._untraceable:
            return None
        runner = self.runner()
        if runner is None:
            return None
        try:
            runner.plan(spec, shape, dtype, lr=lr, step=step)
        except Untraceable:
            self._untraceable.add((spec, len(shape), dtype))
            return None
        grad = grad.contiguous()
        keep.append(grad)
        order = runner.state_order(spec, shape, dtype)
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
                   [value.data_ptr(), grad.data_ptr(), *(state[k].data_ptr() for k in order)])

    def run(self, jobs: list[Job]) -> None:
        self._runner.step(jobs)
