"""Reading a ``.pdopt`` file (``paddle.save(optimizer.state_dict(), path)``) without
running any code in it (``uo.convert_checkpoint``).

``paddle.save`` writes a pickle (protocol 4 on Paddle 3.3) of a dict: accumulator name
(``linear_0.w_0_moment1_0``) -> numpy array, ``"LR_Scheduler"`` -> a dict of numbers
(the scheduler's ``state_dict()``, when the lr is an LRScheduler), and
``"StructuredToParameterName@@"`` -> a dict of names. Inspected with ``pickletools``,
the only globals such a file names are ``numpy.core.multiarray._reconstruct`` (numpy 2:
``numpy._core.multiarray``), ``numpy.ndarray`` and ``numpy.dtype``; the unpickler here
resolves those (and numpy's ``scalar``, which a scheduler's numpy float would need, and
``collections.OrderedDict``) and nothing else: any other global is a ValueError naming it,
raised before it is imported or called. Object arrays are refused after loading.
Imports no paddle.
"""

from __future__ import annotations

import io
import pickle
from pathlib import Path
from typing import Any

import numpy as np

CALLER = "convert_checkpoint"
NAME_TABLE = "StructuredToParameterName@@"
SCHEDULER = "LR_Scheduler"

#: (module, name) a .pdopt file may name: numpy array and scalar reconstruction only
ALLOWED = frozenset({
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"), ("numpy._core.multiarray", "scalar"),
    ("numpy", "ndarray"), ("numpy", "dtype"), ("collections", "OrderedDict"),
})


class ArraysOnly(pickle.Unpickler):
    """An unpickler building numpy arrays, numbers, strings, lists and dicts only."""

    def find_class(self, module: str, name: str):
        if (module, name) not in ALLOWED:
            raise ValueError(f"{CALLER}: the file names the global {module}.{name}, which a "
                             "Paddle optimizer state dict never holds: refused, nothing of "
                             "it was imported or run")
        return super().find_class(module, name)


def read_pdopt(path) -> dict:
    """The state dict in the ``.pdopt`` file ``path`` (see the module docstring): a dict
    of accumulator name -> numpy array, with ``"LR_Scheduler"`` (a dict) where saved.
    ValueError naming the path for anything else (truncated, not a pickle, a global
    that is not numpy's array reconstruction, an object array)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{CALLER}: {str(path)!r} is not a file")
    raw = path.read_bytes()
    try:
        loaded = ArraysOnly(io.BytesIO(raw)).load()
    except ValueError as error:
        raise ValueError(f"{error} (in {str(path)!r})") from None
    except Exception as error:      # UnpicklingError, EOFError, TypeError, ...
        raise ValueError(f"{CALLER}: {str(path)!r} is not a readable paddle.save file of "
                         f"an optimizer state dict (truncated or not a pickle): "
                         f"{type(error).__name__}: {error}") from None
    return checked_state(loaded, repr(str(path)))


def checked_state(loaded: Any, where: str) -> dict:
    """``loaded`` as an optimizer state dict: str keys, arrays (or tensors) as values,
    the scheduler's dict of plain values; the name table dropped."""
    if not isinstance(loaded, dict):
        raise ValueError(f"{CALLER}: {where} holds a {type(loaded).__name__}, not an "
                         "optimizer state_dict()")
    out = {}
    for key, value in loaded.items():
        if not isinstance(key, str):
            raise ValueError(f"{CALLER}: {where} has the key {key!r}; an optimizer state "
                             "dict has accumulator names")
        if key == NAME_TABLE:
            continue
        if key == SCHEDULER:
            if not isinstance(value, dict) or not all(
                    isinstance(v, (int, float, bool, str, list, type(None), np.generic))
                    for v in value.values()):
                raise ValueError(f"{CALLER}: {where}'s {SCHEDULER} entry is not a "
                                 f"scheduler's state dict of numbers: {value!r}")
            out[key] = dict(value)
            continue
        if key == "master_weights":
            raise ValueError(f"{CALLER}: {where} holds master_weights (multi_precision "
                             "training), which a portable state file does not carry")
        if isinstance(value, np.ndarray):
            if value.dtype.hasobject:
                raise ValueError(f"{CALLER}: {where}'s entry {key!r} is an object array")
        elif type(value).__name__ != "Tensor":
            raise ValueError(f"{CALLER}: {where}'s entry {key!r} is a "
                             f"{type(value).__name__}, not an array")
        out[key] = value
    return out
