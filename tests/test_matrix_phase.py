"""The kernel IR's matrix phase (``Ops.matrix_function``: Muon's Newton–Schulz
iteration): the plan holds it between the elementwise phases, the runtime runs the
segments on the VM and its kernels and the iteration on the host, and the numbers are
the eager update's, bit for bit, on numpy and on each framework's own path; a runner
without matrix phases (the CUDA engine's) and the generators refuse it by name."""

from __future__ import annotations

import numpy as np
import pytest
from algorithms import ALGORITHMS
from support import case_of, judge
from test_kernels import vm_trajectory

import unified_opt as uo
from unified_opt.algorithms.muon import MATRICES
from unified_opt.kernels import build
from unified_opt.kernels.bytecode import MATRIX, encode, schedule, segments
from unified_opt.kernels.codegen import kernel_source
from unified_opt.kernels.runtime import KernelRunner, Programs, Segmented, run_numpy
from unified_opt.kernels.trace import Untraceable, state_masks, trace_update
from unified_opt.ops import numpy_ops

try:
    build.load()
except build.KernelUnavailable as error:           # no C++ compiler on this machine
    pytest.skip(f"the kernel VM cannot be built here: {error}", allow_module_level=True)

SPECS = [uo.Muon(lr=0.02, weight_decay=0.1),
         uo.Muon(lr=0.02, ns_dtype="bfloat16", nesterov=False),
         uo.Muon(lr=0.01, adjust_lr_fn="match_rms_adamw", ns_steps=3, eps=0.5),
         uo.Muon(lr=0.02, muon_params="matrices_and_conv", others="adamw")]
#: a tall and a wide matrix (the iteration transposes the tall one), a conv kernel (its
#: flattening, where the spec takes conv kernels), a vector (the auxiliary AdamW)
SHAPES = {"tall": (65, 40), "wide": (24, 33), "conv": (8, 3, 3, 3), "bias": (7,)}
SAMPLES = list(enumerate(ALGORITHMS["muon"].samples))


def _program(spec, shape=(6, 4)):
    return trace_update(spec, shape, "float32", state_masks(spec, shape, "float32"),
                        lr=0.02, step=1).program


def test_the_plan_puts_the_matrix_phase_between_the_elementwise_ones():
    """Muon's plan: the momentum and the iteration's input in a full phase, the matrix
    phase, the new parameter in a full phase. Its segments carry the iteration's
    operand and result across (the arrays the host reads and writes); the plan itself
    is not code: encoding it, or writing a kernel of it, is refused by name."""
    program = _program(uo.Muon(lr=0.02))
    assert [node.op for node in program.nodes].count("matrix") == 1
    assert program.matrix_calls[0][0].__name__ == "orthogonalised"
    plan = schedule(program, keep_costly=True)
    full = program.input_masks[0]
    assert [p.domain for p in plan.phases] == [full, MATRIX, full]
    with pytest.raises(ValueError, match="matrix phase"):
        encode(plan)
    with pytest.raises(ValueError, match="matrix phase"):
        kernel_source(plan)
    parts, crossing = segments(plan, tiles=True)
    assert len(crossing) == 2 and [len(part.calls) for part in parts] == [1, 0]
    call = parts[0].calls[0]
    assert {call.a, call.dst} == {0, 1}
    for part in parts:                                # each segment is ordinary code
        assert part.plan.n_inputs == plan.n_inputs + 2
        encode(part.plan)
        kernel_source(encode(part.plan))


def test_a_trace_reads_the_real_shape_of_a_parameter_of_four_dimensions():
    """The leading axes of a conv kernel are one axis (B) of the trace, but a shape read
    gives each its size (Muon's flattening of a conv kernel reads them): the
    parameter's, and a mean's kept with keepdims."""
    from unified_opt.kernels.trace import TraceOps, Tracer, axis_labels

    tracer = Tracer((2, 3, 4, 5), "float32")
    x = tracer.input(0, axis_labels(4))
    ops = TraceOps(tracer)
    assert tuple(x.shape) == (2, 3, 4, 5) and tracer.shape_read
    assert tuple(ops.mean(x, axis=-1, keepdims=True).shape) == (2, 3, 4, 1)
    assert tuple(ops.mean(x, axis=-2, keepdims=True).shape) == (2, 3, 1, 5)


def test_a_runner_without_matrix_phases_refuses_the_update():
    """The CUDA engine's programs (:class:`Programs`) do not run a matrix phase: Muon
    stays untraceable there (and runs eagerly), with the reason."""
    spec = uo.Muon(lr=0.02)
    with pytest.raises(Untraceable, match="matrix_function"):
        Programs().code_and_scalars(spec, (64, 96), "float32", 0.02, 1)
    runner = KernelRunner(specialize=False)
    code, _ = runner.code_and_scalars(spec, (64, 96), "float32", 0.02, 1)
    assert isinstance(code, Segmented) and code.crossing == (6, 6)


@pytest.mark.parametrize("specialize", [False, True], ids=["vm", "kernels"])
@pytest.mark.parametrize("spec", SPECS, ids=[str(i) for i in range(len(SPECS))])
def test_the_kernel_runner_gives_the_eager_numpy_bits(spec, specialize):
    """Three steps of the update on numpy arrays, eagerly and on the kernel runner (the
    VM, and the generated kernels of each segment): the same bits, parameter and
    state, for a tall and a wide matrix, a conv kernel flattened into Muon, a vector
    of the auxiliary AdamW, in float32 and bfloat16 iterations."""
    runner = KernelRunner(specialize=specialize)
    rng = np.random.default_rng(0)
    for name, shape in SHAPES.items():
        if not spec.updates_shape(shape):
            continue
        eager = rng.standard_normal(shape).astype(np.float32)
        state = spec.init(eager, numpy_ops)
        param = eager.copy()
        kept = {k: np.array(v, order="C") for k, v in state.items()}
        for step in range(1, 4):
            grad = rng.standard_normal(shape).astype(np.float32)
            eager, state = spec.update(eager, grad, state, lr=0.02, step=step, ops=numpy_ops)
            run_numpy(runner, spec, param, grad, kept, lr=0.02, step=step)
        np.testing.assert_array_equal(param, eager, err_msg=name)
        for key in state:
            np.testing.assert_array_equal(kept[key], state[key], err_msg=f"{name} {key}")
        made = runner.prepared(spec, shape, "float32", 0.02, 3)
        assert isinstance(made.code, Segmented) == spec.takes_muon(shape), name


@pytest.mark.parametrize("index,spec", SAMPLES, ids=[str(i) for i, _ in SAMPLES])
def test_every_muon_sample_follows_the_oracle_on_the_kernels(index, spec):
    case = case_of(f"vm_muon_{index}", spec, MATRICES)
    comparison = judge(vm_trajectory(KernelRunner(), case), case)
    assert comparison.passed, comparison.detail


def _framework_runs(framework: str, spec, steps: int = 3):
    """The own path's parameters after ``steps`` steps, with ``compile`` False (eager)
    and True (the kernels: every program compiled before the first step)."""
    rng = np.random.default_rng(1)
    names = [n for n, s in SHAPES.items() if spec.updates_shape(s)]
    start = {n: rng.standard_normal(SHAPES[n]).astype(np.float32) for n in names}
    grads = [{n: rng.standard_normal(SHAPES[n]).astype(np.float32) for n in names}
             for _ in range(steps)]
    out = {}
    for mode in (False, True):
        if framework == "torch":
            import torch

            params = [torch.nn.Parameter(torch.from_numpy(start[n].copy())) for n in names]
            optimizer = uo.build(spec, params, path="own", options={"compile": mode})
            for grad in grads:
                for p, n in zip(params, names):
                    p.grad = torch.from_numpy(grad[n].copy())
                optimizer.step()
            out[mode] = [p.detach().numpy().copy() for p in params]
        else:
            import paddle

            params = []
            for n in names:
                p = paddle.create_parameter(list(SHAPES[n]), "float32")
                p.set_value(start[n])
                params.append(p)
            optimizer = uo.build(spec, params, path="own", options={"compile": mode})
            for grad in grads:
                for p, n in zip(params, names):
                    p._set_grad_ivar(paddle.to_tensor(grad[n]))
                optimizer.step()
            out[mode] = [p.numpy().copy() for p in params]
    return names, out


@pytest.mark.parametrize("framework", ["torch", "paddle"])
@pytest.mark.parametrize("spec", SPECS, ids=[str(i) for i in range(len(SPECS))])
def test_the_own_path_on_the_kernels_gives_the_eager_bits(framework, spec):
    """torch's and Paddle's own optimizer, ``compile=True`` (the elementwise phases on the
    kernels, the iteration in the framework's matrix products on the host) against
    ``compile=False`` (the update in the framework's operations): the same bits."""
    pytest.importorskip(framework)
    names, out = _framework_runs(framework, spec)
    for n, kernels, eager in zip(names, out[True], out[False]):
        np.testing.assert_array_equal(kernels, eager, err_msg=n)


def test_mindspore_runs_the_iteration_in_numpy_between_the_kernels():
    """MindSpore's own optimizer on the kernels: the iteration runs in numpy on the host
    (one PyNative operation there costs about a millisecond), so its numbers are the
    numpy update's, bit for bit."""
    ms = pytest.importorskip("mindspore")
    spec = uo.Muon(lr=0.02, weight_decay=0.1, muon_params="matrices_and_conv",
                   others="adamw")
    rng = np.random.default_rng(2)
    start = {n: rng.standard_normal(s).astype(np.float32) for n, s in SHAPES.items()}
    params = [ms.Parameter(ms.Tensor(start[n].copy()), name=n) for n in SHAPES]
    optimizer = uo.build(spec, params, path="own", options={"compile": True})
    eager = {n: a.copy() for n, a in start.items()}
    state = {n: spec.init(eager[n], numpy_ops) for n in SHAPES}
    for step in range(1, 4):
        grads = {n: rng.standard_normal(s).astype(np.float32) for n, s in SHAPES.items()}
        optimizer(tuple(ms.Tensor(grads[n]) for n in SHAPES))
        for n in SHAPES:
            eager[n], state[n] = spec.update(eager[n], grads[n], state[n], lr=0.02,
                                             step=step, ops=numpy_ops)
    for n, p in zip(SHAPES, params):
        np.testing.assert_array_equal(p.asnumpy(), eager[n], err_msg=n)
