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
there. Sums add in float64 and round once.

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
import os
import sys
import threading

import numpy as np
import torch

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

DTYPES = {torch.float32: "float32", torch.float64: "float64"}
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
                partial = path.with_suffix(f".{os.getpid()}.tmp")
                partial.write_text(program.source)
                partial.replace(path)
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
            buffer = torch.empty(sum(sizes), dtype=params[0].dtype, device=device)
            self._keep.append(buffer)
            starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
            table[k] = buffer.data_ptr() + starts * buffer.element_size()
        self.table = table
        self.phases = []
        for phase in program.phases:
            programs = self._programs(phase.domain, dims)
            sums = []
            parts = np.zeros((max(1, len(phase.sums)), self.count), dtype=np.int64)
            for s, plan in enumerate(phase.sums):
                extents = np.array([sum_extent(plan, phase.domain, d) for d in dims],
                                   dtype=np.int64).reshape(-1, 2)
                sizes = np.maximum(1, extents[:, 0] * extents[:, 1])
                buffer = torch.empty(int(sizes.sum()), dtype=torch.float64, device=device)
                self._keep.append(buffer)
                starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
                parts[s] = buffer.data_ptr() + starts * 8
                jobs = []
                for t, (_, outputs) in enumerate(extents):
                    step = REDUCE_MANY[1] if plan.many else 1
                    jobs += [(t, o) for o in range(0, int(outputs), step)]
                sums.append((plan, torch.tensor(jobs, dtype=torch.int64).reshape(-1, 2)
                             .to(device), torch.from_numpy(extents).to(device)))
            parts_device = torch.from_numpy(parts).to(device)
            sums = [(plan, jobs, extents, parts_device[s]) for s, (plan, jobs, extents)
                    in enumerate(sums)]
            self.phases.append((phase, programs, parts_device, sums))

    def _programs(self, domain: int, dims) -> torch.Tensor | None:
        rows = []
        for t, d in enumerate(dims):
            bd = extent(domain, d)[0]
            row_programs, col_blocks = programs_per_b(domain, d)
            if not (bd and row_programs and col_blocks):
                continue
            b, rp, cb = np.meshgrid(np.arange(bd), np.arange(row_programs),
                                    np.arange(col_blocks), indexing="ij")
            rows.append(np.stack([np.full(b.size, t), b.ravel(), rp.ravel(), cb.ravel()],
                                 axis=1))
        if not rows:
            return None
        return torch.from_numpy(np.concatenate(rows).astype(np.int64)).to(self.device)

    def run(self, grads, scalars: np.ndarray, scalar_rows: np.ndarray) -> None:
        """One step: the gradients' addresses and the scalars go down in one copy (a
        fresh buffer each step: the allocators keep it until the kernels have read it),
        then the phases and their reductions, in order on the current stream."""
        table = self.table
        table[1] = _addresses(grads)
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
        for phase, programs, parts, sums in self.phases:
            br, bc, iters = phase.block
            if programs is not None:
                getattr(self.module, phase.kernel)[(programs.shape[0],)](
                    programs, self.dims, arrays, self.count, values, rows, n_scalars, parts,
                    T=self.dtype, BR=br, BC=bc, ITERS=iters, num_warps=4,
                    enable_fp_fusion=False)
            for plan, jobs, extents, part_row in sums:
                if not jobs.shape[0]:
                    continue
                if plan.many:
                    self.module.reduce_many[(jobs.shape[0],)](
                        jobs, part_row, extents, arrays[plan.dst], T=self.dtype,
                        BK=REDUCE_MANY[0], BO=REDUCE_MANY[1], num_warps=8)
                else:
                    self.module.reduce_total[(jobs.shape[0],)](
                        jobs, part_row, extents, arrays[plan.dst], T=self.dtype,
                        BK=REDUCE_TOTAL, num_warps=4)


class CudaKernels(Engine):
    """The engine of CUDA tensors (see the module). ``mode`` is the ``compile`` option:
    "auto" runs eagerly (warning once) what cannot run here, True refuses it when the
    optimizer is built (:meth:`require`)."""

    name = "cuda"

    def __init__(self, mode, owner: str):
        self.mode, self.owner = mode, owner
        self.programs = Programs()
        self._launches: dict = {}
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
            return f"dtype {param.dtype} (the CUDA kernels run float32 and float64)"
        if not param.is_contiguous():
            return "the parameter is not contiguous"
        try:
            triton_language()
            code, _ = self.programs.code_and_scalars(spec, tuple(param.shape),
                                                     DTYPES[param.dtype], lr, step)
            self._program(code, DTYPES[param.dtype])
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

    def _program(self, code: np.ndarray, dtype: str) -> TritonProgram:
        key = (code.tobytes(), dtype)
        program = self._triton.get(key)
        if program is None:
            if len(self._triton) >= LABELS_KEPT:
                self._triton.clear()
            program = self._triton[key] = triton_program(code, dtype)
        return program

    # -- a step ------------------------------------------------------------------------
    def run(self, batch: Batch) -> list[int]:
        leftover = []
        sets: dict = {}
        for k, (p, grad, step) in enumerate(zip(batch.params, batch.grads, batch.steps)):
            dtype = DTYPES.get(p.dtype)
            key = (dtype, p.dim(), step, tuple(p.shape))
            if dtype is None or not p.is_contiguous() or key in self._refused:
                leftover.append(k)
                continue
            sets.setdefault(key, []).append(k)
        by_code: dict = {}
        for (dtype, _, step, shape), positions in sets.items():
            try:
                code, scalars = self.programs.code_and_scalars(batch.spec, shape, dtype,
                                                               batch.lr, step)
                program = self._program(code, dtype)
            except (Untraceable, Unsupported, TritonUnavailable) as error:
                self._refuse((dtype, len(shape), step, shape), batch, error)
                leftover += positions
                continue
            entry = by_code.setdefault(program.digest, (program, [], []))
            entry[1].extend(positions)
            entry[2].extend([scalars] * len(positions))
        for program, positions, scalars in by_code.values():
            self._launch(program, batch, positions, scalars)
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

    def _launch(self, program: TritonProgram, batch: Batch, positions, scalars) -> None:
        params = [batch.params[k] for k in positions]
        states = [batch.states[k] for k in positions]
        order = self.programs.state_order(batch.spec, tuple(params[0].shape), program.dtype)
        key = (program.digest, tuple(id(p) for p in params),
               tuple(state[name].data_ptr() for state in states for name in order))
        launch = self._launches.get(key)
        if launch is None:
            for p, state in zip(params, states):
                _own_memory(p, state, order, self.programs.state_sizes(
                    batch.spec, tuple(p.shape), program.dtype))
            if len(self._launches) >= 64:
                self._launches.clear()
            key = key[:2] + (tuple(state[name].data_ptr() for state in states
                                   for name in order),)
            launch = self._launches[key] = _Launch(program, params, states, order,
                                                   params[0].device)
        grads = [batch.grads[k] for k in positions]
        grads = [g if g.is_contiguous() else g.contiguous() for g in grads]
        rows, scalar_rows = _scalar_table(scalars)
        launch.run(grads, rows, scalar_rows)


def _own_memory(p, state: dict, order, sizes: dict) -> None:
    """Each state tensor contiguous, of the parameter's dtype and device, the size the
    program walks, and memory of its own (the eager update may have kept a gradient as a
    state tensor): the kernels write it in place."""
    seen = {p.data_ptr()} if p.numel() else set()
    for key in order:
        array = state[key]
        if array.numel() != sizes[key]:
            raise ValueError(f"SpecOptimizer: state {key!r} of a parameter of shape "
                             f"{list(p.shape)} has shape {list(array.shape)} "
                             f"({array.numel()} elements, the spec's has {sizes[key]}): a "
                             "state_dict of another model?")
        if array.numel() and (array.data_ptr() in seen or not array.is_contiguous()
                              or array.dtype != p.dtype or array.device != p.device):
            array = state[key] = array.to(device=p.device, dtype=p.dtype).clone(
                memory_format=torch.contiguous_format)
        if array.numel():
            seen.add(array.data_ptr())


def _scalar_table(scalars: list) -> tuple[np.ndarray, np.ndarray]:
    """Distinct scalar vectors as rows, and each tensor's row."""
    rows, index, of = [], {}, []
    for values in scalars:
        key = values.tobytes()
        if key not in index:
            index[key] = len(rows)
            rows.append(values)
        of.append(index[key])
    width = max(1, max(len(r) for r in rows))
    table = np.zeros((len(rows), width), dtype=np.float64)
    for i, r in enumerate(rows):
        table[i, :len(r)] = r
    return table, np.asarray(of, dtype=np.int64)
