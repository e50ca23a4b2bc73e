"""Building the kernel VM (``vm.cc``) once per machine, and loading it.

The VM is C++ compiled with the system compiler (``$CXX``, else ``c++``; where neither
is there, the clang of the ``ziglang`` package, ``pip install unified-opt[compiler]``,
which has no OpenMP runtime) for this machine's CPU (``-march=native``), with
``-fopenmp`` where the compiler has it (``-fopenmp-simd`` otherwise: the ``simd``
pragmas; no parallel region uses OpenMP's runtime: a parallel phase runs on
``phases.h``'s own pool of threads, which sleep between loops instead of spinning),
into a cache folder: ``$UNIFIED_OPT_CACHE``, else ``$XDG_CACHE_HOME/unified_opt``, else
``~/.cache/unified_opt``. The file's name holds a digest of the source, the flags, the
compiler's version and the CPU, so a new release, compiler or machine builds anew and
an old file is never loaded for the wrong one. Building takes about 3 s (2-core CPU);
processes that start together wait on a lock for the one that builds.

Flags: ``-O3`` and vectorisation; ``-ffp-contract=off`` keeps every ``a * b + c`` two
roundings, as numpy and the eager bindings compute it; no ``-ffast-math`` (NaN and
infinities follow IEEE); ``-fno-math-errno`` only lets ``sqrt`` vectorise.

Where no compiler runs (none on PATH and no ziglang), :func:`load` raises
:class:`KernelUnavailable` with the compiler's message; the own optimizers then run
eagerly (``compile="auto"``, with a warning) or refuse (``compile=True``).

Clean-up (:func:`_build`): the cache never holds a file under its final name that is
not complete. The source ``<stem>_<digest>.cc`` is written atomically
(:func:`unified_opt.files.write_text`); the compiler writes the library, and its own
temporary files (``TMPDIR``), into a work folder ``.partial-build.<pid>.<random>``
beside it, the library is ``fsync``-ed and moved to its name with ``os.replace``, and
the work folder is removed whether the build succeeded or failed (a full disk: the
compiler's message, ``ENOSPC`` or ``EFBIG``, in :class:`KernelUnavailable`; no
partial file left). The compiler runs in a process group of its own, watched by a ``/bin/sh`` that
reads a pipe only this process writes: when this process dies in any way (SIGKILL
included, where no Python code runs), the pipe closes and the watcher kills the
compiler's whole group (the driver and its ``cc1plus``, ``as``, ``ld``), so no compiler
outlives it; a KeyboardInterrupt kills the group at once. (Not ``PR_SET_PDEATHSIG``: it
reaches the driver only, not the ``cc1plus`` it starts, and needs a ``preexec_fn``,
unsafe in a threaded process, where kernels compile in a background thread. Limits: a
process forked without an exec while the compiler runs (``multiprocessing``'s "fork")
holds the pipe too, so the watcher waits for it as well; a kill in the instant between
the compiler's start and the watcher's leaves the compiler to finish on its own.) Every
build holds the cache's lock (``.lock``), so a work folder or a ``.cc`` partial found
by a process holding it was left by a killed one: :func:`compiled` removes them before
it builds.

Priority: a generated kernel compiled in the background (``compile="auto"``: the VM runs
the program meanwhile) runs its compiler at nice 19 (:func:`lowest_priority_command`,
set before the compiler's exec, so ``cc1plus``, ``as`` and ``ld`` inherit it): on a
machine with as many busy threads as cores the training step keeps the cores. A build
that a step waits for (the VM's, ``compile=True``'s kernels) runs at the caller's
priority.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import importlib.util
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from ..devices import cpu_info
from ..files import PARTIAL_SUFFIX, fsync_folder, write_text
from .bytecode import FUNCTIONS

SOURCE = Path(__file__).with_name("vm.cc")
#: what the VM and the generated kernels include (abi.h: generated from bytecode.py)
HEADER = Path(__file__).with_name("phases.h")
HEADERS = (HEADER, *(Path(__file__).with_name(name)
                     for name in ("abi.h", "numbers.h", "threads.h", "walk.h")))
#: the CPU the code is compiled for: this machine's, unless a build names another
#: (:mod:`.prebuilt` builds the VM for several x86-64 levels)
MARCH = "native"
FLAGS = ["-O3", "-std=c++17", "-fPIC", "-shared", "-ffp-contract=off", "-fno-math-errno"]
OPENMP = ["-fopenmp"]
#: the name of a build's work folder in the cache starts so (then the builder's pid)
WORK_PREFIX = ".partial-build."
#: the shell of the watcher that kills a compiler whose Python died (see the module)
SHELL = "/bin/sh"

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
    no OpenMP runtime there, which the threads do not use anyway; same code, same bits)."""
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
    model, cpu_flags = cpu_info()
    if model is None and not cpu_flags:
        return platform.processor() or platform.machine()
    return f"{model}\n{' '.join(sorted(cpu_flags))}"


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
           march: str = MARCH, lowest_priority: bool = False) -> None:
    """Compile ``source`` into ``target`` (see the module's clean-up: the source written
    atomically, the library and the compiler's temporary files in a work folder removed
    in every case, the compiler killed with this process)."""
    folder = target.parent
    source_file = target.with_suffix(".cc")
    write_text(source_file, source)
    work = Path(tempfile.mkdtemp(dir=folder, prefix=f"{WORK_PREFIX}{os.getpid()}."))
    try:
        partial = work / target.name
        command = [*compiler, *flags(march, openmp, compiler.zig), f"-I{HEADER.parent}",
                   "-o", str(partial), str(source_file)]
        returncode, stderr = _run_compiler(command, dict(os.environ, TMPDIR=str(work)),
                                           lowest_priority)
        if returncode != 0:
            raise KernelUnavailable(f"compiling {source_file.name} failed "
                                    f"({' '.join(command)}): {stderr.strip()[-2000:]}")
        with open(partial, "rb") as library_file:
            os.fsync(library_file.fileno())   # complete on disk before it takes the name
        os.replace(partial, target)        # atomic: a reader never sees half a library
        fsync_folder(folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)


#: run by this interpreter before the compiler (argv: the compiler's command): the lowest
#: CPU priority (nice 19), set before the exec, so every process the compiler starts
#: (``cc1plus``, ``as``, ``ld``) inherits it; where the system has no priorities
#: (``os.setpriority`` missing) it just runs the command
LOWEST_PRIORITY = ("import os, sys\n"
                   "if hasattr(os, 'setpriority'):\n"
                   "    os.setpriority(os.PRIO_PROCESS, 0, 19)\n"
                   "os.execvp(sys.argv[1], sys.argv[1:])\n")


def lowest_priority_command(command: list) -> list:
    """``command`` started at the lowest CPU priority (:data:`LOWEST_PRIORITY`): nice
    19, not SCHED_IDLE, so that a kernel still lands on a machine whose other jobs keep
    every core busy, while a training step at the default priority gets nearly all the
    CPU it would get without the compile (a nice-19 process weighs 15 against a nice-0
    one's 1024 in Linux's scheduler)."""
    return [sys.executable, "-I", "-S", "-c", LOWEST_PRIORITY, *command]


def _run_compiler(command: list, env: dict, lowest_priority: bool = False
                  ) -> tuple[int, str]:
    """Run ``command`` in a process group of its own under a watcher that kills the
    group when this process dies (see the module), at the lowest CPU priority where
    ``lowest_priority`` (a background build: :func:`lowest_priority_command`);
    ``(exit status, stderr)``."""
    if lowest_priority:
        command = lowest_priority_command(command)
    compiler = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, env=env, text=True,
                                start_new_session=True)
    watcher = None
    try:
        # `read` returns true on the line written below when the compiler is done, false
        # at the end of the pipe: this process died (its end closed by the kernel); a
        # negative pid names a group (dash's `kill` takes no `--` before it)
        watcher = subprocess.Popen(
            [SHELL, "-c", 'read done || kill -KILL "-$1" 2>/dev/null', "uo-watch",
             str(compiler.pid)], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True)
        _, stderr = compiler.communicate()
    except BaseException:
        # a KeyboardInterrupt (or any error) here: the whole group goes now
        with contextlib.suppress(OSError):
            os.killpg(compiler.pid, signal.SIGKILL)
        compiler.wait()
        raise
    finally:
        if watcher is not None:
            with contextlib.suppress(OSError):
                watcher.stdin.write(b"done\n")
                watcher.stdin.close()
            watcher.wait()
    return compiler.returncode, stderr


#: the partial library of a killed build of releases before the work folders
#: (``tempfile``'s name: "tmp", 8 characters)
_OLD_PARTIAL = re.compile(r"tmp[a-z0-9_]{8}\.so")


def _remove_partials(folder: Path) -> None:
    """Remove the work folders and the ``.cc`` partial files of killed builds from the
    cache ``folder`` (called holding its lock: no build is running, see the module), and
    the partial libraries that earlier releases' killed builds left."""
    for entry in folder.iterdir():
        name = entry.name
        if name.startswith(WORK_PREFIX) and entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        elif ((name.startswith(".") and name.endswith(PARTIAL_SUFFIX) and ".cc." in name)
              or _OLD_PARTIAL.fullmatch(name)):
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                entry.unlink()


def compiled(source: str, stem: str, march: str = MARCH, lowest_priority: bool = False
             ) -> Path:
    """The shared library of C++ ``source`` (including ``phases.h``), compiled into the
    cache unless it is there (see the module); with OpenMP where the compiler has it;
    the compiler at the lowest CPU priority where ``lowest_priority`` (a background
    build, :func:`lowest_priority_command`)."""
    compiler = _compiler()
    for openmp in (True, False) if compiler.openmp else (False,):
        # without OpenMP: the same code, the same numbers
        target = library_path(source, stem, compiler, openmp, march)
        if target.exists():
            return target
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target.parent / ".lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)      # one process builds, the others wait
                if not target.exists():
                    _remove_partials(target.parent)
                    _build(compiler, source, target, openmp, march, lowest_priority)
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


def load_kernel(source: str, march: str = MARCH, lowest_priority: bool = False
                ) -> ctypes.CDLL:
    """A generated kernel (:mod:`.codegen`), compiled on first use (at the lowest CPU
    priority where ``lowest_priority``: a background build, see :func:`compiled`)."""
    return _bind(_open(compiled(source, "uo_kernel", march, lowest_priority)),
                 ("uo_kernel_run", "uo_kernel_set_threads", "uo_kernel_threads",
                  "uo_kernel_set_tile"))


#: C types of bytecode.FUNCTIONS as ctypes
_CTYPES = {"int": ctypes.c_int, "int64_t": ctypes.c_int64, "void": None}


def _bind(library: ctypes.CDLL, names=("uo_vm_version", "uo_vm_run", "uo_vm_register",
                                       "uo_vm_set_threads", "uo_vm_threads", "uo_vm_set_tile")
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
