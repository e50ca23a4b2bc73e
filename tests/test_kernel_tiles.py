"""Tile runs: the CPU kernels run a factored update's small phases tile by tile over B.

``bytecode.schedule`` groups consecutive phases whose domains span B into tile runs
(``bytecode.tile_runs``; a scalar phase between them moves after the run) and
``phases.h``'s ``run_tiles`` runs each run a block of b's at a time, every phase of the run
on the block before the next block, so that a conv weight's row and column arrays are
read back from the cache. None of that may change a bit: here the tiled code against the
same program scheduled without tile runs (``tiles=False``: its phases one after the
other), on the VM and on a generated kernel, at 1 and 2 threads, with the default tile
and with tiles of 1 and 7 b's (``uo_vm_set_tile``: tile edges inside small tensors, and
many tiles, so that 2 threads share them).
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import unified_opt as uo
from unified_opt.kernels import build
from unified_opt.kernels.bytecode import DTYPES, OPCODES, compile_program, decode, encode
from unified_opt.kernels.codegen import kernel_source
from unified_opt.kernels.runtime import KernelRunner
from unified_opt.kernels.trace import canonical_dims
from unified_opt.ops import numpy_ops

try:
    build.load()
except build.KernelUnavailable as error:           # no C++ compiler on this machine
    pytest.skip(f"the kernel VM cannot be built here: {error}", allow_module_level=True)

SPECS = [uo.Adafactor(lr=1e-2), uo.Adafactor(lr=1e-2, beta1=0.9, weight_decay=0.1),
         uo.Adafactor(lr=1e-2, eps_mode="add"), uo.CAME(lr=1e-3),
         uo.CAME(lr=1e-3, weight_decay=0.1)]
#: conv weights (rows of 3, of 1, of 7), a matrix (B = 1), a vector (no B), 3-D tensors
#: (one with rows of 1, one with b's of one row: arrays missing an axis of length 1 are
#: read in place); (96, 96, 3, 3): enough default tiles for 2 threads to share them
SHAPES = [(64, 64, 3, 3), (32, 16, 1, 1), (8, 3, 7, 7), (128, 96), (5,), (4, 6, 5),
          (40, 5, 1), (40, 1, 5), (96, 96, 3, 3)]
#: b's per tile: the default (0), and tiles whose edges fall inside every tensor above
TILES = (0, 1, 7)
#: the generated kernels' comparison compiles one kernel per spec (seconds each)
COMPILED = [SPECS[1], SPECS[4]]
COMPILED_SHAPES = [(64, 64, 3, 3), (32, 16, 1, 1), (8, 3, 7, 7), (4, 6, 5)]


@pytest.fixture(scope="module")
def runner():
    return KernelRunner(specialize=False)


def _codes(runner, spec, shape, dtype, lr, step):
    """(the shape the kernels see, the tiled code, the untiled code, the scalars)."""
    kernel_shape, code, scalars, _ = runner.program(spec, shape, dtype, lr, step)
    trace, traced_code = runner.traced(spec, kernel_shape, dtype, lr, step)
    assert np.array_equal(traced_code, code)
    untiled = compile_program(trace.program, keep_costly=True, tiles=False)
    return kernel_shape, code, untiled, scalars


def _steps(runner, spec, shape, run_code, dtype="float64") -> list[bytes]:
    """3 steps of ``spec`` from a seeded start, each run by ``run_code(dtype code, code,
    untiled, dims, arrays, scalars)`` (which picks the code); the bits of the parameter
    and the state after each. Gradients hold zeros and negative zeros. In float64 an
    order of summation other than the untiled one shows in the bits (float32 rounds most
    such differences of its sums in double away)."""
    rng = np.random.default_rng(5)
    p = np.ascontiguousarray(rng.normal(size=shape), dtype=dtype)
    state = {k: np.array(v, order="C") for k, v in spec.init(p, numpy_ops).items()}
    order = runner.state_order(spec, shape, dtype)
    bits = []
    for step in range(1, 4):
        g = np.ascontiguousarray(rng.normal(size=shape) * 10.0 ** (step - 2), dtype=dtype)
        flat = g.reshape(-1)
        flat[::7] = 0.0
        flat[1::11] = -0.0
        kernel_shape, code, untiled, scalars = _codes(runner, spec, shape, dtype,
                                                      spec.lr_at(step - 1), step)
        dims = np.asarray(canonical_dims(kernel_shape), dtype=np.int64)
        arrays = [p, g] + [state[k] for k in order]
        addresses = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
        assert run_code(DTYPES[dtype], code, untiled, dims, addresses, scalars) == 0
        bits.append(b"".join([p.tobytes(), *(state[k].tobytes() for k in sorted(state))]))
    return bits


def _vm(tiled: bool, threads: int, tile: int):
    vm = build.load()

    def run(dtype, code, untiled, dims, addresses, scalars):
        chosen = code if tiled else untiled
        vm.uo_vm_set_threads(threads)
        vm.uo_vm_set_tile(tile)
        try:
            return vm.uo_vm_run(dtype, chosen.ctypes.data, chosen.size, addresses,
                                dims.ctypes.data, scalars.ctypes.data)
        finally:
            vm.uo_vm_set_threads(0)
            vm.uo_vm_set_tile(0)
    return run


def _kernel(threads: int, tile: int, tiled: bool = False):
    """A ``run_code`` for _steps: the code's generated kernel on ``threads`` threads with
    tiles of ``tile`` b's (0: the default); ``tiled``: the code must have tile runs."""
    def run(dtype, code, untiled, dims, addresses, scalars):
        assert not tiled or decode(code).tiles
        kernel = build.load_kernel(kernel_source(code))
        kernel.uo_kernel_set_threads(threads)
        kernel.uo_kernel_set_tile(tile)
        try:
            return kernel.uo_kernel_run(dtype, addresses, dims.ctypes.data,
                                        scalars.ctypes.data)
        finally:
            kernel.uo_kernel_set_threads(0)
            kernel.uo_kernel_set_tile(0)
    return run


def test_a_conv_weights_factored_phases_form_tile_runs(runner):
    """The schedule has power here: Adafactor's and CAME's phases on a conv weight are in
    tile runs but for the scalar phases (moved after the runs) and Adafactor's last full
    phase (it reads the clip's total over B); the new factored state stored straight into
    its input arrays by the phases of the runs that compute it, with no copies. The same
    phases as untiled, reordered."""
    store = OPCODES["store"]
    for spec in (SPECS[0], SPECS[3]):
        _, code, untiled, _ = _codes(runner, spec, (64, 64, 3, 3), "float32", 1e-3, 2)
        tiled, plain = decode(code), decode(untiled)
        assert plain.tiles == () and tiled.tiles
        assert sorted(tiled.phases) == sorted(plain.phases) and tiled.masks == plain.masks
        inside = {i for first, count in tiled.tiles for i in range(first, first + count)}
        outside = [tiled.phases[i].domain for i in range(len(tiled.phases)) if i not in inside]
        assert sorted(outside) == ([0, 0, 7] if spec.name == "adafactor" else [0])
        assert not [p for p in plain.phases
                    if all(ins.op == store and ins.a_kind == 2 for ins in p.instructions)]
        factored = [k for k in range(tiled.n_inputs) if tiled.masks[k] in (3, 5)]
        writers = [i for i, p in enumerate(tiled.phases) for ins in p.instructions
                   if ins.op == store and ins.dst in factored]
        assert len(writers) == len(factored) >= 2 and set(writers) <= inside


@pytest.mark.parametrize("spec", SPECS, ids=[f"{s.name}-{i}" for i, s in enumerate(SPECS)])
def test_tile_runs_give_the_bits_of_the_phases_one_after_the_other_on_the_vm(runner, spec):
    for shape in SHAPES:
        for dtype in ("float32", "float64"):
            expected = _steps(runner, spec, shape, _vm(False, 1, 0), dtype)
            assert _steps(runner, spec, shape, _vm(False, 2, 0), dtype) == expected, shape
            for threads in (1, 2):
                for tile in TILES:
                    found = _steps(runner, spec, shape, _vm(True, threads, tile), dtype)
                    assert found == expected, (shape, dtype, threads, tile)


@pytest.mark.parametrize("spec", COMPILED, ids=[s.name for s in COMPILED])
def test_a_generated_kernel_runs_the_tile_runs_with_the_same_bits(runner, spec):
    for shape in COMPILED_SHAPES:
        expected = _steps(runner, spec, shape, _vm(False, 1, 0))
        for threads in (1, 2):
            for tile in (0, 7):
                found = _steps(runner, spec, shape, _kernel(threads, tile, tiled=True))
                assert found == expected, (shape, threads, tile)


def test_code_with_a_tile_run_the_kernels_cannot_run_is_refused(runner):
    """A tile run widened over the scalar phases after it (no B; they read the run's
    total over B): the VM refuses the code (1) and changes nothing, the generator
    raises."""
    spec = SPECS[0]
    _, code, _, scalars = _codes(runner, spec, (8, 6, 3, 3), "float32", 1e-2, 2)
    scheduled = decode(code)
    first, count = scheduled.tiles[0]
    # the run widened over the scalar phase that reads its sum over B
    widened = scheduled.__class__(scheduled.n_inputs, scheduled.masks,
                                  scheduled.n_registers, scheduled.phases,
                                  ((first, count + 2),) + scheduled.tiles[1:])
    broken = encode(widened)
    with pytest.raises(ValueError, match="tile runs"):
        kernel_source(broken)
    shape = (8, 6, 3, 3)
    p = np.zeros(shape, dtype=np.float32)
    g = np.ones(shape, dtype=np.float32)
    state = {k: np.array(v, order="C") for k, v in spec.init(p, numpy_ops).items()}
    arrays = [p, g] + [state[k] for k in runner.state_order(spec, shape, "float32")]
    before = [a.copy() for a in arrays]
    addresses = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
    dims = np.asarray(canonical_dims(shape), dtype=np.int64)
    assert build.load().uo_vm_run(0, broken.ctypes.data, broken.size, addresses,
                                  dims.ctypes.data, scalars.ctypes.data) == 1
    assert all(np.array_equal(a, b) for a, b in zip(arrays, before))


def _sweep(seed: int, count: int) -> list[tuple]:
    """A seeded sample of conv-like shapes, each with a dtype, a thread count and a tile:
    kernels of 1x1 to 7x7 (a few not square) and channel counts that put tile edges,
    chunk edges and the blocked totals' 16-row blocks anywhere; a few 3-D tensors."""
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(count):
        kh = int(rng.choice([1, 3, 3, 5, 7]))
        kw = kh if rng.random() < 0.8 else int(rng.choice([1, 2, 4]))
        out, inp = int(rng.choice([1, 2, 5, 17, 31, 64, 130])), int(rng.choice([1, 3, 16, 33, 129]))
        shape = ((out, inp, kh, kw) if rng.random() < 0.8
                 else (out * inp, kh * kw, int(rng.choice([1, 2, 3, 17]))))
        cases.append((shape, str(rng.choice(["float32", "float64"])),
                       int(rng.choice([1, 2])), int(rng.choice([0, 1, 5, 16, 33, 100]))))
    return cases


#: specs whose phases on a conv weight hold totals over every axis (blocked totals:
#: the clip's RMS, Lamb's and LARS's norms) and factored sums
SWEPT = [SPECS[1], SPECS[4], uo.Lamb(lr=1e-3, weight_decay=0.01),
         uo.LARS(lr=0.1, weight_decay=1e-4)]


@pytest.mark.parametrize("index", range(len(SWEPT)), ids=[s.name for s in SWEPT])
def test_a_sweep_of_conv_shapes_gives_the_bits_of_one_untiled_thread(runner, index):
    """Shapes, tiles and thread counts drawn at random (seeded): the tiled VM and, in
    float64 (where an order of summation shows in the bits), a generated kernel against
    the untiled VM on one thread."""
    spec = SWEPT[index]
    for shape, dtype, threads, tile in _sweep(44 + index, 10):
        case = (shape, dtype, threads, tile)
        expected = _steps(runner, spec, shape, _vm(False, 1, 0), dtype)
        assert _steps(runner, spec, shape, _vm(True, threads, tile), dtype) == expected, case
        if dtype == "float64":
            assert _steps(runner, spec, shape, _kernel(threads, tile), dtype) == expected, case
