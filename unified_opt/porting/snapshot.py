"""What a portable state holds (:class:`Snapshot`), and the dtypes and layouts of its
arrays: the pieces :mod:`.state` (the file), :mod:`.state_dict` (the dict form) and each
backend's ``state`` module share.

Each array keeps its storage dtype; numpy has no bfloat16, so a bfloat16 array is held as
its raw bits under :data:`BFLOAT16`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backend import BuildRecord
from ..groups import Group
from ..ops import NumpyOps, numpy_ops
from ..spec import Spec
from ..storage import round_to

#: how a bfloat16 array is held in numpy (which has no bfloat16): its raw bits, under a
#: dtype of its own (a one-field record of uint16, equal to no other dtype), written to
#: the file as safetensors' ``BF16`` and read back from it
BFLOAT16 = np.dtype([("bfloat16", "<u2")])
#: safetensors' dtype names -> numpy's, of every dtype a state file holds
FILE_DTYPES = {"F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
               "BF16": BFLOAT16, "I64": np.dtype("<i8")}


def dtype_name(dtype: np.dtype) -> str:
    """``dtype``'s name, ``"bfloat16"`` for :data:`BFLOAT16`."""
    return "bfloat16" if np.dtype(dtype) == BFLOAT16 else np.dtype(dtype).name


def storage_dtype(name: str) -> np.dtype:
    """The numpy dtype a state array stored in ``name`` (a
    :data:`unified_opt.storage.STORAGE_DTYPES` name) is held in."""
    return BFLOAT16 if name == "bfloat16" else np.dtype(name)


def bfloat16_bits(values) -> np.ndarray:
    """float32 ``values`` that bfloat16 holds exactly, as :data:`BFLOAT16` bits."""
    single = np.ascontiguousarray(values, dtype=np.float32)
    if not np.array_equal(round_to(single, "bfloat16"), single, equal_nan=True):
        raise ValueError("bfloat16_bits: the values are not all bfloat16 values")
    return (single.view(np.uint32) >> np.uint32(16)).astype(np.uint16).view(BFLOAT16)


def initial_state(spec: Spec, shape: tuple[int, ...], dtype: np.dtype,
                  values: Any = None) -> dict[str, np.ndarray]:
    """The spec's state of a fresh parameter of ``shape``, kept in numpy ``dtype``
    (:data:`BFLOAT16` for bfloat16): name -> array (what a backend's state reader gives a
    parameter that has not stepped). ``values``: the parameter's (a float32 or float64
    array), for a spec whose initial state holds them (schedule-free's base point
    starts at the parameter); None: zeros stand in (the state of every other spec
    depends on the shape only)."""
    if np.dtype(dtype) in (BFLOAT16, np.dtype(np.float16)):
        # computed in float32 (numpy has no bfloat16 arithmetic); the initial values
        # (zeros, a constant, the parameter's) are exact in the storage dtype
        out = initial_state(spec, shape, np.dtype(np.float32), values)
        if np.dtype(dtype) == BFLOAT16:
            return {k: bfloat16_bits(round_to(a, "bfloat16")) for k, a in out.items()}
        return {k: a.astype(np.float16) for k, a in out.items()}
    start = np.zeros(shape, dtype=dtype) if values is None else \
        np.asarray(values, dtype=dtype).reshape(shape)
    init = spec.init(start, numpy_ops)
    return {k: np.asarray(a).copy() for k, a in init.items()}


class _LayoutOps(NumpyOps):
    """``numpy_ops`` whose ``zeros_like`` and ``full_like`` make arrays that hold no
    resident memory of their size (``np.zeros``: pages mapped on first write; a
    broadcast constant): :func:`state_layout` reads only their shapes and dtypes."""

    def zeros_like(self, x):
        return np.zeros(np.shape(x), dtype=x.dtype)

    def full_like(self, x, value):
        if x.ndim == 0:
            return super().full_like(x, value)
        return np.broadcast_to(np.array(value, dtype=x.dtype), np.shape(x))


_layout_ops = _LayoutOps()


def state_layout(spec: Spec, shape: tuple[int, ...], dtype: np.dtype) -> dict[str, tuple]:
    """The spec's state of such a parameter: name -> (shape, numpy dtype), as
    :func:`initial_state` gives it. ``spec.init`` (a pure function) runs on a read-only
    broadcast zero with :class:`_LayoutOps` and its arrays are not copied: checking a
    load's layout costs no resident memory of the state's size."""
    low = np.dtype(dtype) in (BFLOAT16, np.dtype(np.float16))
    probe = np.broadcast_to(np.zeros((), dtype=np.float32 if low else dtype), shape)
    init = spec.init(probe, _layout_ops)
    if not low:
        return {k: (np.shape(a), np.asarray(a).dtype) for k, a in init.items()}
    # the low-precision storage dtypes hold every state array in that dtype; a 0-d
    # array becomes [1] in bfloat16 (bfloat16_bits' ascontiguousarray), as initial_state
    # gives it
    bits = np.dtype(dtype) == BFLOAT16
    return {k: ((1,) if bits and np.ndim(a) == 0 else np.shape(a), np.dtype(dtype))
            for k, a in init.items()}


@dataclass
class Snapshot:
    """What a state file holds (see the module docstring)."""

    spec: Spec
    groups: tuple[Group, ...]
    names: list[str]
    shapes: dict[str, tuple[int, ...]]
    steps: int
    position: int | None
    param_steps: dict[str, int]
    arrays: dict[str, dict[str, np.ndarray]]
    framework: str
    #: (rank, world size) of the process that wrote a data-parallel spec's state (its
    #: residuals are that rank's own: one file per rank); None for other specs
    ranks: tuple[int, int] | None = None
    #: parameter name -> the values of the param group holding it when it was saved: its
    #: live ``"lr"`` (the lr its next step uses), the spec hyperparameters written into
    #: it after the build (``betas`` as a list, ``momentum``: a scheduler's momentum
    #: cycling) and the group's scheduler bookkeeping keys that are plain numbers
    #: (``initial_lr``, ``max_lr``, ...); None where the saver records none (a file
    #: written before they were recorded, a native optimizer read by ``uo.from_native``)
    group_values: dict[str, dict[str, float | int | bool | list[float]]] | None = None


def refuse_unnamed(record: BuildRecord, held) -> None:
    """Refuse (ValueError) an optimizer made by ``uo.build`` that holds a parameter the
    build was not given: ``held`` is each parameter the optimizer steps, as ``(how the
    framework names it, parameter)``. The file names each parameter by the build's name
    for it, so such a parameter (a group added after the build, by a path that got past
    ``add_param_group``'s refusal) would be silently left out and resume from nothing."""
    built = {id(p) for p in record.params}
    for label, p in held:
        if id(p) not in built:
            raise ValueError(
                f"save_state: the optimizer holds {label} (shape {list(p.shape)}), which "
                "was not given to uo.build (a group added later?), so the state file has "
                "no name for it and would leave its state out; build the optimizer with "
                "every parameter up front (uo.build(spec, model, groups=[uo.Group(...)]))")


def changed_outside(found: str, expected: str, how: str) -> ValueError:
    """``save_state``'s refusal of a value changed outside uo that a state file cannot
    carry (``how``: the ways it could have been): a native class's hyperparameter
    written after the build that it does not take under the spec's name and value, an
    lr written over a scheduled spec lr, a Paddle ``LRScheduler`` put in place of a
    constant lr (an lr written over a constant spec lr, and a spec hyperparameter
    written into the groups, are recorded, not refused).
    ``found`` says what the optimizer holds, ``expected`` what the spec gives instead."""
    return ValueError(f"save_state: {found}, but {expected}: it was changed outside uo "
                      f"({how}), which a state file cannot carry (the resumed run would use "
                      "the spec's). Give the change to the spec instead (a uo.schedules lr, "
                      "spec.replace(...), uo.Group rules) and build with it, or set it back "
                      "before saving")


def spec_differences(saved: Spec, built: Spec) -> str:
    """The fields in which ``saved`` (the file's) and ``built`` (the optimizer's) differ,
    each with both values (two whole specs hide the one that differs)."""
    import dataclasses

    if type(saved) is not type(built):
        return f"the file's is {saved.name}, the optimizer's {built.name}"
    parts = [f"{f.name}={getattr(saved, f.name)!r} in the file, "
             f"{getattr(built, f.name)!r} in the optimizer"
             for f in dataclasses.fields(saved)
             if getattr(saved, f.name) != getattr(built, f.name)]
    return "; ".join(parts) or f"{saved} vs {built}"

