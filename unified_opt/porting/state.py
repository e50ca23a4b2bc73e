"""Portable optimizer state: ``uo.save_state``, ``uo.load_state`` and ``uo.resume``.

One safetensors file holds a run's optimizer, readable on any backend:

* tensors ``state/<parameter name>/<state name>``: every state array under the spec's
  own state names (``exp_avg``, ``exp_avg_sq``, ...; those ``spec.init`` makes for the
  parameter's shape), and ``step/<parameter name>`` (int64 [1]): the steps that
  parameter took;
* metadata (strings): ``format`` (:data:`FORMAT`), ``spec`` (``spec.to_dict()`` as JSON),
  ``groups`` (the ``uo.Group`` rules as JSON), ``names`` (the parameter names in build
  order), ``shapes``, ``steps`` (optimizer steps taken), ``position`` (the step the lr
  schedule stands at, empty without one), ``framework`` (where it was written), for a
  data-parallel spec ``rank`` and ``world_size`` (its residuals are that rank's: it
  loads on that rank only), and
  ``sha256``: a digest over all of the above, so truncation or flipped bytes anywhere
  are an error, not different numbers.

Each array keeps its storage dtype (bfloat16 as safetensors' ``BF16``, held in numpy as
:data:`BFLOAT16` bits). The file is safetensors' layout (an 8-byte header length, a
JSON header, the raw little-endian arrays), readable by the ``safetensors`` package: no
code runs on load, no pickle.

How it is written and read: ``save_state`` (and ``convert_checkpoint``)
writes through :func:`unified_opt.files.atomic_writer` (a temporary file in the same
folder, fsync, ``os.replace``, folder fsync), so a process killed at any moment, a full
disk or a file size limit leaves the old file whole (a failed write is an OSError
naming the file). Both directions stream: the digest is fed one array at a time and
each array is written from its own memory, and each array is read from its byte range
straight into the array returned; every backend hands over read-only views of its CPU
state tensors' memory (torch's tensors, Paddle's through DLPack, MindSpore's
``asnumpy``), and torch and MindSpore take the loaded arrays as their state (Paddle
copies each into its accumulator). The peak memory beyond the state the
optimizer holds (saving) or the arrays returned (loading) is the JSON header, not a
multiple of the state: ``benchmarks/results/state_memory.md`` measures it against the
target of 0.25 x the state's size. ``load_state`` checks everything (digest, format, spec
and groups equal to the target's, the same parameter names, every state array's name,
shape and dtype) before it writes anything: the optimizer is either fully loaded or
untouched.

Which optimizers: any made by ``uo.build``, on the own path or a native one, on every
backend; for saving, also a native optimizer built by hand that ``uo.from_native``
reads (with its ``lr_scheduler``; ``names`` names its parameters). A native class's
state is mapped through its descriptor's ``state`` map, and its step count is read
from an exact source (the class's own counter, Paddle's beta powers, uo's count or the
lr scheduler's position); a class whose count or state cannot be read that way is
refused by name (each backend's ``state`` module says which). ``convert_checkpoint``
turns a framework's own checkpoint file into such a state file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from ..backend import BACKENDS, BuildRecord, record_of
from ..files import atomic_writer
from ..groups import Group
from ..ops import NumpyOps, numpy_ops
from ..spec import Spec, spec_from_dict
from ..storage import round_to
from .saved_groups import saved_record

#: a file path as the functions below take it
FilePath = str | os.PathLike
#: ``load_state``'s ``transform``: parameter name -> a function of each state array, or
#: a function of the name returning one (or None: that parameter's arrays as they are)
Transform = Mapping[str, Callable[[Any], Any]] | Callable[[str], Callable[[Any], Any] | None]

FORMAT = "unified-opt-state/1"
CALLER = "load_state"


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


def initial_state(spec: Spec, shape: tuple[int, ...], dtype: np.dtype) -> dict[str, np.ndarray]:
    """The spec's state of a fresh parameter of ``shape``, kept in numpy ``dtype``
    (:data:`BFLOAT16` for bfloat16): name -> array (what a backend's state reader gives a
    parameter that has not stepped)."""
    if np.dtype(dtype) in (BFLOAT16, np.dtype(np.float16)):
        # computed in float32 (numpy has no bfloat16 arithmetic); the initial values
        # (zeros, a constant) are exact in the storage dtype
        out = initial_state(spec, shape, np.dtype(np.float32))
        if np.dtype(dtype) == BFLOAT16:
            return {k: bfloat16_bits(round_to(a, "bfloat16")) for k, a in out.items()}
        return {k: a.astype(np.float16) for k, a in out.items()}
    init = spec.init(np.zeros(shape, dtype=dtype), numpy_ops)
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
    """``save_state``'s refusal of an lr or hyperparameter changed outside uo (``how``:
    the ways it could have been), which a state file cannot carry: ``found`` says what
    the optimizer holds, ``expected`` what the spec gives instead."""
    return ValueError(f"save_state: {found}, but {expected}: it was changed outside uo "
                      f"({how}), which a state file cannot carry (the resumed run would use "
                      "the spec's). Give the change to the spec instead (a uo.schedules lr, "
                      "spec.replace(...), uo.Group rules) and build with it, or set it back "
                      "before saving")


def _backend_state(framework: str):
    return importlib.import_module(f"unified_opt.backends.{framework}.state")


def _framework(optimizer: Any) -> str:
    root = type(optimizer).__module__.partition(".")[0]
    for framework in BACKENDS:
        if root == framework or type(optimizer).__module__.startswith(
                f"unified_opt.backends.{framework}"):
            return framework
    raise TypeError(f"save_state: optimizer must be a torch, Paddle or MindSpore optimizer, "
                    f"got {type(optimizer).__name__}")


def _record(optimizer: Any) -> BuildRecord | None:
    try:
        return record_of(optimizer)
    except ValueError:
        return None


# -- saving -------------------------------------------------------------------------------

def save_state(optimizer: Any, path: FilePath, *, lr_scheduler: Any = None, names: Any = None,
               constant_lr: bool = False) -> None:
    """Write ``optimizer``'s state to the safetensors file ``path`` (module docstring).
    ``lr_scheduler``: a native optimizer's scheduler (a ``uo.build`` optimizer's own is
    found by itself); ``names``: a module or ``(name, parameter)`` pairs naming a native
    optimizer's parameters; ``constant_lr=True``: a native optimizer whose groups show a
    scheduler's traces is saved with its current lr as a constant (else refused, see
    ``uo.from_native``).

    Args:
        optimizer: an optimizer made by ``uo.build``, or a native one.
        path: the safetensors file to write (atomically).
        lr_scheduler: a native optimizer's scheduler, or None.
        names: a module or ``(name, parameter)`` pairs naming a native optimizer's
            parameters, or None.
        constant_lr: True: a scheduler's traces are saved as the current lr.

    Returns:
        None.

    Raises:
        TypeError: an object of no known framework.
        ValueError: unnamed parameters, or a native optimizer whose spec cannot be read.

    Example:
        >>> import torch
        >>> import unified_opt as uo
        >>> opt = uo.build(uo.AdamW(lr=1e-3), torch.nn.Linear(4, 2))
        >>> uo.save_state(opt, "run.safetensors")  # doctest: +SKIP
    """
    framework = _framework(optimizer)
    record = _record(optimizer)
    backend = _backend_state(framework)
    if record is not None:
        if lr_scheduler is not None and lr_scheduler is not record.lr_scheduler:
            raise ValueError("save_state: lr_scheduler is not the scheduler uo.build made "
                             "for this optimizer (uo.native_scheduler(optimizer)); leave it out")
        snapshot = backend.snapshot_built(saved_record(record, optimizer), optimizer)
    else:
        from .live import read_native

        reading = read_native(optimizer, lr_scheduler, names=names, constant_lr=constant_lr)
        snapshot = backend.snapshot_native(reading, optimizer, names)
    if getattr(snapshot.spec, "data_parallel", False):
        snapshot = dataclasses.replace(snapshot, ranks=_ranks(framework, optimizer))
    _write(snapshot, Path(path))


def _ranks(framework: str, optimizer: Any) -> tuple[int, int]:
    """(rank, world size) of ``optimizer``'s data-parallel exchange ((0, 1) without one)."""
    exchange = getattr(optimizer, "exchange", None)
    if exchange is None:
        return 0, 1
    if framework == "torch":
        import torch.distributed as dist

        rank = dist.get_rank(getattr(exchange, "group", None))
    elif framework == "paddle":
        import paddle.distributed as dist

        rank = dist.get_rank(getattr(exchange, "group", None))
    else:
        from mindspore.communication import get_rank

        rank = get_rank()
    return int(rank), int(exchange.world_size)


def convert_checkpoint(checkpoint: FilePath | Mapping[str, Any], path: FilePath, *,
                       optimizer: Any, lr_scheduler: Any = None,
                       scheduler_checkpoint: FilePath | Mapping[str, Any] | None = None,
                       names: Any = None,
                       constant_lr: bool = False) -> None:
    """Turn a framework's own checkpoint of a native optimizer into a state file ``path``
    that ``uo.resume`` / ``uo.load_state`` read on any backend.

    Args:
        checkpoint: the framework's checkpoint file, or (torch) its dict (below).
        path: the state file to write.
        optimizer: the native optimizer the checkpoint was taken from, built again.
        lr_scheduler: its scheduler, or None.
        scheduler_checkpoint: torch: the scheduler's ``state_dict`` file or dict.
        names: a module or ``(name, parameter)`` pairs naming the parameters.
        constant_lr: True: a scheduler's traces are saved as the current lr.

    Returns:
        None.

    Raises:
        TypeError: arguments of the wrong type.
        ValueError: a checkpoint that does not fit ``optimizer``, or that
            :func:`save_state` refuses.

    Example:
        >>> uo.convert_checkpoint("opt.pt", "run.safetensors", optimizer=opt)  # doctest: +SKIP

    ``optimizer`` (and ``lr_scheduler``) are the native objects the checkpoint was taken
    from, built again as the script builds them (same class, arguments and parameters,
    as one does before ``load_state_dict``): the checkpoint is loaded into them with the
    framework's own loader, run so that no code in the file can run, and then saved as
    by ``save_state`` (``names`` names their parameters). ``checkpoint``:

    * torch: a file of ``optimizer.state_dict()`` (``torch.save``), read with
      ``torch.load(weights_only=True)``, or that dict; ``scheduler_checkpoint``: a file
      (or dict) of ``lr_scheduler.state_dict()``;
    * Paddle: a ``.pdopt`` file of ``optimizer.state_dict()`` (``paddle.save``; the lr
      scheduler's position is inside), read by an unpickler that builds nothing but
      arrays, numbers, strings, lists and dicts;
    * MindSpore: a ``.ckpt`` file of the optimizer's Parameters (``ms.save_checkpoint``
      of the optimizer or of a training cell holding it; a protobuf, no code).

    ``optimizer`` is changed (it holds the checkpoint's state afterwards). A checkpoint
    whose param groups carry a scheduler's traces (``initial_lr``, ...) needs its
    ``lr_scheduler`` (or ``constant_lr=True``), as for ``save_state``."""
    framework = _framework(optimizer)
    if _record(optimizer) is not None:
        raise TypeError("convert_checkpoint: optimizer must be the native optimizer the "
                        "checkpoint was taken from, not one made by uo.build (save_state "
                        "writes those directly)")
    _backend_state(framework).load_checkpoint(optimizer, lr_scheduler, checkpoint,
                                              scheduler_checkpoint)
    save_state(optimizer, path, lr_scheduler=lr_scheduler, names=names,
               constant_lr=constant_lr)


def _metadata(s: Snapshot) -> dict[str, str]:
    try:
        groups = json.dumps([g.to_dict() for g in s.groups])
    except (TypeError, ValueError) as error:
        raise ValueError(f"save_state: the groups cannot be written ({error}); give their "
                         "match as patterns, not Python functions") from None
    return {"format": FORMAT, "spec": json.dumps(s.spec.to_dict()), "groups": groups,
            "names": json.dumps(s.names), "shapes": json.dumps(s.shapes),
            "steps": str(s.steps), "position": "" if s.position is None else str(s.position),
            "framework": s.framework,
            **({} if s.ranks is None else {"rank": str(s.ranks[0]),
                                           "world_size": str(s.ranks[1])})}


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


#: safetensors' header-length field: 8 bytes, little-endian unsigned
_HEADER_LENGTH = struct.Struct("<Q")
#: the largest header safetensors reads (its own limit, 100 MB)
_MAX_HEADER = 100_000_000
#: bytes handed to one write() or readinto() call: a bound on what the OS copies at once,
#: not a buffer of ours (each chunk is a view of the array)
_CHUNK = 16 << 20


def _write(s: Snapshot, path: Path) -> None:
    """Write ``s`` as a safetensors file, streaming each array from its own memory into
    an :func:`unified_opt.files.atomic_writer` file (temporary file in ``path``'s folder,
    fsync, ``os.replace``, folder fsync): the extra memory is the JSON header, whatever
    the state's size, and a failure or a kill at any moment leaves the old file whole.

    The layout is the safetensors format (read by ``safetensors.safe_open``; files that
    ``safetensors.serialize`` wrote read the same): an 8-byte little-endian header
    length, a JSON header (``__metadata__``, then per tensor its ``dtype``, ``shape``
    and ``data_offsets``) padded with spaces to a multiple of 8, then the raw
    little-endian arrays, the widest dtypes first (then by name) so that every array
    starts at a multiple of its item size."""
    metadata, tensors = _metadata(s), _tensors(s)
    names = {dtype: name for name, dtype in FILE_DTYPES.items()}
    for key, array in tensors.items():
        if array.dtype not in names:
            raise TypeError(f"save_state: state {key!r} is {dtype_name(array.dtype)}, which "
                            f"a state file does not hold (one of "
                            f"{sorted(map(dtype_name, FILE_DTYPES.values()))})")
    metadata["sha256"] = _digest(metadata, tensors)
    order = sorted(tensors, key=lambda key: (-tensors[key].dtype.itemsize, key))
    header: dict[str, Any] = {"__metadata__": metadata}
    offset = 0
    for key in order:
        array = tensors[key]
        header[key] = {"dtype": names[array.dtype], "shape": list(array.shape),
                       "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    # atomic_writer gives the umask's mode like every other output (safetensors'
    # save_file leaves 0600)
    try:
        with atomic_writer(path, "wb") as handle:
            handle.write(_HEADER_LENGTH.pack(len(text)))
            handle.write(text)
            for key in order:
                raw = _raw(tensors[key])
                for begin in range(0, len(raw), _CHUNK):
                    handle.write(raw[begin:begin + _CHUNK])
    except OSError as error:
        # the same errno (so the same OSError subclass), naming the file and what
        # became of it: a full disk or a size limit says neither
        raise OSError(error.errno, f"save_state: cannot write the state file "
                      f"({error.strerror or error}); the file there, if any, is unchanged",
                      str(path)) from error


# -- reading a file -----------------------------------------------------------------------

def _read_into(handle, target: memoryview) -> None:
    """Fill ``target`` from the unbuffered ``handle``'s position (ValueError at the
    file's end)."""
    filled = 0
    while filled < len(target):
        count = handle.readinto(target[filled:filled + _CHUNK])
        if not count:
            raise ValueError("the file ends inside a tensor")
        filled += count


def _entries(header: Any, data_size: int) -> list[tuple[str, str, tuple, int, int]]:
    """The tensors of a parsed safetensors header, checked as safetensors checks them
    (dtype known, shape a list of counts, byte ranges adjacent from 0 and covering the
    ``data_size`` bytes after the header exactly): (name, dtype name, shape, begin,
    end), in file order."""
    if not isinstance(header, dict):
        raise ValueError(f"the header is a {type(header).__name__}, not a JSON object")
    metadata = header.get("__metadata__", {})
    if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise ValueError("__metadata__ is not a mapping of strings to strings")
    entries = []
    for key, entry in header.items():
        if key == "__metadata__":
            continue
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise ValueError(f"tensor {key!r} has entry {entry!r}, not dtype, shape and "
                             "data_offsets")
        kind, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if kind not in FILE_DTYPES:
            raise ValueError(f"tensor {key!r} has dtype {kind}, not one of "
                             f"{sorted(FILE_DTYPES)}")
        counts = (list, tuple)
        if not isinstance(shape, counts) or not all(
                type(n) is int and n >= 0 for n in shape):
            raise ValueError(f"tensor {key!r} has shape {shape!r}, not a list of counts")
        if not isinstance(offsets, counts) or len(offsets) != 2 or not all(
                type(n) is int for n in offsets):
            raise ValueError(f"tensor {key!r} has data_offsets {offsets!r}, not [begin, end]")
        begin, end = offsets
        size = int(np.prod(shape, dtype=np.int64)) * FILE_DTYPES[kind].itemsize
        if end - begin != size:
            raise ValueError(f"tensor {key!r} of shape {shape} and dtype {kind} spans "
                             f"{end - begin} bytes, not {size}")
        entries.append((key, kind, tuple(shape), begin, end))
    entries.sort(key=lambda entry: (entry[3], entry[4]))
    position = 0
    for key, _, _, begin, end in entries:
        if begin != position:
            raise ValueError(f"tensor {key!r} starts at byte {begin} of the data, not at "
                             f"{position} (where the one before ends)")
        position = end
    if position != data_size:
        raise ValueError(f"the tensors span {position} bytes and the file holds "
                         f"{data_size} after its header (truncated or extended)")
    return entries


def _read_file(path: Path) -> tuple[dict[str, str], dict[str, np.ndarray]]:
    """A safetensors file's metadata and tensors (name order), each array read from its
    byte range straight into its own memory: no copy of the file is held. One open
    file is read throughout, so a file replaced meanwhile (``os.replace`` by a save)
    is read whole, old or new."""
    with open(path, "rb", buffering=0) as handle:
        file_size = os.fstat(handle.fileno()).st_size
        head = handle.read(_HEADER_LENGTH.size)
        if len(head) != _HEADER_LENGTH.size:
            raise ValueError(f"the file has {len(head)} bytes, fewer than a header length")
        (length,) = _HEADER_LENGTH.unpack(head)
        if length > min(_MAX_HEADER, file_size - _HEADER_LENGTH.size):
            raise ValueError(f"the header length {length} exceeds the file or "
                             f"{_MAX_HEADER} bytes")
        text = bytearray(length)
        _read_into(handle, memoryview(text))
        try:
            header = json.loads(text.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ValueError(f"the header is not JSON: {error}") from None
        start = _HEADER_LENGTH.size + length
        entries = _entries(header, file_size - start)
        tensors = {}
        for key, kind, shape, begin, _ in entries:
            array = np.empty(shape, dtype=FILE_DTYPES[kind])
            handle.seek(start + begin)
            _read_into(handle, _raw(array))
            tensors[key] = array
    return dict(header.get("__metadata__", {})), {k: tensors[k] for k in sorted(tensors)}


def read_state(path) -> Snapshot:
    """The checked contents of a state file (ValueError naming the path when it is not a
    complete, unchanged file of this format). Each array is read from its byte range
    into the array returned and the digest is fed from those arrays: the memory beyond
    the returned arrays is the header's."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{CALLER}: no state file {str(path)!r}")
    if not path.is_file():
        raise ValueError(f"{CALLER}: {str(path)!r} is not a file")
    try:
        metadata, tensors = _read_file(path)
    except (OSError, ValueError) as error:
        raise ValueError(f"{CALLER}: {str(path)!r} is not a readable state file "
                         f"(truncated or not safetensors): {error}") from None
    if metadata.get("format") != FORMAT:
        raise ValueError(f"{CALLER}: {str(path)!r} has format {metadata.get('format')!r}, "
                         f"expected {FORMAT!r}")
    if metadata.get("sha256") != _digest(metadata, tensors):
        raise ValueError(f"{CALLER}: {str(path)!r} does not match its sha256: the file was "
                         "changed or damaged after it was written")
    try:
        return _snapshot(metadata, tensors)
    except (KeyError, TypeError, ValueError, IndexError) as error:
        # a file written by hand with its digest: complete in form, not in content
        raise ValueError(f"{CALLER}: {str(path)!r} is not a complete state file: "
                         f"{type(error).__name__}: {error}") from None


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
    return s


def _snapshot(metadata: dict[str, str], tensors: dict[str, np.ndarray]) -> Snapshot:
    return _checked(_read_snapshot(metadata, tensors))


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
        if "rank" in metadata or "world_size" in metadata else None)


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


# -- loading ------------------------------------------------------------------------------

def _transformer(transform) -> Callable[[str], Callable | None]:
    if transform is None:
        return lambda name: None
    if isinstance(transform, Mapping):
        return transform.get
    if callable(transform):
        return transform
    raise TypeError(f"{CALLER}: transform must be a mapping parameter name -> function, "
                    f"or a function of the name, got {transform!r}")


def _model_of(model: Any, framework: str) -> Any:
    """``model`` checked to be a module of ``framework`` (None stays None)."""
    if model is None:
        return None
    from ..build import framework_of

    if framework_of(model) != framework or not any(hasattr(model, m) for m in (
            "named_modules", "named_sublayers", "cells_and_names")):
        raise TypeError(f"{CALLER}: model must be the {framework} module whose parameters "
                        f"the optimizer holds, got {type(model).__qualname__}")
    return model


def _renamed(saved: Snapshot, rename: dict[str, str]) -> Snapshot:
    """``saved`` under the names ``rename`` gives; its groups and the spec's name rules
    (written over the old names) become rules over exactly the parameters they took."""
    from .names import renamed_rules

    new = [rename[n] for n in saved.names]
    spec, groups = renamed_rules(saved.spec, saved.groups, saved.names, rename, CALLER)
    return dataclasses.replace(
        saved, spec=spec, groups=tuple(groups), names=new,
        shapes={rename[n]: s for n, s in saved.shapes.items()},
        param_steps={rename[n]: s for n, s in saved.param_steps.items()},
        arrays={rename[n]: a for n, a in saved.arrays.items()})


def _transposed(name: str, shape: tuple, arrays: dict, why: str) -> dict:
    """A 2-D weight's state in the other layout: arrays of its shape transposed, a
    factored moment's row and column statistics exchanged (the rows of the transposed
    weight are the columns of the saved one; kept as 2-D ``(n, 1)`` / ``(1, n)``
    arrays, each transposed too), scalars kept."""
    out = {}
    for key, array in arrays.items():
        partner = {"_row": "_col", "_col": "_row"}.get(key[-4:])
        if array.shape == tuple(shape):
            out[key] = np.ascontiguousarray(array.T)
        elif partner is not None and key[:-4] + partner in arrays:
            other = arrays[key[:-4] + partner]
            out[key] = np.ascontiguousarray(other.T) if other.ndim == 2 else other
        elif array.size == 1 or array.ndim == 0:
            out[key] = array
        else:
            raise ValueError(f"{CALLER}: parameter {name!r} is stored transposed ({why}), "
                             f"and its state {key!r} of shape {array.shape} has no known "
                             "transposed form; pass transform= for it")
    return out


def across(saved: Snapshot, framework: str, names: list[str], model: Any = None,
           transform=None) -> Snapshot:
    """``saved`` as a run on ``framework`` reads it (:mod:`.names`): a file written on
    another framework is renamed by :func:`.names.name_map` where ``model`` (the target
    module) is given and the names differ, and the state of each 2-D weight whose module
    types keep other layouts there is transposed; a square 2-D weight of no known
    module type is refused where the frameworks' layouts differ (its shape cannot tell).
    A parameter ``transform`` covers is left to it."""
    from .names import layout, layouts_differ, name_map, parameter_modules

    if saved.framework == framework:
        return saved
    transform_of = _transformer(transform)
    modules = parameter_modules(model) if model is not None else {}
    if model is not None and sorted(saved.names) != sorted(names):
        mapping = name_map(saved.framework, model)
        saved = _renamed(saved, {n: mapping.get(n, n) for n in saved.names})
    arrays, shapes = dict(saved.arrays), dict(saved.shapes)
    for name in saved.names:
        shape = tuple(saved.shapes[name])
        if len(shape) != 2 or transform_of(name) is not None:
            continue
        kind = modules.get(name, (None, None))[0]
        if kind is None:
            if shape[0] == shape[1] and layouts_differ(saved.framework, framework):
                where = ("its module is of no known type" if name in modules else
                         "no model says its module type")
                raise ValueError(
                    f"{CALLER}: parameter {name!r} is a square {shape} weight saved on "
                    f"{saved.framework} and loaded on {framework}, and {where}: a Linear "
                    f"keeps its weight {layout(saved.framework, 'linear')} on "
                    f"{saved.framework} and {layout(framework, 'linear')} on {framework}, "
                    "which a square shape cannot tell; pass model=<the module> (its "
                    f"module types decide), or transform={{{name!r}: np.transpose}} (or "
                    "an identity function) for it")
            continue
        source, target = layout(saved.framework, kind), layout(framework, kind)
        if source is not None and target is not None and source != target:
            why = f"a {kind} weight: {source} on {saved.framework}, {target} on {framework}"
            arrays[name] = _transposed(name, shape, saved.arrays[name], why)
            shapes[name] = shape[::-1]
    return dataclasses.replace(saved, arrays=arrays, shapes=shapes)


def load_state(optimizer: Any, path: FilePath, *, transform: Transform | None = None,
               model: Any = None) -> None:
    """Restore the state file ``path`` into ``optimizer``, made by ``uo.build`` on any
    backend for the same spec, groups and parameter names. ``transform``: a parameter
    name -> a function applied to each of that parameter's state arrays (e.g.
    ``np.transpose`` between torch's ``(out, in)`` and Paddle's ``(in, out)`` Linear
    weights); a mapping, or a function of the name returning one or None.

    ``model``: the module whose parameters the optimizer holds. A file written on
    another framework is then read under that module's parameter names
    (:func:`.names.name_map`: MindSpore's ``gamma``/``beta`` for torch's LayerNorm
    ``weight``/``bias``) and layouts (a Linear weight's state transposed between torch
    or MindSpore and Paddle) by its module types. Without it a square 2-D weight is
    refused where the two frameworks' layouts differ (:func:`across`).

    Args:
        optimizer: an optimizer made by ``uo.build`` for the saved spec and groups.
        path: the state file.
        transform: parameter name -> a function of each state array, or None.
        model: the module holding the parameters, or None.

    Returns:
        None.

    Raises:
        ValueError: a file for another spec, groups or parameters, or a layout that
            cannot be read without ``model``.

    Example:
        >>> uo.load_state(opt, "run.safetensors", model=model)  # doctest: +SKIP
    """
    record = _record(optimizer)
    if record is None:
        raise TypeError(f"{CALLER}: optimizer must be made by uo.build, got "
                        f"{type(optimizer).__name__} (uo.resume builds one from the file)")
    transform_of = _transformer(transform)
    framework = _framework(optimizer)
    saved = across(read_state(path), framework, list(record.names),
                   _model_of(model, framework), transform)
    if saved.spec != record.spec:
        raise ValueError(f"{CALLER}: the file holds the state of another spec than the "
                         f"optimizer computes: {spec_differences(saved.spec, record.spec)}")
    if tuple(saved.groups) != tuple(saved_record(record, optimizer, CALLER).groups):
        raise ValueError(f"{CALLER}: the file's groups {list(saved.groups)} differ from the "
                         f"optimizer's {list(record.groups)}")
    if sorted(saved.names) != sorted(record.names):
        missing = sorted(set(record.names) - set(saved.names))
        extra = sorted(set(saved.names) - set(record.names))
        hint = ("" if model is not None or saved.framework == framework else
                f" (written on {saved.framework}: pass model=<the {framework} module> to "
                "read it under that module's names, uo.porting.name_map)")
        raise ValueError(f"{CALLER}: parameter names differ: not in the file {missing}, "
                         f"not in the optimizer {extra}{hint}")
    if getattr(saved.spec, "data_parallel", False):
        here = _ranks(framework, optimizer)
        if saved.ranks is None:
            raise ValueError(f"{CALLER}: the file holds {saved.spec.name} state (per-rank "
                             "residuals) but records no rank: it cannot be told whose it is; "
                             "save it again with this version of save_state on every rank")
        if saved.ranks != here:
            raise ValueError(f"{CALLER}: the file holds rank {saved.ranks[0]}'s state of "
                             f"{saved.ranks[1]} ranks ({saved.spec.name} keeps residuals per "
                             f"rank), and this optimizer is rank {here[0]} of {here[1]}: "
                             "load each rank's own file (save_state on every rank, one file "
                             "per rank, the same world size)")
    backend = _backend_state(framework)
    arrays = {}
    for name, p, plan in zip(record.names, record.params, record.plans):
        expected = backend.expected_state(plan.spec, p)    # name -> (shape, dtype)
        got = dict(saved.arrays[name])
        fn = transform_of(name)
        if fn is not None:
            # a copy: a backend may keep the arrays it is handed as the state itself,
            # and a transform's result may be an array the caller still holds
            got = {k: np.array(fn(a)) for k, a in got.items()}
        if sorted(got) != sorted(expected):
            raise ValueError(f"{CALLER}: parameter {name!r} has state {sorted(got)} in the "
                             f"file, the optimizer expects {sorted(expected)}")
        for key, (shape, dtype) in expected.items():
            if got[key].shape != shape:
                raise ValueError(f"{CALLER}: state {key!r} of {name!r} has shape "
                                 f"{got[key].shape} in the file, expected {shape}")
            if got[key].dtype != dtype:
                raise ValueError(f"{CALLER}: state {key!r} of {name!r} is "
                                 f"{dtype_name(got[key].dtype)} in the file, expected "
                                 f"{dtype_name(dtype)}")
        arrays[name] = got
    backend.check_writable(record, optimizer)
    backend.write_built(record, optimizer, saved, arrays)


def resume(path: FilePath, params: Any, *, transform: Transform | None = None,
           path_taken: str = "auto", prefer: str = "speed") -> Any:
    """``uo.build`` the saved spec and groups over ``params`` (on their framework), load
    the state into it (``transform``: as for :func:`load_state`), and return the
    optimizer (its scheduler: ``uo.native_scheduler``). ``path_taken`` and ``prefer``:
    ``uo.build``'s ``path`` and ``prefer`` (which class it built, and why:
    ``uo.explain(optimizer)``).

    Args:
        path: the state file (:func:`save_state`).
        params: the parameters to optimize, of any framework (a module reads names and
            layouts, as ``model`` in :func:`load_state`).
        transform: as for :func:`load_state`.
        path_taken: ``uo.build``'s ``path``.
        prefer: ``uo.build``'s ``prefer``.

    Returns:
        The optimizer ``uo.build`` made, holding the saved state.

    Raises:
        ValueError: a file that does not fit ``params``, or what ``uo.build`` refuses.

    Example:
        >>> import paddle
        >>> import unified_opt as uo
        >>> model = paddle.nn.Linear(4, 2)
        >>> opt = uo.resume("run.safetensors", model)  # doctest: +SKIP
    """
    from ..build import build, framework_of, named_parameters

    saved = read_state(path)
    if framework_of(params) is None and not isinstance(params, Mapping):
        params = list(params)                  # read twice: here and by build
    named = named_parameters(params, "resume")
    framework = framework_of(named[0][1]) if named else None
    walks = any(hasattr(params, m) for m in ("named_modules", "named_sublayers",
                                              "cells_and_names"))
    model = params if walks and framework_of(params) == framework else None
    if framework is not None:     # the spec and groups as read on the target (across)
        saved = across(saved, framework, [n for n, _ in named], model, transform)
    optimizer = build(saved.spec, params, groups=list(saved.groups) or None,
                      path=path_taken, prefer=prefer)
    load_state(optimizer, path, transform=transform, model=model)
    return optimizer
