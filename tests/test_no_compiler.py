"""The CPU fast path where no C++ compiler is installed (docs/kernels.md, "Without a
system compiler"): with ``c++``, ``g++`` and ``cc`` off PATH, the kernels are built by
the clang of the ``ziglang`` package (``unified-opt[compiler]``), without OpenMP's
runtime (std::thread instead). The same VM, the same generated kernels, the same bits as
with the system compiler; and their speed class: every program runs on its generated
kernel (not the VM, not eagerly), and one step of each executes at most 1.5x the
instructions of the system compiler's (callgrind, one thread: counted, not timed;
``benchmarks/no_compiler.py`` times it).

The count compares both compilers' builds for this machine's CPU (``-march=native``:
zig's kernels are then the bits test's, and zig's C++ runtime, 2 CPU-minutes cold per
PATH and CPU, is built once). Where valgrind cannot run that build (it decodes no
AVX-512: callgrind dies with SIGILL on a CPU that has it, as valgrind 3.19 on an AMD EPYC
with avx512_bf16 did), both sides are built for x86-64-v3 (``kernel_counts.MARCH``) and
counted again; where callgrind cannot run that either, the test skips, naming why."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from kernel_counts import DRIVER, MARCH, TABLE, CannotCount, counts, job

from unified_opt.kernels import build
from unified_opt.kernels.codegen import kernel_source

pytest.importorskip("ziglang", reason="the no-compiler path needs unified-opt[compiler]")
pytestmark = pytest.mark.slow

#: the system compiler's step over the zig-built kernel's, in instructions
SPEED_CLASS = 1.5
#: the parameter of both tests: rank 3, 180,000 elements (every thread has work)
SHAPE = (3, 200, 300)

_SCRIPT = """
import hashlib, json
import numpy as np
import unified_opt as uo
from unified_opt.kernels import build, runtime
from unified_opt.kernels.runtime import KernelRunner, run_numpy
from unified_opt.ops import numpy_ops
import sys
TABLE = {k: uo.spec_from_dict(d) for k, d in json.loads(sys.argv[1]).items()}
SHAPE = tuple(json.loads(sys.argv[2]))
runner = KernelRunner(specialize=True)
out = {"compiler": list(build._compiler()), "digests": {}, "on_kernels": True}
for name, spec in TABLE.items():
    rng = np.random.default_rng(0)
    p = rng.normal(size=SHAPE).astype(np.float32)
    state = {k: np.array(v, order="C") for k, v in spec.init(p, numpy_ops).items()}
    for step in range(1, 4):
        g = rng.normal(size=p.shape).astype(np.float32)
        run_numpy(runner, spec, p, g, state, lr=spec.lr_at(0), step=step)
        # the program the runner ran (a rank-blind update's: its 1-D program)
        code = runner.program(spec, p.shape, "float32", spec.lr_at(0), step)[1]
        out["on_kernels"] &= code.tobytes() in runtime._kernels
    digest = hashlib.sha256(p.tobytes())
    for k in sorted(state):
        digest.update(state[k].tobytes())
    out["digests"][name] = digest.hexdigest()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def zig_cache(tmp_path_factory):
    """The kernel cache of the zig builds, this module's (its tests run in one process,
    one after the other): the speed-class test finds the libraries of the bits test (zig
    takes 4 to 23 s a kernel, most of it linking its C++ runtime in)."""
    return tmp_path_factory.mktemp("zig-kernels")


def _no_compiler_env(tmp_path, cache) -> dict:
    """The environment without a compiler: PATH an empty folder, no CXX, ``cache`` the
    kernel cache."""
    empty = tmp_path / "bin"
    empty.mkdir()
    env = dict(os.environ, PATH=str(empty), UNIFIED_OPT_CACHE=str(cache), OMP_NUM_THREADS="2")
    env.pop("CXX", None)
    return env


def test_without_a_compiler_the_kernels_run_with_the_same_bits(tmp_path, zig_cache):
    env = _no_compiler_env(tmp_path, zig_cache)
    for tool in ("c++", "g++", "cc"):
        assert shutil.which(tool, path=env["PATH"]) is None
    table = json.dumps({k: spec.to_dict() for k, spec in TABLE.items()})
    done = subprocess.run([sys.executable, "-c", _SCRIPT, table, json.dumps(SHAPE)], env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    there = json.loads(done.stdout.strip().splitlines()[-1])
    assert "ziglang" in there["compiler"], there["compiler"]
    assert there["on_kernels"], "a program ran without its generated kernel"
    # the system compiler's VM and kernels, here
    here = subprocess.run([sys.executable, "-c", _SCRIPT, table, json.dumps(SHAPE)],
                          capture_output=True, text=True,
                          timeout=900, env=dict(env, PATH=os.environ["PATH"],
                                                UNIFIED_OPT_CACHE=build.cache_dir().as_posix()))
    assert here.returncode == 0, here.stderr[-3000:]
    ours = json.loads(here.stdout.strip().splitlines()[-1])
    assert "ziglang" not in ours["compiler"]
    assert there["digests"] == ours["digests"]


@pytest.mark.skipif(shutil.which("valgrind") is None or shutil.which("c++") is None,
                    reason="counting needs valgrind and the system compiler to compare with")
def test_without_a_compiler_a_step_stays_in_the_fast_path_speed_class(tmp_path, zig_cache,
                                                                     monkeypatch):
    driver = tmp_path / "driver"
    subprocess.run(["c++", "-O2", "-std=c++17", "-o", str(driver), str(DRIVER), "-ldl"],
                   check=True)
    # the programs the test above ran, so that zig's kernels are in its cache
    jobs = {name: job(tmp_path / f"{name}.job", spec, "random", SHAPE, as_run=True)
            for name, spec in TABLE.items()}
    system = build._compiler()
    assert not system.zig
    env = _no_compiler_env(tmp_path, zig_cache)

    def zig_kernels(march: str) -> dict:
        # zig's kernels as build.compiled makes them where no compiler is (zig's C++
        # runtime depends on PATH and CPU: built once each, 2 CPU-minutes); for this
        # machine's CPU, from the cache the test above filled
        with monkeypatch.context() as patched:
            for key in ("PATH", "UNIFIED_OPT_CACHE"):
                patched.setenv(key, env[key])
            patched.delenv("CXX", raising=False)
            assert build._compiler().zig
            return {name: build.compiled(kernel_source(code), "uo_kernel", march)
                    for name, (_, code) in jobs.items()}

    def instructions(march: str) -> dict:
        """Each algorithm's step in instructions, system compiler and zig, built for
        ``march``: the system's first (CannotCount stops there, before zig builds)."""
        stop = threading.Event()

        def count(name: str, label: str, library) -> int:
            if stop.is_set():
                raise CannotCount("stopped: another library could not be counted")
            job_file, code = jobs[name]
            if label == "system":
                # built as build.compiled builds it (OpenMP where the compiler has it),
                # into a file of its own: two builds at a time
                library = tmp_path / f"{name}.{march}.system.so"
                build._build(system, kernel_source(code), library, system.openmp, march)
            try:
                return counts(driver, library, job_file,
                              tmp_path / f"{name}.{march}.{label}.out")["Ir"]
            except CannotCount:
                stop.set()
                raise

        steps = {}
        with ThreadPoolExecutor(2) as pool:
            steps.update(zip([(n, "system") for n in TABLE],
                             pool.map(lambda name: count(name, "system", None), TABLE)))
            zig = zig_kernels(march)
            steps.update(zip([(n, "zig") for n in TABLE],
                             pool.map(lambda name: count(name, "zig", zig[name]), TABLE)))
        return steps

    try:
        steps = instructions(build.MARCH)
    except CannotCount as native:
        # valgrind does not decode an instruction this CPU's build has (AVX-512): both
        # compilers' builds for a CPU valgrind runs (the first time: zig's C++ runtime
        # for it, 2 CPU-minutes)
        try:
            steps = instructions(MARCH)
        except CannotCount as portable:
            pytest.skip(f"callgrind cannot count here: -march={build.MARCH}: {native}; "
                        f"{MARCH}: {portable}")
    ratios = {name: steps[name, "zig"] / steps[name, "system"] for name in TABLE}
    print({k: round(v, 3) for k, v in ratios.items()})
    assert np.isfinite(list(ratios.values())).all()
    assert max(ratios.values()) <= SPEED_CLASS, ratios


@pytest.mark.skipif(shutil.which("valgrind") is None or shutil.which("c++") is None
                    or build.platform.machine() != "x86_64",
                    reason="needs valgrind and the system compiler, on x86-64")
def test_callgrind_dying_on_an_instruction_it_does_not_decode_is_named(tmp_path):
    """What the speed-class test falls back on: a library valgrind cannot run (here: built
    for x86-64-v4, AVX-512, which valgrind does not decode on any CPU) gives CannotCount
    quoting valgrind, not a failed count."""
    driver = tmp_path / "driver"
    subprocess.run(["c++", "-O2", "-std=c++17", "-o", str(driver), str(DRIVER), "-ldl"],
                   check=True)
    job_file, code = job(tmp_path / "adam.job", TABLE["adam"], "random", SHAPE)
    system = build._compiler()
    library = tmp_path / "adam.v4.so"
    try:
        build._build(system, kernel_source(code), library, system.openmp, "x86-64-v4")
    except build.KernelUnavailable as error:         # a compiler older than x86-64-v4
        pytest.skip(f"the system compiler builds nothing for x86-64-v4: {error}"[:300])
    try:
        counts(driver, library, job_file, tmp_path / "adam.v4.out")
    except CannotCount as error:
        assert "SIGILL on adam.v4.so" in str(error), error
        assert "unhandled instruction" in str(error), error
    else:
        pytest.skip("this valgrind runs x86-64-v4 code (AVX-512): nothing to fall back from")
