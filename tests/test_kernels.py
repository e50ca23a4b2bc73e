"""The kernel VM and the generated kernels (``unified_opt.kernels``), with numpy arrays and
no framework: every sample of the algorithm table run on the VM follows its float64
oracle under the conformance rule; a generated kernel gives the VM's bits; the bits do
not depend on the number of threads; what cannot be traced says what."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from algorithms import ALGORITHMS, UNTRACEABLE
from support import PARAMS, PerRankSGD, UntraceableSGD, case_of, judge

import unified_opt as uo
from unified_opt.conformance.trajectory import Recorder
from unified_opt.kernels import build
from unified_opt.kernels.bytecode import decode
from unified_opt.kernels.codegen import kernel_source
from unified_opt.kernels.runtime import KernelRunner, Programs, run_numpy
from unified_opt.kernels.trace import Untraceable, canonical_dims, state_masks, trace_update
from unified_opt.ops import numpy_ops
from unified_opt.pre_step import prepare_gradients

try:
    build.load()
except build.KernelUnavailable as error:           # no C++ compiler on this machine
    pytest.skip(f"the kernel VM cannot be built here: {error}", allow_module_level=True)

#: every sample of the table whose update traces (DGC's top-k selection too)
TRACED = [(name, i, spec) for name, algorithm in ALGORITHMS.items()
          if name not in UNTRACEABLE for i, spec in enumerate(algorithm.samples)]


class _Plan:                       # what prepare_gradients reads of a parameter
    def __init__(self, spec):
        self.spec, self.group = spec, None
        self.clip_excluded = False


def vm_trajectory(runner, case, dtype=np.float32):
    """The case run on the VM over numpy arrays, recorded as a conformance run."""
    params = {n: np.array(a, dtype=dtype, order="C") for n, a in case.initial_params().items()}
    specs = {n: case.spec.for_parameter(n) for n in params}
    state = {n: {k: np.array(v, order="C") for k, v in specs[n].init(p, numpy_ops).items()}
             for n, p in params.items()}
    recorder = Recorder()
    for t in range(case.steps):
        names = list(params)
        grads = [np.asarray(case.gradients(t)[n], dtype=dtype) for n in names]
        with np.errstate(all="ignore"):
            grads = prepare_gradients(case.spec, [_Plan(specs[n]) for n in names], grads,
                                      numpy_ops)
        lr = case.spec.lr_at(t)
        for n, g in zip(names, grads):
            run_numpy(runner, specs[n].at_step(t), params[n], g, state[n], lr=lr, step=t + 1)
        recorder.add(lr, {n: p.copy() for n, p in params.items()},
                     {n: {k: v.copy() for k, v in s.items()} for n, s in state.items()})
    return recorder.trajectory()


@pytest.fixture(scope="module")
def runner():
    return KernelRunner()


@pytest.mark.parametrize("name,index,spec", TRACED, ids=[f"{n}-{i}" for n, i, _ in TRACED])
def test_every_sample_follows_the_oracle_on_the_vm(runner, name, index, spec):
    case = case_of(f"vm_{name}_{index}", spec, PARAMS)
    comparison = judge(vm_trajectory(runner, case), case)
    assert comparison.passed, comparison.detail


def test_a_planted_deviation_fails_on_the_vm(runner):
    """The VM runs what the spec says: run a variant and it no longer matches."""
    case = case_of("vm_planted", uo.Adam(lr=0.01, eps=1e-3), PARAMS)
    trajectory = vm_trajectory(runner, case)
    assert judge(trajectory, case).passed
    assert not judge(trajectory, case, uo.Adam(lr=0.01, eps=1e-3,
                                               eps_placement="eps_hat")).passed


#: one sample per algorithm whose structure is the same from step 2 on
KERNEL_SPECS = [uo.Adam(lr=0.01, amsgrad=True, weight_decay=0.1), uo.CAME(lr=1e-3),
                uo.Lamb(lr=0.01), uo.LARS(lr=0.1, weight_decay=1e-3),
                uo.Lion(lr=1e-3, weight_decay=0.1), uo.Adafactor(lr=1e-2, beta1=0.9),
                uo.Rprop(lr=0.01), uo.NAdam(lr=0.01),
                uo.DGCMomentum(lr=0.05, rampup_begin_step=0, sparsity=(0.9,), min_numel=1,
                               local_grad_clip_norm=2.0, num_trainers=1)]


@pytest.mark.parametrize("spec", KERNEL_SPECS, ids=[s.name for s in KERNEL_SPECS])
def test_a_generated_kernel_gives_the_vm_bits(runner, spec):
    for shape in [(65, 65), (7,), (4, 4, 4), (1, 65), (0, 5), (3, 1025)]:
        for dtype in (np.float32, np.float64):
            # the program the runner runs (a rank-blind one on the shape read as 1-D)
            code = runner.program(spec, shape, np.dtype(dtype).name, spec.lr_at(1), 2)[1]
            library = build.load_kernel(kernel_source(code))
            (p, state), (p2, state2) = _run_both_from_step_two(runner, spec, library, shape,
                                                               dtype)
            assert p.tobytes() == p2.tobytes(), (spec.name, shape, dtype)
            for k in state:
                assert state[k].tobytes() == state2[k].tobytes(), (spec.name, shape, k)


@pytest.mark.parametrize("spec", [uo.Adafactor(lr=1e-2), uo.Lamb(lr=1e-2)],
                         ids=["adafactor", "lamb"])
def test_a_pass_walked_backwards_gives_the_vm_bits(spec):
    """The update pass after the pass that computed it walks back from the parameter's
    end in stretches (phases.h's run_phase, `backwards`): the VM's bits (it walks
    forwards) on one and two threads, over several stretches and a part of one, for rows
    longer than a chunk and chunks of several rows. The reference runs on the VM alone
    (these parameters are large enough for "auto" to compile and register the kernel)."""
    runner = KernelRunner(specialize=False)
    for shape in [(700, 1000), (90, 90, 3, 3)]:
        code = runner.program(spec, shape, "float32", spec.lr_at(1), 2)[1]
        source = kernel_source(code)
        assert "// phase" in source and "backwards" in source, spec.name
        library = build.load_kernel(source)
        order = runner.state_order(spec, shape, "float32")
        for threads in (1, 2):
            library.uo_kernel_set_threads(threads)
            rng = np.random.default_rng(threads)
            p = rng.normal(size=shape).astype(np.float32)
            state = {k: np.array(v, order="C") for k, v in spec.init(p, numpy_ops).items()}
            p2, state2 = p.copy(), {k: v.copy() for k, v in state.items()}
            for step in range(1, 4):
                g = rng.normal(size=shape).astype(np.float32)
                run_numpy(runner, spec, p, g, state, lr=spec.lr_at(step - 1), step=step)
                _kernel_step(runner, spec, library, p2, g, state2, order, spec.lr_at(step - 1),
                             step)
            assert np.isfinite(p).all() and p.tobytes() == p2.tobytes(), (spec.name, shape)
            for k in state:
                assert state[k].tobytes() == state2[k].tobytes(), (spec.name, shape, k)
        library.uo_kernel_set_threads(0)


def test_only_kernels_with_a_tile_run_ask_for_256_bit_vectors(runner):
    """codegen.py's _HALF_WIDTH: Adafactor's and CAME's kernels on a conv weight (tile
    runs) ask GCC for 256-bit vectors, guarded from clang; elementwise kernels and a
    matrix's Adafactor keep the compiler's width."""
    def source(spec, shape):
        return kernel_source(runner.program(spec, shape, "float32", spec.lr_at(1), 2)[1])
    for spec in (uo.Adafactor(lr=1e-2), uo.CAME(lr=1e-3)):
        text = source(spec, (64, 64, 3, 3))
        assert "a tile run" in text
        assert text.count('#pragma GCC target("prefer-vector-width=256")') == 1
        assert text.count("#pragma GCC push_options") == text.count("#pragma GCC pop_options")
        assert "!defined(__clang__)" in text
    for spec, shape in ((uo.AdamW(lr=1e-3), (64, 64, 3, 3)), (uo.Adafactor(lr=1e-2), (33, 300))):
        text = source(spec, shape)
        assert "a tile run" not in text and "prefer-vector-width" not in text


@pytest.mark.parametrize("spec", [uo.CAME(lr=1e-3, weight_decay=0.1), uo.Adafactor(lr=1e-2)],
                         ids=["came", "adafactor"])
def test_a_clocked_kernel_gives_the_plain_kernels_bits_and_ticks_every_phase(spec):
    """codegen's clock (kernel_source(..., clock=True), benchmarks/kernel_phases.py): the
    plain kernel's bits, with tiles of 3 b's (tile edges inside the tensor: every tile's
    chunks clocked), and every phase's ticks counted; reading the ticks clears them. A
    plain kernel has no clock."""
    runner = KernelRunner(specialize=False)
    shape = (20, 6, 3, 3)
    code = runner.program(spec, shape, "float32", spec.lr_at(1), 2)[1]
    assert "clock_ticks" not in kernel_source(code)
    with pytest.raises(TypeError, match="clock must be a bool"):
        kernel_source(code, clock=1)
    plain, clocked = (build.load_kernel(kernel_source(code, clock=c)) for c in (False, True))
    order = runner.state_order(spec, shape, "float32")
    rng = np.random.default_rng(5)
    p = rng.normal(size=shape).astype(np.float32)
    state = {k: np.array(v, order="C") for k, v in spec.init(p, numpy_ops).items()}
    p2, state2 = p.copy(), {k: v.copy() for k, v in state.items()}
    try:
        for library in (plain, clocked):
            library.uo_kernel_set_tile(3)
        for step in range(2, 5):
            g = rng.normal(size=shape).astype(np.float32)
            _kernel_step(runner, spec, plain, p, g, state, order, spec.lr_at(step - 1), step)
            _kernel_step(runner, spec, clocked, p2, g, state2, order, spec.lr_at(step - 1),
                         step)
    finally:
        for library in (plain, clocked):
            library.uo_kernel_set_tile(0)
    assert np.isfinite(p).all() and p.tobytes() == p2.tobytes(), spec.name
    for k in state:
        assert state[k].tobytes() == state2[k].tobytes(), (spec.name, k)
    phases = len(decode(code).phases)
    ticks = (ctypes.c_uint64 * phases)()
    clocked.uo_kernel_phase_ticks.argtypes = [ctypes.POINTER(ctypes.c_uint64), ctypes.c_int]
    clocked.uo_kernel_phase_ticks(ticks, phases)
    assert all(t > 0 for t in ticks), list(ticks)
    clocked.uo_kernel_phase_ticks(ticks, phases)
    assert list(ticks) == [0] * phases


def test_the_kernel_phases_benchmark_tables_every_phase():
    """benchmarks/kernel_phases.py: a row per phase of the program, its tile run, its
    operations and its share of the ticks; a shape it cannot run is refused by name."""
    import importlib.util

    path = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "kernel_phases.py")
    loaded = importlib.util.spec_from_file_location("kernel_phases_script", path)
    module = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(module)
    table = module.phase_table("came", (8, 6, 3, 3), steps=2)
    spec = uo.records.record_of("came").benchmark
    code = KernelRunner(specialize=False).program(spec, (8, 6, 3, 3), "float32",
                                                  spec.lr_at(1), 2)[1]
    plan = decode(code)
    rows = table["phases"]
    assert [row["phase"] for row in rows] == list(range(len(plan.phases)))
    assert [row["tile_run"] for row in rows if row["tile_run"] is not None] == [
        first for first, count in plan.tiles for _ in range(count)]
    assert any("sqrt div" in row["operations"] for row in rows)
    assert abs(sum(row["share"] for row in rows) - 1.0) < 1e-9
    assert all(row["ticks_per_element"] > 0 for row in rows)
    assert table["median_step_ms"] > 0
    assert module.markdown(table).count("\n| ") == len(rows) + 1
    with pytest.raises(ValueError, match="shape must be a tuple of positive ints"):
        module.phase_table("came", (8, 0, 3, 3))
    with pytest.raises(ValueError, match="steps must be an int >= 1"):
        module.phase_table("came", (8, 6, 3, 3), steps=0)


def _run_both_from_step_two(runner, spec, library, shape, dtype):
    """Step 1 on the VM for both (the first step may differ in structure), then both."""
    rng = np.random.default_rng(3)
    p = np.ascontiguousarray(rng.normal(size=shape), dtype=dtype)
    state = {k: np.array(v, order="C") for k, v in spec.init(p, numpy_ops).items()}
    g = np.ascontiguousarray(rng.normal(size=shape), dtype=dtype)
    run_numpy(runner, spec, p, g, state, lr=spec.lr_at(0), step=1)
    p2, state2 = p.copy(), {k: v.copy() for k, v in state.items()}
    order = runner.state_order(spec, shape, np.dtype(dtype).name)
    for step in range(2, 8):
        g = np.ascontiguousarray(rng.normal(size=shape) * 10.0 ** (step % 5 - 2), dtype=dtype)
        if step == 5 and g.size:
            g.reshape(-1)[0] = np.nan
        lr = spec.lr_at(step - 1)
        with np.errstate(all="ignore"):       # the means of an empty tensor are NaN
            run_numpy(runner, spec, p, g, state, lr=lr, step=step)
        _kernel_step(runner, spec, library, p2, g, state2, order, lr, step)
    return (p, state), (p2, state2)


def _kernel_step(runner, spec, library, p, g, state, order, lr, step):
    """One step of the generated kernel ``library`` on ``p`` and ``state`` in place (the
    state arrays in the runner's ``order``), with the runner's program and scalars."""
    dtype = p.dtype
    seen, _, scalars, _ = runner.program(spec, p.shape, dtype.name, lr, step)
    arrays = [p, g] + [state[k] for k in order]
    addresses = (ctypes.c_void_p * len(arrays))(*[a.ctypes.data for a in arrays])
    dims = np.asarray(canonical_dims(seen), dtype=np.int64)
    assert library.uo_kernel_run(0 if dtype == np.float32 else 1, addresses,
                                 dims.ctypes.data, scalars.ctypes.data) == 0


_THREADS_SCRIPT = """
import hashlib, json, sys
import numpy as np
import unified_opt as uo
from unified_opt.kernels.runtime import KernelRunner, run_numpy
from unified_opt.ops import numpy_ops
runner = KernelRunner()
out = {}
for spec in [uo.CAME(lr=1e-3, weight_decay=0.1), uo.Lamb(lr=1e-2), uo.Adafactor(lr=1e-2)]:
    rng = np.random.default_rng(0)
    p = rng.normal(size=(3, 300, 700)).astype(np.float32)
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


def test_the_vm_gives_the_same_bits_on_one_and_two_threads():
    """Sums over rows, columns and whole tensors large enough to run on several threads
    add in an order of their own: one thread or two, the same bits."""
    digests = []
    for threads in ("1", "2"):
        env = dict(os.environ, OMP_NUM_THREADS=threads)
        done = subprocess.run([sys.executable, "-c", _THREADS_SCRIPT], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        digests.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert digests[0] == digests[1]


def test_an_update_that_cannot_be_traced_says_why():
    with pytest.raises(Untraceable, match="truth value"):
        trace_update(UntraceableSGD(lr=0.1), (8, 8), "float32", {}, lr=0.1, step=1)
    runner = KernelRunner()
    with pytest.raises(Untraceable, match="float16"):
        runner.plan(uo.Adam(), (4,), "float16", lr=1e-3, step=1)


def test_the_structure_follows_python_branches_and_the_values_follow_the_step(runner):
    """SGD's first step takes another branch (a new program); a schedule's lr and the
    bias corrections only change the slots' values (the same program)."""
    sgd = uo.SGD(lr=0.1, momentum=0.9)
    first = runner.code_and_scalars(sgd, (4, 4), "float32", 0.1, 1)[0]
    second = runner.code_and_scalars(sgd, (4, 4), "float32", 0.1, 2)[0]
    assert first.tobytes() != second.tobytes()
    adam = uo.Adam(lr=uo.schedules.Cosine(lr=0.1, T_max=10))
    code3, values3 = runner.code_and_scalars(adam, (4, 4), "float32", adam.lr_at(2), 3)
    code7, values7 = runner.code_and_scalars(adam, (4, 4), "float32", adam.lr_at(6), 7)
    assert code3.tobytes() == code7.tobytes()
    assert not np.array_equal(values3, values7)


class _RowMean(uo.SGD):
    """An update that sums over a chosen axis (without reading the rank)."""

    def update(self, param, grad, state, *, lr, step, ops):
        return param - ops.mean(grad, axis=-1, keepdims=True) * lr, state


def test_a_trace_is_rank_blind_only_where_python_never_saw_the_axes():
    """``Trace.rank_blind`` lets the CUDA engine run a parameter of any rank on the 1-D
    trace of the step (one trace a step): true for AdamW, Lion and Lamb, whose Python
    reads no shape; false for an update that reads ``ndim`` (its scalar follows the
    rank), one that sums over a chosen axis, and a factored one. The state test
    (``Programs.states_flatten``) takes AdamW's moments, whole at every rank, and refuses
    Adafactor's factored rows and columns."""
    def blind(spec, shape):
        return trace_update(spec, shape, "float32", state_masks(spec, shape, "float32"),
                            lr=1e-3, step=3).rank_blind

    for spec in (uo.AdamW(), uo.Lion(), uo.Lamb(), uo.LARS()):
        assert blind(spec, (64,)), spec.name
    for spec in (PerRankSGD(lr=0.1), _RowMean(lr=0.1), uo.Adafactor(),
                 uo.LARS(exclude_1d=True)):
        assert not blind(spec, (64,)), spec.name
    programs = Programs()
    assert all(programs.states_flatten(uo.AdamW(), ndim, "float32") for ndim in (0, 2, 3))
    assert programs.states_flatten(uo.SGD(lr=0.1), 2, "float32")          # no state
    assert not programs.states_flatten(uo.Adafactor(), 2, "float32")
    assert programs.states_flatten(uo.Adafactor(), 0, "float32")          # 0-d: one value


class _PerWidth(uo.SGD):
    """An update that reads a size as a number: its trace is that size's."""

    def update(self, param, grad, state, *, lr, step, ops):
        return param - grad * (lr / param.shape[-1]), state


def test_an_update_reading_a_size_is_traced_per_size(runner):
    spec = _PerWidth(lr=1.0)
    for width in (4, 8, 4):
        param = np.zeros((2, width), np.float32)
        run_numpy(runner, spec, param, np.ones((2, width), np.float32), {}, lr=1.0, step=2)
        np.testing.assert_array_equal(param, np.float32(-1.0 / width))


def test_a_missing_compiler_is_named():
    script = ("from unified_opt.kernels import build\n"
              "try:\n    build.load()\nexcept build.KernelUnavailable as e:\n    print(e)\n")
    env = dict(os.environ, CXX="no-such-c++", UNIFIED_OPT_CACHE=os.devnull + "-none")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=60)
    assert "no C++ compiler: 'no-such-c++' is not on PATH" in done.stdout


def test_a_cache_that_cannot_be_written_is_named(tmp_path):
    """A file where the cache folder should be: KernelUnavailable naming the folder (what
    compile='auto' turns into its warning), not an OSError out of a step."""
    blocker = tmp_path / "cache"
    blocker.write_text("not a folder")
    script = ("from unified_opt.kernels import build\n"
              "try:\n    build.load()\nexcept build.KernelUnavailable as e:\n    print(e)\n")
    env = dict(os.environ, UNIFIED_OPT_CACHE=str(blocker / "inner"))
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert f"the kernel cache {blocker / 'inner'} cannot be written" in done.stdout, \
        done.stdout + done.stderr


def test_an_exchanging_optimizer_runs_eagerly_and_compile_true_refuses_it():
    from unified_opt.kernels.runtime import KernelPath

    assert KernelPath.for_optimizer("auto", "Opt", exchanges=True) is None
    assert KernelPath.for_optimizer(False, "Opt", exchanges=False) is None
    assert KernelPath.for_optimizer("inductor", "Opt", exchanges=False) is None
    assert isinstance(KernelPath.for_optimizer(True, "Opt", exchanges=False), KernelPath)
    with pytest.raises(ValueError, match="Opt: options compile=True, but a data-parallel "
                                         "spec exchanging between ranks runs eagerly"):
        KernelPath.for_optimizer(True, "Opt", exchanges=True)


def test_abi_h_is_generated_from_the_one_abi():
    """The opcodes, operand kinds, layout, axis bits, dtype codes and C signatures are
    written once (bytecode.py); abi.h, which vm.cc, phases.h and every generated kernel
    include, is its output (`python -m unified_opt.kernels.bytecode` rewrites it), and a
    definition in vm.cc that differs from its declaration there does not compile."""
    from unified_opt.kernels.bytecode import ABI_HEADER, abi_header

    assert ABI_HEADER.read_text() == abi_header()
    vm = build.SOURCE.read_text()
    assert '#include "abi.h"' in build.HEADER.read_text()
    for stale in ("enum Op", "enum Kind", "constexpr int VERSION", "struct Ins"):
        assert stale not in vm, f"vm.cc writes the ABI's {stale} again"


@pytest.mark.parametrize("name,index,spec", TRACED, ids=[f"{n}-{i}" for n, i, _ in TRACED])
def test_the_vm_code_is_the_schedule_every_generator_reads(name, index, spec):
    """One IR: the tracer's program is scheduled once (bytecode.schedule); the VM's code
    is that KernelPlan encoded, and decode gives it back whole."""
    from unified_opt.kernels.bytecode import decode, encode, schedule

    for shape in [(5, 7), (9,), (2, 3, 4)]:
        labels = Programs().state_labels(spec, shape, "float32")
        try:
            trace = trace_update(spec, shape, "float32", labels, lr=float(spec.lr_at(0)),
                                 step=2)
        except Untraceable:
            continue
        scheduled = schedule(trace.program)
        code = encode(scheduled)
        assert decode(code) == scheduled
        assert encode(decode(code)).tobytes() == code.tobytes()
        assert kernel_source(code) == kernel_source(scheduled)


#: updates elementwise but for whole-tensor sums (the CPU kernels run them as 1-D)
RANK_BLIND = [uo.AdamW(lr=1e-3, weight_decay=0.1), uo.Lion(lr=1e-3, weight_decay=0.1),
              uo.Lamb(lr=1e-2, weight_decay=0.01), uo.LARS(lr=0.1, weight_decay=1e-3),
              uo.NAdam(lr=1e-2), uo.SGD(lr=0.1, momentum=0.9, nesterov=True)]


@pytest.mark.parametrize("spec", RANK_BLIND, ids=[s.name for s in RANK_BLIND])
def test_a_conv_weight_steps_as_its_matrix_and_as_one_row(runner, spec):
    """The walk does not depend on the last axis: a conv weight (64, 64, 3, 3), the same
    elements as (64, 576) and as one row give the same bits (before, the kernels walked
    rows of 3: 5-18x slower, and Lamb's and LARS's norms added in another order)."""
    shapes = [(64, 64, 3, 3), (64, 576), (64 * 576,)]
    assert runner.program(spec, shapes[0], "float32", spec.lr_at(0), 2)[0] == (64 * 576,)
    results = []
    for shape in shapes:
        rng = np.random.default_rng(5)
        p = rng.normal(size=shape).astype(np.float32)
        state = {k: np.array(v, order="C") for k, v in spec.init(p, numpy_ops).items()}
        for step in range(1, 4):
            g = rng.normal(size=shape).astype(np.float32)
            run_numpy(runner, spec, p, g, state, lr=spec.lr_at(step - 1), step=step)
        results.append([p.tobytes(), *(state[k].tobytes() for k in sorted(state))])
    assert results[0] == results[1] == results[2]


def test_a_factored_moment_keeps_the_shape_it_reduces_over(runner):
    """Adafactor reduces over the last two axes, as the spec defines: its program is not
    run as 1-D."""
    spec = uo.Adafactor(lr=1e-2)
    assert runner.program(spec, (8, 4, 3, 3), "float32", 1e-2, 2)[0] == (8, 4, 3, 3)
