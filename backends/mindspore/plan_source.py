"""A :class:`~unified_opt.kernels.bytecode.KernelPlan` written out as MindSpore operations
over whole tensors: the program function of the ``"ops"`` graph form
(:mod:`.graph_ops`), from the same plan the VM, the C++ kernels and the Triton kernels
run.

The plan's phases walk their domains in chunks; here each instruction is one operation
over the whole domain, every value viewed as ``(B, R, C)`` with 1 for the axes it lacks
(:func:`unified_opt.kernels.trace.canonical_dims`), so MindSpore's broadcasting does what
the VM's gathers do. An array is a name: a store or a sum rebinds it, and a later read
sees the new value, as a later phase of the VM reads what an earlier one wrote. A plan
computes a full value again in each phase that needs it; an operation written before on
the same operands is not written again (the names are single-assignment, so the same
text is the same value), so the graph computes each value once, as the traced program
does. The input arrays a plan stores into are written back with ``ops.assign`` at the
end.

Masks: a comparison or a logical operation of the plan gives 1 or 0 in the parameter's
dtype; here it is a boolean tensor, cast to float32 where a value is read and compared
with 0 where a condition is (``where`` and the logical operations take any nonzero value
as true, as ``numbers.h`` does). ``max`` and ``min`` keep NaN, as numpy's and the VM's do.
"""

from __future__ import annotations

from unified_opt.kernels.bytecode import MATRIX, OPCODES, OPERAND_KINDS, SELECT, KernelPlan
from unified_opt.kernels.trace import B, C, R, Untraceable, canonical_dims

_AXES = ((B, 0), (R, 1), (C, 2))
_NAMES = {code: name for name, code in OPCODES.items()}
_KINDS = {code: name for name, code in OPERAND_KINDS.items()}
_ARITHMETIC = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
_COMPARE = {"gt": ">", "ge": ">=", "lt": "<", "le": "<=", "eq": "==", "ne": "!="}


def canonical(mask: int, dims) -> tuple[int, int, int]:
    """The ``(B, R, C)`` shape of a value spanning ``mask``: 1 for the axes it lacks."""
    return tuple(int(dims[i]) if mask & axis else 1 for axis, i in _AXES)


def plan_source(name: str, plan: KernelPlan, shape, state_shapes) -> list[str]:
    """The lines of ``def name(sc, p, g, *states)``: ``plan`` over one parameter of
    ``shape`` (state arrays of ``state_shapes``), ``sc`` the scalar slots as float32
    values, the new parameter and state written into the Parameters (see the module)."""
    dims = canonical_dims(shape)
    args = ["p", "g"] + [f"s{i}" for i in range(plan.n_inputs - 2)]
    shapes = [tuple(shape), tuple(shape)] + [tuple(s) for s in state_shapes]
    body: list[str] = []
    known: dict[str, str] = {}          # an expression -> the name it was written as
    masks: dict[str, int] = {}          # a name -> the axes its value spans
    boolean: set[str] = set()           # names holding a boolean tensor

    def bind(expr: str, mask: int, is_boolean: bool = False) -> str:
        if expr not in known:
            known[expr] = f"x{len(known)}"
            body.append(f"{known[expr]} = {expr}")
            masks[known[expr]] = mask
            if is_boolean:
                boolean.add(known[expr])
        return known[expr]

    arrays = {k: bind(f"ops.reshape({args[k]}, {canonical(plan.masks[k], dims)})",
                      plan.masks[k]) for k in range(plan.n_inputs)}
    written: set[int] = set()

    def value(name: str) -> str:            # as float32
        return f"ops.cast({name}, F32)" if name in boolean else name

    def condition(name: str) -> str:
        return name if name in boolean else f"({name} != 0)"

    def count(axes: int) -> str:
        n = 1
        for axis, i in _AXES:
            if axes & axis:
                n *= int(dims[i])
        return bind(f"ops.cast(ops.scalar_to_tensor({float(n)!r}), F32)", 0)

    for number, (domain, instructions) in enumerate(plan.phases):
        if domain == SELECT:
            raise Untraceable("a top-k selection has no MindSpore form here")
        if domain == MATRIX:
            raise Untraceable("a matrix phase (Muon's iteration) has no MindSpore form here")
        registers: dict[int, str] = {}

        def operand(kind: int, k: int) -> str:
            kind_name = _KINDS[kind]
            if kind_name == "register":
                return registers[k]
            if kind_name == "array":
                return arrays[k]
            if kind_name == "scalar":
                return bind(f"sc[{k}]", 0)
            if kind_name == "count":
                return count(k)
            raise AssertionError(f"phase {number}: operand kind {kind}")

        for ins in instructions:
            op = _NAMES[ins.op]
            operands = [operand(kind, k) for kind, k in
                        ((ins.a_kind, ins.a), (ins.b_kind, ins.b), (ins.c_kind, ins.c))
                        if _KINDS[kind] != "none"]
            mask = 0
            for x in operands:
                mask |= masks[x]
            if op == "store":
                stored = operands[0]
                if masks[stored] != plan.masks[ins.dst]:
                    stored = bind(f"ops.broadcast_to({value(stored)}, "
                                  f"{canonical(plan.masks[ins.dst], dims)})",
                                  plan.masks[ins.dst])
                arrays[ins.dst] = stored
                written.add(ins.dst)
            elif op == "sum":
                x = operands[0]
                if ins.aux & ~masks[x]:          # a value the same along a summed axis
                    x = bind(f"ops.broadcast_to({value(x)}, {canonical(domain, dims)})",
                             domain)
                axes = tuple(i for axis, i in _AXES if ins.aux & axis)
                arrays[ins.dst] = bind(f"ops.sum({value(x)}, {axes}, True)",
                                       masks[x] & ~ins.aux)
            else:
                registers[ins.dst] = _operation(op, operands, value, condition, bind, mask)
    writes = []
    for k in sorted(written):
        if k < plan.n_inputs:
            body.append(f"w{k} = ops.assign({args[k]}, ops.reshape({value(arrays[k])}, "
                        f"{shapes[k]}))")
            writes.append(f"w{k}")
    body.append(f"return ops.depend(True, ({', '.join(writes)},))" if writes
                else "return True")
    return [f"def {name}(sc, {', '.join(args)}):"] + ["    " + line for line in body]


def _operation(op, operands, value, condition, bind, mask) -> str:
    """The name of an elementwise instruction's result."""
    f = [value(x) for x in operands]
    if op in _ARITHMETIC:
        return bind(f"{f[0]} {_ARITHMETIC[op]} {f[1]}", mask)
    if op in ("max", "min"):
        fn = "maximum" if op == "max" else "minimum"
        return bind(f"_kept(ops.{fn}({f[0]}, {f[1]}), {f[0]}, {f[1]})", mask)
    if op in _COMPARE:
        return bind(f"{f[0]} {_COMPARE[op]} {f[1]}", mask, True)
    if op in ("and", "or"):
        return bind(f"ops.logical_{op}({condition(operands[0])}, {condition(operands[1])})",
                    mask, True)
    if op == "neg":
        return bind(f"-{f[0]}", mask)
    if op in ("sqrt", "abs"):
        return bind(f"ops.{op}({f[0]})", mask)
    if op == "sign":
        return bind(f"_sign({f[0]})", mask)
    if op == "where":
        return bind(f"ops.where({condition(operands[0])}, {f[1]}, {f[2]})", mask)
    raise Untraceable(f"the operation {op!r} has no MindSpore form here")
