"""The CPU kernels' walk over a conv weight's short rows gives the bits it gave before it
was made fast.

A factored update (Adafactor, CAME) on a conv weight (out, in, kh, kw) reduces over its
last two axes, so its phases walk rows of kw elements. ``phases.h`` walks them several to a
chunk and lands sums in their arrays during the walk where the order of summation allows
(a row's total at once, a b's column totals at once, a running total on one thread),
sums rows of 3 four at a time in AVX2 and reuses its scratch memory from run to run. None
of that may change a bit: the digests below were first computed with the VM as it was
before (commit 799f8bc, one partial per row and block, totals added after the walk,
scratch allocated per run) on the same code, at 1 and 2 threads. They were computed again,
once, when a total of several rows (the parameter's RMS, the clipped update's) came to add
its rows in four lanes (``walk.h``'s ``Landing``: a deliberate change of order, with the
old walk's one partial per row and block); the scheduler's fewer phases (``bytecode.py``:
small values computed where they are read, new factored state stored in place) left
every digest as it was. They changed a second time, deliberately, when a total over every
axis of rows shorter than 16 came to add its elements in blocks of 16 rows, each element
in the lane it is loaded in, and every total of several rows in 16 lanes (``walk.h``'s
blocked totals): the float64 digests of the five cases whose totals moved in their last
bits were computed again; every float32 digest, and rows of 1, stayed as they were.
Checked here on the VM at 1 and 2 threads (tests/test_kernel_factored_shapes.py checks
that a generated kernel gives the VM's bits on these shapes).
"""

from __future__ import annotations

import ctypes
import hashlib

import numpy as np
import pytest

import unified_opt as uo
from unified_opt.kernels import build
from unified_opt.kernels.bytecode import HEADER_INTS, PHASE_INTS, TILE_RUN_INTS
from unified_opt.kernels.codegen import kernel_source
from unified_opt.kernels.runtime import KernelRunner
from unified_opt.kernels.trace import canonical_dims
from unified_opt.ops import numpy_ops

try:
    build.load()
except build.KernelUnavailable as error:           # no C++ compiler on this machine
    pytest.skip(f"the kernel VM cannot be built here: {error}", allow_module_level=True)

SPECS = {"adafactor": uo.Adafactor(lr=1e-2),
         "came": uo.CAME(lr=1e-3, weight_decay=0.1)}
#: rows of 3 in b's of 3 rows (the rows-of-3 and per-b paths), rows of 1 (a pointwise
#: conv), rows of 5 (no rows-of-3 path), b's of 40 rows (column sums in several groups
#: per b: partials kept), and a conv weight of 36,864 elements (phases on 2 threads)
SHAPES = [(8, 6, 3, 3), (6, 4, 1, 1), (7, 3, 3, 5), (3, 40, 5), (64, 64, 3, 3)]
DTYPES = ("float32", "float64")

#: sha256[:16] of the parameter and the state after 3 steps (the same at 1 and 2 threads),
#: by the VM with blocked totals in 16 lanes; see the module
BEFORE = {
    "adafactor (8, 6, 3, 3) float32": "b43425eb789fe7b3",
    "adafactor (8, 6, 3, 3) float64": "3c776547c2398d2c",
    "adafactor (6, 4, 1, 1) float32": "7858642605dae3d0",
    "adafactor (6, 4, 1, 1) float64": "6f86f595f16887d8",
    "adafactor (7, 3, 3, 5) float32": "6f7c6d8984fa45dd",
    "adafactor (7, 3, 3, 5) float64": "f9dd29b807e9e343",
    "adafactor (3, 40, 5) float32": "e679169e22ff5e67",
    "adafactor (3, 40, 5) float64": "d9d5341579bcfe75",
    "adafactor (64, 64, 3, 3) float32": "813cd616294c9a4d",
    "adafactor (64, 64, 3, 3) float64": "d4422c1a86e06fe3",
    "came (8, 6, 3, 3) float32": "ed4e0c861eb0fae8",
    "came (8, 6, 3, 3) float64": "ecfb45612993d0c9",
    "came (6, 4, 1, 1) float32": "f2085a1a6a3dbacb",
    "came (6, 4, 1, 1) float64": "14da8cb6298a7e29",
    "came (7, 3, 3, 5) float32": "bfd4d9e875f278af",
    "came (7, 3, 3, 5) float64": "253c6248791ac221",
    "came (3, 40, 5) float32": "3bb093bb37ca62a9",
    "came (3, 40, 5) float64": "47ed7d29e5f0fd3b",
    "came (64, 64, 3, 3) float32": "1fd6cacc45809837",
    "came (64, 64, 3, 3) float64": "d0eef06490bab7e8",
}


def _digest(vm, spec, shape, dtype: str, threads: int) -> str:
    """3 steps of ``spec`` from a seeded start through ``vm`` (a VM library) at
    ``threads`` threads; the digest of the parameter and the state. Gradients hold
    zeros and negative zeros (a sum's first partial is 0 + x: -0 becomes +0)."""
    runner = KernelRunner(specialize=False)
    rng = np.random.default_rng(11)
    p = np.ascontiguousarray(rng.normal(size=shape), dtype=dtype)
    state = {k: np.array(v, order="C") for k, v in spec.init(p, numpy_ops).items()}
    order = runner.state_order(spec, shape, dtype)
    vm.uo_vm_set_threads(threads)
    try:
        for step in range(1, 4):
            g = np.ascontiguousarray(rng.normal(size=shape) * 10.0 ** (step - 2), dtype=dtype)
            flat = g.reshape(-1)
            flat[::7] = 0.0
            flat[1::11] = -0.0
            kernel_shape, code, scalars, _ = runner.program(spec, shape, dtype,
                                                            spec.lr_at(step - 1), step)
            dims = np.asarray(canonical_dims(kernel_shape), dtype=np.int64)
            arrays = [p, g] + [state[k] for k in order]
            addresses = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
            assert vm.uo_vm_run(0 if dtype == "float32" else 1, code.ctypes.data, code.size,
                                addresses, dims.ctypes.data, scalars.ctypes.data) == 0
    finally:
        vm.uo_vm_set_threads(0)
    digest = hashlib.sha256(p.tobytes())
    for k in sorted(state):
        digest.update(state[k].tobytes())
    return digest.hexdigest()[:16]


def digests(vm) -> dict[str, str]:
    """Every case's digest at 1 thread, checked equal at 2 (what :data:`BEFORE` holds)."""
    found = {}
    for name, spec in SPECS.items():
        for shape in SHAPES:
            for dtype in DTYPES:
                one = _digest(vm, spec, shape, dtype, 1)
                assert _digest(vm, spec, shape, dtype, 2) == one, (name, shape, dtype)
                found[f"{name} {shape} {dtype}"] = one
    return found


def test_a_conv_weights_factored_update_gives_the_bits_of_before():
    assert digests(build.load()) == BEFORE


def test_a_program_whose_phase_reads_a_scratch_array_before_it_is_written_is_refused():
    """Scratch arrays come unzeroed from a pool: code that would read one before an
    earlier phase wrote it whole is refused by the VM (return 1) and by the generator."""
    spec = SPECS["adafactor"]
    runner = KernelRunner(specialize=False)
    shape = (4, 3, 3, 3)
    _, code, scalars, _ = runner.program(spec, shape, "float32", spec.lr_at(0), 2)
    n_inputs, n_arrays = int(code[1]), int(code[2])
    broken = code.copy()
    # the first phase's first instruction reads the last scratch array instead (after the
    # header, the masks and the tile runs)
    first = HEADER_INTS + n_arrays + TILE_RUN_INTS * int(code[5]) + PHASE_INTS
    assert broken[first + 3] in (2, 1, 3)          # an operand kind: array, register, scalar
    broken[first + 3], broken[first + 4] = 2, n_arrays - 1
    assert n_arrays - 1 >= n_inputs
    with pytest.raises(ValueError, match="before an earlier phase writes it"):
        kernel_source(broken)
    rng = np.random.default_rng(0)
    p = rng.normal(size=shape).astype(np.float32)
    g = rng.normal(size=shape).astype(np.float32)
    state = {k: np.array(v, order="C") for k, v in spec.init(p, numpy_ops).items()}
    arrays = [p, g] + [state[k] for k in runner.state_order(spec, shape, "float32")]
    before = [a.copy() for a in arrays]
    addresses = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
    dims = np.asarray(canonical_dims(shape), dtype=np.int64)
    vm = build.load()
    assert vm.uo_vm_run(0, broken.ctypes.data, broken.size, addresses, dims.ctypes.data,
                        scalars.ctypes.data) == 1
    assert all(np.array_equal(a, b) for a, b in zip(arrays, before))
