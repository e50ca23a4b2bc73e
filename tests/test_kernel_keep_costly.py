"""The CPU kernels keep a costly full value for a later phase (``bytecode.schedule``'s
``keep_costly``): Lamb's update direction, three divisions and a square root per element,
is stored where it is normed and read back where it is applied, instead of computed
again. The same operations in the same order: the same bits as the schedule that
computes it again (the CUDA path's), checked on the VM for every spec that changes."""

from __future__ import annotations

import numpy as np
import pytest

import unified_opt as uo
from unified_opt.kernels import build
from unified_opt.kernels.bytecode import OPCODES, decode, schedule
from unified_opt.kernels.runtime import KernelRunner, Programs, run_numpy
from unified_opt.kernels.trace import trace_update

try:
    build.load()
except build.KernelUnavailable as error:           # no C++ compiler on this machine
    pytest.skip(f"the kernel VM cannot be built here: {error}", allow_module_level=True)

SPECS = [uo.Lamb(lr=1e-3, weight_decay=0.01), uo.CAME(lr=1e-3, weight_decay=0.1),
         uo.Adafactor(lr=1e-2, beta1=0.9)]
SHAPES = [(1000,), (6, 5, 3, 3)]


class RecomputingRunner(KernelRunner):
    """The VM with the schedule that computes every full value again (CUDA's)."""

    keep_costly = False


def program_of(spec, shape, keep_costly: bool):
    labels = Programs().state_labels(spec, shape, "float32")
    trace = trace_update(spec, shape, "float32", labels, lr=1e-3, step=3)
    return schedule(trace.program, keep_costly)


def test_lamb_keeps_its_direction_in_one_array_and_applies_it_without_dividing():
    spec = SPECS[0]
    kept, again = program_of(spec, (1000,), True), program_of(spec, (1000,), False)
    full = kept.masks[0]

    def scratch_full(program):
        return sum(m == full for m in program.masks[program.n_inputs:])

    assert scratch_full(kept) == scratch_full(again) + 1   # one array of the param's size

    def costly(body):
        return sum(ins.op in (OPCODES["div"], OPCODES["sqrt"]) for ins in body)

    assert costly(kept.phases[-1][1]) == 0          # the step applies the kept direction
    assert costly(again.phases[-1][1]) == 4         # three divisions and a square root


def test_an_update_without_a_second_full_phase_is_unchanged():
    spec = uo.AdamW(lr=1e-3, weight_decay=0.01)
    assert program_of(spec, (1000,), True) == program_of(spec, (1000,), False)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_keeping_gives_the_bits_of_computing_again(spec, shape):
    kept = decode(KernelRunner(specialize=False).program(spec, shape, "float32", 1e-3, 3)[1])
    if len(kept.masks) == len(program_of(spec, shape, False).masks):
        pytest.skip("nothing kept for this spec and shape")
    rng = np.random.default_rng(7)
    runs = []
    for runner in (KernelRunner(specialize=False), RecomputingRunner(specialize=False)):
        p = rng.standard_normal(shape).astype(np.float32)
        state = {k: np.ascontiguousarray(v, dtype=np.float32)
                 for k, v in spec.init(p, ops=uo.ops.numpy_ops).items()}
        for step in range(1, 6):
            g = np.random.default_rng(step).standard_normal(shape).astype(np.float32)
            run_numpy(runner, spec, p, g, state, lr=spec.lr_at(step - 1), step=step)
        runs.append((p, state))
        rng = np.random.default_rng(7)
    (p1, s1), (p2, s2) = runs
    assert p1.tobytes() == p2.tobytes()
    assert {k: v.tobytes() for k, v in s1.items()} == {k: v.tobytes() for k, v in s2.items()}
