"""Files a user keeps, written atomically.

A state file, a converted checkpoint, a conformance report or a trajectory is written
into a temporary file in the target's own folder, flushed and ``fsync``-ed, then moved
over the target with ``os.replace`` (atomic on POSIX within one file system), and the
folder is ``fsync``-ed so that the rename itself survives a power loss. A process killed
at any moment, or a full disk (``ENOSPC``, ``EFBIG`` under ``RLIMIT_FSIZE``), leaves
either the old file or the new one, never neither and never half of one; the temporary
file is removed when the write fails in this process, and one left by a killed process
is named ``.<target name>.<random>.partial`` beside the target.

The written file takes the umask's mode, as ``open()`` gives (``tempfile`` alone
would leave 0600). A symbolic link keeps being one: the file it names is replaced. A
device or a pipe (``-o /dev/null``, ``/dev/stdout``, a FIFO) is written through, never
replaced: a rename over ``/dev/null`` run as root would leave a regular file there.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import IO, Iterator

__all__ = ["atomic_writer", "fsync_folder", "write_bytes", "write_text", "PARTIAL_SUFFIX"]

#: the suffix of a temporary file that becomes the target when complete
PARTIAL_SUFFIX = ".partial"


def _umask_mode() -> int:
    # os.umask can only be read by setting it; set it straight back (one call pair,
    # under the GIL: no other Python thread runs in between)
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def fsync_folder(folder: Path) -> None:
    """Make a rename or a new file in ``folder`` durable (a no-op where a folder cannot
    be opened, as on some network file systems)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass            # e.g. EINVAL on a file system without folder fsync
    finally:
        os.close(fd)


def _special(path: Path) -> bool:
    """Whether ``path`` exists and is neither a regular file nor a folder."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


@contextlib.contextmanager
def atomic_writer(path, mode: str = "wb", encoding: str | None = None) -> Iterator[IO]:
    """An open file whose content replaces ``path`` when the ``with`` block ends without
    an error; on an error (or a kill) ``path`` keeps what it held before.

    ``mode`` is ``"wb"`` or ``"w"`` (text, ``encoding`` defaulting to UTF-8)."""
    if mode not in ("wb", "w"):
        raise ValueError(f"atomic_writer: mode is {mode!r}, not 'wb' or 'w'")
    target = Path(path)
    if target.is_symlink():
        target = target.resolve()        # the link stays; the file it names is replaced
    if _special(target):
        # a device or a pipe (/dev/null, /dev/stdout, a FIFO): written through; a rename
        # over it would put a regular file where the device was (as root, /dev/null)
        through: IO
        if mode == "wb":
            through = open(target, "wb")
        else:
            through = open(target, "w", encoding=encoding or "utf-8", newline="")
        with through:
            yield through
        return
    folder = target.parent
    fd, partial = tempfile.mkstemp(dir=folder, prefix=f".{target.name}.",
                                   suffix=PARTIAL_SUFFIX)
    try:
        handle: IO
        if mode == "wb":
            handle = os.fdopen(fd, "wb")
        else:
            handle = os.fdopen(fd, "w", encoding=encoding or "utf-8", newline="")
        with handle:
            os.fchmod(handle.fileno(), _umask_mode())
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, target)
    except BaseException:
        # a failed write (ENOSPC, an error while producing the content, KeyboardInterrupt):
        # the old file stays; the partial one goes
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise
    fsync_folder(folder)


def write_bytes(path, data: bytes | bytearray | memoryview) -> None:
    """``Path(path).write_bytes(data)``, atomically (see the module)."""
    with atomic_writer(path, "wb") as handle:
        handle.write(data)


def write_text(path, text: str, encoding: str = "utf-8") -> None:
    """``Path(path).write_text(text)``, atomically (see the module)."""
    with atomic_writer(path, "w", encoding=encoding) as handle:
        handle.write(text)


def write_pages(out, pages: dict[str, str]) -> list[Path]:
    """Each page's text written into folder ``out`` (made if needed) as ``out / name``,
    atomically and only where the text changed (an incremental docs build then rereads
    nothing else); the paths, in order."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in pages.items():
        path = out / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            write_text(path, text)
        written.append(path)
    return written
