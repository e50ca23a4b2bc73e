"""Building the kernel VM (``vm.cc``) once per machine, and loading it.

The VM is C++ compiled with the system compiler (``$CXX``, else ``c++``) for this
machine's CPU (``-march=native``), with OpenMP where the compiler has it, into a cache
folder: ``$UNIFIED_OPT_CACHE``, else ``$XDG_CACHE_HOME/unified_opt``, else
``~/.cache/unified_opt``. The file's name holds a digest of the source, the flags, the
compiler's version and the CPU, so a new release, compiler or machine builds anew and
an old file is never loaded for the wrong one. Building takes about 3 s (2-core CPU);
processes that start together wait on a lock for the one that builds.

Flags: ``-O3`` and vectorisation; ``-ffp-contract=off`` keeps every ``a * b + c`` two
roundings, as numpy and the eager bindings compute it; no ``-ffast-math`` (NaN and
infinities follow IEEE); ``-fno-math-errno`` only lets ``sqrt`` vectorise.

Where no compiler runs, :func:`load` raises :class:`KernelUnavailable` with the
compiler's message; the own optimizers then run eagerly (``compile="auto"``) or refuse
(``compile=True``).
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("vm.cc")
#: what the VM and the generated kernels include
HEADER = Path(__file__).with_name("phases.h")
FLAGS = ["-O3", "-march=native", "-std=c++17", "-fPIC", "-shared", "-ffp-contract=off",
         "-fno-math-errno"]
OPENMP = ["-fopenmp"]

_loaded: ctypes.CDLL | None = None
_path: Path | None = None
_failure: str | None = None


class KernelUnavailable(RuntimeError):
    """The VM cannot be built or loaded on this machine (the message says why)."""


def cache_dir() -> Path:
    if os.environ.get("UNIFIED_OPT_CACHE"):
        return Path(os.environ["UNIFIED_OPT_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "unified_opt"


def _compiler() -> str:
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        raise KernelUnavailable(f"no C++ compiler: {compiler!r} is not on PATH (set CXX)")
    return compiler


def _cpu() -> str:
    """What -march=native depends on: the CPU's model and feature flags."""
    try:
        text = Path("/proc/cpuinfo").read_text()
        lines = [ln for ln in text.splitlines() if ln.startswith(("model name", "flags"))]
        return "\n".join(sorted(set(lines)))
    except OSError:
        return platform.processor() or platform.machine()


def library_path(source: str, stem: str, compiler: str, openmp: bool) -> Path:
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
    flags = " ".join(FLAGS + (OPENMP if openmp else []))
    digest = hashlib.sha256("\0".join(
        [source, HEADER.read_text(), flags, version, _cpu(),
         platform.machine()]).encode()).hexdigest()[:20]
    return cache_dir() / f"{stem}_{digest}.so"


def _build(compiler: str, source: str, target: Path, openmp: bool) -> None:
    source_file = target.with_suffix(".cc")
    source_file.write_text(source)
    with tempfile.NamedTemporaryFile(dir=target.parent, suffix=".so", delete=False) as tmp:
        partial = Path(tmp.name)
    command = [compiler, *FLAGS, *(OPENMP if openmp else []), f"-I{HEADER.parent}", "-o",
               str(partial), str(source_file)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        raise KernelUnavailable(f"compiling {source_file.name} failed ({' '.join(command)}): "
                                f"{done.stderr.strip()[-2000:]}")
    os.replace(partial, target)        # atomic: a reader never sees half a library


def compiled(source: str, stem: str) -> Path:
    """The shared library of C++ ``source`` (including ``phases.h``), compiled into the
    cache unless it is there (see the module); with OpenMP where the compiler has it."""
    compiler = _compiler()
    for openmp in (True, False):         # without OpenMP: one thread, same numbers
        target = library_path(source, stem, compiler, openmp)
        if target.exists():
            return target
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target.parent / ".lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)      # one process builds, the others wait
                if not target.exists():
                    _build(compiler, source, target, openmp)
            return target
        except KernelUnavailable:
            if not openmp:
                raise
        except OSError as error:     # a read-only or full cache: not OpenMP's fault
            raise KernelUnavailable(f"the kernel cache {target.parent} cannot be written "
                                    f"(set UNIFIED_OPT_CACHE to another folder): {error}"
                                    ) from error
    raise AssertionError("unreachable")


def _open(path: Path) -> ctypes.CDLL:
    try:
        return ctypes.CDLL(str(path))
    except OSError as error:         # e.g. a cache on a noexec file system
        raise KernelUnavailable(f"{path} cannot be loaded (set UNIFIED_OPT_CACHE to a "
                                f"folder whose libraries can be loaded): {error}") from error


def library() -> Path:
    """The VM library's file, built on first use (see the module): what MindSpore's AOT
    custom operators load (the same library, so the same registered kernels)."""
    load()
    return _path


def load() -> ctypes.CDLL:
    """The VM library, built on first use (see the module)."""
    global _loaded, _failure
    if _loaded is not None:
        return _loaded
    if _failure is not None:
        raise KernelUnavailable(_failure)
    global _path
    try:
        _path = compiled(SOURCE.read_text(), "uo_vm")
        _loaded = _bind(_open(_path))
    except KernelUnavailable as error:
        _failure = str(error)
        raise
    return _loaded


def load_kernel(source: str) -> ctypes.CDLL:
    """A generated kernel (:mod:`.codegen`), compiled on first use."""
    library = _open(compiled(source, "uo_kernel"))
    pointer = ctypes.c_void_p
    library.uo_kernel_run.restype = ctypes.c_int
    library.uo_kernel_run.argtypes = [ctypes.c_int, pointer, pointer, pointer]
    return library


def _bind(library: ctypes.CDLL) -> ctypes.CDLL:
    pointer, i64 = ctypes.c_void_p, ctypes.c_int64
    library.uo_vm_run.restype = ctypes.c_int
    library.uo_vm_run.argtypes = [ctypes.c_int, pointer, i64, pointer, pointer, pointer]
    library.uo_vm_register.restype = None
    library.uo_vm_register.argtypes = [pointer, i64, pointer]
    return library
