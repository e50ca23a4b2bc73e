"""MindSpore's ``"ops"`` graph form is written from the KernelPlan (``plan_source.py``):
text only, no MindSpore needed here (``tests/test_mindspore_graph_ops.py`` compiles and
runs it against the oracle and PyNative).

The plan computes a full value again in every phase that reads it (Adafactor's update
direction: once for its RMS, once for the step); the source writes each operation on the
same operands once, so the graph computes what the traced program computes, no more."""

from __future__ import annotations

import pytest

import unified_opt as uo
from unified_opt.backends.mindspore.plan_source import plan_source
from unified_opt.kernels.bytecode import OPCODES, _live, schedule
from unified_opt.kernels.runtime import Programs
from unified_opt.kernels.trace import trace_update

SPECS = [uo.Adafactor(lr=1e-2), uo.CAME(lr=1e-3, weight_decay=0.1),
         uo.Lamb(lr=1e-3, weight_decay=0.01), uo.AdamW(lr=1e-3, weight_decay=0.01)]


@pytest.mark.parametrize("shape", [(8, 6, 3, 3), (64, 32), (40,)])
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_each_operation_of_the_program_is_written_once(spec, shape):
    labels = Programs().state_labels(spec, shape, "float32")
    program = trace_update(spec, shape, "float32", labels, lr=1e-3, step=3).program
    plan = schedule(program)
    state_shapes = [(n,) for n in Programs().state_sizes(spec, shape, "float32").values()]
    text = "\n".join(plan_source("f", plan, shape, state_shapes))
    live = _live(program)
    for op, written in (("sqrt", "ops.sqrt("), ("sum", "ops.sum("), ("div", " / ")):
        nodes = sum(program.nodes[i].op == op for i in live)
        # a count is a division's operand the plan holds as a number, not a node
        assert text.count(written) == nodes, (op, text)
    in_plan = sum(ins.op == OPCODES["sqrt"] for _, body in plan.phases for ins in body)
    if spec.name == "adafactor":        # its direction: normed in one phase, applied next
        assert in_plan > sum(program.nodes[i].op == "sqrt" for i in live)
    # every input the update writes is assigned once, at the end
    for target, _ in program.outputs:
        arg = ["p", "g", *(f"s{i}" for i in range(len(program.inputs) - 2))][target]
        assert text.count(f"ops.assign({arg},") == 1
