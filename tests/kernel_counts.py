"""What tests/test_kernel_speed.py and tests/test_no_compiler.py share: the benchmark
table's specs, one step's job file for ``kernel_driver.cc`` and callgrind's counts of it."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import numpy as np

from unified_opt.kernels import build
from unified_opt.kernels.codegen import kernel_source
from unified_opt.kernels.runtime import Programs
from unified_opt.kernels.trace import canonical_dims
from unified_opt.ops import numpy_ops
from unified_opt.records import benchmarked

#: the algorithms of benchmarks/algorithm_step_time.py's table, its specs: the records'
#: benchmark specs
TABLE = benchmarked()
SHAPE = (32, 2048)                     # 65,536 elements: every element loop runs long
#: the CPU the counted libraries are built for: AVX2 and FMA, the newest that valgrind
#: (3.19 and later) decodes; it has no AVX-512, which a ``-march=native`` build has on
#: some CPUs (callgrind then dies with SIGILL: :class:`CannotCount`)
MARCH = "x86-64-v3"
DRIVER = Path(__file__).with_name("kernel_driver.cc")
#: mispredicted conditional branches per element that random signs may add: a branch
#: per element on the data costs about 0.5
MISSES_PER_ELEMENT = 0.01
#: instructions random signs may add
INSTRUCTIONS = 1.02


def job(path: Path, spec, gradient: str, shape: tuple = SHAPE, as_run: bool = False
        ) -> tuple[Path, np.ndarray]:
    """One step's job file (see kernel_driver.cc) on ``gradient`` ("constant": all ones,
    "random": standard normal, random signs) for a parameter of ``shape``, and the
    program's code: the parameter's own trace, or with ``as_run`` the program the kernel
    runtime runs for it (``Programs.program``: a rank-blind update's 1-D program)."""
    programs = Programs()
    if as_run:
        view, code, scalars, _ = programs.program(spec, shape, "float32", 1e-3, 2)
    else:
        view = shape
        code, scalars = programs.code_and_scalars(spec, shape, "float32", 1e-3, 2)
    rng = np.random.default_rng(0)
    param = rng.standard_normal(shape, dtype=np.float32)
    grad = (np.ones(shape, np.float32) if gradient == "constant"
            else rng.standard_normal(shape, dtype=np.float32))
    state = spec.init(param, numpy_ops)
    arrays = [param, grad] + [np.ascontiguousarray(state[k], np.float32)
                              for k in programs.state_order(spec, shape, "float32")]
    with open(path, "wb") as f:
        f.write(np.int32(0).tobytes())
        f.write(np.asarray(canonical_dims(view), np.int64).tobytes())
        for values, dtype in ((code, np.int32), (scalars, np.float64)):
            f.write(np.int64(values.size).tobytes() + np.asarray(values, dtype).tobytes())
        f.write(np.int64(len(arrays)).tobytes())
        for a in arrays:
            f.write(np.int64(a.nbytes).tobytes() + a.tobytes())
    return path, code


class CannotCount(RuntimeError):
    """callgrind cannot run the library: valgrind does not decode one of its instructions
    (it raises SIGILL in the program; the message quotes valgrind's words)."""


def counts(driver: Path, library: Path, job_file: Path, out: Path) -> dict[str, int]:
    """callgrind's totals (Ir, Bc, Bcm, ...) of the library's step (one thread);
    :class:`CannotCount` where valgrind cannot run an instruction of the library."""
    done = subprocess.run(["valgrind", "--tool=callgrind", "--branch-sim=yes",
                           f"--callgrind-out-file={out}", "--toggle-collect=uo_vm_run",
                           "--toggle-collect=uo_kernel_run", str(driver), str(library),
                           str(job_file)], capture_output=True, text=True,
                          env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}, timeout=600)
    if done.returncode == -signal.SIGILL or "signal 4 (SIGILL)" in done.stderr:
        said = [line.split("== ", 1)[-1] for line in done.stderr.splitlines()
                if "unhandled instruction" in line or "(SIGILL)" in line]
        raise CannotCount(f"callgrind died with SIGILL on {library.name}: "
                          f"{' / '.join(said)[:400]}")
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, done.args, done.stdout,
                                            done.stderr)
    text = out.read_text().splitlines()
    events = next(line for line in text if line.startswith("events:")).split()[1:]
    totals = next(line for line in text if line.startswith(("totals:", "summary:")))
    return dict(zip(events, map(int, totals.split()[1:])))


def libraries(code) -> dict[str, Path]:
    return {"vm": build.compiled(build.SOURCE.read_text(), "uo_vm", MARCH),
            "kernel": build.compiled(kernel_source(code), "uo_kernel", MARCH)}
