"""Storage dtypes: what a parameter or a state array is kept in, against what its update
computes in.

Every own update computes in its *math dtype* and rounds what it keeps to its *storage
dtype*, round to nearest, ties to even (the frameworks' casts, torch's ``copy_`` into a
bfloat16 tensor, CUDA's ``cvt.rn``):

* a float64 or float32 parameter computes in its own dtype; a bfloat16 or float16
  parameter (:data:`LOW_PRECISION`) computes in float32: its value, its gradient and its
  state are read into float32, the whole update runs there, and the new value is rounded
  to the parameter's dtype once, at the end. (Running the spec's update on bfloat16
  tensors would round after every operation: ``beta2 * v + (1 - beta2) * g * g`` in
  bfloat16 stops growing ``v`` once ``(1 - beta2) * g * g`` is below half a bfloat16
  ulp of ``v``, which is not the spec.)
* a state array is kept in the spec's ``state_dtype`` where it sets one (``"float32"``:
  moments of a bfloat16 model in float32; ``"bfloat16"``: half the state memory of a
  float32 model), else in the parameter's dtype, as torch, Paddle and MindSpore keep
  their optimizers' state. It is rounded once per step, after the update.
* gradients arrive in the parameter's dtype; the gradient pre-step (clipping, loss
  scale) computes in the math dtype and its results are rounded to the gradient's dtype,
  as a clipped gradient written back into ``p.grad`` is.

The numpy reference (:class:`unified_opt.reference.Reference`, ``storage=``) rounds at
the same places with :func:`round_to`, bit for bit what the frameworks' casts give for a
float32 value; a float64 value (the oracle's) is rounded to float32 first, as the
frameworks' double-to-bfloat16 casts do.
"""

from __future__ import annotations

import numpy as np

#: the values of a spec's ``state_dtype`` (None: the parameter's dtype)
STATE_DTYPES = ("float32", "bfloat16")
#: parameter dtypes whose update computes in float32
LOW_PRECISION = ("bfloat16", "float16")
#: every dtype a value may be stored in, by name
STORAGE_DTYPES = ("float64", "float32", *LOW_PRECISION)
#: significand bits of each storage dtype, the implicit one included (the spacing of
#: its values is ``2 ** (exponent - (bits - 1))``)
SIGNIFICAND_BITS = {"float64": 53, "float32": 24, "bfloat16": 8, "float16": 11}


def math_dtype(storage: str) -> str:
    """The dtype the update of a parameter stored in ``storage`` computes in."""
    return "float32" if storage in LOW_PRECISION else storage


def state_storage(spec, param_storage: str) -> str:
    """The dtype a parameter's state arrays are kept in (see the module)."""
    chosen = getattr(spec, "state_dtype", None)
    return param_storage if chosen is None else chosen


def rounds(spec, param_storage: str) -> bool:
    """Whether the update of a parameter stored in ``param_storage`` keeps anything in
    another dtype than it computes in (then a kernel must round where it stores)."""
    math = math_dtype(param_storage)
    return param_storage != math or state_storage(spec, param_storage) != math


def round_to(values, storage: str) -> np.ndarray:
    """``values`` (a float32 or float64 array) rounded to ``storage``, to nearest with ties
    to even, and returned in the input's dtype (the values are exact there)."""
    array = np.asarray(values)
    # (np.dtype's == takes None for float64: the dtype is looked up only where it exists)
    if storage == "float64" or (storage in _NUMPY_DTYPES
                                and array.dtype == _NUMPY_DTYPES[storage]):
        return array
    single = array.astype(np.float32)
    if storage == "float32":
        out = single
    elif storage == "float16":
        with np.errstate(over="ignore"):          # beyond float16's range: inf, as a cast
            out = single.astype(np.float16).astype(np.float32)
    elif storage == "bfloat16":
        # round to nearest even on the 16 bits dropped: add 0x7FFF and the kept lsb. In
        # 32 bits no finite value or infinity carries past the top bit (the largest,
        # 0xFF7FFFFF + 0x8000, stays below 2**32); only a NaN may, and NaNs are kept.
        bits = single.view(np.uint32)
        rounded = (bits >> _SIXTEEN) & _ONE
        rounded += _HALF
        rounded += bits
        rounded &= _KEEP
        # (a 0-d input's arithmetic gives numpy scalars: made an array again)
        out = np.asarray(rounded).view(np.float32)
        nan = np.isnan(single)
        if nan.any():
            out = np.where(nan, single, out)
    else:
        raise ValueError(f"round_to: storage must be one of {STORAGE_DTYPES}, got {storage!r}")
    return out.astype(array.dtype, copy=False)


#: the numpy dtype of each storage dtype numpy has (bfloat16 is computed in float32)
_NUMPY_DTYPES = {"float64": np.dtype(np.float64), "float32": np.dtype(np.float32),
                 "float16": np.dtype(np.float16)}
_SIXTEEN, _ONE = np.uint32(16), np.uint32(1)
_HALF, _KEEP = np.uint32(0x7FFF), np.uint32(0xFFFF0000)


def spacing(values, storage: str) -> np.ndarray:
    """The distance from each of ``values`` to the next larger magnitude stored in
    ``storage`` (its ulp there; at 0, the smallest subnormal's), as float64."""
    magnitude = np.abs(np.asarray(values, dtype=np.float64))
    bits = SIGNIFICAND_BITS[storage]
    smallest = {"float64": -1074, "float32": -149, "bfloat16": -133, "float16": -24}[storage]
    exponent = np.floor(np.log2(np.where(magnitude > 0, magnitude, 1.0)))
    exponent = np.where(magnitude > 0, exponent, smallest + bits - 1)
    return np.exp2(np.maximum(exponent - (bits - 1), smallest))


def refuse_rounding(owner: str, framework: str, specs, named_dtypes) -> None:
    """For an own optimizer that computes in the parameter's dtype and keeps its state
    there (Paddle's, MindSpore's): a spec's ``state_dtype`` (ValueError) and a bfloat16 or
    float16 parameter (TypeError) are refused before anything is made, instead of
    running another update than this module's."""
    for spec in specs:
        if getattr(spec, "state_dtype", None) is not None:
            raise ValueError(f"{owner}: state_dtype={spec.state_dtype!r}: the {framework} "
                             "own optimizer keeps the state in the parameter's dtype "
                             "(state_dtype runs on torch)")
    for name, dtype in named_dtypes:
        if dtype in LOW_PRECISION:
            raise TypeError(f"{owner}: parameter {name} is {dtype}; the {framework} own "
                            "optimizer computes in the parameter's dtype and would not "
                            "compute this update in float32 (bfloat16 and float16 "
                            "parameters run on torch)")
