"""The minimal tensor-ops interface that every spec's update is written against.

Arithmetic uses Python operators (``+ - * /``, unary ``-``) on the framework's own
tensors, with Python floats as scalars (which never promote a float32 tensor). Anything
else goes through an ``Ops`` object: this module's :data:`numpy_ops`, and one binding
per backend (``unified_opt.backends.<name>.ops``). The bindings are a handful of
one-line functions; the math itself lives only in the spec modules.
"""

from __future__ import annotations

import numpy as np


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


class NumpyOps(Ops):
    name = "numpy"

    def zeros_like(self, x): return np.zeros_like(x)
    def full_like(self, x, value): return np.full_like(x, value)
    def scalar_like(self, x, value): return np.array(value, dtype=x.dtype)
    def sqrt(self, x): return np.sqrt(x)
    def abs(self, x): return np.abs(x)
    def sign(self, x): return np.sign(x)
    def maximum(self, x, y): return np.maximum(x, y)
    def minimum(self, x, y): return np.minimum(x, y)
    def where(self, condition, x, y): return np.where(condition, x, y)
    def clip(self, x, low, high): return np.clip(x, low, high)
    def norm(self, x): return np.sqrt(np.sum(x * x, dtype=x.dtype))


numpy_ops = NumpyOps()
