"""A :class:`~.snapshot.Snapshot` as strings and arrays, and back: the metadata (strings)
and tensors (numpy arrays, bfloat16 as :data:`~.snapshot.BFLOAT16` bits) that the state
file (:mod:`.state_file`) and the dict form (:mod:`.state_dict`) hold alike, with the
``sha256`` digest over both.

* tensors ``state/<parameter name>/<state name>``: every state array under the spec's
  own state names, and ``step/<parameter name>`` (int64 [1]): the steps that parameter
  took;
* metadata: ``format`` (:data:`FORMAT`), ``spec``, ``groups``, ``names``, ``shapes``,
  ``steps``, ``position``, ``framework``, for a data-parallel spec ``rank`` and
  ``world_size``, ``group_values`` (optional: parameter name -> its param group's live
  ``lr``, the spec hyperparameters written into it after the build (a tuple such as
  ``betas`` as a list) and its scheduler bookkeeping numbers,
  :attr:`~.snapshot.Snapshot.group_values`;
  a file without it loads as before), and ``sha256``: a digest over all of the above
  (each tensor's name, dtype, shape and bytes), so a changed byte anywhere is an error,
  not other numbers.
"""

from __future__ import annotations

import hashlib
import json
from math import inf, isfinite
from typing import Mapping

import numpy as np

from ..backend import BACKENDS
from ..groups import Group
from ..spec import spec_from_dict
from .snapshot import BFLOAT16, FILE_DTYPES, Snapshot, dtype_name

FORMAT = "unified-opt-state/1"


def encoded(s: Snapshot, caller: str = "save_state"
            ) -> tuple[dict[str, str], dict[str, np.ndarray]]:
    """``s`` as its metadata, ``sha256`` included, and its tensors (views of ``s``'s
    arrays where they are contiguous: no copy). A state array of a dtype the format does
    not hold is a TypeError naming it (``caller`` names the function in errors)."""
    unnamed = [i for i, name in enumerate(s.names) if not isinstance(name, str)]
    if unnamed or len(set(s.names)) != len(s.names):
        # the file keys each parameter's state by its name: one name for two parameters
        # (or none) would keep one's state under both, silently
        shared = sorted({n for n in s.names if isinstance(n, str) and s.names.count(n) > 1})
        raise ValueError(f"{caller}: every parameter needs its own name in a state file; "
                         + (f"parameters {unnamed} have none" if unnamed else
                            f"the names {shared} are shared")
                         + "; pass names=<module> or build with (name, parameter) pairs")
    metadata, tensors = _metadata(s, caller), _tensors(s)
    for key, array in tensors.items():
        if array.dtype not in FILE_DTYPES.values():
            raise TypeError(f"{caller}: state {key!r} is {dtype_name(array.dtype)}, which "
                            f"a state file does not hold (one of "
                            f"{sorted(map(dtype_name, FILE_DTYPES.values()))})")
    metadata["sha256"] = _digest(metadata, tensors)
    return metadata, tensors


def decoded(metadata: Mapping[str, str], tensors: Mapping[str, np.ndarray], *, caller: str,
            what: str, kind: str) -> Snapshot:
    """The checked snapshot that ``metadata`` and ``tensors`` hold. A ValueError, naming
    ``caller`` and ``what`` (the source, a ``kind`` of thing: "file", "state dict"), for
    another format, a digest that does not match (changed or damaged after it was
    written), or contents that no run writes (edited with the digest recomputed)."""
    if metadata.get("format") != FORMAT:
        raise ValueError(f"{caller}: {what} has format {metadata.get('format')!r}, "
                         f"expected {FORMAT!r}")
    if metadata.get("sha256") != _digest(metadata, tensors):
        raise ValueError(f"{caller}: {what} does not match its sha256: the {kind} was "
                         "changed or damaged after it was written")
    try:
        return _checked(_read_snapshot(dict(metadata), dict(tensors)))
    except (KeyError, TypeError, ValueError, IndexError) as error:
        # written by hand with its digest: complete in form, not in content
        raise ValueError(f"{caller}: {what} is not a complete state {kind}: "
                         f"{type(error).__name__}: {error}") from None


def _metadata(s: Snapshot, caller: str) -> dict[str, str]:
    try:
        groups = json.dumps([g.to_dict() for g in s.groups])
    except (TypeError, ValueError) as error:
        raise ValueError(f"{caller}: the groups cannot be written ({error}); give their "
                         "match as patterns, not Python functions") from None
    return {"format": FORMAT, "spec": json.dumps(s.spec.to_dict()), "groups": groups,
            "names": json.dumps(s.names), "shapes": json.dumps(s.shapes),
            "steps": str(s.steps), "position": "" if s.position is None else str(s.position),
            "framework": s.framework,
            **({} if s.ranks is None else {"rank": str(s.ranks[0]),
                                           "world_size": str(s.ranks[1])}),
            **({} if s.group_values is None else {
                "group_values": json.dumps(s.group_values, allow_nan=False)})}


def _tensors(s: Snapshot) -> dict[str, np.ndarray]:
    out = {}
    for name in s.names:
        for key, array in s.arrays[name].items():
            # ascontiguousarray makes a 0-d array 1-d: keep the state's own shape
            out[f"state/{name}/{key}"] = np.ascontiguousarray(array).reshape(np.shape(array))
        out[f"step/{name}"] = np.array([s.param_steps[name]], dtype=np.int64)
    return out


def _raw(array: np.ndarray) -> memoryview:
    """The bytes of the C-contiguous ``array`` (any shape, 0-d and 0-size included), as a
    view: no copy."""
    return memoryview(array.reshape(-1).view(np.uint8))


def _digest(metadata: Mapping[str, str], tensors: Mapping[str, np.ndarray]) -> str:
    """sha256 over the metadata (but ``sha256``) and each tensor's name, dtype, shape and
    bytes, in name order; fed one array at a time from the arrays themselves (no
    concatenated copy)."""
    h = hashlib.sha256()
    for key in sorted(metadata):
        if key != "sha256":
            h.update(f"{key}={metadata[key]}\0".encode())
    for key in sorted(tensors):
        a = tensors[key]
        kind = "bfloat16" if a.dtype == BFLOAT16 else a.dtype.str
        h.update(f"{key}:{kind}:{a.shape}\0".encode())
        h.update(_raw(np.ascontiguousarray(a)))
    return h.hexdigest()


def _count(what: str, value: int) -> int:
    if value < 0:
        raise ValueError(f"{what} is {value}, not a count (>= 0)")
    return value


def _checked(s: Snapshot) -> Snapshot:
    """Refuse contents that no run writes (a file edited with its digest recomputed)."""
    from ..schedules import Schedule

    if s.framework not in BACKENDS:
        raise ValueError(f"framework is {s.framework!r}, not one of {list(BACKENDS)}")
    _count("steps", s.steps)
    for name, count in s.param_steps.items():
        _count(f"the step count of {name!r}", count)
        if count > s.steps:
            raise ValueError(f"parameter {name!r} took {count} steps, more than the "
                             f"optimizer's {s.steps} (metadata steps)")
    if s.position is not None:
        _count("position", s.position)
        if not isinstance(s.spec.lr, Schedule):
            raise ValueError(f"position is {s.position}, but the spec's lr {s.spec.lr!r} is "
                             "no schedule (there is nothing the position could set)")
    if s.ranks is not None and not 0 <= s.ranks[0] < s.ranks[1]:
        raise ValueError(f"rank {s.ranks[0]} of world_size {s.ranks[1]} is no rank")
    if s.group_values is not None:
        _check_group_values(s.group_values, s.names)
    return s


def _check_group_values(values: object, names: list[str]) -> None:
    """``group_values`` must be a dict of exactly the parameter names, each a dict of
    strings to JSON numbers or bools (or lists of them) holding a finite ``"lr"`` >= 0."""
    if not isinstance(values, dict) or sorted(values) != sorted(names):
        raise ValueError(f"group_values must name every parameter ({names}), got "
                         f"{sorted(values) if isinstance(values, dict) else values!r}")
    for name, entry in values.items():
        if not isinstance(entry, dict) or not all(
                isinstance(k, str) and all(isinstance(x, (int, float)) and isfinite(x)
                                           for x in (v if isinstance(v, list) else [v]))
                for k, v in entry.items()):
            raise ValueError(f"group_values[{name!r}] must be a dict of names to finite "
                             f"numbers (or lists of them: a written betas), got {entry!r}")
        lr = entry.get("lr")
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not 0 <= lr < inf:
            raise ValueError(f"group_values[{name!r}]['lr'] is {lr!r}, not an lr "
                             "(a finite number >= 0)")


def _read_snapshot(metadata: dict[str, str], tensors: dict[str, np.ndarray]) -> Snapshot:
    names = json.loads(metadata["names"])
    arrays: dict[str, dict[str, np.ndarray]] = {n: {} for n in names}
    for key, array in tensors.items():
        if key.startswith("state/"):
            name, _, state = key[len("state/"):].rpartition("/")
            arrays[name][state] = array
    return Snapshot(
        spec=spec_from_dict(json.loads(metadata["spec"])),
        groups=tuple(Group.from_dict(g) for g in json.loads(metadata["groups"])),
        names=names, shapes={n: tuple(s) for n, s in json.loads(metadata["shapes"]).items()},
        steps=int(metadata["steps"]),
        position=int(metadata["position"]) if metadata["position"] else None,
        param_steps={n: int(tensors[f"step/{n}"][0]) for n in names},
        arrays=arrays, framework=metadata["framework"],
        ranks=(int(metadata["rank"]), int(metadata["world_size"]))
        if "rank" in metadata or "world_size" in metadata else None,
        group_values=json.loads(metadata["group_values"]) if "group_values" in metadata
        else None)

