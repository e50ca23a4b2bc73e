"""The kernels' speed does not depend on the data, counted, not timed.

``benchmarks/algorithm_step_time.py`` times every algorithm of its table on random-sign
and on constant gradients (its "data independence" rows: within 1.3x). Timings flake on
a shared machine; this test checks the same thing deterministically: valgrind's callgrind
runs one step of the kernel VM and of each program's generated kernel
(``tests/kernel_driver.cc``, one thread) and counts the instructions executed and the
conditional branches its branch predictor model mispredicts. A data-dependent branch in
an element loop mispredicts about once per two elements on random signs and almost never
on constant data; branch-free code (selects and blends) mispredicts the same on both.
Instruction counts are the same for the same binary and input whatever else runs.

valgrind has no AVX-512, so the libraries are compiled here for x86-64-v3 (AVX2) rather
than this machine's CPU: the same source, the same branches or none.
"""

from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest
from kernel_counts import (
    DRIVER,
    INSTRUCTIONS,
    MISSES_PER_ELEMENT,
    SHAPE,
    TABLE,
    counts,
    job,
    libraries,
)

from unified_opt.kernels import build

try:
    build._compiler()
except build.KernelUnavailable as error:
    pytest.skip(f"no C++ compiler here: {error}", allow_module_level=True)
if shutil.which("valgrind") is None:
    pytest.skip("valgrind is not installed", allow_module_level=True)
if build.platform.machine() not in ("x86_64", "AMD64"):
    pytest.skip("the libraries are compiled for x86-64-v3", allow_module_level=True)


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    out = tmp_path_factory.mktemp("driver") / "driver"
    subprocess.run([*build._compiler(), "-O2", "-std=c++17", "-o", str(out), str(DRIVER),
                    "-ldl"], check=True)
    return out


@pytest.mark.parametrize("name", TABLE)
def test_a_step_executes_the_same_on_random_signs_as_on_constant_gradients(
        driver, tmp_path, name):
    spec = TABLE[name]
    constant, code = job(tmp_path / "constant.job", spec, "constant")
    random, _ = job(tmp_path / "random.job", spec, "random")
    elements = int(np.prod(SHAPE))
    for kind, library in libraries(code).items():
        c = counts(driver, library, constant, tmp_path / f"{kind}.constant.out")
        r = counts(driver, library, random, tmp_path / f"{kind}.random.out")
        assert c["Ir"] > elements, (name, kind, c)        # the step was counted
        extra = (r["Bcm"] - c["Bcm"]) / elements
        assert extra <= MISSES_PER_ELEMENT, (
            f"{name} on the {kind}: {extra:.3f} more mispredicted branches per element on "
            f"random signs ({r['Bcm']} vs {c['Bcm']})")
        assert r["Ir"] <= INSTRUCTIONS * c["Ir"], (name, kind, r["Ir"], c["Ir"])
