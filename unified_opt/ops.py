"""The minimal tensor-ops interface that every spec's update is written against.

Arithmetic uses Python operators (``+ - * /``, unary ``-``) on the framework's own
tensors, with Python floats as scalars (which never promote a float32 tensor: numpy's
reference computes under NEP 50, :func:`unified_opt.reference.weak_python_scalars`,
so that a 0-d float32 array is no exception). Anything
else goes through an ``Ops`` object: this module's :data:`numpy_ops`, and one binding
per backend (``unified_opt.backends.<name>.ops``). The bindings are a handful of
one-line functions; the math itself lives only in the spec modules.

Non-finite values follow numpy in every binding: ``sign(NaN)``, ``maximum(NaN, y)``,
``minimum(x, NaN)`` and ``clip(NaN, ...)`` are NaN. A binding whose framework answers
otherwise (torch's and MindSpore's ``sign(NaN)`` is 0; MindSpore's ``maximum`` drops a
NaN) puts the NaN back, so a NaN gradient makes the parameter NaN on every backend
instead of silently freezing that element.
"""

from __future__ import annotations

import numpy as np

from .storage import round_to


class Ops:
    """The operations a spec's ``update`` may call besides arithmetic operators."""

    name = "abstract"

    def zeros_like(self, x): raise NotImplementedError
    def full_like(self, x, value: float): raise NotImplementedError

    def scalar_like(self, x, value: float):
        """A 0-d tensor holding ``value`` in ``x``'s dtype (scalar optimizer state)."""
        raise NotImplementedError
    def sqrt(self, x): raise NotImplementedError
    def abs(self, x): raise NotImplementedError
    def sign(self, x): raise NotImplementedError
    def maximum(self, x, y): raise NotImplementedError
    def minimum(self, x, y): raise NotImplementedError
    def where(self, condition, x, y): raise NotImplementedError

    def clip(self, x, low: float, high: float):
        """Elementwise clamp of ``x`` to [low, high] (Python float bounds)."""
        raise NotImplementedError

    def norm(self, x):
        """Euclidean norm over every element, as a 0-d tensor."""
        raise NotImplementedError

    def matmul(self, a, b):
        """The matrix product of 2-D ``a`` and ``b``, in their dtype."""
        raise NotImplementedError

    def transpose(self, x):
        """The transpose of 2-D ``x``."""
        raise NotImplementedError

    def reshape(self, x, shape: tuple[int, ...]):
        """``x``'s elements in ``shape`` (row-major, as numpy's reshape)."""
        raise NotImplementedError

    def addmm(self, c, a, b, *, beta: float, alpha: float):
        """``beta * c + alpha * (a @ b)`` as one operation, as ``torch.addmm`` computes it:
        rounded once in the operands' dtype where the framework fuses it."""
        raise NotImplementedError

    def rounded(self, x, dtype: str):
        """``x``'s values rounded to the low-precision ``dtype`` (``"bfloat16"``), to
        nearest with ties to even, as a cast to it rounds. Where the framework's products
        in that dtype are fast (torch on CUDA) the binding returns a tensor of it, whose
        operations then round as its kernels do (float32 accumulation, one rounding per
        result); elsewhere (numpy, torch on the CPU, Paddle, MindSpore) it returns
        ``x``'s dtype holding those values, the next operation computes in float32 and
        the update rounds its result again. An update that computes in ``dtype`` calls
        this after every operation (on a bfloat16 tensor it changes nothing)."""
        raise NotImplementedError

    def cast_like(self, x, other):
        """``x`` in ``other``'s dtype (the result of a low-precision computation taken
        back to the parameter's)."""
        raise NotImplementedError

    def matrix_function(self, fn, x, *args):
        """``fn(x, *args, ops=self)``: a function of the whole tensor ``x`` that multiplies
        matrices (Muon's Newton–Schulz iteration), returning a tensor of ``x``'s shape and
        dtype; ``args`` are hashable Python values. Eagerly it is the call. A trace
        (:mod:`unified_opt.kernels.trace`) records it as one node, which the CPU kernels
        run as a matrix phase: on the host, ``fn`` over the framework's tensors, between
        the compiled elementwise phases before and after it."""
        return fn(x, *args, ops=self)

    def power(self, base: float, exponent: int) -> float:
        """``base ** exponent`` of Python numbers (a bias correction's beta^t), as a
        Python float: exact in double precision on every binding."""
        return base ** exponent

    def mean(self, x, axis: int | None = None, keepdims: bool = False):
        """Arithmetic mean over ``axis`` (every element when None), in ``x``'s dtype;
        ``keepdims`` keeps the reduced axis with length 1 (factored moments)."""
        raise NotImplementedError

    def numel(self, x) -> int:
        """The number of elements of ``x``, as a Python int."""
        raise NotImplementedError

    def machine_eps(self, x) -> float:
        """The machine epsilon of ``x``'s dtype, as a Python float (``finfo(dtype).eps``)."""
        raise NotImplementedError

    def stack(self, xs: list):
        """The 0-d tensors ``xs`` as one 1-d tensor."""
        raise NotImplementedError

    def all_finite(self, x) -> bool:
        """Whether every element of ``x`` is finite, as a Python bool."""
        raise NotImplementedError

    def topk_mask(self, x, k: int):
        """A bool tensor of ``x``'s shape, True at the ``k`` largest elements of ``x``
        (compared over the flattened tensor). Ties go to the lower flat index, so every
        binding selects the same elements: a stable descending sort, first ``k``."""
        raise NotImplementedError


class NumpyOps(Ops):
    name = "numpy"

    def zeros_like(self, x): return np.zeros_like(x)
    def full_like(self, x, value):
        # a 0-d one (norms, trust ratios) without np.full_like's 7 us: the same array
        return self.scalar_like(x, value) if x.ndim == 0 else np.full_like(x, value)
    def scalar_like(self, x, value): return np.array(value, dtype=x.dtype)
    def sqrt(self, x): return np.sqrt(x)
    def abs(self, x): return np.abs(x)
    def sign(self, x): return np.sign(x)
    def maximum(self, x, y): return np.maximum(x, y)
    def minimum(self, x, y): return np.minimum(x, y)
    def where(self, condition, x, y): return np.where(condition, x, y)
    def clip(self, x, low, high): return np.clip(x, low, high)
    def norm(self, x):
        # np.sum's own reduce, without its Python wrapper (half its time on small tensors)
        return np.sqrt(np.add.reduce(x * x, axis=None, dtype=x.dtype))

    def mean(self, x, axis=None, keepdims=False):
        # np.mean's sum / count, without its "Mean of empty slice" warning: the NaN of an
        # empty mean is the frameworks' too, and the reference runs under np.errstate
        count = np.size(x) if axis is None else np.shape(x)[axis]
        return np.sum(x, axis=axis, keepdims=keepdims) / x.dtype.type(count)
    def numel(self, x): return int(np.size(x))
    def machine_eps(self, x): return float(np.finfo(x.dtype).eps)
    def all_finite(self, x): return bool(np.isfinite(x).all())
    def stack(self, xs): return np.stack(xs)
    def matmul(self, a, b): return np.matmul(a, b)
    def transpose(self, x): return np.transpose(x)
    def addmm(self, c, a, b, *, beta, alpha): return c * beta + np.matmul(a, b) * alpha
    def reshape(self, x, shape): return np.reshape(x, shape)
    def rounded(self, x, dtype): return round_to(x, dtype)
    def cast_like(self, x, other): return np.asarray(x, dtype=np.result_type(other))

    def topk_mask(self, x, k):
        flat = np.asarray(x).reshape(-1)
        mask = np.zeros(flat.shape, dtype=bool)
        mask[np.argsort(-flat, kind="stable")[:k]] = True
        return mask.reshape(np.shape(x))


numpy_ops = NumpyOps()


#: Float32KernelOps.power's running float32 products: base -> (base ** 0, base ** 1, ...)
_RUNNING_PRODUCTS: dict[float, tuple[float, ...]] = {}


class Float32KernelOps(NumpyOps):
    """numpy computing as a float32 kernel may, where numpy's float32 is more accurate:
    every sum taken element after element (``np.cumsum``; numpy's own sums are pairwise,
    whose error grows with log(n), a sequential one's with n), matrix products summed in
    double and rounded once, and ``beta ** t`` as a running float32 product (Paddle's and
    MindSpore's ``beta_pow`` accumulators). The conformance floor runs a float32
    reference on it, so a framework whose norms or products sum in another order or whose
    bias corrections carry float32 powers is held to float32 noise, not to numpy's
    luck."""

    name = "numpy-float32-kernel"

    def power(self, base, exponent):
        # the running products of each base, kept: a trajectory asks for t = 1, 2, ...
        steps = int(exponent)
        if steps <= 0:                  # no factor taken (as the product loop ran none)
            return 1.0
        factor = np.float32(base)
        products = _RUNNING_PRODUCTS.get(float(factor), (1.0,))
        if len(products) <= steps:
            # extended in a list of this call's own, then stored whole: a worker judges
            # a distributed case in a thread beside its own cases
            longer = list(products)
            while len(longer) <= steps:
                longer.append(float(np.float32(np.float32(longer[-1]) * factor)))
            products = _RUNNING_PRODUCTS[float(factor)] = tuple(longer)
        return products[steps]

    def norm(self, x):
        return np.sqrt(_sequential_sum(x * x, None, False))

    def matmul(self, a, b):
        # each product's sum in double, rounded once: an order of accumulation other
        # than the BLAS's of numpy's float32 matmul (the frameworks' matrix kernels add
        # in orders of their own)
        wide = np.matmul(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
        return wide.astype(np.result_type(a, b))

    def addmm(self, c, a, b, *, beta, alpha):
        # as a fused kernel: in double, rounded once
        wide = np.matmul(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
        return (np.asarray(c, dtype=np.float64) * beta + wide * alpha).astype(
            np.result_type(c, a, b))

    def mean(self, x, axis=None, keepdims=False):
        count = np.size(x) if axis is None else np.shape(x)[axis]
        return _sequential_sum(x, axis, keepdims) / x.dtype.type(count)


def _sequential_sum(x, axis, keepdims):
    x = np.asarray(x)
    if axis is None:
        flat = x.reshape(-1)
        out = np.cumsum(flat, dtype=x.dtype)[-1] if flat.size else x.dtype.type(0)
        return np.reshape(out, (1,) * x.ndim) if keepdims else np.asarray(out, dtype=x.dtype)
    if x.shape[axis] == 0:
        return np.sum(x, axis=axis, keepdims=keepdims)
    out = np.take(np.cumsum(x, axis=axis, dtype=x.dtype), [-1], axis=axis)
    return out if keepdims else np.squeeze(out, axis=axis)


float32_kernel_ops = Float32KernelOps()


class UlpOffOps(Float32KernelOps):
    """:class:`Float32KernelOps` whose low-precision results come back one ulp of that
    dtype nearer zero at every element (:meth:`Ops.cast_like` after
    :meth:`Ops.rounded`): the rounding of each element taken to the other side. A
    bfloat16 rounding lands on either side of a boundary as the float32 sum before it was
    accumulated, in an order each framework's matrix kernels choose, so a correct
    implementation sits a bfloat16 ulp from the oracle at elements no float32 reference
    predicts; this reference's distance from the oracle is the floor that holds them
    (the conformance suite adds it for a spec whose ``low_precision_update`` is set)."""

    name = "numpy-ulp-off"

    def rounded(self, x, dtype):
        if dtype != "bfloat16":
            raise ValueError(f"UlpOffOps.rounded: dtype must be 'bfloat16', got {dtype!r}")
        return super().rounded(x, dtype)

    def cast_like(self, x, other):
        # x holds bfloat16 values, float32's upper 16 bits: one less in their magnitude
        # bits is the next value toward zero (0 stays 0)
        single = np.asarray(x, dtype=np.float32)
        bits = single.view(np.uint32)
        step = np.where((bits & np.uint32(0x7FFFFFFF)) != 0, np.uint32(0x10000), np.uint32(0))
        nearer = (bits - step).view(np.float32)
        return np.asarray(np.where(np.isfinite(single), nearer, single),
                          dtype=np.result_type(other))


ulp_off_ops = UlpOffOps()
