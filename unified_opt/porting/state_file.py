"""The state file: a :class:`~.snapshot.Snapshot` written to and read from one
safetensors file (an 8-byte header length, a JSON header, the raw little-endian arrays),
readable by the ``safetensors`` package: no code runs on load, no pickle. What it holds:
:mod:`.state_encoding`.

Both directions stream: the digest is fed one array at a time and each array is written
from its own memory (through :func:`unified_opt.files.atomic_writer`: a failed write or a
kill leaves the old file whole), and each array is read from its byte range straight into
the array returned; the memory beyond the state is the JSON header.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np

from ..files import atomic_writer
from .snapshot import FILE_DTYPES, Snapshot
from .state_encoding import _raw, decoded, encoded

#: the function named in a reading error (files are read to be loaded)
CALLER = "load_state"

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
    metadata, tensors = encoded(s)
    names = {dtype: name for name, dtype in FILE_DTYPES.items()}
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
    return decoded(metadata, tensors, caller=CALLER, what=repr(str(path)), kind="file")
