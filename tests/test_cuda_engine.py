"""The CUDA engine (``backends/torch/cuda.py``): every phase of a spec's VM program as one
Triton kernel over all tensors of a group. Here its kernels run in Triton's interpreter
(``TRITON_INTERPRET=1``: numpy on the CPU, no GPU needed) over CPU tensors:

* bit for bit the kernel VM's numbers (itself the numpy float32 rules without FMA), for
  every algorithm over tensors of every rank, odd sizes that cut the tiles, a 0-d and
  zero-size tensors, several tensors per launch, adversarial gradients (zeros, tiny,
  huge, NaN and inf);
* a sign decided by a value within float32 rounding of 0 (Lion) as the float32 reference
  decides it: the kernels keep the spec's operation order without fused multiply-adds;
* through ``uo.build``'s own optimizer, the conformance rule against the float64 oracle;
* what the kernels do not run (DGC's top-k) is refused by ``compile=True`` and handed to
  the eager update by ``"auto"``.

The same kernels compiled for a GPU: ``tests/test_cuda_native.py`` and the device script
``benchmarks/gpu_check.py``.
"""

import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from algorithms import UNTRACEABLE
from support import LOOP_PARAMS, PerRankSGD, case_of, judge

import unified_opt as uo

torch = pytest.importorskip("torch")
pytest.importorskip("triton")
CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
#: without a GPU the tests run in a process of their own with Triton's interpreter on from
#: the start (Triton's own jit functions, tl.sum among them, take it only as Triton loads,
#: and this session loaded Triton with MindSpore)
CHILD = "UO_TRITON_INTERPRETER_CHILD"
SHARD = "UO_TEST_SHARD"
HERE = CUDA or os.environ.get(CHILD) == "1"
here = pytest.mark.skipif(not HERE, reason="runs in test_under_triton_s_interpreter")


@pytest.mark.skipif(HERE, reason="the tests run in this process")
@pytest.mark.slow
def test_under_triton_s_interpreter():
    """Two children, each every other test of this file (conftest.py's SHARD): the
    interpreter is numpy on one core."""
    children = [subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W",
         "ignore::RuntimeWarning", __file__], cwd=Path(__file__).parent.parent,
        env=dict(os.environ, TRITON_INTERPRET="1", **{CHILD: "1", SHARD: f"{k}/2"}),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in range(2)]
    outputs = []
    for child in children:
        try:
            out, err = child.communicate(timeout=1200)
        except subprocess.TimeoutExpired:
            for other in children:
                other.kill()
            raise
        assert child.returncode == 0, out[-6000:] + err[-3000:]
        outputs.append(out)
    counts = [dict((word, int(n)) for n, word in re.findall(r"(\d+) (passed|skipped)", out))
              for out in outputs]
    assert all(c.get("passed", 0) > 10 for c in counts), outputs
    assert sum(c.get("skipped", 0) for c in counts) == 2, outputs   # this one, compiling


from unified_opt.backends.torch import cuda  # noqa: E402
from unified_opt.backends.torch.ops import torch_ops  # noqa: E402
from unified_opt.conformance.trajectory import Recorder  # noqa: E402
from unified_opt.kernels.runtime import KernelRunner, run_numpy  # noqa: E402
from unified_opt.kernels.trace import trace_update  # noqa: E402
from unified_opt.ops import numpy_ops  # noqa: E402
from unified_opt.step_loop import Batch  # noqa: E402

#: ranks 0 to 3, a tile's edges crossed (8 rows x 256 columns per tile, 64 rows per
#: program), zero-size tensors, 1-row and 1-column matrices
SHAPES = [(70, 300), (300,), (3, 5, 9), (), (0,), (4, 0), (1, 1), (33, 2), (1, 257)]
SPECS = {name: uo.get(name) for name in uo.algorithms()
         if name != "dgc_momentum" and name not in UNTRACEABLE}
SPECS.update({
    "adam_eps_hat_amsgrad": uo.Adam(eps_placement="eps_hat", amsgrad=True, lr=1e-2),
    "sgd_nesterov": uo.SGD(lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3),
    "lamb_clamped": uo.Lamb(lr=1e-2, weight_decay=0.01, weight_norm_clamp=10.0,
                            trust_eps=1e-6, always_adapt=True),
    "came_relative": uo.CAME(relative_step=True, scale_parameter=True, warmup_init=True),
})


@pytest.fixture(autouse=True)
def quiet():
    with warnings.catch_warnings():
        # the interpreter's numpy warns where the kernels divide by zero (inf, as on a GPU)
        warnings.simplefilter("ignore", RuntimeWarning)
        yield


def _gradients(rng, step):
    """Gradients for :data:`SHAPES` at ``step``: random magnitudes with a zero, a tiny
    (1e-30) and a large (500) element, and at step 2 a NaN or an Inf (so step 3 shows
    what follows one)."""
    out = []
    for shape in SHAPES:
        g = np.asarray(rng.standard_normal(shape) * 10.0 ** rng.uniform(-3, 2))
        flat = g.reshape(-1)
        if flat.size > 8:
            flat[:3] = (0.0, 1e-30, 500.0)
            if step == 2:
                flat[5] = np.nan if flat.size % 2 else np.inf
        out.append(g.astype(np.float32))
    return out


def _on_both(spec, seed):
    """``(rng, engine, VM runner, params, their numpy copies, states, the states' numpy
    copies)``: :data:`SHAPES`'s parameters on the device and for the VM."""
    rng = np.random.default_rng(seed)
    params = [torch.tensor(np.asarray(rng.standard_normal(s), dtype=np.float32),
                           device=DEVICE) for s in SHAPES]
    states = [{k: v.clone() for k, v in spec.init(p, torch_ops).items()} for p in params]
    return (rng, cuda.CudaKernels(True, "test"), KernelRunner(specialize=False), params,
            [p.cpu().numpy() for p in params], states,
            [{k: v.cpu().numpy() for k, v in s.items()} for s in states])


@here
@pytest.mark.parametrize("name", sorted(SPECS))
def test_the_kernels_give_the_vm_s_bits(name):
    spec = SPECS[name]
    rng, engine, runner, params, on_vm, states, vm_states = _on_both(spec, 7)
    for step in (1, 2, 3):        # (the interpreter: about 2 s a step for CAME's)
        grads = _gradients(rng, step)
        lr = float(spec.lr_at(step - 1))
        batch = Batch(spec, lr, list(range(len(SHAPES))), params,
                      [torch.tensor(g, device=DEVICE) for g in grads], states,
                      [step] * len(SHAPES))
        assert engine.run(batch) == []
        for p, g, state in zip(on_vm, grads, vm_states):
            run_numpy(runner, spec, p, g.copy(), state, lr=lr, step=step)
        for shape, p, q, state, vm_state in zip(SHAPES, params, on_vm, states, vm_states):
            np.testing.assert_array_equal(p.cpu().numpy(), q,
                                          err_msg=f"{name} {shape} step {step}")
            for key, value in vm_state.items():
                np.testing.assert_array_equal(state[key].cpu().numpy(), value,
                                              err_msg=f"{name} {shape} {key} step {step}")


@here
@pytest.mark.parametrize("name, traces", [("adamw", 1), ("per_rank", 4)])
def test_a_rank_blind_update_is_traced_once_a_step(name, traces, monkeypatch):
    """A step's scalars come from tracing the update's Python. AdamW's never looks at
    the axes: one 1-D trace a step serves the tensors of every rank. ``PerRankSGD``'s
    scalar follows the rank: each of the four ranks is traced for itself, and each gets
    its own scale (the VM's bits, rank by rank)."""
    from unified_opt.kernels import runtime

    spec = uo.AdamW(lr=1e-2) if name == "adamw" else PerRankSGD(lr=0.1)
    made = []
    monkeypatch.setattr(runtime, "trace_update",
                        lambda *a, **k: made.append(a[1]) or trace_update(*a, **k))
    rng, engine, runner, params, on_vm, states, vm_states = _on_both(spec, 5)
    for step in (1, 2, 3):
        grads = _gradients(rng, step)
        made.clear()
        assert engine.run(Batch(spec, 0.1, list(range(len(SHAPES))), params,
                                [torch.tensor(g, device=DEVICE) for g in grads], states,
                                [step] * len(SHAPES))) == []
        if step > 1:
            assert len(made) == traces, made
        for p, g, state in zip(on_vm, grads, vm_states):
            run_numpy(runner, spec, p, g.copy(), state, lr=0.1, step=step)
        for shape, p, q in zip(SHAPES, params, on_vm):
            np.testing.assert_array_equal(p.cpu().numpy(), q, err_msg=f"{shape} {step}")


@here
def test_a_sign_near_zero_decides_as_the_float32_reference():
    """Lion's update is sign(beta1 m + (1 - beta1) g): with m and g chosen so the two
    terms cancel to within float32 rounding, a contracted a*b+c would round once and
    could take the other sign; the kernels round each operation as numpy does."""
    spec = uo.Lion(lr=1e-2, betas=(0.9, 0.99), weight_decay=0.0)
    rng = np.random.default_rng(3)
    m = rng.standard_normal(4096).astype(np.float32)
    g = (-np.float32(0.9) * m / np.float32(0.1)).astype(np.float32)   # cancels to ~ulps
    g += rng.choice([-1, 0, 1], 4096).astype(np.float32) * np.spacing(g)
    p = rng.standard_normal(4096).astype(np.float32)
    expected, expected_state = spec.update(p.copy(), g.copy(), {"exp_avg": m.copy()},
                                           lr=1e-2, step=1, ops=numpy_ops)
    mixed = np.sign(np.float32(0.9) * m + np.float32(0.1) * g)
    assert (mixed == 0).sum() > 100 and len(set(mixed.tolist())) == 3   # near ties exist
    param, state = torch.tensor(p, device=DEVICE), {"exp_avg": torch.tensor(m, device=DEVICE)}
    engine = cuda.CudaKernels(True, "test")
    assert engine.run(Batch(spec, 1e-2, [0], [param], [torch.tensor(g, device=DEVICE)],
                            [state], [1])) == []
    np.testing.assert_array_equal(param.cpu().numpy(), expected)
    np.testing.assert_array_equal(state["exp_avg"].cpu().numpy(), expected_state["exp_avg"])


@here
def test_a_parameter_given_other_memory_is_updated_there():
    """``p.data = ...`` between steps (as ``Module.to`` or ``.double()`` do): the kernels'
    tables are made again for the new memory, dtype included, and the update is the VM's
    on the new values (the tables kept the old address, and the step updated memory the
    parameter had left)."""
    spec = uo.AdamW(lr=0.1)
    param = torch.nn.Parameter(torch.ones(4, 8, device=DEVICE))
    optimizer = uo.build(spec, [param], path="own", options={"compile": True})
    assert optimizer._engines(0, spec)[0].name == "cuda"
    runner = KernelRunner(specialize=False)
    value = np.ones((4, 8), np.float32)
    state = {k: np.ascontiguousarray(v) for k, v in spec.init(value, numpy_ops).items()}
    grad = np.linspace(-1, 1, 32, dtype=np.float32).reshape(4, 8)
    for step, moved_to in ((1, None), (2, np.float32), (3, None), (4, np.float64)):
        if moved_to is not None:
            param.data = torch.full((4, 8), 5.0, dtype=TORCH_DTYPES[moved_to], device=DEVICE)
            value = np.full((4, 8), 5.0, moved_to)
            state = {k: v.astype(moved_to) for k, v in state.items()}
        param.grad = torch.tensor(grad.astype(value.dtype), device=DEVICE)
        optimizer.step()
        run_numpy(runner, spec, value, grad.astype(value.dtype), state, lr=0.1, step=step)
        assert param.dtype == TORCH_DTYPES[value.dtype.type]
        np.testing.assert_array_equal(param.detach().cpu().numpy(), value,
                                      err_msg=f"step {step}")


#: numpy's float types as torch's
TORCH_DTYPES = {np.float32: torch.float32, np.float64: torch.float64}


@here
@pytest.mark.parametrize("name", ["lion"] + (["lamb", "came", "adafactor"] if CUDA else []))
def test_the_own_optimizer_on_the_kernels_follows_the_oracle(name):
    """``uo.build``'s own optimizer puts the tensors the engine claims (CUDA ones; CPU
    ones under the interpreter) on it, and the run passes the conformance rule. (The
    interpreter takes about a second per step of a program with sums: those run here on
    a GPU only; their kernels are checked bit for bit above.)"""
    from unified_opt.conformance.device import place
    from unified_opt.conformance.drivers.torch import TorchDriver

    spec = SPECS[name]
    case = case_of(f"cuda_engine_{name}", spec, LOOP_PARAMS)
    driver = TorchDriver(spec, case.initial_params(), path="own", options={"compile": True},
                         device=place("torch", DEVICE))
    assert driver.optimizer._engines(0, spec)[0].name == "cuda"
    recorder = Recorder()
    for t in range(case.steps):
        lr = driver.step(case.gradients(t))
        recorder.add(lr, driver.params_numpy(), driver.state_numpy())
    result = judge(recorder.trajectory(), case)
    assert result.passed, result.detail
    assert driver.optimizer._cuda._launches           # the kernels ran


#: updates whose programs store each kept array once, in their last phase that reads it
BFLOAT16_SPECS = {
    "adamw": uo.AdamW(lr=1e-2),
    "adamw_float32_state": uo.AdamW(lr=1e-2, state_dtype="float32"),
    "lion": uo.Lion(lr=1e-2, weight_decay=0.1),
    # (a clipped one sums the norm in torch, not bit for bit numpy's: the conformance
    # case bfloat16_sgd_momentum_clipped judges it)
    "sgd_momentum": uo.SGD(lr=0.05, momentum=0.9, state_dtype="bfloat16"),
}


@here
@pytest.mark.parametrize("name", sorted(BFLOAT16_SPECS))
def test_bfloat16_parameters_on_the_kernels_are_the_rounded_float32_reference_s_bits(name):
    """bfloat16 parameters (and state) on the kernels: read into float32, the program in
    float32, each kept array rounded to nearest even where it is stored: the numpy
    float32 reference rounded as :mod:`unified_opt.storage` says, bit for bit."""
    from unified_opt.reference import Reference
    from unified_opt.storage import round_to

    spec = BFLOAT16_SPECS[name]
    rng = np.random.default_rng(11)
    shapes = {"w": (70, 300), "b": (300,), "s": (1, 1)}
    init = {n: round_to(rng.standard_normal(s) * 0.3, "bfloat16") for n, s in shapes.items()}
    params = [torch.nn.Parameter(torch.tensor(init[n], device=DEVICE).bfloat16())
              for n in shapes]
    opt = uo.build(spec, params, path="own", options={"compile": True})
    assert opt._engines(0, spec)[0].name == "cuda"
    reference = Reference(spec, init, "float32", storage="bfloat16")
    for step in range(6):
        grads = {n: round_to(rng.standard_normal(s) * 10.0 ** (step - 3), "bfloat16")
                 for n, s in shapes.items()}
        for p, n in zip(params, shapes):
            p.grad = torch.tensor(grads[n], device=DEVICE).bfloat16()
        opt.step()
        reference.step(grads)
        for p, n in zip(params, shapes):
            np.testing.assert_array_equal(p.detach().float().cpu().numpy(),
                                          reference.params[n], err_msg=f"{n} step {step}")
            for key, value in opt.spec_state(p).items():
                np.testing.assert_array_equal(value.float().cpu().numpy(),
                                              reference.state[n][key],
                                              err_msg=f"{n} {key} step {step}")
    assert opt._cuda._launches


@here
def test_a_kept_array_read_back_after_its_store_runs_eagerly():
    """Lamb stores its moments in one phase and reads them again after the norms: rounded
    at the store, the later phase would compute with the rounded moments, where the update
    rounds once, at its end. compile=True refuses it by name; "auto" runs it eagerly."""
    spec = uo.Lamb(lr=1e-2)
    p = torch.nn.Parameter(torch.ones(8, 8, device=DEVICE, dtype=torch.bfloat16))
    with pytest.raises(ValueError, match=r"kept as bfloat16, is read after a phase stored it"):
        uo.build(spec, [p], path="own", options={"compile": True})
    opt = uo.build(spec, [p], path="own")
    p.grad = torch.full((8, 8), 0.5, device=DEVICE, dtype=torch.bfloat16)
    with pytest.warns(RuntimeWarning, match="runs eagerly"):
        opt.step()
    eager = torch.nn.Parameter(torch.ones(8, 8, device=DEVICE, dtype=torch.bfloat16))
    reference = uo.build(spec, [eager], path="own", options={"compile": False})
    eager.grad = torch.full((8, 8), 0.5, device=DEVICE, dtype=torch.bfloat16)
    reference.step()
    assert torch.equal(p.detach(), eager.detach())


@here
def test_a_top_k_update_is_refused_by_true_and_run_eagerly_by_auto():
    spec = uo.DGCMomentum(lr=0.1, momentum=0.9, sparsity=(0.5,), rampup_begin_step=0,
                          min_numel=1)
    p = torch.nn.Parameter(torch.ones(8, 8, device=DEVICE))
    with pytest.raises(ValueError, match=r"cannot run on the CUDA kernels: ops.topk_mask"):
        uo.build(spec, [p], path="own", options={"compile": True})
    opt = uo.build(spec, [p], path="own", options={"compile": "auto"})
    p.grad = torch.arange(64.0, device=DEVICE).reshape(8, 8)
    with pytest.warns(RuntimeWarning, match="runs eagerly"):
        opt.step()
    eager = torch.nn.Parameter(torch.ones(8, 8, device=DEVICE))
    reference = uo.build(spec, [eager], path="own", options={"compile": False})
    eager.grad = torch.arange(64.0, device=DEVICE).reshape(8, 8)
    reference.step()
    assert torch.equal(p.detach(), eager.detach())


def test_only_the_listed_algorithms_do_not_trace():
    from unified_opt.kernels.runtime import Programs
    from unified_opt.kernels.trace import Untraceable

    failing = []
    for name in uo.algorithms():
        spec = uo.get(name)
        try:
            Programs().code_and_scalars(spec, (64, 96), "float32", float(spec.lr_at(0)), 1)
        except Untraceable:
            failing.append(name)
    assert tuple(failing) == UNTRACEABLE


@pytest.mark.skipif(os.environ.get(CHILD) == "1", reason="compiled in the parent process")
def test_every_kernel_compiles_for_the_gpu_without_contraction_or_approximation():
    """Each algorithm's kernels (float32: 2-D and 3-D programs; float64 for two) compile
    for an H100/H200 (sm_90) here, without a GPU, and their PTX holds no fused
    multiply-add and no approximate division, reciprocal or square root: the operation
    order of the float32 references, whatever ptxas would contract."""
    import re

    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from unified_opt.kernels.runtime import Programs
    from unified_opt.kernels.triton_source import (
        REDUCE_MANY,
        REDUCE_TOTAL,
        Unsupported,
        triton_program,
    )

    signature = {"programs": "*i64", "dims": "*i64", "arrays": "*i64", "n_tensors": "i32",
                 "scalars": "*fp64", "scalar_rows": "*i64", "n_scalars": "i32",
                 "parts": "*i64", "T": "constexpr", "ALIGNED": "constexpr"}
    programs, compiled = Programs(), 0
    runs = [(name, "float32", shape) for name in SPECS for shape in ((64, 96), (3, 4, 5))]
    runs += [("adamw", "float64", (64, 96)), ("came", "float64", (64, 96))]
    seen = set()
    for name, dtype, shape in runs:
        spec = SPECS[name]
        code, _ = programs.code_and_scalars(spec, shape, dtype, float(spec.lr_at(0)), 1)
        try:
            program = triton_program(code, dtype)
        except Unsupported:
            continue
        if program.digest in seen:
            continue
        first = program.digest if not seen else None
        seen.add(program.digest)
        module = cuda.module_of(program)
        for launch in program.launches:
            kernel = triton.compile(
                ASTSource(getattr(module, launch.kernel), signature,
                          {"T": getattr(tl, dtype), "ALIGNED": True}),
                target=GPUTarget("cuda", 90, 32),
                options={"num_warps": launch.num_warps, "enable_fp_fusion": False})
            ptx = kernel.asm["ptx"]
            assert not re.search(r"\bfma\.|(div|sqrt|rcp)\.(approx|full)", ptx), \
                (name, shape, launch.kernel)
            compiled += 1
        reductions = [("reduce_many", {"BK": REDUCE_MANY[0], "BO": REDUCE_MANY[1]}),
                      ("reduce_total", {"BK": REDUCE_TOTAL})]
        for kernel_name, blocks in reductions if program.digest == first else ():
            triton.compile(ASTSource(getattr(module, kernel_name),
                                     {"jobs": "*i64", "T": "constexpr",
                                      **{k: "constexpr" for k in blocks}},
                                     {"T": getattr(tl, dtype), **blocks}),
                           target=GPUTarget("cuda", 90, 32), options={"num_warps": 8})
    assert compiled > 30 and len(seen) > 15
