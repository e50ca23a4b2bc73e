"""The kernel cache cleans up after a killed compile and a full disk
(``unified_opt/kernels/build.py``, its module docstring: "Clean-up"): no compiler
outlives the Python process that started it, even one killed by SIGKILL; the next build
removes what a killed one left and succeeds; a full disk (``RLIMIT_FSIZE``: ``EFBIG``)
gives ``KernelUnavailable`` with the reason, a warning on ``compile="auto"``, and leaves
no empty source, no partial library."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from unified_opt.kernels import build

pytestmark = pytest.mark.skipif(not Path("/proc/self/cmdline").exists(),
                                reason="finding the compiler's processes reads /proc")

#: a source that compiles in a fraction of a second, about 2 kB (see the full-disk test)
TINY = "// " + "x" * 2000 + '\nextern "C" int uo_test_answer() { return 42; }\n'


def _system_compiler() -> build.Compiler:
    try:
        compiler = build._compiler()
    except build.KernelUnavailable as error:
        pytest.skip(f"no compiler here: {error}")
    if compiler.zig:
        pytest.skip("zig's clang only here (its first build on a machine takes minutes)")
    return compiler


def _processes_naming(folder: Path, besides: int) -> dict[int, str]:
    """The live (not zombie) processes other than ``besides`` whose command line names
    ``folder``: the compiler's driver and the compiler proper."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == besides:
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue                         # gone meanwhile
        if str(folder) in command and state != "Z":
            found[int(entry.name)] = command
    return found


def _short(processes: dict[int, str]) -> dict[int, str]:
    return {pid: command[:100] for pid, command in processes.items()}


def _leftovers(folder: Path) -> list[str]:
    """What a build must not leave: a work folder, a partial file, an empty file (the
    lock file is empty by design)."""
    return sorted(entry.name for entry in folder.iterdir()
                  if entry.name.startswith(build.WORK_PREFIX)
                  or entry.name.endswith(".partial")
                  or (entry.is_file() and entry.name != ".lock"
                      and entry.stat().st_size == 0))


def test_a_compile_killed_midway_leaves_no_compiler_and_the_next_build_cleans_up(
        tmp_path, monkeypatch):
    _system_compiler()
    cache = tmp_path / "cache"
    child = subprocess.Popen(
        [sys.executable, "-c", "from unified_opt.kernels import build; build.load()"],
        env=dict(os.environ, UNIFIED_OPT_CACHE=str(cache)))
    try:
        deadline = time.monotonic() + 60
        while not (compilers := _processes_naming(cache, child.pid)):
            assert child.poll() is None, "the child ended before its compiler was seen"
            assert time.monotonic() < deadline, "no compiler started within 60 s"
            time.sleep(0.01)
        time.sleep(0.3)            # into the compile (the VM takes seconds)
        compilers.update(_processes_naming(cache, child.pid))
        assert child.poll() is None, "the build ended before the kill"
    finally:
        child.kill()                   # SIGKILL: no Python code of the child runs
        child.wait()
    assert child.returncode == -signal.SIGKILL
    deadline = time.monotonic() + 60
    while (left := _processes_naming(cache, child.pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not left, (f"compiler processes outlived their Python: {_short(left)} "
                      f"(of {_short(compilers)})")
    # what the killed build left: its work folder, without the library (a compiler left
    # running, orphaned, would have linked it there by now)
    works = [p for p in cache.iterdir() if p.name.startswith(build.WORK_PREFIX)]
    assert len(works) == 1, works
    assert not list(works[0].glob("*.so")), "the killed build's compiler ran on to the end"
    # and what a killed atomic write of the source and an earlier release's killed build
    # leave
    (cache / ".uo_vm_0123.cc.abcd1234.partial").write_text("// half a sou")
    (cache / "tmpab_cd123.so").write_bytes(b"\x7fELF")
    # the next build into the cache (any source: the clean-up is the folder's)
    monkeypatch.setenv("UNIFIED_OPT_CACHE", str(cache))
    library = build.compiled(TINY, "uo_test")
    assert library.parent == cache and library.stat().st_size > 0
    assert _leftovers(cache) == []
    assert not (cache / "tmpab_cd123.so").exists()
    assert build._open(library).uo_test_answer() == 42


_FULL_DISK = r"""
import resource, signal, sys, warnings
from unified_opt.kernels import build
from unified_opt.kernels.runtime import KernelPath
limit = int(sys.argv[1])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)       # write() fails with EFBIG instead
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
try:
    build.compiled(sys.argv[2], "uo_test")
    print("built")
except build.KernelUnavailable as error:
    print("KernelUnavailable:", str(error).replace("\n", " "))
if limit < 1000:                  # the VM's source (12 kB) cannot be written either
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        print("runner:", KernelPath("auto", "test").runner())
    print("warned:", [str(w.message) for w in caught if w.category is RuntimeWarning])
    try:
        KernelPath(True, "test").runner()
    except build.KernelUnavailable as error:
        print("compile=True:", str(error).replace("\n", " "))
"""


@pytest.mark.parametrize("limit, fails_at", [(500, "source"), (6000, "link")])
def test_a_full_disk_gives_the_reason_and_leaves_no_partial_file(tmp_path, limit, fails_at):
    """``RLIMIT_FSIZE`` at ``limit`` bytes: below the 2 kB source (its write fails), or
    above it and below the library (the linker's write fails)."""
    compiler = _system_compiler()
    cache = tmp_path / "cache"
    done = subprocess.run([sys.executable, "-c", _FULL_DISK, str(limit), TINY],
                          env=dict(os.environ, UNIFIED_OPT_CACHE=str(cache)),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    error = lines["KernelUnavailable"]
    if fails_at == "source":
        assert f"the kernel cache {cache} cannot be written" in error, error
        assert "File too large" in error, error
        assert lines["runner"] == "None"
        assert "compile='auto' found no kernel VM" in lines["warned"], lines["warned"]
        assert "File too large" in lines["warned"]
        assert "File too large" in lines["compile=True"]
        assert sorted(p.name for p in cache.iterdir()) == [".lock"]
    else:
        assert "compiling uo_test_" in error and "failed" in error, error
        # the linker's words for it (gcc's collect2: "File size limit exceeded")
        assert "File size limit exceeded" in error or "File too large" in error, error
        sources = sorted(cache.glob("*.cc"))
        # both builds were tried (with OpenMP, then without), each source whole
        assert len(sources) == (2 if compiler.openmp else 1)
        assert all(p.read_text() == TINY for p in sources)
        assert not list(cache.glob("*.so"))
    assert _leftovers(cache) == []


def test_a_compile_interrupted_in_this_process_kills_its_compiler(tmp_path, monkeypatch):
    """A KeyboardInterrupt while the compiler runs kills its process group at once and
    removes the work folder (the ``finally`` of :func:`build._build`)."""
    compiler = _system_compiler()
    cache = tmp_path / "cache"
    cache.mkdir()
    seen = {}

    def interrupt(*_):
        raise KeyboardInterrupt

    def interrupt_when_compiling():
        # SIGALRM to this (the main) thread once the compiler runs: its handler raises
        deadline = time.monotonic() + 60
        while not seen and time.monotonic() < deadline:
            seen.update(_processes_naming(cache, os.getpid()))
            time.sleep(0.01)
        time.sleep(0.2)                   # into the compile (the VM takes seconds)
        signal.pthread_kill(threading.main_thread().ident, signal.SIGALRM)

    removed = []                    # what the work folder held when it was removed
    remove = shutil.rmtree

    def recorded_rmtree(path, *args, **kwargs):
        removed.append(sorted(os.listdir(path)))
        return remove(path, *args, **kwargs)

    monkeypatch.setattr(build.shutil, "rmtree", recorded_rmtree)
    previous = signal.signal(signal.SIGALRM, interrupt)
    watcher = threading.Thread(target=interrupt_when_compiling)
    try:
        watcher.start()
        with pytest.raises(KeyboardInterrupt):
            build._build(compiler, build.SOURCE.read_text(), cache / "uo_vm_test.so",
                         compiler.openmp)
    finally:
        watcher.join()
        signal.signal(signal.SIGALRM, previous)
    # killed, not waited for: the compiler never got to write the library
    assert len(removed) == 1 and "uo_vm_test.so" not in removed[0], removed
    assert seen, "the compiler was not running at the interrupt"
    deadline = time.monotonic() + 5          # a SIGKILL-ed process takes a moment to go
    while (left := _processes_naming(cache, os.getpid())) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not left, f"compiler processes outlived the interrupt: {_short(left)}"
    assert _leftovers(cache) == []
    assert sorted(p.name for p in cache.iterdir()) == ["uo_vm_test.cc"]
