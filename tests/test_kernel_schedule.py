"""How ``bytecode.schedule`` places small values and new state of fewer axes.

* A small value read only by values of its own axes is computed in their phase
  (``_places``): no phase of its own that stores it for one reader.
* New factored state is stored into its input array by the phase that computes it where
  nothing after that phase reads the old value (``_small_state_in_place``, the CPU
  kernels' schedule); otherwise it is copied in at the end.

The bits are those of the schedule that keeps a scratch array and a copy
(``tests/test_kernel_keep_costly.py`` runs both schedules on the VM; the conv-weight
digests of ``tests/test_kernel_conv_walk.py`` did not move).
"""

from __future__ import annotations

import pytest

import unified_opt as uo
from unified_opt.kernels.bytecode import (
    OPCODES,
    OPERAND_KINDS,
    Instruction,
    Phase,
    _accesses,
    _small_state_in_place,
    schedule,
)
from unified_opt.kernels.runtime import Programs
from unified_opt.kernels.trace import trace_update

STORE, SUM, MUL = OPCODES["store"], OPCODES["sum"], OPCODES["mul"]
ARRAY, REGISTER, SCALAR = (OPERAND_KINDS["array"], OPERAND_KINDS["register"],
                           OPERAND_KINDS["scalar"])
SPECS = [uo.Adafactor(lr=1e-2), uo.CAME(lr=1e-3, weight_decay=0.1),
         uo.Adafactor(lr=1e-2, beta1=0.9)]
SHAPES = [(64, 64, 3, 3), (512, 2048)]


def plan_of(spec, shape, keep_costly: bool):
    labels = Programs().state_labels(spec, shape, "float32")
    trace = trace_update(spec, shape, "float32", labels, lr=1e-3, step=3)
    return schedule(trace.program, keep_costly, tiles=False)


@pytest.mark.parametrize("keep_costly", [True, False])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_a_small_value_is_stored_only_for_a_phase_of_other_axes(spec, shape, keep_costly):
    """Every scratch array a phase of fewer axes stores is read by a phase of other axes
    (Adafactor's ``R / mean(R)`` by the full phase), or holds a value the phase also sums
    (the new row, whose mean a later phase of its axes divides by): ``beta2 * R`` is
    computed where the new row is, not stored by a phase of its own for it."""
    plan = plan_of(spec, shape, keep_costly)
    full = plan.masks[0]
    for p, phase in enumerate(plan.phases):
        if phase.domain == full:
            continue
        body = phase.instructions
        for at, ins in enumerate(body):
            if ins.op != STORE or ins.dst < plan.n_inputs or ins.a_kind != REGISTER:
                continue
            readers = [q.domain for q in plan.phases[p + 1:] if ins.dst in _accesses(q)[0]]
            written = max(k for k in range(at) if body[k].op not in (STORE, SUM)
                          and body[k].dst == ins.a)
            summed = any(i.op == SUM and i.a_kind == REGISTER and i.a == ins.a
                         for i in body[written + 1:at])
            assert readers and (summed or any(d != phase.domain for d in readers)), (p, ins)


@pytest.mark.parametrize("spec, phases", [(SPECS[0], (9, 11)), (SPECS[1], (13, 15))],
                         ids=["adafactor", "came"])
def test_the_factored_updates_phases(spec, phases):
    """On a conv weight: the CPU schedule stores the new rows and columns in place (no
    copy phases); the CUDA schedule (state kept in bfloat16 there is rounded where
    stored) keeps them in scratch arrays copied in at the end."""
    cpu, cuda = plan_of(spec, (64, 64, 3, 3), True), plan_of(spec, (64, 64, 3, 3), False)
    assert (len(cpu.phases), len(cuda.phases)) == phases

    def copies(plan):
        return [p for p in plan.phases
                if all(ins.op == STORE and ins.a_kind == ARRAY for ins in p.instructions)]

    assert not copies(cpu) and len(copies(cuda)) == 2


def _ins(op, dst, *operands) -> Instruction:
    flat = [x for pair in operands for x in pair] + [0, 0] * (3 - len(operands))
    return Instruction(op, dst, 0, *flat)


def _phases(final_reads_old_row: bool):
    """Inputs: 0 the parameter (B|R|C = 7), 1 a row state (B|R = 3). Phase 0 computes the
    new row into scratch array 2; phase 1 (full) reads it, and the old row too where
    asked; phase 2 copies the new row in."""
    new_row = Phase(3, (_ins(MUL, 0, (ARRAY, 1), (SCALAR, 0)),
                        _ins(STORE, 2, (REGISTER, 0))))
    reads = [(ARRAY, 2), (ARRAY, 1 if final_reads_old_row else 2)]
    step = Phase(7, (_ins(MUL, 0, *reads), _ins(MUL, 1, (ARRAY, 0), (REGISTER, 0)),
                     _ins(STORE, 0, (REGISTER, 1))))
    copy = Phase(3, (_ins(STORE, 1, (ARRAY, 2)),))
    return [new_row, step, copy], [7, 3, 3]


def test_new_state_is_stored_in_place_when_nothing_reads_the_old_value_after():
    phases, masks = _small_state_in_place(*_phases(False), n_inputs=2)
    assert masks == [7, 3]                                   # the scratch array is gone
    assert len(phases) == 2                                  # and the copy
    assert phases[0].instructions[-1] == _ins(STORE, 1, (REGISTER, 0))
    assert _accesses(phases[1])[0] == {0, 1}              # the new row, in place


def test_new_state_is_copied_when_a_later_phase_reads_the_old_value():
    phases, masks = _phases(True)
    assert _small_state_in_place(phases, masks, n_inputs=2) == (phases, masks)
