"""The own update on the kernel VM and its generated kernels (:mod:`unified_opt.kernels`)
where Python calls the optimizer (PyNative): the spec's update traced, run in place over
the Parameters' memory on the CPU, which ``Tensor.data_ptr`` hands out as host
addresses. Before it runs, MindSpore's queue of pending operations is drained, so the
gradients are computed and no queued operation reads a parameter after it changed.
Compiled into a graph the same programs run through :mod:`.graph`."""

from __future__ import annotations

import ctypes
import os
import warnings

import mindspore as ms
import numpy as np

from unified_opt.kernels.runtime import Job, KernelPath

_DTYPES = {ms.float32: "float32", ms.float64: "float64"}
_NUMPY = {ms.float16: np.float16, ms.float32: np.float32, ms.float64: np.float64,
          ms.int32: np.int32, ms.int64: np.int64, ms.bool_: np.bool_}


def drain() -> None:
    """Wait for every queued PyNative operation (MindSpore runs them asynchronously)."""
    from mindspore.graph.api import _pynative_executor

    _pynative_executor.sync()


def on_cpu() -> bool:
    """Whether MindSpore computes on the CPU (read once: ``get_context`` takes about
    20 us, and the device is fixed once a tensor exists)."""
    global _on_cpu
    if _on_cpu is None:
        _on_cpu = ms.get_context("device_target") == "CPU"
    return _on_cpu


_on_cpu = None


def numpy_dtype(dtype):
    """The numpy dtype of a MindSpore dtype (float16/32/64, int32/64, bool)."""
    return np.dtype(_NUMPY[dtype])


def host_view(tensor) -> np.ndarray | None:
    """A numpy array over a CPU tensor's own memory (no copy; valid while the tensor
    lives, after draining the queue), or None (another device, dtype or layout)."""
    dtype = _NUMPY.get(tensor.dtype)
    if dtype is None or not on_cpu() or not tensor.is_contiguous():
        return None
    shape = tuple(tensor.shape)
    if not tensor.size:
        return np.empty(shape, dtype=dtype)
    drain()
    nbytes = int(tensor.size) * np.dtype(dtype).itemsize
    raw = (ctypes.c_char * nbytes).from_address(tensor.data_ptr())
    return np.frombuffer(raw, dtype=dtype).reshape(shape)


def host_copy(tensor) -> np.ndarray:
    """A numpy copy of a tensor: read from its host memory on the CPU (``asnumpy``
    costs about 0.2 ms a call), ``asnumpy`` elsewhere."""
    view = host_view(tensor)
    return tensor.asnumpy() if view is None else view.copy()


_warned_threads = False


def threads_num_set() -> bool:
    """Whether ``mindspore.device_context.cpu.op_tuning.threads_num`` was called: what
    sets the threads of MindSpore's CPU kernels (2.10, measured on 2 cores: ``nn.Adam``
    over 16 M elements used 1.02 CPU seconds per second after ``threads_num(1)``, 1.92
    after ``set_context(runtime_num_threads=1)``, which MindSpore deprecates for it).
    MindSpore has no function that reads its count back. False where this MindSpore
    cannot say (``RuntimeConf.is_op_threads_num_configured``, which 2.10 has)."""
    try:
        from mindspore._c_expression import RuntimeConf

        return bool(RuntimeConf.get_instance().is_op_threads_num_configured())
    except (ImportError, AttributeError):
        return False


def default_runtime_threads() -> int:
    """``runtime_num_threads`` when nothing set it: the CPU count up to 30 (MindSpore
    2.10's documentation says 30; it read 2 on a 2-core machine, also with the process
    bound to one core)."""
    return min(30, os.cpu_count() or 1)


class MindSporeKernels(KernelPath):
    """:class:`~unified_opt.kernels.runtime.KernelPath` over MindSpore Parameters."""

    def threads(self) -> int:
        """``get_context("runtime_num_threads")``: what ``set_context(runtime_num_threads=
        ...)`` set, else MindSpore's default (:func:`default_runtime_threads`). Where
        ``op_tuning.threads_num`` set the count of MindSpore's own kernels
        (:func:`threads_num_set`), which cannot be read back, and ``runtime_num_threads``
        was left at its default, the own path's kernels may run on another count than
        MindSpore's: the first step says so once (:class:`UserWarning`, naming the count
        used and how to match it)."""
        global _warned_threads
        count = max(1, int(ms.get_context("runtime_num_threads")))
        if not _warned_threads and count == default_runtime_threads() and threads_num_set():
            _warned_threads = True
            warnings.warn(
                "unified_opt: mindspore.device_context.cpu.op_tuning.threads_num was set, "
                "and MindSpore cannot report its count: the own path's kernels run on "
                f"runtime_num_threads={count}, MindSpore's default; "
                "set_context(runtime_num_threads=N) with the count given to threads_num "
                "runs them on it", UserWarning, stacklevel=2)
        return count

    def job(self, p, grad, spec, slots: dict, lr: float, step: int, keep: list) -> Job | None:
        """The VM job of one parameter's step, or None (then it runs eagerly). ``slots``:
        the spec's state Parameters by name; ``keep`` holds what the job's addresses
        point into until it has run."""
        dtype = _DTYPES.get(p.dtype)
        shape = tuple(p.shape)
        if dtype is None or not on_cpu() or not p.is_contiguous():
            return None
        made = self.prepared(spec, shape, dtype, lr=lr, step=step)
        if made is None:
            return None
        order = made.order
        if isinstance(grad, np.ndarray):         # a gradient the host pre-step made
            grad = np.ascontiguousarray(grad, dtype=_NUMPY[p.dtype])
            address = grad.ctypes.data
        else:
            if not grad.is_contiguous():
                grad = grad.contiguous()
            address = grad.data_ptr()
        keep.append(grad)
        return Job(spec, shape, dtype, lr, step,
                   [p.data_ptr(), address, *(slots[k].data_ptr() for k in order)],
                   made)

    def run(self, jobs: list[Job]) -> None:
        drain()
        super().run(jobs)
