"""A program's schedule (:class:`.bytecode.KernelPlan`, the IR every generator reads) as
C++ of its own: one kernel per program structure.

The VM runs an instruction over a whole chunk before the next, through registers in
memory; for a large parameter that memory traffic costs more than the arithmetic. The
kernel written here does the same phases with the same walk, sums and helpers
(``phases.h``), but runs all of a chunk's instructions element by element in one loop
over values the compiler keeps in vector registers. Same operations, same order, same
sums: it gives the VM's bits (tested), so a run may switch from one to the other at any
step, and ranks that switch at different steps stay equal.

:func:`kernel_source` writes the source; :mod:`.build` compiles it (about 1 s). Every
operation is branch-free (``phases.h``'s selects and blends), so its speed does not
depend on the data.
"""

from __future__ import annotations

import numpy as np

from .bytecode import (
    AXES,
    DTYPES,
    MATRIX,
    OPCODES,
    OPERAND_KINDS,
    SELECT,
    decode,
    tile_local,
    tile_runs_valid,
)

_NAMES = {v: k for k, v in OPCODES.items()}
_BINARY = {"add": "{a} + {b}", "sub": "{a} - {b}", "mul": "{a} * {b}", "div": "{a} / {b}",
           "max": "uo::nan_max({a}, {b})", "min": "uo::nan_min({a}, {b})",
           "gt": "T({a} > {b})", "ge": "T({a} >= {b})", "lt": "T({a} < {b})",
           "le": "T({a} <= {b})", "eq": "T({a} == {b})", "ne": "T({a} != {b})",
           "and": "uo::logical_and({a}, {b})", "or": "uo::logical_or({a}, {b})"}
_UNARY = {"neg": "-{a}", "sqrt": "std::sqrt({a})", "abs": "std::fabs({a})",
          "sign": "uo::sign_of({a})"}
_C = AXES["AC"]


def kernel_source(code: np.ndarray, clock: bool = False) -> str:
    """The C++ of one program's kernel (``code``: its VM code or its :class:`KernelPlan`):
    ``uo_kernel_run(dtype, inputs, dims, scalars)`` with the VM's ``uo_vm_run`` contract
    (without the code).

    ``clock``: each phase also adds the ticks it took (``phases.h``'s ``clock_ticks``)
    into the kernel's ``PHASE_TICKS``, one per phase (``uo_kernel_phase_ticks`` reads and
    clears them; ``benchmarks/kernel_phases.py``). The same operations: the same bits."""
    if not isinstance(clock, bool):
        raise TypeError(f"kernel_source: clock must be a bool, got {clock!r}")
    decoded = decode(code)
    n_inputs, masks, phases = decoded.n_inputs, decoded.masks, decoded.phases
    if any(domain == MATRIX for domain, _ in phases):
        raise ValueError("kernel_source: a plan with a matrix phase (the host runs it): "
                         "write its segments' kernels (bytecode.segments)")
    _check_scratch_written_first(n_inputs, masks, phases)
    if not tile_runs_valid(decoded):
        raise ValueError(f"kernel_source: tile runs {decoded.tiles} that phases.h's run_tiles "
                         "cannot run (bytecode.tile_runs_valid)")
    runs = dict(decoded.tiles)
    lines = ['#include "phases.h"', "", "namespace {", "",
             f"constexpr int32_t MASKS[] = {{{', '.join(map(str, masks))}}};", ""]
    if clock:
        lines += [f"std::atomic<uint64_t> PHASE_TICKS[{len(phases)}] = {{}};",
                  "void add_ticks(int phase, uint64_t since) {",
                  "  PHASE_TICKS[phase].fetch_add(uo::clock_ticks() - since, "
                  "std::memory_order_relaxed);", "}", ""]
    if runs:
        lines += _HALF_WIDTH
    lines += ["template <class T>",
             "int kernel(void* const* inputs, const int64_t* d, const double* S) {",
             "  const uo::Dims dims{d[0], d[1], d[2]};",
             f"  uo::Arrays<T> arrays({n_inputs}, {len(masks)}, MASKS, inputs, dims);",
             "  T* const* A = arrays.ptr.data();"]
    number = 0
    # whether the last pass over the whole parameter walked it from its start: the next
    # one without sums walks back (run_phase's `backwards`), on what the cache still holds
    last_forward = False
    while number < len(phases):
        domain, instructions = phases[number]
        if number in runs:
            lines += _tile_run(number, phases[number:number + runs[number]], masks,
                               tile_local(decoded, number, runs[number]), clock)
            number += runs[number]
            last_forward = True
            continue
        if domain == SELECT:
            phase = [f"  uo::top_k<T>(A[{ins[4]}], dims.size({masks[ins[4]]}), S[{ins[6]}], "
                     f"A[{ins[1]}]);  // phase {number}" for ins in instructions]
        else:
            backwards = False
            if domain == masks[0]:             # the parameter's axes
                backwards = last_forward and not any(_NAMES[ins[0]] == "sum"
                                                     for ins in instructions)
                last_forward = not backwards
            phase = _phase(number, domain, instructions, masks, backwards)
        if clock:
            phase = ([f"  const uint64_t clock{number} = uo::clock_ticks();"] + phase
                     + [f"  add_ticks({number}, clock{number});"])
        lines += phase
        number += 1
    lines += ["  return 0;", "}", ""]
    if runs:
        lines += _HALF_WIDTH_END
    lines += ["}  // namespace", "", 'extern "C" {',
              "int uo_kernel_run(int dtype, void* const* inputs, const int64_t* dims,",
              "                  const double* scalars) {",
              f"  if (dtype == {DTYPES['float32']}) return kernel<float>(inputs, dims, scalars);",
              f"  if (dtype == {DTYPES['float64']}) return kernel<double>(inputs, dims, scalars);",
              "  return 2;", "}",
              "void uo_kernel_set_threads(int threads) {",
              "  uo::requested_threads().store(threads > 0 ? threads : 0);", "}",
              "int uo_kernel_threads() { return uo::thread_count(); }",
              "void uo_kernel_set_tile(int64_t bs) {",
              "  uo::requested_tile_bs().store(bs > 0 ? bs : 0);", "}"]
    if clock:
        lines += ["// each phase's ticks since the last call, into ticks[0, n); cleared",
                  "void uo_kernel_phase_ticks(uint64_t* ticks, int n) {",
                  f"  for (int k = 0; k < n && k < {len(phases)}; ++k)",
                  "    ticks[k] = PHASE_TICKS[k].exchange(0);", "}"]
    lines += ['}  // extern "C"', ""]
    return "\n".join(lines)


# A kernel with a tile run (a conv weight's factored moments: Adafactor's, CAME's) asks
# GCC for 256-bit vectors where the CPU has 512-bit ones: its element loops are short
# and read gathered row and column factors, and on AVX-512 (Zen 4) they ran 1-6 % slower
# in 512-bit ones (ResNet-18's set: CAME 31.5 -> 30.4 ms, Adafactor 22.6 -> 22.3), while
# the elementwise kernels (AdamW's, Lion's) ran 0-4 % faster in them. The same
# operations either way: the bits do not change.
_HALF_WIDTH = ["#if defined(__GNUC__) && !defined(__clang__)", "#pragma GCC push_options",
               '#pragma GCC target("prefer-vector-width=256")', "#endif", ""]
_HALF_WIDTH_END = ["#if defined(__GNUC__) && !defined(__clang__)", "#pragma GCC pop_options",
                   "#endif", ""]


def _rows_together(domain: int, instructions, masks) -> bool:
    """``phases.h``'s ``rows_together``: every array read spans axes of the domain only,
    every array written spans the domain (a chunk may then hold several rows)."""
    array = OPERAND_KINDS["array"]
    for ins in instructions:
        if _NAMES[ins[0]] == "store" and masks[ins[1]] != domain:
            return False
        if any(kind == array and masks[k] & ~domain
               for kind, k in ((ins[3], ins[4]), (ins[5], ins[6]), (ins[7], ins[8]))):
            return False
    return True


def _lands_direct(dst: int, instructions) -> bool:
    """``phases.h``'s ``lands_direct``: no instruction of the phase reads the sum's array
    ``dst`` or stores into it (its total may then be written during the walk)."""
    array = OPERAND_KINDS["array"]
    return not any((_NAMES[ins[0]] == "store" and ins[1] == dst)
                   or any(kind == array and k == dst
                          for kind, k in ((ins[3], ins[4]), (ins[5], ins[6]), (ins[7], ins[8])))
                   for ins in instructions)


def _check_scratch_written_first(n_inputs: int, masks, phases) -> None:
    """``phases.h``'s ``scratch_written_first``: the kernels' scratch arrays come unzeroed
    from a pool, so each one a phase reads must have been written whole by an earlier
    phase (a store in a phase spanning its axes, a sum's or a top-k's result)."""
    array = OPERAND_KINDS["array"]
    written = set(range(n_inputs))
    for number, (domain, instructions) in enumerate(phases):
        for ins in instructions:
            for kind, k in ((ins[3], ins[4]), (ins[5], ins[6]), (ins[7], ins[8])):
                if kind == array and k not in written:
                    raise ValueError(f"kernel_source: phase {number} reads array {k} before "
                                     "an earlier phase writes it whole")
        for ins in instructions:
            op = _NAMES[ins[0]]
            if op in ("sum", "topk") or (op == "store" and domain != SELECT
                                          and not masks[ins[1]] & ~domain):
                written.add(ins[1])


def _parts(domain: int, instructions, masks) -> tuple[str, bool, list[str], int]:
    """A phase's sums (``uo::Sum`` initialisers), whether its chunks may hold several rows,
    the C++ of one chunk and the scratch buffers it uses."""
    sums = [ins for ins in instructions if _NAMES[ins[0]] == "sum"]
    declared = ", ".join(
        f"{{{ins[2]}, {ins[1]}, {'true' if _lands_direct(ins[1], instructions) else 'false'}}}"
        for ins in sums)
    together = _rows_together(domain, instructions, masks)
    one_row, one_buffers = _body(domain, instructions, masks, rows=False)
    body, buffers = one_row, one_buffers
    if together:
        # a chunk of one whole row shorter than LANES (a blocked total's domain's last
        # row, walk.h's Landing) takes the rows' code too: it sums through row_sums, as
        # the VM does; a part of a longer row (c0 > 0, n < Dc) keeps the one row's code
        several, several_buffers = _body(domain, instructions, masks, rows=True)
        buffers = max(one_buffers, several_buffers)
        body = (["if (ch.rows == 1 && (ch.n >= uo::LANES || ch.n != w.Dc)) {"]
                + ["  " + line for line in one_row]
                + ["} else {"] + ["  " + line for line in several] + ["}"])
    return declared, together, body, buffers


def _tile_run(first: int, phases, masks, local, clock: bool) -> list[str]:
    """A tile run's phases (``phases.h``'s ``run_tiles``): one chunk body that runs phase
    ``k`` of the run, as the VM's; ``local``: its tile-local arrays; ``clock``: each
    chunk's ticks added to its phase's (kernel_source)."""
    parts = [_parts(domain, instructions, masks) for domain, instructions in phases]
    buffers = max(max(p[3] for p in parts), 1)
    lines = [f"  {{  // phases {first} to {first + len(phases) - 1}: a tile run"]
    lines += [f"    std::vector<uo::Sum> sums{k}{{{declared}}};"
              for k, (declared, _, _, _) in enumerate(parts)]
    lines.append("    const uo::TilePhase run[] = {" + ", ".join(
        f"{{{domain}, &sums{k}, {'true' if parts[k][1] else 'false'}}}"
        for k, (domain, _) in enumerate(phases)) + "};")
    if local:
        lines.append(f"    static const int local[] = {{{', '.join(map(str, local))}}};")
    lines += [f"    uo::run_tiles<uo::KERNEL_CHUNK, T>(run, {len(phases)}, dims, "
              f"arrays.ptr.data(), MASKS, {'local' if local else 'nullptr'}, {len(local)},",
              f"        {buffers} * uo::KERNEL_CHUNK,",
              "        [&](int k, const uo::Walk& w, const uo::Chunk& ch, T* scratch) {",
              "    (void)w; (void)scratch;"]
    if clock:
        lines.append("    const uint64_t clock = uo::clock_ticks();")
    lines.append("    switch (k) {")
    for k, (_, _, body, _) in enumerate(parts):
        lines += [f"      case {k}: {{  // phase {first + k}",
                  f"        std::vector<uo::Sum>& sums = sums{k};", "        (void)sums;"]
        lines += ["        " + line for line in body]
        lines += ["        break;", "      }"]
    lines += ["      default: break;", "    }"]
    if clock:
        lines.append(f"    add_ticks({first} + k, clock);")
    lines += ["    });", "  }"]
    return lines


def _phase(number: int, domain: int, instructions, masks, backwards: bool) -> list[str]:
    declared, together, body, buffers = _parts(domain, instructions, masks)
    return ([f"  {{  // phase {number}" + (": backwards" if backwards else ""),
             f"    std::vector<uo::Sum> sums{{{declared}}};",
             f"    uo::run_phase<uo::KERNEL_CHUNK, T>({domain}, dims, sums, A, "
             f"{max(buffers, 1)} * uo::KERNEL_CHUNK, {'true' if together else 'false'},",
             "        [&](const uo::Walk& w, const uo::Chunk& ch, T* scratch) {",
             "    (void)w; (void)scratch;"]
            + ["    " + line for line in body]
            + [f"    }}, {'true' if backwards else 'false'});", "  }"])


def _body(domain: int, instructions, masks, rows: bool) -> tuple[list[str], int]:
    """The C++ of one chunk of a phase, and the scratch buffers it uses. ``rows``: a
    chunk of several whole rows (``phases.h``'s Chunk): its elements are consecutive in
    the arrays spanning the domain; an array of fewer axes is gathered, and a column sum
    goes through a buffer (it adds each row in order), as does a sum over C where the
    rows are shorter than LANES (``walk.h``'s short-row sums); a sum over C of longer
    rows adds into lanes in the loop (:func:`_lane_blocks`)."""
    head: list[str] = []
    loop: list = []             # lines, and a sum over C's (slot, expression)
    tail: list = []             # lines, and a sum over C's (slot,)
    reads: dict[tuple[str, int], str] = {}
    registers: dict[int, str] = {}
    buffers = 0
    if rows:
        head.append("const int64_t n = ch.size();")
    else:
        head.append("const int64_t b = ch.b, r = ch.r, c0 = ch.c0, n = ch.n;")
        head.append("(void)b; (void)r; (void)c0;")

    def buffer() -> str:
        nonlocal buffers
        buffers += 1
        return f"scratch + {buffers - 1} * uo::KERNEL_CHUNK"

    def operand(kind, k):
        if kind == OPERAND_KINDS["register"]:
            return registers[k], True
        if kind == OPERAND_KINDS["scalar"]:
            key = ("s", k)
            if key not in reads:
                reads[key] = f"s{k}"
                head.append(f"const T s{k} = T(S[{k}]);")
            return reads[key], False
        if kind == OPERAND_KINDS["count"]:
            key = ("n", k)
            if key not in reads:
                reads[key] = f"n{k}"
                head.append(f"const T n{k} = T(dims.size({k}));")
            return reads[key], False
        if kind == OPERAND_KINDS["array"]:
            mask = masks[k]
            vector = bool(mask != 0) if rows else bool(mask & _C)
            key = ("a", k)
            if key not in reads:
                reads[key] = f"a{k}"
                if rows and vector and mask == domain:
                    head.append(f"const T* a{k} = A[{k}] + ch.row * w.Dc;")
                elif rows and vector:
                    head.append(f"T* a{k} = {buffer()};")
                    head.append(f"uo::gather(a{k}, A[{k}], {mask}, dims, w, ch);")
                elif vector:
                    head.append(f"const T* a{k} = A[{k}] + dims.index({mask}, b, r, c0);")
                elif rows:
                    head.append(f"const T a{k} = A[{k}][0];")
                else:
                    head.append(f"const T a{k} = A[{k}][dims.index({mask}, b, r, 0)];")
            return (f"a{k}[j]" if vector else f"a{k}"), vector
        raise ValueError(f"operand kind {kind}")

    sum_index = 0
    # sums over C: added into lanes in the element loop (_lane_blocks) where a chunk's
    # rows are at least LANES long, else (a chunk of several short rows) through a buffer;
    # in `loop` and `tail` as (slot, expression) and (slot,), written per form below
    lanes: list[int] = []
    # a sum over C whose value a column sum also takes (slot -> the column sum's slot): on
    # short rows the two land from the column sum's buffer at once (walk.h's
    # rows_and_columns); the column sum's tail line is ("column", slot, line) then
    partner = _partners(instructions) if rows else {}
    partnered = set(partner.values())
    for count, ins in enumerate(instructions):
        op, dst, aux = _NAMES[ins[0]], ins[1], ins[2]
        a = operand(ins[3], ins[4]) if ins[3] else None
        if op == "sum":
            expression, vector = a
            slot = sum_index
            sum_index += 1
            kind = "row" if aux & _C else "column"
            if vector and aux & _C:
                lanes.append(slot)
                if rows and slot not in partner:
                    head.append(f"T* q{slot} = {buffer()};")
                loop.append((slot, expression))
                tail.append((slot,))
            elif vector and rows:
                head.append(f"T* q{slot} = {buffer()};")
                loop.append(f"q{slot}[j] = {expression};")
                line = f"uo::{kind}_sums(sums[{slot}], w, ch, q{slot});"
                tail.append(("column", slot, line) if slot in partnered else line)
            elif vector:              # one row's column sum: added in the loop
                head.append(f"double* col{slot} = uo::column_partial(sums[{slot}], w, ch);")
                loop.append(f"col{slot}[j] += double({expression});")
            else:
                tail.append(f"uo::{kind}_sums_of<T>(sums[{slot}], w, ch, "
                            f"double({expression}));")
            continue
        if op == "store":
            if rows:
                vector = True
                head.append(f"T* o{count} = A[{dst}] + ch.row * w.Dc;")
            else:
                vector = bool(masks[dst] & _C)
                head.append(f"T* o{count} = A[{dst}] + dims.index({masks[dst]}, b, r, "
                            f"{'c0' if vector else '0'});")
            loop.append(f"o{count}[{'j' if vector else '0'}] = {a[0]};")
            continue
        name = f"v{count}"
        if op in _BINARY:
            b = operand(ins[5], ins[6])
            expression = _BINARY[op].format(a=a[0], b=b[0])
        elif op in _UNARY:
            expression = _UNARY[op].format(a=a[0])
        else:                                                       # where
            b, c = operand(ins[5], ins[6]), operand(ins[7], ins[8])
            expression = f"uo::select({a[0]}, {b[0]}, {c[0]})"
        loop.append(f"const T {name} = {expression};")
        registers[dst] = name
    if not lanes:
        return head + _plain_loop(loop) + tail, buffers
    in_lanes = (_lane_blocks([f"lane{x[0]}[l] += double({x[1]});" if isinstance(x, tuple)
                              else x for x in loop], lanes, rows)
                + [x if isinstance(x, str) else x[2] if x[0] == "column" else
                   f"uo::row_partials<T>(sums[{x[0]}], w, ch, part{x[0]});" for x in tail])
    if not rows:
        return head + in_lanes, buffers

    def buffered_tail(x) -> list[str]:
        if isinstance(x, str):
            return [x]
        if x[0] == "column":                  # landed with its row sum
            return []
        if x[0] in partner:
            return [f"uo::rows_and_columns(sums[{x[0]}], sums[{partner[x[0]]}], w, ch, "
                    f"q{partner[x[0]]});"]
        return [f"uo::row_sums(sums[{x[0]}], w, ch, q{x[0]});"]

    buffered = (_plain_loop([x if isinstance(x, str) else f"q{x[0]}[j] = {x[1]};"
                             for x in loop if isinstance(x, str) or x[0] not in partner])
                + [line for x in tail for line in buffered_tail(x)])
    return (head + ["if (ch.n >= uo::LANES) {"] + ["  " + line for line in in_lanes]
            + ["} else {"] + ["  " + line for line in buffered] + ["}"]), buffers


def _partners(instructions) -> dict[int, int]:
    """The sums over C (by slot, in the order of the phase's sums) whose value a sum
    without C (a column sum) also takes, each with the first such column sum's slot. A
    value is its operand, a register read as the instruction that last wrote it (the
    VM's registers are reused)."""
    written: dict[int, int] = {}
    sums = []
    for count, ins in enumerate(instructions):
        op = _NAMES[ins[0]]
        if op == "sum":
            register = ins[3] == OPERAND_KINDS["register"]
            value = ("written", written[ins[4]]) if register else (ins[3], ins[4])
            sums.append((len(sums), bool(ins[2] & _C), value))
        elif op != "store":
            written[ins[1]] = count
    partner: dict[int, int] = {}
    for slot, over_c, value in sums:
        if over_c:
            columns = [other for other, other_c, taken in sums
                       if not other_c and taken == value and other not in partner.values()]
            if columns:
                partner[slot] = columns[0]
    return partner


def _plain_loop(loop: list[str]) -> list[str]:
    return (["#pragma omp simd", "for (int64_t j = 0; j < n; ++j) {"]
            + ["  " + line for line in loop] + ["}"])


def _lane_blocks(loop: list[str], lanes: list[int], rows: bool) -> list[str]:
    """The element loop of a chunk with sums over C, row by row (``rows``: a chunk of
    several whole rows, else one row's elements from c0) and block by block of SUM_BLOCK
    elements: element i of a block added into lane i % LANES of each sum and the lanes
    added in lane_tree's order, lane_sum's partials (the same bits as row_sums over a
    buffer), without writing the values to a buffer and reading them back."""
    width = "ch.n" if rows else "n"
    inner = ["    " + line for line in loop]
    return ([f"const int64_t blocks = ({width} + uo::SUM_BLOCK - 1) / uo::SUM_BLOCK;"]
            + [f"double part{slot}[uo::KERNEL_CHUNK / uo::LANES];" for slot in lanes]
            + ["for (int64_t row = 0; row < ch.rows; ++row) {",
               f"  for (int64_t k0 = 0; k0 < {width}; k0 += uo::SUM_BLOCK) {{",
               f"    const int64_t m = std::min<int64_t>(uo::SUM_BLOCK, {width} - k0);",
               f"    const int64_t start = row * {width} + k0;"]
            + [f"    double lane{slot}[uo::LANES] = {{}};" for slot in lanes]
            + ["    int64_t i = 0;",
               "    for (; i + uo::LANES <= m; i += uo::LANES) {",
               "      #pragma omp simd",
               "      for (int64_t l = 0; l < uo::LANES; ++l) {",
               "        const int64_t j = start + i + l;"]
            + ["    " + line for line in inner]
            + ["      }", "    }",
               "    for (int64_t l = 0; i < m; ++i, ++l) {",
               "      const int64_t j = start + i;"]
            + ["  " + line for line in inner]
            + ["    }"]
            + [f"    part{slot}[row * blocks + k0 / uo::SUM_BLOCK] = uo::lane_tree(lane{slot});"
               for slot in lanes]
            + ["  }", "}"])
