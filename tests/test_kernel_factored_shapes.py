"""Factored moments (Adafactor, CAME) on conv-weight shapes through the CPU kernels.

Their second moment reduces over the last two axes, as the spec defines: a conv weight
(out, in, kh, kw) has row statistics over kw and column statistics over kh for each of
the out * in leading positions, so its rows are 3 elements long. The kernels walk such
rows several to a chunk (``phases.h``: ``Chunk``, ``rows_together``); every sum keeps
its order of summation per output element. Checked here, with small sizes: the VM (one
row per chunk where a row is longer than half its 256-element chunk) and a generated
kernel (1024-element chunks) give the same bits on every shape, one thread or two give
the same bits, and the VM follows the float64 oracle under the conformance rule on a
conv weight.
"""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from support import case_of, judge

import unified_opt as uo
from unified_opt.kernels import build
from unified_opt.kernels.codegen import kernel_source
from unified_opt.kernels.runtime import KernelRunner, run_numpy
from unified_opt.kernels.trace import canonical_dims
from unified_opt.ops import numpy_ops

try:
    build.load()
except build.KernelUnavailable as error:           # no C++ compiler on this machine
    pytest.skip(f"the kernel VM cannot be built here: {error}", allow_module_level=True)

FACTORED = [uo.Adafactor(lr=1e-2), uo.Adafactor(lr=1e-2, beta1=0.9, weight_decay=0.1),
            uo.CAME(lr=1e-3), uo.CAME(lr=1e-3, weight_decay=0.1)]
#: conv weights (rows of 3 and of 1), rows of 300 (one row per VM chunk, several per
#: kernel chunk) and rows of 1100 (several chunks each): of one rank's program each, so
#: one kernel to compile per spec
SHAPES = [(8, 6, 3, 3), (6, 4, 1, 1), (5, 7, 300), (2, 3, 1100)]
#: the kernels' comparison compiles one kernel per spec (seconds each): two specs
COMPILED = [FACTORED[1], FACTORED[3]]


@pytest.fixture(scope="module")
def runner():
    return KernelRunner(specialize=False)


def _start(spec, shape, dtype, seed=3):
    rng = np.random.default_rng(seed)
    p = np.ascontiguousarray(rng.normal(size=shape), dtype=dtype)
    state = {k: np.array(v, order="C") for k, v in spec.init(p, numpy_ops).items()}
    return rng, p, state


def _bits(p, state):
    return [p.tobytes(), *(state[k].tobytes() for k in sorted(state))]


@pytest.mark.parametrize("spec", COMPILED, ids=[s.name for s in COMPILED])
def test_a_generated_kernel_gives_the_vm_bits_on_conv_shapes(runner, spec):
    for shape in SHAPES:
        for dtype in (np.float32, np.float64):
            name = np.dtype(dtype).name
            assert runner.program(spec, shape, name, spec.lr_at(0), 2)[0] == shape
            rng, p, state = _start(spec, shape, dtype)
            g = np.ascontiguousarray(rng.normal(size=shape), dtype=dtype)
            run_numpy(runner, spec, p, g, state, lr=spec.lr_at(0), step=1)
            p2, state2 = p.copy(), {k: v.copy() for k, v in state.items()}
            order = runner.state_order(spec, shape, name)
            for step in range(2, 5):
                g = np.ascontiguousarray(rng.normal(size=shape) * 10.0 ** (step - 3),
                                         dtype=dtype)
                lr = spec.lr_at(step - 1)
                run_numpy(runner, spec, p, g, state, lr=lr, step=step)
                _, code, scalars, _ = runner.program(spec, shape, name, lr, step)
                library = build.load_kernel(kernel_source(code))
                arrays = [p2, g] + [state2[k] for k in order]
                addresses = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
                dims = np.asarray(canonical_dims(shape), dtype=np.int64)
                assert library.uo_kernel_run(0 if dtype == np.float32 else 1, addresses,
                                             dims.ctypes.data, scalars.ctypes.data) == 0
            assert _bits(p, state) == _bits(p2, state2), (spec.name, shape, name)


@pytest.mark.parametrize("spec", FACTORED, ids=[f"{s.name}-{i}" for i, s in enumerate(FACTORED)])
def test_a_conv_weight_follows_the_oracle_on_the_vm(runner, spec):
    """A conv weight's factored update on the VM against the float64 oracle (the
    conformance rule: the same floors as every other case)."""
    from unified_opt.conformance.trajectory import Recorder

    case = case_of(f"conv_{spec.name}", spec, {"conv": (8, 6, 3, 3), "point": (6, 4, 1, 1)})
    params = {n: np.array(a, dtype=np.float32, order="C")
              for n, a in case.initial_params().items()}
    state = {n: {k: np.array(v, order="C") for k, v in spec.init(p, numpy_ops).items()}
             for n, p in params.items()}
    recorder = Recorder()
    for t in range(case.steps):
        grads = case.gradients(t)
        for n, p in params.items():
            g = np.ascontiguousarray(grads[n], dtype=np.float32)
            run_numpy(runner, spec, p, g, state[n], lr=spec.lr_at(t), step=t + 1)
        recorder.add(spec.lr_at(t), {n: p.copy() for n, p in params.items()},
                     {n: {k: v.copy() for k, v in s.items()} for n, s in state.items()})
    comparison = judge(recorder.trajectory(), case)
    assert comparison.passed, comparison.detail


_THREADS_SCRIPT = """
import hashlib, json
import numpy as np
import unified_opt as uo
from unified_opt.kernels.runtime import KernelRunner, run_numpy
from unified_opt.ops import numpy_ops
runner = KernelRunner(specialize=False)
out = {}
for spec in [uo.Adafactor(lr=1e-2), uo.CAME(lr=1e-3, weight_decay=0.1)]:
    rng = np.random.default_rng(0)
    p = rng.normal(size=(64, 64, 3, 3)).astype(np.float32)
    state = {k: np.array(v, order="C") for k, v in spec.init(p, numpy_ops).items()}
    for step in range(1, 4):
        g = rng.normal(size=p.shape).astype(np.float32)
        run_numpy(runner, spec, p, g, state, lr=spec.lr_at(0), step=step)
    digest = hashlib.sha256(p.tobytes())
    for k in sorted(state):
        digest.update(state[k].tobytes())
    out[spec.name] = digest.hexdigest()
print(json.dumps(out))
"""


def test_a_conv_weight_gives_the_same_bits_on_one_and_two_threads():
    """(64, 64, 3, 3): large enough for the phases to run on several threads, whose
    chunks of several rows then split between them."""
    digests = []
    for threads in ("1", "2"):
        env = dict(os.environ, OMP_NUM_THREADS=threads)
        done = subprocess.run([sys.executable, "-c", _THREADS_SCRIPT], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        digests.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert digests[0] == digests[1]
