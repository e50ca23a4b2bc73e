"""VM code (:mod:`.bytecode`) as Triton kernels that run one program over many tensors
in few launches: the own update's CUDA path (``backends/torch/cuda.py`` builds
the tables and launches them). This module writes source text only; it imports neither
Triton nor a framework.

The kernels follow the VM's phases, instructions and operation order exactly: every
elementwise operation rounds to the parameter's dtype in the order of the spec's code,
division and square root are the IEEE ones (``tl.div_rn``, ``tl.sqrt_rn``; Triton's
``/`` and ``tl.sqrt`` on float32 are approximations), and the launcher passes
``enable_fp_fusion=False`` (no contraction of ``a * b + c`` into one rounding: LLVM's
and ptxas's default on the GPU). So a sign, a comparison or a clamp decides as the
float32 reference does. Sums add in float64, as the VM's do, and round once to the
dtype; their order differs from the VM's (per tile, then per tensor), which can move a
total by one ulp now and then: inside the conformance floor, not bit for bit.

Work decomposition: each tensor is viewed as ``(B, R, C)`` (:func:`.trace.canonical_dims`).
A phase over domain ``D`` runs one *program* per ``(tensor, b, row block, column block)``
of D's extent; the launcher's table lists them for every tensor of the group, so one
launch covers every tensor. Layouts by D's axes:

* ``2d`` (R and C): tiles of ``BR x BC``, ``ITERS`` row tiles per program;
* ``cols`` (C only): one row, ``BC`` columns per program;
* ``rows`` (R only): ``BR`` rows per program;
* ``single`` (neither): one value per program (per tensor and b).

Consecutive phases that touch no array another of them writes run in one launch
(:class:`LaunchPlan`; CAME's 15 phases take 11 launches): each program's table row says
which phase it runs.

A sum writes, per program, partial totals in float64 into a buffer of the tensor's
``[contributions, outputs]`` (:func:`sum_extent`); a second kernel adds each output's
contributions in a fixed order. No atomics: every run gives the same bits.

``topk_mask`` (a SELECT phase, DGC) is not written here: :class:`Unsupported`.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from .bytecode import MATRIX, OPCODES, OPERAND_KINDS, SELECT, decode
from .trace import B, C, R

_NAMES = {v: k for k, v in OPCODES.items()}
#: tile shapes per layout: (BR, BC, ITERS); the "cols" layout runs a tile wholly inside
#: the tensor without masks (vector loads where the tensors are 16-byte aligned)
BLOCKS = {"2d": (4, 256, 16), "cols": (1, 2048, 1), "rows": (1024, 1, 1), "single": (1, 1, 1)}
#: warps per program by layout
NUM_WARPS = {"2d": 4, "cols": 4, "rows": 4, "single": 1}
#: the reduction kernels' blocks: contributions x outputs, and contributions alone
REDUCE_MANY = (32, 128)
REDUCE_TOTAL = 1024
#: the columns of a reduction job (see ``_reductions``)
JOB = ("partials", "contributions", "outputs", "first_output", "total")
DTYPES = {"float32": "tl.float32", "float64": "tl.float64"}
#: the dtypes an input array may be stored in besides the program's (read into it when
#: loaded, rounded to nearest even when stored: :mod:`unified_opt.storage`)
STORAGE = {**DTYPES, "bfloat16": "tl.bfloat16", "float16": "tl.float16"}


class Unsupported(Exception):
    """VM code these kernels do not run (a top-k selection, a dtype)."""


@dataclass(frozen=True)
class SumPlan:
    """One sum of a phase: its total lands in array ``dst``, whose axes are ``kept``."""

    dst: int
    axes: int          # the axes of the phase's domain it adds over
    kept: int          # the domain's other axes (``dst``'s mask)

    @property
    def many(self) -> bool:
        """Whether its totals are rows or columns (the 2-D reduction) or a few numbers."""
        return bool(self.kept & (R | C))


@dataclass(frozen=True)
class PhasePlan:
    kernel: str        # the kernel's name in the module
    domain: int
    layout: str
    sums: tuple[SumPlan, ...]

    @property
    def block(self) -> tuple[int, int, int]:
        return BLOCKS[self.layout]


@dataclass(frozen=True)
class LaunchPlan:
    """Consecutive phases that run in one launch (none reads or writes what another one
    writes): a program of the launch's table says which phase it runs. The sums of all
    of them are reduced after it."""

    kernel: str
    phases: tuple[PhasePlan, ...]

    @property
    def num_warps(self) -> int:
        return max(NUM_WARPS[phase.layout] for phase in self.phases)

    @property
    def sums(self) -> tuple[SumPlan, ...]:
        return tuple(plan for phase in self.phases for plan in phase.sums)


@dataclass(frozen=True)
class TritonProgram:
    """The Triton module of one VM program and dtype, and what its launcher needs."""

    source: str
    dtype: str
    #: ``(array, dtype)`` of the input arrays stored in another dtype than ``dtype``
    storage: tuple[tuple[int, str], ...]
    n_inputs: int
    masks: tuple[int, ...]
    launches: tuple[LaunchPlan, ...]
    digest: str            # of the source: the module's file name

    @property
    def phases(self) -> tuple[PhasePlan, ...]:
        return tuple(phase for launch in self.launches for phase in launch.phases)


def layout_of(domain: int) -> str:
    if domain & R and domain & C:
        return "2d"
    if domain & C:
        return "cols"
    if domain & R:
        return "rows"
    return "single"


def extent(mask: int, dims) -> tuple[int, int, int]:
    """``(B, R, C)`` of the part of a tensor of canonical ``dims`` that ``mask`` spans."""
    b, r, c = dims
    return (b if mask & B else 1, r if mask & R else 1, c if mask & C else 1)


def programs_per_b(domain: int, dims) -> tuple[int, int]:
    """``(row programs, column blocks)`` of a phase over ``domain`` for one b."""
    br, bc, iters = BLOCKS[layout_of(domain)]
    _, rd, cd = extent(domain, dims)
    return -(-rd // (br * iters)), -(-cd // bc)


def sum_extent(plan: SumPlan, domain: int, dims) -> tuple[int, int]:
    """``(contributions, outputs)`` of one tensor's partial buffer for ``plan``."""
    bd, rd, cd = extent(domain, dims)
    row_programs, col_blocks = programs_per_b(domain, dims)
    contributions = ((bd if plan.axes & B else 1) * (row_programs if plan.axes & R else 1)
                     * (col_blocks if plan.axes & C else 1))
    kb, kr, kc = extent(plan.kept, dims)
    return contributions, kb * kr * kc


def triton_program(code: np.ndarray, dtype: str,
                   storage: dict[int, str] | None = None) -> TritonProgram:
    """The Triton module of VM ``code`` computing in ``dtype``; ``storage`` gives the dtype
    of each input array (0 the parameter, 1 the gradient, then the state arrays) kept in
    another one: such an array is read into ``dtype`` and rounded to its own where the
    program stores it."""
    if dtype not in DTYPES:
        raise Unsupported(f"dtype {dtype} (these kernels run float32 and float64)")
    decoded = decode(code)
    masks = decoded.masks
    kept = tuple(sorted((k, d) for k, d in (storage or {}).items() if d != dtype))
    for k, stored in kept:
        if stored not in STORAGE or not 0 <= k < decoded.n_inputs:
            raise Unsupported(f"array {k} stored as {stored} (inputs 0 to "
                              f"{decoded.n_inputs - 1} in {sorted(STORAGE)})")
    _check_read_back(decoded.phases, dict(kept))
    T = DTYPES[dtype]
    lines = ["import triton", "import triton.language as tl", "", *_helpers(T)]
    if "bfloat16" in dict(kept).values():
        lines += _BFLOAT16
    plans = []
    for number, (domain, instructions) in enumerate(decoded.phases):
        if domain == SELECT:
            raise Unsupported("ops.topk_mask (a selection over the whole tensor)")
        if domain == MATRIX:
            raise Unsupported("ops.matrix_function (a matrix phase runs on the host)")
        layout = layout_of(domain)
        sums = tuple(SumPlan(ins[1], ins[2], domain & ~ins[2] & (B | R | C))
                     for ins in instructions if _NAMES[ins[0]] == "sum")
        plan = PhasePlan(f"phase_{number}", domain, layout, sums)
        lines += _phase(plan, instructions, masks, decoded.n_inputs, dict(kept))
        plans.append(plan)
    launches = []
    for number, members in enumerate(_launch_groups(decoded.phases)):
        launch = LaunchPlan(f"launch_{number}", tuple(plans[i] for i in members))
        lines += _launch(launch)
        launches.append(launch)
    lines += _reductions()
    source = "\n".join(lines) + "\n"
    return TritonProgram(source, dtype, kept, decoded.n_inputs, masks, tuple(launches),
                         hashlib.sha256(source.encode()).hexdigest()[:24])


def _arrays_read(ins) -> set[int]:
    """The arrays an instruction reads (its operands of the array kind)."""
    array = OPERAND_KINDS["array"]
    return {v for k, v in ((ins[3], ins[4]), (ins[5], ins[6]), (ins[7], ins[8]))
            if k == array}


def _check_read_back(phases, storage: dict[int, str]) -> None:
    """An array kept in another dtype is rounded where it is stored; a later phase reading
    it back would compute with the rounded value, where the update rounds once, at its
    end: refused (the update then runs eagerly)."""
    stored: set[int] = set()
    for _, instructions in phases:
        for ins in instructions:
            read = _arrays_read(ins)
            if read & stored:
                raise Unsupported(f"array {min(read & stored)}, kept as "
                                  f"{storage[min(read & stored)]}, is read after a phase "
                                  "stored it")
        stored |= {ins[1] for ins in instructions
                   if _NAMES[ins[0]] == "store" and ins[1] in storage}


def _launch_groups(phases) -> list[list[int]]:
    """Consecutive phases with no array one of them writes (a store, a sum's total) that
    another reads or writes: they may run in one launch, in any order."""
    touched = []
    for _, instructions in phases:
        reads, writes = set(), set()
        for ins in instructions:
            reads |= _arrays_read(ins)
            if _NAMES[ins[0]] in ("store", "sum"):
                writes.add(ins[1])
        touched.append((reads, writes))
    groups = [[0]] if phases else []
    for j in range(1, len(phases)):
        reads, writes = touched[j]
        if all(not (touched[k][1] & (reads | writes)) and not (touched[k][0] & writes)
               for k in groups[-1]):
            groups[-1].append(j)
        else:
            groups.append([j])
    return groups


def _launch(plan: LaunchPlan) -> list[str]:
    """The kernel of one launch: each program runs the phase its table row names, with
    that phase's tile shape, and its sums' partials at their place in ``parts``."""
    lines = ['@triton.jit(do_not_specialize=["n_tensors", "n_scalars"])',
             f"def {plan.kernel}(programs, dims, arrays, n_tensors, scalars, scalar_rows, "
             "n_scalars, parts, T: tl.constexpr, ALIGNED: tl.constexpr):",
             "    pid = tl.program_id(0)",
             "    t = tl.load(programs + pid * 5)", "    b = tl.load(programs + pid * 5 + 1)",
             "    rp = tl.load(programs + pid * 5 + 2)",
             "    cb = tl.load(programs + pid * 5 + 3)"]
    call = ("(t, b, rp, cb, dims, arrays, n_tensors, scalars, scalar_rows, n_scalars, "
            "parts + {offset} * n_tensors, T, {br}, {bc}, {iters}, ALIGNED)")
    offset = 0
    if len(plan.phases) > 1:
        lines.append("    q = tl.load(programs + pid * 5 + 4)")
    for number, phase in enumerate(plan.phases):
        br, bc, iters = phase.block
        invocation = phase.kernel + call.format(offset=offset, br=br, bc=bc, iters=iters)
        if len(plan.phases) == 1:
            lines.append("    " + invocation)
        else:
            lines += [f"    {'if' if number == 0 else 'elif'} q == {number}:",
                      "        " + invocation]
        offset += len(phase.sums)
    return lines + ["", ""]


def _helpers(T: str) -> list[str]:
    """Operations whose numbers need care: IEEE division and square root on float32,
    numpy's NaN rules for max/min/sign (see ``phases.h``)."""
    precise = T == "tl.float32"
    div = "tl.div_rn(x, y)" if precise else "x / y"
    sqrt = "tl.sqrt_rn(x)" if precise else "tl.sqrt(x)"
    return ["@triton.jit", "def _div(x, y):", "    x, y = tl.broadcast(x, y)",
            f"    return {div}", "", "",
            "@triton.jit", "def _sqrt(x):", f"    return {sqrt}", "", "",
            "@triton.jit", "def _max(a, b):", "    r = tl.where(a >= b, a, b)",
            "    r = tl.where(b != b, b, r)", "    return tl.where(a != a, a, r)", "", "",
            "@triton.jit", "def _min(a, b):", "    r = tl.where(a <= b, a, b)",
            "    r = tl.where(b != b, b, r)", "    return tl.where(a != a, a, r)", "", "",
            "@triton.jit", "def _sign(x):",
            "    return tl.where(x > 0, 1.0, tl.where(x < 0, -1.0, x)).to(x.dtype)", "", ""]


#: rounding to bfloat16, nearest even, by its bits: a cast does it on the GPU
#: (``cvt.rn.bf16.f32``), but Triton's interpreter truncates, and the tests run the
#: kernels there
_BFLOAT16 = ["@triton.jit", "def _to_bf16(x):",
             "    bits = x.to(tl.uint32, bitcast=True)",
             "    bits = bits + ((bits >> 16) & 1) + 0x7FFF",
             "    rounded = (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)",
             "    return tl.where(x != x, x.to(tl.bfloat16), rounded)", "", ""]


def _narrowed(value: str, stored: str | None) -> str:
    """``value`` as it is stored in an array kept as ``stored`` (None: the math dtype)."""
    if stored is None:
        return value
    return f"_to_bf16({value})" if stored == "bfloat16" else f"{value}.to({STORAGE[stored]})"


_BINARY = {"add": "({a} + {b})", "sub": "({a} - {b})", "mul": "({a} * {b})",
           "div": "_div({a}, {b})", "max": "_max({a}, {b})", "min": "_min({a}, {b})",
           "gt": "({a} > {b}).to(T)", "ge": "({a} >= {b}).to(T)", "lt": "({a} < {b}).to(T)",
           "le": "({a} <= {b}).to(T)", "eq": "({a} == {b}).to(T)", "ne": "({a} != {b}).to(T)",
           "and": "(({a} != 0) & ({b} != 0)).to(T)", "or": "(({a} != 0) | ({b} != 0)).to(T)"}
_UNARY = {"neg": "(-{a})", "sqrt": "_sqrt({a})", "abs": "tl.abs({a})", "sign": "_sign({a})"}


def _index(mask: int, b: str, r: str, c: str) -> str:
    """The position of (b, r, c) in an array spanning ``mask`` (``phases.h``'s index)."""
    out = b if mask & B else "0"
    if mask & R:
        out = f"({out}) * R + {r}" if out != "0" else r
    if mask & C:
        out = f"({out}) * C + {c}" if out != "0" else c
    return out


def _valid(mask: int) -> str | None:
    parts = (["vr"] if mask & R else []) + (["vc"] if mask & C else [])
    return " & ".join(parts) or None


def _phase(plan: PhasePlan, instructions, masks, n_inputs: int,
           storage: dict[int, str]) -> list[str]:
    domain, layout = plan.domain, plan.layout
    head = ["Bt = tl.load(dims + t * 3)", "R = tl.load(dims + t * 3 + 1)",
            "C = tl.load(dims + t * 3 + 2)",
            f"Rd = {'R' if domain & R else '1'}", f"Cd = {'C' if domain & C else '1'}",
            "srow = tl.load(scalar_rows + t)"]
    if layout == "2d":
        head += ["c1 = cb * BC + tl.arange(0, BC)", "c = c1[None, :]", "vc = c < Cd"]
        loop = ["r1 = (rp * ITERS + it) * BR + tl.arange(0, BR)", "r = r1[:, None]",
                "vr = r < Rd", "valid = vr & vc"]
    elif layout == "cols":
        head += ["c = cb * BC + tl.arange(0, BC)", "vc = c < Cd", "r = 0", "valid = vc"]
        loop = []
    elif layout == "rows":
        head += ["c = 0"]
        loop = ["r = (rp * ITERS + it) * BR + tl.arange(0, BR)", "vr = r < Rd", "valid = vr"]
    else:
        head += ["r = 0", "c = 0"]
        loop = []
    tail: list[str] = []
    hoisted: dict[int, str] = {}
    pointers: set[int] = set()
    named: set[str] = set()

    def pointer(k: int) -> str:
        if k not in pointers:
            pointers.add(k)
            element = STORAGE[storage[k]] if k in storage else "T"
            head.append(f"A{k} = tl.load(arrays + {k} * n_tensors + t)"
                        f".to(tl.pointer_type({element}))")
            if layout == "cols" and k < n_inputs and masks[k] & C:
                # the caller's tensors start 16-byte aligned (ALIGNED): whole tiles load
                # and store 4 floats at a time
                head.extend(["if ALIGNED:", f"    A{k} = tl.multiple_of(A{k}, 16)"])
        return f"A{k}"

    def emit(masked: bool) -> list[str]:
        """The instructions over one tile; ``masked=False``: a tile inside the domain."""
        body: list[str] = []
        registers: dict[int, str] = {}
        loaded: dict[int, str] = {}

        def mask_of(mask: int) -> str | None:
            return _valid(mask) if masked else None

        def operand(kind: int, k: int) -> str:
            if kind == OPERAND_KINDS["register"]:
                return registers[k]
            if kind == OPERAND_KINDS["scalar"]:
                name = f"s{k}"
                if name not in named:
                    named.add(name)
                    head.append(f"{name} = tl.load(scalars + srow * n_scalars + {k}).to(T)")
                return name
            if kind == OPERAND_KINDS["count"]:
                name = f"n{k}"
                if name not in named:
                    named.add(name)
                    factors = [x for axis, x in ((B, "Bt"), (R, "R"), (C, "C"))
                               if k & axis] or ["1"]
                    head.append(f"{name} = ({' * '.join(factors)}).to(T)")
                return name
            if kind == OPERAND_KINDS["array"]:
                where = _index(masks[k], "b", "r", "c")
                widen = ".to(T)" if k in storage else ""      # read into the math dtype
                if not masks[k] & (R | C) or (layout == "2d" and not masks[k] & R):
                    if k not in hoisted:         # the same for the whole program
                        hoisted[k] = f"a{k}"
                        valid = _valid(masks[k])
                        head.append(f"a{k} = " + (
                            f"tl.load({pointer(k)} + {where}, mask={valid}, other=0)"
                            if valid else f"tl.load({pointer(k)} + {where})") + widen)
                    return hoisted[k]
                if k not in loaded:
                    loaded[k] = f"a{k}"
                    valid = mask_of(masks[k])
                    body.append(f"a{k} = " + (
                        f"tl.load({pointer(k)} + {where}, mask={valid}, other=0)" if valid
                        else f"tl.load({pointer(k)} + {where})") + widen)
                return loaded[k]
            raise ValueError(f"operand kind {kind}")

        sum_number = 0
        for count, ins in enumerate(instructions):
            op, dst = _NAMES[ins[0]], ins[1]
            a = operand(ins[3], ins[4]) if ins[3] else None
            if op == "sum":
                body += _partial(plan.sums[sum_number], sum_number, a, layout, head, tail,
                                 masked)
                sum_number += 1
            elif op == "store":
                valid = mask_of(masks[dst])
                where = _index(masks[dst], "b", "r", "c")
                value = _narrowed(a, storage.get(dst))
                body.append(f"tl.store({pointer(dst)} + {where}, {value}"
                            + (f", mask={valid})" if valid else ")"))
            else:
                if op in _BINARY:
                    expression = _BINARY[op].format(a=a, b=operand(ins[5], ins[6]))
                elif op in _UNARY:
                    expression = _UNARY[op].format(a=a)
                else:                                                  # where
                    expression = (f"tl.where({a} != 0, {operand(ins[5], ins[6])}, "
                                  f"{operand(ins[7], ins[8])})")
                name = f"v{count}"
                body.append(f"{name} = {expression}")
                registers[dst] = name
        return body

    if layout == "cols":
        whole, partial = emit(False), emit(True)
        body = (["if (cb + 1) * BC <= Cd:"] + ["    " + x for x in whole]
                + ["else:"] + ["    " + x for x in partial])
    else:
        body = emit(True)
    # the body of a phase over one program's tile (t, b, rp, cb): a launch kernel
    # (_launch) calls it, with the phase's tile shape
    lines = ["@triton.jit",
             f"def {plan.kernel}(t, b, rp, cb, dims, arrays, n_tensors, scalars, scalar_rows, "
             "n_scalars, parts, T: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr, "
             "ITERS: tl.constexpr, ALIGNED: tl.constexpr):"]
    lines += ["    " + line for line in head]
    if layout in ("2d", "rows"):
        lines.append("    for it in range(ITERS):")
        lines += ["        " + line for line in loop + body]
    else:
        lines += ["    " + line for line in loop + body]
    lines += ["    " + line for line in tail]
    return lines + ["", ""]


def _partial(plan: SumPlan, number: int, value: str, layout: str, head: list, tail: list,
             masked: bool = True) -> list[str]:
    """The code that adds ``value`` into sum ``number``'s partial buffer (see the module);
    ``masked=False``: a tile inside the domain. The set-up and the final store are added
    to ``head`` and ``tail`` once."""
    axes, kept = plan.axes, plan.kept
    if f"acc{number} = " in "\n".join(head) or f"P{number} = " in "\n".join(head):
        head, tail = [], []             # the other branch's code already made them
    head += [f"P{number} = tl.load(parts + {number} * n_tensors + t)"
             ".to(tl.pointer_type(tl.float64))",
             "nrp = (Rd + BR * ITERS - 1) // (BR * ITERS)", "ncb = (Cd + BC - 1) // BC",
             f"k{number} = (({'b' if axes & B else '0'}) * "
             f"({'nrp' if axes & R else '1'}) + ({'rp' if axes & R else '0'})) * "
             f"({'ncb' if axes & C else '1'}) + ({'cb' if axes & C else '0'})",
             f"o{number} = k{number} * (({'Bt' if kept & B else '1'}) * "
             f"({'R' if kept & R else '1'}) * ({'C' if kept & C else '1'}))"]
    base = f"P{number} + o{number}"
    if layout == "single":
        return [f"tl.store({base} + {_index(kept, 'b', '0', '0')}, "
                f"{value}.to(tl.float64))"]
    x = f"x{number}"
    lines = [f"{x} = tl.where(valid, ({value}).to(tl.float64), 0.0)" if masked else
             f"{x} = tl.broadcast_to(({value}).to(tl.float64), [BC])"]
    if layout == "2d" and kept & R and kept & C or layout == "cols" and kept & C or \
            layout == "rows" and kept & R:             # every element its own output
        valid = _valid(kept & (R | C)) if masked else None
        return lines + [f"tl.store({base} + {_index(kept, 'b', 'r', 'c')}, {x}"
                        + (f", mask={valid})" if valid else ")")]
    if layout == "2d" and kept & R:                 # row totals, tile by tile
        return lines + [f"tl.store({base} + {_index(kept, 'b', 'r1', '0')}, "
                        f"tl.sum({x}, axis=1), mask=r1 < Rd)"]
    shape = {"2d": "[BR, BC]", "rows": "[BR]", "cols": "[BC]"}[layout]
    head.append(f"acc{number} = tl.zeros({shape}, tl.float64)")
    if layout == "2d" and kept & C:                 # column totals over the program's rows
        tail.append(f"tl.store({base} + {_index(kept, 'b', '0', 'c1')}, "
                    f"tl.sum(acc{number}, axis=0), mask=c1 < Cd)")
    else:                                           # one total per program
        tail.append(f"tl.store({base} + {_index(kept, 'b', '0', '0')}, tl.sum(acc{number}))")
    return lines + [f"acc{number} += {x}"]


def _reductions() -> list[str]:
    """The second stage of the sums: each output adds its contributions in order. One
    launch takes every sum of a phase: a job row is ``(partial buffer address,
    contributions, outputs, first output, total's address)`` (see :data:`JOB`)."""
    head = ["    pid = tl.program_id(0)",
            "    P = tl.load(jobs + pid * 5).to(tl.pointer_type(tl.float64))",
            "    nk = tl.load(jobs + pid * 5 + 1)",
            "    no = tl.load(jobs + pid * 5 + 2)",
            "    o0 = tl.load(jobs + pid * 5 + 3)",
            "    D = tl.load(jobs + pid * 5 + 4).to(tl.pointer_type(T))"]
    return (["@triton.jit",
             "def reduce_many(jobs, T: tl.constexpr, BK: tl.constexpr, BO: tl.constexpr):"]
            + head +
            ["    o = o0 + tl.arange(0, BO)",
             "    acc = tl.zeros([BK, BO], tl.float64)",
             "    for k0 in range(0, nk, BK):",
             "        k = k0 + tl.arange(0, BK)",
             "        acc += tl.load(P + k[:, None] * no + o[None, :], "
             "mask=(k[:, None] < nk) & (o[None, :] < no), other=0.0)",
             "    tl.store(D + o, tl.sum(acc, axis=0).to(T), mask=o < no)",
             "", "",
             "@triton.jit",
             "def reduce_total(jobs, T: tl.constexpr, BK: tl.constexpr):"]
            + head +
            ["    acc = tl.zeros([BK], tl.float64)",
             "    for k0 in range(0, nk, BK):",
             "        k = k0 + tl.arange(0, BK)",
             "        acc += tl.load(P + k * no + o0, mask=k < nk, other=0.0)",
             "    tl.store(D + o0, tl.sum(acc).to(T))",
             ""])
