"""The CPU fast path where no C++ compiler is installed (docs/kernels.md, "Without a
system compiler"): with ``c++``, ``g++`` and ``cc`` off PATH, the kernels are built by
the clang of the ``ziglang`` package (``unified-opt[compiler]``), without OpenMP's
runtime (std::thread instead). The same VM, the same generated kernels, the same bits as
with the system compiler; and their speed class: every program runs on its generated
kernel (not the VM, not eagerly), and one step of each executes at most 1.5x the
instructions of the system compiler's, both for this machine's CPU (callgrind, one
thread: counted, not timed; ``benchmarks/no_compiler.py`` times it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from kernel_counts import DRIVER, TABLE, counts, job

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
        code = runner.code_and_scalars(spec, p.shape, "float32", spec.lr_at(0), step)[0]
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
    jobs = {name: job(tmp_path / f"{name}.job", spec, "random", SHAPE)
            for name, spec in TABLE.items()}
    # zig's kernels as build.compiled makes them where no compiler is (zig's C++ runtime
    # depends on PATH: built once, 2 CPU-minutes), from the cache the test above filled
    libraries = {}
    env = _no_compiler_env(tmp_path, zig_cache)
    with monkeypatch.context() as patched:
        for key in ("PATH", "UNIFIED_OPT_CACHE"):
            patched.setenv(key, env[key])
        patched.delenv("CXX", raising=False)
        assert build._compiler().zig
        for name, (_, code) in jobs.items():
            libraries[name, "zig"] = build.compiled(kernel_source(code), "uo_kernel")
    system = build._compiler()
    assert not system.zig

    def instructions(name: str, label: str) -> int:
        job_file, code = jobs[name]
        if label == "system":
            # built as build.compiled builds it (OpenMP where the compiler has it, for
            # this machine's CPU), into a file of its own: two builds at a time
            library = libraries[name, label] = tmp_path / f"{name}.{label}.so"
            build._build(system, kernel_source(code), library, system.openmp, build.MARCH)
        return counts(driver, libraries[name, label], job_file,
                      tmp_path / f"{name}.{label}.out")["Ir"]

    pairs = [(name, label) for name in TABLE for label in ("system", "zig")]
    with ThreadPoolExecutor(2) as pool:
        steps = dict(zip(pairs, pool.map(lambda pair: instructions(*pair), pairs)))
    ratios = {name: steps[name, "zig"] / steps[name, "system"] for name in TABLE}
    print({k: round(v, 3) for k, v in ratios.items()})
    assert max(ratios.values()) <= SPEED_CLASS, ratios
    assert np.isfinite(list(ratios.values())).all()
