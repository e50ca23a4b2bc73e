"""Building the kernel VM (``vm.cc``) once per machine, and loading it.

The VM is C++ compiled with the system compiler (``$CXX``, else ``c++``; where neither
is there, the clang of the ``ziglang`` package, ``pip install unified-opt[compiler]``,
without OpenMP's runtime: ``phases.h`` then runs its threads on std::thread) for this
machine's CPU (``-march=native``), with OpenMP where the compiler has it, into a cache
folder: ``$UNIFIED_OPT_CACHE``, else ``$XDG_CACHE_HOME/unified_opt``, else
``~/.cache/unified_opt``. The file's name holds a digest of the source, the flags, the
compiler's version and the CPU, so a new release, compiler or machine builds anew and
an old file is never loaded for the wrong one. Building takes about 3 s (2-core CPU);
processes that start together wait on a lock for the one that builds.

Flags: ``-O3`` and vectorisation; ``-ffp-contract=off`` keeps every ``a * b + c`` two
roundings, as numpy and the eager bindings compute it; no ``-ffast-math`` (NaN and
infinities follow IEEE); ``-fno-math-errno`` only lets ``sqrt`` vectorise.

Where no compiler runs (none on PATH and no ziglang), :func:`load` raises
:class:`KernelUnavailable` with the compiler's message; the own optimizers then run
eagerly (``compile="auto"``) or refuse (``compile=True``).
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import importlib.util
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .bytecode import FUNCTIONS

SOURCE = Path(__file__).with_name("vm.cc")
#: what the VM and the generated kernels include (abi.h: generated from bytecode.py)
HEADER = Path(__file__).with_name("phases.h")
HEADERS = (HEADER, Path(__file__).with_name("abi.h"))
#: the CPU the code is compiled for: this machine's, unless a build names another
#: (:mod:`.prebuilt` builds the VM for several x86-64 levels)
MARCH = "native"
FLAGS = ["-O3", "-std=c++17", "-fPIC", "-shared", "-ffp-contract=off", "-fno-math-errno"]
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


class Compiler(tuple):
    """A compiler's command (a tuple of words), whether it has OpenMP's runtime, and
    whether it is zig's clang (which names a CPU other than this one ``-mcpu=x86_64_v3``
    where gcc and clang say ``-march=x86-64-v3``)."""

    openmp: bool = True
    zig: bool = False


def _compiler() -> Compiler:
    """``$CXX`` (words, as a shell splits them); else ``c++`` on PATH; else the clang in
    the ``ziglang`` package where it is installed (``pip install unified-opt[compiler]``:
    no OpenMP runtime there, so the threads are std::thread's; same code, same bits)."""
    if os.environ.get("CXX"):
        words = shlex.split(os.environ["CXX"])
        if not words or shutil.which(words[0]) is None:
            raise KernelUnavailable(f"no C++ compiler: {os.environ['CXX']!r} is not on PATH "
                                    "(set CXX)")
        return Compiler(words)
    if shutil.which("c++") is not None:
        return Compiler(["c++"])
    if importlib.util.find_spec("ziglang") is not None:
        return zig_compiler()
    raise KernelUnavailable("no C++ compiler: 'c++' is not on PATH (set CXX, or install "
                            "unified-opt[compiler], the clang of the ziglang package)")


def zig_compiler() -> Compiler:
    """The clang of the ``ziglang`` package (see :func:`_compiler`)."""
    zig = Compiler([sys.executable, "-m", "ziglang", "c++"])
    zig.openmp, zig.zig = False, True
    return zig


_versions: dict = {}


def _version(compiler: Compiler) -> str:
    if compiler not in _versions:
        _versions[compiler] = subprocess.run([*compiler, "--version"], capture_output=True,
                                             text=True).stdout
    return _versions[compiler]


def _cpu() -> str:
    """What -march=native depends on: the CPU's model and feature flags."""
    try:
        text = Path("/proc/cpuinfo").read_text()
        lines = [ln for ln in text.splitlines() if ln.startswith(("model name", "flags"))]
        return "\n".join(sorted(set(lines)))
    except OSError:
        return platform.processor() or platform.machine()


def flags(march: str = MARCH, openmp: bool = True, zig: bool = False) -> list[str]:
    """The compiler's flags for code for CPU ``march`` (see the module); without OpenMP
    its ``simd`` pragmas still vectorise."""
    cpu = (f"-mcpu={march.replace('-', '_')}" if zig and march != "native"
           else f"-march={march}")
    return [*FLAGS, cpu, *(OPENMP if openmp else ["-fopenmp-simd"])]


def library_path(source: str, stem: str, compiler: Compiler, openmp: bool,
                 march: str = MARCH) -> Path:
    version = _version(compiler)
    digest = hashlib.sha256("\0".join(
        [source, *(h.read_text() for h in HEADERS), " ".join(flags(march, openmp, compiler.zig)),
         version,
         _cpu() if march == "native" else march, platform.machine()]).encode()
    ).hexdigest()[:20]
    return cache_dir() / f"{stem}_{digest}.so"


def _build(compiler: Compiler, source: str, target: Path, openmp: bool,
           march: str = MARCH) -> None:
    source_file = target.with_suffix(".cc")
    source_file.write_text(source)
    with tempfile.NamedTemporaryFile(dir=target.parent, suffix=".so", delete=False) as tmp:
        partial = Path(tmp.name)
    command = [*compiler, *flags(march, openmp, compiler.zig), f"-I{HEADER.parent}", "-o",
               str(partial), str(source_file)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        raise KernelUnavailable(f"compiling {source_file.name} failed ({' '.join(command)}): "
                                f"{done.stderr.strip()[-2000:]}")
    os.replace(partial, target)        # atomic: a reader never sees half a library


def compiled(source: str, stem: str, march: str = MARCH) -> Path:
    """The shared library of C++ ``source`` (including ``phases.h``), compiled into the
    cache unless it is there (see the module); with OpenMP where the compiler has it."""
    compiler = _compiler()
    for openmp in (True, False) if compiler.openmp else (False,):
        # without OpenMP: std::thread, the same numbers
        target = library_path(source, stem, compiler, openmp, march)
        if target.exists():
            return target
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target.parent / ".lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)      # one process builds, the others wait
                if not target.exists():
                    _build(compiler, source, target, openmp, march)
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


def load_kernel(source: str, march: str = MARCH) -> ctypes.CDLL:
    """A generated kernel (:mod:`.codegen`), compiled on first use."""
    return _bind(_open(compiled(source, "uo_kernel", march)), ("uo_kernel_run",))


#: C types of bytecode.FUNCTIONS as ctypes
_CTYPES = {"int": ctypes.c_int, "int64_t": ctypes.c_int64, "void": None}


def _bind(library: ctypes.CDLL, names=("uo_vm_version", "uo_vm_run", "uo_vm_register")
          ) -> ctypes.CDLL:
    """Set the result and argument types of ``names`` from the one ABI
    (:data:`.bytecode.FUNCTIONS`: what abi.h declares)."""
    for name in names:
        result, arguments = FUNCTIONS[name]
        function = getattr(library, name)
        function.restype = _CTYPES[result]
        function.argtypes = [_CTYPES.get(t, ctypes.c_void_p) for t, _ in arguments]
    return library


if __name__ == "__main__":
    # `python -m unified_opt.kernels.build`: build the VM now (an image's build step, so
    # that no first step waits: with ziglang, its first build on a machine also builds
    # its C++ runtime, 1 to 3 minutes on 2 cores)
    print(library(), " ".join(_compiler()))
