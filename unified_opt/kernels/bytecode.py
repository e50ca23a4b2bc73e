r"""A traced :class:`~.trace.Program` as code for the kernel VM (``vm.cc``).

The VM runs *phases*. A phase loops over a *domain* (a mask: the B, R and C axes it
spans) in chunks of consecutive elements (``phases.h``: a part of a row along C, or
several whole rows where rows are short, as a conv weight's rows of 3), and runs the
same instruction list on every chunk: elementwise operations into registers (one chunk
each), sums, and stores into arrays. What goes where:

* A node spanning the parameter's axes (a *full* node) is not stored: each phase that
  needs it computes it again from the inputs, so a step reads the parameter, gradient
  and state a few times and writes them once. The one exception, for the CPU kernels
  only (``keep_costly``): a full value whose computation costs divisions and square
  roots (:data:`COSTLY_PER_ARRAY`), such as Lamb's update direction, is stored into a
  scratch array of the parameter's size in the phase that first computes it and read
  back by the later phase (a CPU core divides more slowly than it streams memory; a
  GPU's phases are bound by memory).
* A sum ends a phase's worth of work: its operand is computed in the phase over the
  operand's axes, and the total lands in a small array (a row, a column, a number) that
  later phases read. ``topk_mask`` likewise: its operand is stored whole, a *select*
  phase (domain :data:`SELECT`) marks the k largest elements in an array of 1s and 0s
  that later phases read. A node's *level* counts the sums before it; phases run by level,
  and within a level from the fewest axes to the full ones.
* A smaller node (a factored moment's row, a norm, a trust ratio) is computed once, in
  the phase of its level and axes, and stored in an array of its own when another
  phase reads it. One whose every reader is a node of its axes is computed in the
  readers' phase (:func:`_places`: Adafactor's ``beta2 * R`` where the new row is).
* The arrays are updated in place. A new value is written in the first full phase that
  computes it after which no phase reads the old one, and later phases read it back
  instead of computing it again (CAME's first moment, Lamb's moments); the others in
  the last full phase. New state of fewer axes is stored into its array by the phase
  that computes it where no later phase reads the old value (the CPU kernels:
  :func:`_small_state_in_place`), otherwise copied in at the very end.

Code layout (int32): a header ``[VERSION, n_inputs, n_arrays, n_registers,
n_phases]``, the mask of every array (the inputs, then the VM's scratch arrays), then
per phase ``[domain, n_instructions]`` and 9 ints per instruction ``[op, dst, aux,
a_kind, a, b_kind, b, c_kind, c]`` (operand kinds :data:`OPERAND_KINDS`; ``aux``: the
axes a sum adds over).

One IR, one ABI
---------------
The schedule is a :class:`KernelPlan` (its phases, each a list of :class:`Instruction`;
named apart from the lr schedules of :mod:`unified_opt.schedules`):
:func:`schedule` makes it from the tracer's :class:`~.trace.Program`, :func:`encode`
writes it as the int32 code above (what the VM runs and what keys a program's kernel),
:func:`decode` reads code back into it. Every generator (``codegen.py``'s C++,
``triton_source.py``'s Triton) writes its kernels from a :class:`KernelPlan`.

The ABI (the numbers above, the axis bits, the dtype codes and the C functions' signatures)
is written here once. ``abi.h``, which ``vm.cc``, ``phases.h`` and every generated kernel
include, is generated from it (:func:`abi_header`; ``python -m
unified_opt.kernels.bytecode`` rewrites it, a test checks it is current), and
``build.py`` binds the C functions from :data:`FUNCTIONS`; a definition in ``vm.cc`` that
differs from its declaration in ``abi.h`` does not compile.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .trace import ELEMENTWISE, Program
from .trace import B as _B
from .trace import C as _C
from .trace import R as _R

# ---- the ABI (the only place it is written; see the module) ----
VERSION = 2
OPCODES = {name: i for i, name in enumerate(
    ["add", "sub", "mul", "div", "max", "min", "gt", "ge", "lt", "le", "eq", "ne", "and",
     "or", "neg", "sqrt", "abs", "sign", "where", "sum", "store", "topk"])}
#: the domain of a phase that selects the top k of a stored array (``topk_mask``)
SELECT = -1
#: the domain of a matrix phase (``matrix_function``: Muon's iteration), which the host
#: runs between the phases before and after it; not part of the ABI: a plan holding one
#: is run as :func:`segments`, each encoded on its own
MATRIX = -2
#: the op of a matrix phase's instructions (``dst``: the result array, ``aux``: the call's
#: place in the program's ``matrix_calls``, ``a``: the operand array); never encoded
MATRIX_CALL = -1
OPERAND_KINDS = {"none": 0, "register": 1, "array": 2, "scalar": 3, "count": 4}
#: ints in the code's header, in a phase's header, in an instruction
HEADER_INTS, PHASE_INTS, INSTRUCTION_INTS = 6, 2, 9
#: ints of a tile run in the code: its first phase and its number of phases
TILE_RUN_INTS = 2
#: the axis bits of masks and domains (``trace.py``'s B, R, C)
AXES = {"AB": _B, "AR": _R, "AC": _C}
#: element types: the ``dtype`` argument of the C functions
DTYPES = {"float32": 0, "float64": 1}
#: the C functions of the VM library and of a generated kernel: name -> (result,
#: ((C type, argument), ...)); ``build.py`` binds them by these types
FUNCTIONS = {
    "uo_vm_version": ("int", ()),
    "uo_vm_run": ("int", (("int", "dtype"), ("const int32_t*", "code"), ("int64_t", "length"),
                          ("void* const*", "inputs"), ("const int64_t*", "dims"),
                          ("const double*", "scalars"))),
    "uo_vm_register": ("void", (("const int32_t*", "code"), ("int64_t", "length"),
                                ("void*", "kernel"))),
    "uo_kernel_run": ("int", (("int", "dtype"), ("void* const*", "inputs"),
                              ("const int64_t*", "dims"), ("const double*", "scalars"))),
    # the threads of parallel phases from now on (0: OMP_NUM_THREADS, else the CPU's)
    "uo_vm_set_threads": ("void", (("int", "threads"),)),
    "uo_kernel_set_threads": ("void", (("int", "threads"),)),
    # the threads a parallel phase runs on now
    "uo_vm_threads": ("int", ()),
    "uo_kernel_threads": ("int", ()),
    # the b's of a tile run's tile from now on (0: phases.h's TILE_ELEMENTS elements'
    # worth): tests set small tiles to put tile edges inside small tensors
    "uo_vm_set_tile": ("void", (("int64_t", "bs"),)),
    "uo_kernel_set_tile": ("void", (("int64_t", "bs"),)),
    # MindSpore's AOT custom operator calls it (func_type="aot")
    "uo_vm_aot": ("int", (("int", "nparam"), ("void**", "params"), ("int*", "ndims"),
                          ("int64_t**", "shapes"), ("const char**", "dtypes"),
                          ("void*", "stream"), ("void*", "extra"))),
}
#: the file :func:`abi_header` writes
ABI_HEADER = Path(__file__).with_name("abi.h")


def abi_header() -> str:
    """``abi.h``: the ABI above as C++ (see the module)."""
    def enum(name, items):
        return [f"enum {name} {{"] + [f"  {k} = {v}," for k, v in items] + ["};"]

    lines = ["// Generated from unified_opt/kernels/bytecode.py (abi_header) by",
             "// `python -m unified_opt.kernels.bytecode`: do not edit (a test checks it).",
             "#pragma once", "", "#include <cstdint>", "", "namespace uo {", "namespace abi {",
             "", f"constexpr int VERSION = {VERSION};",
             f"constexpr int HEADER_INTS = {HEADER_INTS}, PHASE_INTS = {PHASE_INTS}, "
             f"INSTRUCTION_INTS = {INSTRUCTION_INTS}, TILE_RUN_INTS = {TILE_RUN_INTS};",
             f"constexpr int SELECT = {SELECT};  // a phase that runs TOPK instructions", ""]
    lines += enum("Op", [(k.upper(), v) for k, v in OPCODES.items()])
    lines += enum("Kind", [({"register": "REG", "array": "ARR", "scalar": "SCAL",
                             "count": "CNT"}.get(k, k.upper()), v)
                            for k, v in OPERAND_KINDS.items()])
    lines += enum("Axis", AXES.items())
    lines += enum("DType", [(k.upper(), v) for k, v in DTYPES.items()])
    lines += ["", "// an instruction as the code holds it",
              "struct Ins { int32_t " + ", ".join(Instruction._fields) + "; };",
              "static_assert(sizeof(Ins) == INSTRUCTION_INTS * sizeof(int32_t), \"Ins\");",
              "", "}  // namespace abi", "}  // namespace uo", "", 'extern "C" {']
    for name, (result, arguments) in FUNCTIONS.items():
        lines.append(f"{result} {name}(" + ", ".join(f"{t} {a}" for t, a in arguments) + ");")
    lines += ['}  // extern "C"', ""]
    return "\n".join(lines)


# ---- the IR ----
class Instruction(NamedTuple):
    """One instruction of a phase (its 9 ints in the code)."""

    op: int
    dst: int
    aux: int
    a_kind: int
    a: int
    b_kind: int
    b: int
    c_kind: int
    c: int


class Phase(NamedTuple):
    domain: int                          # the axes it loops over, or SELECT
    instructions: tuple[Instruction, ...]


@dataclass(frozen=True)
class KernelPlan:
    """A program scheduled into phases (see the module): what every generator reads."""

    n_inputs: int
    masks: tuple[int, ...]                 # every array's axes: the inputs, then scratch
    n_registers: int
    phases: tuple[Phase, ...]
    #: tile runs, ``(first phase, number of phases)`` each: phases a CPU kernel may run
    #: tile by tile over B (see :func:`tile_runs`); a consumer that runs the phases one
    #: after the other gives the same bits
    tiles: tuple[tuple[int, int], ...] = ()
    #: ``(function, arguments)`` of each matrix call (the program's ``matrix_calls``)
    matrix_calls: tuple[tuple, ...] = ()



def _popcount(mask: int) -> int:
    return bin(mask).count("1")


@dataclass
class _Phase:
    level: int
    domain: int
    nodes: list          # node indices computed in it (registers)
    sums: list           # sum nodes accumulated in it
    stores: list         # (array, node) written at its end
    reads: dict = field(default_factory=dict)     # node -> the array an earlier phase
                                                  # wrote it into


#: a full value a later full phase would compute again is kept in an array of its own
#: (``keep_costly``) where that spares at least this many divisions and square roots per
#: element for each array kept: on a CPU core a float32 division or square root costs
#: about as much as writing and reading one element back from memory
COSTLY_PER_ARRAY = 2
#: the operations :data:`COSTLY_PER_ARRAY` counts
COSTLY = frozenset({"div", "sqrt"})


def compile_program(program: Program, keep_costly: bool = False,
                    tiles: bool | None = None) -> np.ndarray:
    """The VM code of ``program``: ``encode(schedule(program, keep_costly, tiles))`` (see
    the module)."""
    return encode(schedule(program, keep_costly, tiles))


def schedule(program: Program, keep_costly: bool = False,
             tiles: bool | None = None) -> KernelPlan:
    """``program`` scheduled into phases (see the module). ``keep_costly``: a full value
    that a later full phase needs and whose computation costs divisions and square roots
    (Lamb's update direction, normed in one phase and applied in the next) is stored
    into a scratch array of the parameter's size where it is computed first, and read
    back, where :data:`COSTLY_PER_ARRAY` says that is cheaper (the CPU kernels; a GPU's
    phases are bound by memory, not arithmetic); with it, new state of fewer axes is
    stored in place where that is safe (:func:`_small_state_in_place`: the CPU kernels
    keep one dtype, where the CUDA engine's state kept in bfloat16 would be read back
    rounded). ``tiles`` (default: ``keep_costly``,
    which the CPU runner sets): phases reordered and grouped into tile runs
    (:func:`tile_runs`) that the CPU kernels run tile by tile over B. The same
    operations give the same bits either way."""
    nodes = program.nodes
    full = program.input_masks[0]
    users = defaultdict(list)
    for i, node in enumerate(nodes):
        for a in node.args:
            users[a].append(i)
    live = _live(program)
    level = _levels(nodes)

    def is_computed(i):
        return nodes[i].op in ELEMENTWISE

    place = _places(nodes, level, live, users, full)
    # every sum accumulates in the phase of its operand's level and axes
    phases: dict[tuple[int, int], _Phase] = {}

    def phase(lvl, domain):
        key = (lvl, domain)
        if key not in phases:
            phases[key] = _Phase(lvl, domain, [], [], [])
        return phases[key]

    array_masks = list(program.input_masks)
    array_of: dict[int, int] = {}
    for i in sorted(live):
        node = nodes[i]
        if node.op in ("topk", "matrix"):
            # the operand stored whole in its phase, then a phase selects (or the host
            # runs the matrix function) into an array
            arg = node.args[0]
            operand, array_of[i] = len(array_masks), len(array_masks) + 1
            array_masks += [full, full]
            phase(level[arg], full).stores.append((operand, arg))
            phase(level[i], SELECT if node.op == "topk" else MATRIX).nodes.append(i)
            array_of[("operand", i)] = operand
        elif node.op == "sum":
            arg = node.args[0]
            phase(level[arg], nodes[arg].mask).sums.append(i)
        elif is_computed(i) and node.mask != full:
            phase(place[i], node.mask).nodes.append(i)
    # full nodes: computed again in every full phase that needs them, from the inputs or
    # from new values already written (see the module)
    full_outputs = [(t, v) for t, v in program.outputs if program.input_masks[t] == full]
    small_outputs = [(t, v) for t, v in program.outputs if program.input_masks[t] != full]
    _schedule_full_phases(nodes, level, full, full_outputs,
                          lambda lvl: phase(lvl, full), phases)
    if keep_costly:
        def new_array() -> int:
            array_masks.append(full)
            return len(array_masks) - 1

        _keep_costly(nodes, full, phases, new_array)
    # small nodes read outside their phase get an array; so do sums
    n_inputs = len(program.inputs)
    for i, node in enumerate(nodes):
        if node.op == "input":
            array_of[i] = node.attr
    home = {i: key for key, p in phases.items() for i in p.nodes
            if nodes[i].mask != full and p.domain not in (SELECT, MATRIX)}
    def read_elsewhere(i):
        if any(v == i for _, v in program.outputs):
            return True
        # a sum of i accumulates in i's own phase
        return any(home.get(u) != home[i] for u in users[i]
                   if u in live and nodes[u].op != "sum")

    for i in sorted(live):
        if nodes[i].op == "sum" or (i in home and read_elsewhere(i)):
            array_of[i] = len(array_masks)
            array_masks.append(nodes[i].mask)
    for key, p in phases.items():
        for value, target in p.reads.items():
            array_of.setdefault(value, target)
        if p.domain not in (full, SELECT, MATRIX):
            p.stores.extend((array_of[i], i) for i in p.nodes if array_of.get(i) is not None
                            and nodes[i].op != "input")
    # within a level: the selections and matrix calls, then from the fewest axes to the
    # full ones
    ordered = sorted(phases.values(), key=lambda p: (p.level, p.domain not in (SELECT, MATRIX),
                                                     p.domain == full, _popcount(p.domain),
                                                     p.domain))
    # new state of fewer axes: copied in after every phase
    copies: dict[int, _Phase] = {}
    for target, value in small_outputs:
        domain = program.input_masks[target]
        copies.setdefault(domain, _Phase(-1, domain, [], [], [])).stores.append(
            (target, value))
    ordered += [copies[d] for d in sorted(copies, key=_popcount)]

    out, n_registers = [], 0
    for p in ordered:
        if p.domain == SELECT:
            instructions, used = [_instruction(
                OPCODES["topk"], array_of[t], 0,
                [(OPERAND_KINDS["array"], array_of[("operand", t)]),
                 (OPERAND_KINDS["scalar"], nodes[nodes[t].args[1]].attr)])
                for t in p.nodes], 0
        elif p.domain == MATRIX:
            instructions, used = [_instruction(
                MATRIX_CALL, array_of[t], nodes[t].attr,
                [(OPERAND_KINDS["array"], array_of[("operand", t)])]) for t in p.nodes], 0
        else:
            instructions, used = _phase_code(p, nodes, {**array_of, **p.reads}, full)
        out.append(Phase(p.domain, tuple(Instruction(*ins) for ins in instructions)))
        n_registers = max(n_registers, used)
    if keep_costly:
        out, array_masks = _small_state_in_place(out, array_masks, n_inputs)
    runs: tuple[tuple[int, int], ...] = ()
    if (keep_costly if tiles is None else tiles) and not program.matrix_calls:
        out, runs = tile_runs(out, array_masks)       # a matrix plan: per segment
    return KernelPlan(n_inputs, tuple(array_masks), n_registers, tuple(out), runs,
                      program.matrix_calls)


def encode(scheduled: KernelPlan) -> np.ndarray:
    """The int32 code of ``scheduled`` (see the module); a plan with a matrix phase is
    refused (its :func:`segments` are encoded one by one)."""
    if any(p.domain == MATRIX for p in scheduled.phases):
        raise ValueError("encode: a plan with a matrix phase (the host runs it): encode "
                         "its segments (bytecode.segments)")
    code = [VERSION, scheduled.n_inputs, len(scheduled.masks), scheduled.n_registers,
            len(scheduled.phases), len(scheduled.tiles), *scheduled.masks]
    for first, count in scheduled.tiles:
        code += [first, count]
    for domain, instructions in scheduled.phases:
        code += [domain, len(instructions)]
        for ins in instructions:
            code += ins
    return np.asarray(code, dtype=np.int32)


def decode(code) -> KernelPlan:
    """The :class:`KernelPlan` that ``code`` encodes (see the module); a KernelPlan as it is."""
    if isinstance(code, KernelPlan):
        return code
    code = [int(x) for x in code]
    if code[0] != VERSION:
        raise ValueError(f"VM code version {code[0]}, this is {VERSION}")
    n_inputs, n_arrays, n_registers, n_phases, n_runs = code[1:HEADER_INTS]
    masks = tuple(code[HEADER_INTS:HEADER_INTS + n_arrays])
    at = HEADER_INTS + n_arrays
    runs = tuple((code[at + TILE_RUN_INTS * i], code[at + TILE_RUN_INTS * i + 1])
                 for i in range(n_runs))
    at, phases = at + TILE_RUN_INTS * n_runs, []
    for _ in range(n_phases):
        domain, n = code[at], code[at + 1]
        body = code[at + PHASE_INTS:at + PHASE_INTS + INSTRUCTION_INTS * n]
        phases.append(Phase(domain, tuple(Instruction(*body[i:i + INSTRUCTION_INTS])
                                          for i in range(0, len(body), INSTRUCTION_INTS))))
        at += PHASE_INTS + INSTRUCTION_INTS * n
    if at != len(code):
        raise ValueError(f"VM code of {len(code)} ints holds {at}")
    return KernelPlan(n_inputs, masks, n_registers, tuple(phases), runs)


def _accesses(p: Phase) -> tuple[set[int], set[int]]:
    """The arrays phase ``p`` reads, and those it writes (stores, sums, selections)."""
    array = OPERAND_KINDS["array"]
    reads = {k for ins in p.instructions
             for kind, k in ((ins.a_kind, ins.a), (ins.b_kind, ins.b), (ins.c_kind, ins.c))
             if kind == array}
    writes = {ins.dst for ins in p.instructions
              if ins.op in (OPCODES["store"], OPCODES["sum"], OPCODES["topk"], MATRIX_CALL)}
    return reads, writes


def tileable(p: Phase, masks) -> bool:
    """Whether phase ``p`` may run tile by tile over B (see :func:`tile_runs`): its
    domain spans B, it writes arrays that span B or sums, and none of its sums adds over B
    without C (a column sum over B adds rows of several b's into one partial row: ``phases.h``
    keeps such partials per group of rows, and groups cross tiles)."""
    if p.domain in (SELECT, MATRIX) or not p.domain & _B:
        return False
    for ins in p.instructions:
        if ins.op == OPCODES["sum"] and ins.aux & _B and not ins.aux & _C:
            return False
        if ins.op == OPCODES["store"] and not masks[ins.dst] & _B:
            return False
        if ins.op == OPCODES["topk"]:
            return False
    return True


def tile_runs(phases, masks) -> tuple[list[Phase], tuple[tuple[int, int], ...]]:
    """``phases`` reordered into tile runs, and the runs ``(first, count)``.

    A tile run is two or more consecutive phases that a CPU kernel may run tile by tile
    over B (a block of whole b's, every phase of the run on it before the next block):
    each phase is :func:`tileable`, and no phase of the run reads an array that another
    phase of the run writes without B (a sum over B: its total needs every tile). A phase
    reads and writes an array spanning B at the b it walks only, so on each tile the run's
    phases see the values they see when each runs over the whole domain in turn.

    A phase without B (a scalar phase: Adafactor's alpha from the parameter's RMS) between
    phases of a run moves after the run when no later phase of the run reads what it
    writes or writes what it reads or writes: it then runs after the phases it came
    before, which do not touch its arrays, so it computes the same values. A phase that
    would join a run but depends on a moved phase ends the run (it starts the next).

    First, a phase that only copies arrays (new state of fewer axes, copied in at the
    end) moves up to just after the last phase that writes what it reads or reads or
    writes what it writes: into the run that computes the new state, whose tiles then
    copy it while it is in the cache."""
    phases = _copies_early(list(phases))
    out: list[Phase] = []
    runs: list[tuple[int, int]] = []
    run: list[tuple[int, Phase]] = []
    moved: list[tuple[int, Phase]] = []
    moved_reads: set[int] = set()
    moved_writes: set[int] = set()
    over_b: set[int] = set()          # written by the run into arrays without B

    def close() -> None:
        if len(run) >= 2:
            runs.append((len(out), len(run)))
            out.extend(p for _, p in run)
            out.extend(p for _, p in moved)
        else:
            out.extend(p for _, p in sorted(run + moved, key=lambda item: item[0]))
        run.clear()
        moved.clear()
        moved_reads.clear()
        moved_writes.clear()
        over_b.clear()

    def join(position: int, p: Phase, writes: set[int]) -> None:
        run.append((position, p))
        over_b.update(k for k in writes if not masks[k] & _B)

    for position, p in enumerate(phases):
        reads, writes = _accesses(p)
        if tileable(p, masks) and not reads & (over_b | moved_writes) \
                and not writes & (moved_reads | moved_writes):
            join(position, p, writes)
        elif run and p.domain not in (SELECT, MATRIX) and not p.domain & _B:
            moved.append((position, p))
            moved_reads.update(reads)
            moved_writes.update(writes)
        else:
            close()
            if tileable(p, masks):
                join(position, p, writes)
            else:
                out.append(p)
    close()
    return out, tuple(runs)


def _copies_early(phases: list[Phase]) -> list[Phase]:
    """``phases`` with each phase that only copies arrays moved up to just after the last
    phase it depends on (see :func:`tile_runs`): the phases it moves past neither write
    what it reads nor read or write what it writes, so every phase computes the same."""
    store, array = OPCODES["store"], OPERAND_KINDS["array"]
    for position in range(len(phases)):
        p = phases[position]
        if p.domain == SELECT or not p.instructions or any(
                ins.op != store or ins.a_kind != array for ins in p.instructions):
            continue
        reads, writes = _accesses(p)
        after = position
        while after > 0:
            other_reads, other_writes = _accesses(phases[after - 1])
            if other_writes & (reads | writes) or other_reads & writes:
                break
            after -= 1
        if after < position:
            phases.insert(after, phases.pop(position))
    return phases


class Segment(NamedTuple):
    """The phases of a matrix plan up to a matrix phase (:func:`segments`)."""

    #: those phases as a plan of their own (None: there are none), whose inputs are the
    #: plan's inputs and then the plan's crossing arrays
    plan: KernelPlan | None
    #: the matrix calls after them (the matrix phase's instructions, the arrays numbered
    #: as the crossing arrays: ``a`` the operand's place, ``dst`` the result's), or ()
    calls: tuple[Instruction, ...]


def segments(scheduled: KernelPlan, tiles: bool = False
             ) -> tuple[tuple[Segment, ...], tuple[int, ...]]:
    """A plan with matrix phases cut at them: the segments (the phases before each matrix
    phase, and after the last), and the *crossing* arrays (scratch arrays that more than
    one segment or matrix call reads or writes: the matrix calls' operands and results,
    and any value an earlier segment leaves for a later one). The runtime keeps the
    crossing arrays (:mod:`.runtime`): each segment runs on the VM or its
    kernel with them as inputs after the plan's own, and the host runs each matrix call
    between the segments, in order: the plan's phases in the plan's order. ``tiles``:
    each segment's phases grouped into tile runs (:func:`tile_runs`)."""
    parts: list[list[Phase]] = [[]]
    calls: list[tuple[Instruction, ...]] = []
    for p in scheduled.phases:
        if p.domain == MATRIX:
            calls.append(p.instructions)
            parts.append([])
        else:
            parts[-1].append(p)
    calls.append(())
    n_inputs = scheduled.n_inputs
    users: dict[int, set[int]] = defaultdict(set)       # scratch array -> where it is used
    for number, part in enumerate(parts):
        for p in part:
            reads, writes = _accesses(p)
            for k in reads | writes:
                users[k].add(2 * number)
        for ins in calls[number]:
            users[ins.a].add(2 * number + 1)
            users[ins.dst].add(2 * number + 1)
    crossing = tuple(k for k in range(n_inputs, len(scheduled.masks)) if len(users[k]) > 1)
    out = []
    for number, part in enumerate(parts):
        place = {k: k for k in range(n_inputs)}
        place.update((k, n_inputs + j) for j, k in enumerate(crossing))
        for k in sorted(k for k in users if 2 * number in users[k] and k not in place):
            place[k] = len(place)
        masks = [0] * len(place)
        for k, j in place.items():
            masks[j] = scheduled.masks[k]
        plan = None
        if part:
            phases = [_renumbered(p, place) for p in part]
            runs: tuple[tuple[int, int], ...] = ()
            if tiles:
                phases, runs = tile_runs(phases, masks)
            plan = KernelPlan(n_inputs + len(crossing), tuple(masks), scheduled.n_registers,
                              tuple(phases), runs)
        where = {k: j for j, k in enumerate(crossing)}
        out.append(Segment(plan, tuple(ins._replace(dst=where[ins.dst], a=where[ins.a])
                                       for ins in calls[number])))
    return tuple(out), crossing


def tile_local(scheduled: KernelPlan, first: int, count: int) -> tuple[int, ...]:
    """The tile-local arrays of the tile run of phases ``[first, first + count)``: the
    scratch arrays spanning B that no phase outside the run reads or writes
    (``phases.h``'s ``tile_local_arrays``; on one thread ``run_tiles`` keeps one tile of
    each, in the cache)."""
    outside: set[int] = set()
    for position, p in enumerate(scheduled.phases):
        if not first <= position < first + count:
            reads, writes = _accesses(p)
            outside |= reads | writes
    return tuple(k for k in range(scheduled.n_inputs, len(scheduled.masks))
                 if scheduled.masks[k] & _B and k not in outside)


def tile_runs_valid(scheduled: KernelPlan) -> bool:
    """Whether ``scheduled``'s tile runs are what :func:`tile_runs` makes: in order, not
    overlapping, two or more :func:`tileable` phases each, none reading what an earlier
    phase of its run writes without B (``phases.h``'s ``tile_runs_valid``: the VM refuses
    other code)."""
    end = 0
    for first, count in scheduled.tiles:
        if first < end or count < 2 or first + count > len(scheduled.phases):
            return False
        end = first + count
        over_b: set[int] = set()
        for p in scheduled.phases[first:end]:
            reads, writes = _accesses(p)
            if not tileable(p, scheduled.masks) or reads & over_b:
                return False
            over_b.update(k for k in writes if not scheduled.masks[k] & _B)
    return True


def _live(program: Program) -> set[int]:
    live, stack = set(), [v for _, v in program.outputs]
    while stack:
        i = stack.pop()
        if i not in live:
            live.add(i)
            stack.extend(program.nodes[i].args)
    return live


def _levels(nodes) -> list[int]:
    level = []
    for node in nodes:
        if node.op in ("sum", "topk", "matrix"):
            level.append(level[node.args[0]] + 1)
        else:
            level.append(max((level[a] for a in node.args), default=0))
    return level


def _places(nodes, level, live, users, full) -> list[int]:
    """The level of the phase each node is computed in: its own level, or for a smaller
    node whose every user is an elementwise node of its axes, the earliest level among
    its users' (it sinks into their phase: Adafactor's ``beta2 * R`` is computed where the
    new row is, not in a phase of its own that stores it for that one). A node with a
    sum stays: its sum accumulates where it is computed, and the sum's level counts from
    there. The same operations on the same operands either way: the same bits."""
    place = list(level)
    for i in sorted(live, reverse=True):          # users (later nodes) placed first
        node = nodes[i]
        if node.op not in ELEMENTWISE or node.mask == full:
            continue
        mine = [u for u in users[i] if u in live]
        if mine and all(nodes[u].op in ELEMENTWISE and nodes[u].mask == node.mask
                        for u in mine):
            place[i] = max(level[i], min(place[u] for u in mine))
    return place


def _small_state_in_place(phases: list[Phase], masks: list[int],
                          n_inputs: int) -> tuple[list[Phase], list[int]]:
    """``phases`` with new state of fewer axes stored straight into its input array where
    that is safe, and ``masks`` without the scratch arrays that frees.

    A new row of Adafactor's (an array of fewer axes than the parameter) is computed and
    stored once, in its own phase, into a scratch array that later phases read and that
    a copy at the end writes into the state's input array. Where no phase after that one
    reads or writes the input array (nothing needs the old value any more), the phase
    stores into the input array instead, the later phases read it there, and the copy
    goes: one array of the state's size fewer to write and read back. The phase reads the
    old value at the element it writes before writing it, as every phase that updates a
    full array in place does; a phase of a tile run before it reads the old value of its
    own tile, which that phase has not reached yet."""
    phases, freed = list(phases), []
    while (found := _copy_to_fold(phases, masks, n_inputs)) is not None:
        q, p, target, source = found
        phases = [_renamed(r, source, target) if k > p else
                  _stored_into(r, source, target) if k == p else r
                  for k, r in enumerate(phases)]
        phases[q] = Phase(phases[q].domain, tuple(        # the copy, now target <- target
            i for i in phases[q].instructions
            if not (i.op == OPCODES["store"] and i.dst == target
                    and i.a_kind == OPERAND_KINDS["array"] and i.a == target)))
        freed.append(source)
    if not freed:
        return phases, masks
    phases = [p for p in phases if p.instructions]
    number = {}
    for k in range(len(masks)):
        if k not in freed:
            number[k] = len(number)
    return ([_renumbered(p, number) for p in phases],
            [m for k, m in enumerate(masks) if k not in freed])


def _copy_to_fold(phases: list[Phase], masks, n_inputs: int):
    """``(copy phase, writing phase, input array, scratch array)`` of the first copy of new
    state that :func:`_small_state_in_place` may fold into the phase computing it, or
    None."""
    store, array = OPCODES["store"], OPERAND_KINDS["array"]
    for q, copy in enumerate(phases):
        for ins in copy.instructions:
            target, source = ins.dst, ins.a
            if not (ins.op == store and ins.a_kind == array and target < n_inputs
                    and source >= n_inputs and masks[target] == masks[source]):
                continue
            writers = [k for k, p in enumerate(phases) if source in _accesses(p)[1]]
            if len(writers) != 1 or writers[0] >= q:
                continue
            p = writers[0]
            if any(i.op != store and i.dst == source for i in phases[p].instructions):
                continue                                    # a sum's total, not a store
            others = [i for i in copy.instructions if i is not ins]
            later = phases[p + 1:q] + [Phase(copy.domain, tuple(others))] + phases[q + 1:]
            if any(target in _accesses(r)[0] | _accesses(r)[1] for r in later):
                continue                        # the old value is still read, or written
            return q, p, target, source
    return None


def _stored_into(p: Phase, source: int, target: int) -> Phase:
    store = OPCODES["store"]
    return Phase(p.domain, tuple(i._replace(dst=target) if i.op == store and i.dst == source
                                 else i for i in p.instructions))


def _renamed(p: Phase, source: int, target: int) -> Phase:
    """``p`` reading array ``target`` where it read ``source``."""
    array = OPERAND_KINDS["array"]

    def one(kind, k):
        return target if kind == array and k == source else k

    return Phase(p.domain, tuple(i._replace(a=one(i.a_kind, i.a), b=one(i.b_kind, i.b),
                                            c=one(i.c_kind, i.c)) for i in p.instructions))


def _renumbered(p: Phase, number: dict[int, int]) -> Phase:
    array = OPERAND_KINDS["array"]
    writes = (OPCODES["store"], OPCODES["sum"], OPCODES["topk"], MATRIX_CALL)

    def one(kind, k):
        return number[k] if kind == array else k

    return Phase(p.domain, tuple(
        i._replace(dst=number[i.dst] if i.op in writes else i.dst, a=one(i.a_kind, i.a),
                   b=one(i.b_kind, i.b), c=one(i.c_kind, i.c)) for i in p.instructions))


def _full_closure(nodes, wanted, full, written=()) -> tuple[set[int], set[int]]:
    """The full elementwise nodes that computing ``wanted`` needs (computed again), and
    the other nodes it reads (inputs, smaller nodes, scalars; nodes in ``written`` are
    read from the array they were written into)."""
    out, reads, stack = set(), set(), list(wanted)
    while stack:
        i = stack.pop()
        node = nodes[i]
        if i in out or i in reads:
            continue
        if i in written or node.op not in ELEMENTWISE or node.mask != full:
            reads.add(i)
            continue
        out.add(i)
        stack.extend(node.args)
    return out, reads


def _schedule_full_phases(nodes, level, full, outputs, full_phase, phases) -> None:
    """What each full phase computes and writes. A new value is written in the first
    full phase that computes it after which no phase needs the old one (later phases
    then read it from its array instead of computing it again: fewer passes of
    arithmetic over the inputs); the rest in the last full phase."""
    ordered = sorted((p for p in phases.values() if p.domain == full), key=lambda p: p.level)
    last = max([p.level for p in ordered] + [level[v] for _, v in outputs] + [0])
    if outputs and (not ordered or ordered[-1].level < last):
        ordered.append(full_phase(last))
    old = {node.attr: i for i, node in enumerate(nodes) if node.op == "input"}
    pending = list(outputs)
    written: dict[int, int] = {}

    def needs(phase, values, done) -> set[int]:
        wanted = ([nodes[s].args[0] for s in phase.sums] + [v for _, v in phase.stores]
                  + list(values))
        return _full_closure(nodes, wanted, full, done)[1]

    for position, p in enumerate(ordered):
        later = ordered[position + 1:]
        p.reads = dict(written)
        for target, value in list(pending):
            if level[value] > p.level:
                continue
            if later:
                trial = {**written, value: target}
                rest = [v for t, v in pending if t != target]
                if any(old[target] in needs(q, rest if q is later[-1] else (), trial)
                       for q in later):
                    continue          # a later phase still reads the old value
            p.stores.append((target, value))
            pending.remove((target, value))
        p.nodes = sorted(_full_closure(nodes, [nodes[s].args[0] for s in p.sums]
                                       + [v for _, v in p.stores], full, written)[0])
        written.update({value: target for target, value in p.stores})


def _keep_costly(nodes, full, phases, new_array) -> None:
    """Where a full phase would compute again values an earlier full phase computed,
    the earlier one stores those it reads first (the frontier) into new arrays, and it
    reads them back, when that spares at least :data:`COSTLY_PER_ARRAY` costly
    operations per element and new array (``schedule``'s ``keep_costly``)."""
    ordered = sorted((p for p in phases.values() if p.domain == full), key=lambda p: p.level)
    kept: dict[int, int] = {}                    # value -> the array it is stored in
    for position, q in enumerate(ordered):
        earlier = {i: p for p in ordered[:position] for i in p.nodes}
        mine = set(q.nodes)
        shared = mine & earlier.keys()
        if not shared:
            continue
        wanted = [nodes[s].args[0] for s in q.sums] + [v for _, v in q.stores]
        frontier = {a for j in mine - shared for a in nodes[j].args if a in shared}
        frontier |= {w for w in wanted if w in shared}
        reads = {**q.reads, **{f: kept.get(f, -1) for f in frontier}}
        after = _full_closure(nodes, wanted, full, reads)[0]

        def costly(values):
            return sum(nodes[i].op in COSTLY for i in values)

        new = [f for f in frontier if f not in kept]
        if costly(mine) - costly(after) < COSTLY_PER_ARRAY * max(1, len(new)):
            continue
        for f in sorted(new):
            kept[f] = new_array()
            earlier[f].stores.append((kept[f], f))
        q.reads.update({f: kept[f] for f in frontier})
        q.nodes = sorted(after)


def _phase_code(p: _Phase, nodes, array_of, full) -> tuple[list[list[int]], int]:
    """The instructions of one phase, and how many registers they use."""
    computed = set(p.nodes)
    order = sorted(computed)
    # the last instruction that reads each register: stores come after everything
    last_use: dict[int, int] = {}
    steps = [("node", i) for i in order]
    for s in p.sums:
        steps.insert(_after(steps, nodes[s].args[0]), ("sum", s))
    steps += [("store", pair) for pair in p.stores]
    for position, (kind, item) in enumerate(steps):
        reads = nodes[item].args if kind in ("node", "sum") else (item[1],)
        for a in reads:
            if a in computed:
                last_use[a] = position
    registers: dict[int, int] = {}
    free: list[int] = []
    used = 0
    out = []

    def operand(i):
        node = nodes[i]
        if i in computed:
            return OPERAND_KINDS["register"], registers[i]
        if node.op == "scalar":
            return OPERAND_KINDS["scalar"], node.attr
        if node.op == "fill":
            return OPERAND_KINDS["scalar"], nodes[node.args[0]].attr
        if node.op == "count":
            return OPERAND_KINDS["count"], node.attr
        if i in array_of:
            return OPERAND_KINDS["array"], array_of[i]
        raise AssertionError(f"node {i} ({node.op}) has no value in this phase")

    for position, (kind, item) in enumerate(steps):
        if kind == "node":
            node = nodes[item]
            args = [operand(a) for a in node.args]
            # the destination never shares a register with an operand (the VM's loops
            # take them as non-aliased)
            if free:
                reg = free.pop()
            else:
                reg, used = used, used + 1
            registers[item] = reg
            out.append(_instruction(OPCODES[node.op], reg, 0, args))
            for a in set(node.args):
                if a in computed and last_use.get(a) == position:
                    free.append(registers[a])
            if last_use.get(item) is None:         # computed but never read here
                free.append(reg)
        elif kind == "sum":
            node = nodes[item]
            arg = node.args[0]
            out.append(_instruction(OPCODES["sum"], array_of[item], node.attr, [operand(arg)]))
            if arg in computed and last_use.get(arg) == position:
                free.append(registers[arg])
        else:
            target, value = item
            out.append(_instruction(OPCODES["store"], target, 0, [operand(value)]))
    return out, used


def _after(steps, node_index) -> int:
    """Where a sum of ``node_index`` goes: right after it is computed (first, for a
    value the phase does not compute)."""
    for position, (kind, item) in enumerate(steps):
        if kind == "node" and item == node_index:
            return position + 1
    return 0


def _instruction(op, dst, aux, operands) -> list[int]:
    operands = list(operands) + [(0, 0)] * (3 - len(operands))
    return [op, dst, aux] + [x for pair in operands for x in pair]


if __name__ == "__main__":
    ABI_HEADER.write_text(abi_header())
    print(f"wrote {ABI_HEADER}")
