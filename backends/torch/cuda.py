"""The own update of CUDA tensors at fused-kernel speed: every phase of a spec's program
as one Triton kernel over all the tensors of a group (:mod:`unified_opt.kernels.triton_source`).

A step of a group (parameters of one spec, dtype and number of dimensions, whose update
traces to the same program) launches one kernel per phase of the program, plus one
small reduction kernel per sum (a norm, a factored moment's rows and columns), whatever
the number of tensors: AdamW is one launch per group, Lamb three plus two reductions.
The tensors are reached through tables of their addresses on the device, built once per
group (parameters, state, scratch) and, for the gradients, refreshed every step.

Numbers: the kernels run the VM's program with the spec's operation order, IEEE
division and square root and no fused multiply-add (``enable_fp_fusion=False``), so
they compute what the float32 references compute: a sign or a comparison decides as
there. Sums add in float64 and round once. A bfloat16 or float16 parameter computes in
float32 and an array kept in another dtype (the parameter, its gradient, a state array in
the spec's ``state_dtype``) is read into float32 and rounded to nearest even where it is
stored, once per step (:mod:`unified_opt.storage`); a program that would read such an
array back after storing it runs eagerly instead.

Where Triton runs in its interpreter (``TRITON_INTERPRET=1``, numpy on the CPU) the same
kernels run over CPU tensors: how the tests check them without a GPU
(``tests/test_cuda_engine.py``).

The generated modules are written to ``<kernel cache>/triton/`` (the VM's cache folder,
:func:`unified_opt.kernels.build.cache_dir`) and Triton keeps their compiled binaries
in its own cache (``TRITON_CACHE_DIR``, by default ``~/.triton/cache``): a later process
compiles nothing.
"""

from __future__ import annotations

import importlib.util
import operator
import os
import sys
import threading

import numpy as np
import torch
from torch.autograd.graph import increment_version

from unified_opt.files import write_text
from unified_opt.kernels import build
from unified_opt.kernels.runtime import LABELS_KEPT, Programs
from unified_opt.kernels.trace import Untraceable, canonical_dims
from unified_opt.kernels.triton_source import (
    REDUCE_MANY,
    REDUCE_TOTAL,
    TritonProgram,
    Unsupported,
    extent,
    programs_per_b,
    sum_extent,
    triton_program,
)
from unified_opt.step_loop import Batch, Engine
from unified_opt.storage import math_dtype, state_storage

#: the parameter dtypes these kernels take (bfloat16 and float16 compute in float32:
#: :mod:`unified_opt.storage`)
DTYPES = {torch.float32: "float32", torch.float64: "float64", torch.bfloat16: "bfloat16",
          torch.float16: "float16"}
TORCH_DTYPES = {name: dtype for dtype, name in DTYPES.items()}
_modules: dict[str, object] = {}
_lock = threading.Lock()


class TritonUnavailable(RuntimeError):
    """Triton cannot be imported (or finds no GPU): the CUDA kernels cannot run."""


def interpreted() -> bool:
    """Whether Triton runs its interpreter (the kernels then take CPU tensors)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def triton_language():
    try:
        import triton.language as tl
    except ImportError as error:           # pragma: no cover - depends on the install
        raise TritonUnavailable(f"Triton cannot be imported ({error})") from error
    return tl


def module_of(program: TritonProgram):
    """The imported module of ``program`` (written once into the cache folder)."""
    with _lock:
        module = _modules.get(program.digest)
        if module is None:
            triton_language()
            folder = build.cache_dir() / "triton"
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"uo_{program.digest}.py"
            if not path.exists() or path.read_text() != program.source:
                # atomically: a failed write (a full disk) removes its partial file
                write_text(path, program.source)
            name = f"unified_opt_triton_{program.digest}"
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module           # Triton reads the source through it
            spec.loader.exec_module(module)
            _modules[program.digest] = module
    return module


def _addresses(tensors) -> list[int]:
    return [t.data_ptr() if t.numel() else 0 for t in tensors]


class _Launch:
    """The device tables of one group of tensors running one program: built once, then
    each step takes the gradients' addresses and the scalars."""

    def __init__(self, program: TritonProgram, params, states, order, device):
        tl = triton_language()
        self.program = program
        self.module = module_of(program)
        self.dtype = {"float32": tl.float32, "float64": tl.float64}[program.dtype]
        math = TORCH_DTYPES[program.dtype]
        self.device = device
        self.count = len(params)
        dims = [canonical_dims(p.shape) for p in params]
        self.dims = torch.tensor(dims, dtype=torch.int64).to(device)
        masks = program.masks
        table = np.zeros((len(masks), self.count), dtype=np.int64)
        table[0] = _addresses(params)
        for j, key in enumerate(order):
            table[2 + j] = _addresses([s[key] for s in states])
        self._keep = []                      # scratch and partial buffers
        for k in range(program.n_inputs, len(masks)):
            sizes = [max(1, int(np.prod(extent(masks[k], d)))) for d in dims]
            buffer = torch.empty(sum(sizes), dtype=math, device=device)
            self._keep.append(buffer)
            starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
            table[k] = buffer.data_ptr() + starts * buffer.element_size()
        self.table = table
        self.order = tuple(order)
        #: the state tensors the tables point into (the launch holds while they are in place)
        self.held = [s[key] for s in states for key in order]
        #: the parameters as autograd sees them written (a detached tensor shares its
        #: parameter's version counter)
        self.written = [p.detach() for p in params]
        # a gradient has its parameter's shape: these have no elements (address 0)
        self._empty = [t for t, p in enumerate(params) if p.numel() == 0]
        # the inputs but the gradients keep their addresses while the launch holds
        inputs = np.delete(table[:program.n_inputs], 1, axis=0)
        self._aligned = bool((inputs % 16 == 0).all())
        self.launches = []
        for launch in program.launches:
            tables = [self._programs(phase.domain, dims, q)
                      for q, phase in enumerate(launch.phases)]
            tables = [t for t in tables if t is not None]
            programs = (torch.from_numpy(np.concatenate(tables)).to(device) if tables
                        else None)
            parts = np.zeros((max(1, len(launch.sums)), self.count), dtype=np.int64)
            many, total = [], []
            s = 0
            for phase in launch.phases:
                for plan in phase.sums:
                    extents = [sum_extent(plan, phase.domain, d) for d in dims]
                    sizes = [max(1, k * n) for k, n in extents]
                    buffer = torch.empty(sum(sizes), dtype=torch.float64, device=device)
                    self._keep.append(buffer)
                    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
                    parts[s] = buffer.data_ptr() + starts * 8
                    # a sum's totals land in a scratch array: its addresses never change
                    for t, (contributions, outputs) in enumerate(extents):
                        row = (int(parts[s, t]), contributions, outputs)
                        total_at = int(table[plan.dst, t])
                        if plan.many:
                            many += [(*row, o, total_at)
                                     for o in range(0, outputs, REDUCE_MANY[1])]
                        else:
                            total += [(*row, o, total_at) for o in range(outputs)]
                    s += 1
            self.launches.append((launch, programs, torch.from_numpy(parts).to(device),
                                  self._jobs(many), self._jobs(total)))

    def _jobs(self, rows) -> torch.Tensor | None:
        if not rows:
            return None
        return torch.tensor(rows, dtype=torch.int64).reshape(-1, 5).to(self.device)

    def holds(self, states) -> bool:
        """Whether ``states`` still hold the tensors the tables point into (a loaded
        state dict or a state written by hand puts others in; a parameter given other
        memory drops every launch: :meth:`CudaKernels._shapes`)."""
        order = self.order
        return all(map(operator.is_, [s[key] for s in states for key in order], self.held))

    def _programs(self, domain: int, dims, q: int) -> np.ndarray | None:
        """The launch table's rows of one phase: ``(tensor, b, row program, column
        block, the phase's place in the launch)``."""
        rows = []
        for t, d in enumerate(dims):
            bd = extent(domain, d)[0]
            row_programs, col_blocks = programs_per_b(domain, d)
            if not (bd and row_programs and col_blocks):
                continue
            b, rp, cb = np.meshgrid(np.arange(bd), np.arange(row_programs),
                                    np.arange(col_blocks), indexing="ij")
            rows.append(np.stack([np.full(b.size, t), b.ravel(), rp.ravel(), cb.ravel(),
                                  np.full(b.size, q)], axis=1))
        if not rows:
            return None
        return np.concatenate(rows).astype(np.int64)

    def run(self, grads, scalars: np.ndarray, scalar_rows: np.ndarray) -> None:
        """One step: the gradients' addresses and the scalars go down in one copy (a
        fresh buffer each step: the allocators keep it until the kernels have read it),
        then the phases and their reductions, in order on the current stream."""
        table = self.table
        row = table[1]
        row[:] = [g.data_ptr() for g in grads]
        if self._empty:
            row[self._empty] = 0
        aligned = self._aligned and not (row % 16).any()
        n_scalars = scalars.shape[1]
        host = torch.empty(table.size + self.count + scalars.size, dtype=torch.int64,
                           pin_memory=self.device.type == "cuda")
        view = host.numpy()
        view[:table.size] = table.ravel()
        view[table.size:table.size + self.count] = scalar_rows
        view[table.size + self.count:] = np.ascontiguousarray(scalars, np.float64).view(
            np.int64).ravel()
        device = host.to(self.device, non_blocking=True)
        arrays = device[:table.size].view(table.shape)
        rows = device[table.size:table.size + self.count]
        values = device[table.size + self.count:].view(torch.float64)
        for launch, programs, parts, many, total in self.launches:
            if programs is not None:
                getattr(self.module, launch.kernel)[(programs.shape[0],)](
                    programs, self.dims, arrays, self.count, values, rows, n_scalars, parts,
                    T=self.dtype, ALIGNED=aligned, num_warps=launch.num_warps,
                    enable_fp_fusion=False)
            if many is not None:
                self.module.reduce_many[(many.shape[0],)](
                    many, T=self.dtype, BK=REDUCE_MANY[0], BO=REDUCE_MANY[1], num_warps=8)
            if total is not None:
                self.module.reduce_total[(total.shape[0],)](
                    total, T=self.dtype, BK=REDUCE_TOTAL, num_warps=4)

class CudaKernels(Engine):
    """The engine of CUDA tensors (see the module). ``mode`` is the ``compile`` option:
    "auto" runs eagerly (warning once) what cannot run here, True refuses it when the
    optimizer is built (:meth:`require`)."""

    name = "cuda"

    def __init__(self, mode, owner: str):
        self.mode, self.owner = mode, owner
        self.programs = Programs()
        self._launches: dict = {}
        self._partitions: dict = {}
        self._triton: dict = {}
        self._refused: set = set()
        self._warned = False

    def claims(self, param, spec) -> bool:
        device = param.device.type
        return device == "cuda" or (device == "cpu" and interpreted())

    # -- what runs here --------------------------------------------------------------
    def why_not(self, param, spec, *, lr: float, step: int) -> str | None:
        """Why this parameter's update cannot run on these kernels, or None."""
        if param.dtype not in DTYPES:
            return (f"dtype {param.dtype} (the CUDA kernels run float64, float32, bfloat16 "
                    "and float16)")
        if not param.is_contiguous():
            return "the parameter is not contiguous"
        stored = DTYPES[param.dtype]
        math = math_dtype(stored)
        try:
            triton_language()
            shape = tuple(param.shape)
            code, _ = self.programs.code_and_scalars(spec, shape, math, lr, step)
            self._program(code, math, self._storage(spec, shape, stored))
        except (Untraceable, Unsupported, TritonUnavailable) as error:
            return str(error)
        return None

    def require(self, params, plans) -> None:
        """``compile=True`` promises the kernels: raise at build where a CUDA
        parameter's update cannot run on them."""
        if self.mode is not True:
            return
        for i, (p, plan) in enumerate(zip(params, plans)):
            if not self.claims(p, plan.spec):
                continue
            reason = self.why_not(p, plan.spec, lr=float(plan.spec.lr_at(0)), step=1)
            if reason:
                raise ValueError(f"{self.owner}: options compile=True, but the "
                                 f"{plan.spec.name} update of parameter {i} "
                                 f"{list(p.shape)} cannot run on the CUDA kernels: {reason} "
                                 "(compile='auto' runs such an update eagerly)")

    def _program(self, code: np.ndarray, dtype: str, storage: dict) -> TritonProgram:
        key = (code.tobytes(), dtype, tuple(sorted(storage.items())))
        program = self._triton.get(key)
        if program is None:
            if len(self._triton) >= LABELS_KEPT:
                self._triton.clear()
            program = self._triton[key] = triton_program(code, dtype, storage)
        return program

    def _storage(self, spec, shape, stored: str) -> dict[int, str]:
        """The dtype each input array is kept in: 0 the parameter stored as ``stored``, 1
        its gradient (the same dtype: a step runs a gradient of another dtype eagerly),
        then the state arrays in the program's order."""
        order = self.programs.state_order(spec, shape, math_dtype(stored))
        kept = state_storage(spec, stored)
        return {0: stored, 1: stored, **{2 + j: kept for j in range(len(order))}}

    # -- a step ------------------------------------------------------------------------
    def _shapes(self, params) -> tuple[dict, list[int], list[int]]:
        """The positions of ``params`` by (dtype, shape, device), those these kernels
        never take (another dtype or device, not contiguous), and the parameters'
        addresses: worked out once per parameter list, and again where a parameter was
        given other memory (``p.data = ...``, as ``Module.to`` or ``.half()`` do: it may
        come with another dtype, shape or device). Then every launch's tables are made
        again too (they would keep the memory the parameters left)."""
        key = tuple(map(id, params))
        addresses = [p.data_ptr() for p in params]
        found = self._partitions.get(key)
        if found is not None and found[2] != addresses:
            found = None
            self._launches.clear()
        if found is None:
            by_shape: dict = {}
            never = []
            for k, p in enumerate(params):
                dtype = DTYPES.get(p.dtype)
                if dtype is None or not p.is_contiguous() or not self.claims(p, None):
                    never.append(k)
                else:
                    by_shape.setdefault((dtype, tuple(p.shape), p.device), []).append(k)
            if len(self._partitions) >= 64:
                self._partitions.clear()
            found = self._partitions[key] = (by_shape, never, addresses)
        return found

    def run(self, batch: Batch) -> list[int]:
        by_shape, never, _ = self._shapes(batch.params)
        leftover = list(never)
        steps = batch.steps
        uniform = steps.count(steps[0]) == len(steps)
        by_code: dict = {}
        # this step's programs that serve every shape of a rank (most do: one trace per
        # rank, not per shape): (dtype, rank, step) -> (view, program, scalars)
        any_shape: dict = {}
        for (dtype, shape, device), positions in by_shape.items():
            # torch's own grads match their parameter; a gradient put there by hand may
            # not: the program is one storage layout, so such a parameter runs eagerly
            want, grads = TORCH_DTYPES[dtype], batch.grads
            odd = {k for k in positions if grads[k].dtype is not want}
            if odd:
                leftover += sorted(odd)
                positions = [k for k in positions if k not in odd]
                if not positions:
                    continue
            math = math_dtype(dtype)
            if uniform:
                sets = {steps[0]: positions}
            else:
                sets = {}
                for k in positions:
                    sets.setdefault(steps[k], []).append(k)
            for step, members in sets.items():
                if (dtype, len(shape), step, shape) in self._refused:
                    leftover += members
                    continue
                found = any_shape.get((dtype, len(shape), step))
                if found is None:
                    try:
                        view, code, scalars, shared = self.programs.program(
                            batch.spec, shape, math, batch.lr, step)
                        program = self._program(code, math,
                                                self._storage(batch.spec, view, dtype))
                    except (Untraceable, Unsupported, TritonUnavailable) as error:
                        self._refuse((dtype, len(shape), step, shape), batch, error)
                        leftover += members
                        continue
                    if shared:
                        any_shape[(dtype, len(shape), step)] = (view, program, scalars)
                else:
                    view, program, scalars = found
                by_code.setdefault((program.digest, device), (program, view, []))[2].append(
                    (members, scalars))
        written = []
        for program, view, parts in by_code.values():
            positions = [k for members, _ in parts for k in members]
            rows, row_of = _scalar_table(parts)
            written += self._launch(program, batch, positions, rows, row_of,
                                    flat=len(view) == 1).written
        if written:
            # the kernels wrote through addresses: tell autograd, as an in-place op would
            increment_version(written)
        return sorted(leftover)

    def _refuse(self, key, batch: Batch, error) -> None:
        if self.mode is True:
            raise RuntimeError(f"{self.owner}: the {batch.spec.name} update cannot run on "
                               f"the CUDA kernels at this step: {error}") from error
        self._refused.add(key)
        if not self._warned:
            self._warned = True
            import warnings

            warnings.warn(f"{self.owner}: the {batch.spec.name} update runs eagerly on this "
                          f"device ({error}); compile='auto' takes the same numbers "
                          "without the CUDA kernels", RuntimeWarning, stacklevel=4)

    def _launch(self, program: TritonProgram, batch: Batch, positions, rows, row_of, *,
                flat: bool) -> _Launch:
        """Launch ``program`` over the parameters at ``positions``; its :class:`_Launch`."""
        params = [batch.params[k] for k in positions]
        key = (program.digest, tuple(map(id, params)))
        launch = self._launches.get(key)
        states = [batch.states[k] for k in positions]
        if launch is None or not launch.holds(states):
            views = [p.view(-1) if flat and p.dim() != 1 else p for p in params]
            order = self.programs.state_order(batch.spec, tuple(views[0].shape),
                                              program.dtype)
            kept = TORCH_DTYPES[state_storage(batch.spec, DTYPES[params[0].dtype])]
            for p, view, state in zip(params, views, states):
                _own_memory(p, state, order, self.programs.state_sizes(
                    batch.spec, tuple(view.shape), program.dtype), kept)
            if len(self._launches) >= 64:
                self._launches.clear()
            launch = self._launches[key] = _Launch(program, views, states, order,
                                                   params[0].device)
        grads = [batch.grads[k] for k in positions]
        grads = [g if g.is_contiguous() else g.contiguous() for g in grads]
        if launch.device.type == "cuda":
            with torch.cuda.device(launch.device):    # Triton launches on the current one
                launch.run(grads, rows, row_of)
        else:
            launch.run(grads, rows, row_of)
        return launch


def _own_memory(p, state: dict, order, sizes: dict, dtype: torch.dtype) -> None:
    """Each state tensor contiguous, of its storage ``dtype`` and the parameter's device,
    the size the program walks, and memory of its own (the eager update may have kept a
    gradient as a state tensor): the kernels write it in place."""
    seen = {p.data_ptr()} if p.numel() else set()
    for key in order:
        array = state[key]
        if array.numel() != sizes[key]:
            raise ValueError(f"SpecOptimizer: state {key!r} of a parameter of shape "
                             f"{list(p.shape)} has shape {list(array.shape)} "
                             f"({array.numel()} elements, the spec's has {sizes[key]}): a "
                             "state_dict of another model?")
        if array.numel() and (array.data_ptr() in seen or not array.is_contiguous()
                              or array.dtype != dtype or array.device != p.device):
            array = state[key] = array.to(device=p.device, dtype=dtype).clone(
                memory_format=torch.contiguous_format)
        if array.numel():
            seen.add(array.data_ptr())


def _scalar_table(parts) -> tuple[np.ndarray, np.ndarray]:
    """The distinct scalar vectors of ``parts`` (``(positions, scalars)`` pairs) as rows,
    and each position's row, in the order of the positions."""
    rows, index, of = [], {}, []
    for members, values in parts:
        key = values.tobytes()
        if key not in index:
            index[key] = len(rows)
            rows.append(values)
        of += [index[key]] * len(members)
    table = np.zeros((len(rows), max(1, max(len(r) for r in rows))), dtype=np.float64)
    for i, r in enumerate(rows):
        table[i, :len(r)] = r
    return table, np.asarray(of, dtype=np.int64)
