"""Running specs' updates on the kernel VM: what a backend's own optimizer calls.

A backend hands :meth:`KernelRunner.step` one :class:`Job` per parameter: the spec of
that parameter at this step, the lr and 1-based step, the shape and dtype, and the
addresses of its contiguous arrays (parameter, gradient, then the state arrays in
:meth:`KernelRunner.state_order`). The runner traces the update (once per distinct spec,
number of dimensions and dtype in a step; per shape where the update reads the size),
turns each new program structure into VM code (cached for the runner's life), and runs
the jobs; the arrays are updated in place. Nothing here imports a framework.

Generated kernels (:mod:`.codegen`) give the VM's bits faster; ``specialize`` says when a
program gets one:

* ``"auto"``: a program run on a parameter of at least :data:`SPECIALIZE_MIN` elements
  is compiled in a background thread (about 1 to 4 s, once per machine: the library is
  cached); the VM runs it until the kernel is loaded. The numbers are the same either
  way, so neither the step at which it switches nor the rank matters.
* ``True``: every program is compiled before its first step (blocking).
* ``False``: the VM only.

:meth:`KernelRunner.plan` says up front whether a parameter can run here (its update
traces: :class:`~.trace.Untraceable` otherwise; float32 or float64).

Threads: a step runs its parallel phases on the framework's thread setting
(:meth:`KernelPath.threads`, which a backend reads at every step), handed to the VM and to
every loaded kernel by :func:`set_threads`; their threads sleep between loops
(``phases.h``'s pool). A kernel compiled in the background runs its compiler at the
lowest CPU priority (:func:`.build.lowest_priority_command`).
"""

from __future__ import annotations

import ctypes
import math
import threading
import warnings
from dataclasses import dataclass, field

import numpy as np

from ..ops import numpy_ops
from . import build
from .bytecode import (
    DTYPES,
    OPCODES,
    OPERAND_KINDS,
    compile_program,
    decode,
    encode,
    schedule,
    segments,
)
from .codegen import kernel_source
from .trace import (
    B,
    C,
    R,
    Untraceable,
    axis_labels,
    canonical_dims,
    state_masks,
    trace_update,
)

#: elements from which "auto" compiles a parameter's program into a kernel of its own
SPECIALIZE_MIN = 1 << 16

# generated kernels of this process, by VM code (shared by every runner; registered with
# the VM, which runs a program's kernel when it has one)
_kernels: dict[bytes, object] = {}
_compiling: set[bytes] = set()
_lock = threading.Lock()
#: the thread count last handed to the VM and every kernel (0: phases.h's default)
_threads = 0


@dataclass(frozen=True)
class Segmented:
    """A program with matrix phases (``Ops.matrix_function``: Muon's iteration) as the
    runner runs it: its :func:`.bytecode.segments`, each as VM code (None: no phases) with
    the matrix calls the host runs after it, and the masks of the arrays that cross
    between them (kept for the step, handed to every segment after the program's own
    arrays)."""

    codes: tuple                   # per segment: VM code or None
    calls: tuple                   # per segment: ((function, arguments, operand, result), ...)
    crossing: tuple[int, ...]      # the crossing arrays' masks
    key: bytes

    @classmethod
    def of(cls, program, keep_costly: bool) -> "Segmented":
        plan = schedule(program, keep_costly, tiles=False)
        parts, crossing = segments(plan, tiles=keep_costly)
        codes = tuple(None if part.plan is None else encode(part.plan) for part in parts)
        calls = tuple(tuple((*plan.matrix_calls[ins.aux], ins.a, ins.dst)
                            for ins in part.calls) for part in parts)
        masks = tuple(plan.masks[k] for k in crossing)
        key = b"segmented" + b"".join(b"|" + (b"" if c is None else c.tobytes()) for c in codes)
        return cls(codes, calls, masks, key + repr(calls).encode())


def elements(mask: int, dims) -> int:
    """The number of elements of an array spanning the axes ``mask`` of a parameter of
    canonical ``dims`` (B, R, C): ``numbers.h``'s ``Dims::size``."""
    n = 1
    for axis, size in zip((B, R, C), dims):
        if mask & axis:
            n *= int(size)
    return n


def _key(code) -> bytes:
    return code.key if isinstance(code, Segmented) else code.tobytes()


@dataclass(frozen=True)
class Prepared:
    """What one parameter's job needs at one step, worked out once per spec, shape,
    dtype, lr and step (:meth:`Programs.prepared`): a step over many tensors of few
    shapes (a ResNet's 62) pays the Python for each shape, not for each tensor."""

    order: tuple[str, ...]     # the state arrays after the parameter and the gradient
    sizes: dict                # each state array's element count
    shape: tuple[int, ...]     # the shape the kernels see (1-D where the update runs flat)
    code: "np.ndarray | Segmented"     # VM code, or a program with matrix phases
    key: bytes                 # ``code.tobytes()`` (or its key): the program's identity
    scalars: np.ndarray
    dims: np.ndarray           # canonical_dims(shape) as the VM reads them
    numel: int
    #: id(VM code) -> (its address, its size, dims' and scalars' addresses): numpy's
    #: ``.ctypes.data`` costs a microsecond, paid once per shape and step, not per tensor
    pointers: dict = field(default_factory=dict, repr=False, compare=False)


@dataclass
class Job:
    spec: object
    shape: tuple[int, ...]
    dtype: str                 # "float32" or "float64"
    lr: float
    step: int                  # 1-based
    addresses: list[int]       # parameter, gradient, state arrays (state_order)
    #: what the backend already looked up for this job (None: looked up here)
    prepared: Prepared | None = None


#: state layouts a runner keeps (one per spec, rank and dtype)
LABELS_KEPT = 1024
#: sets of crossing arrays a runner keeps (one per segmented program, shape and dtype)
CROSSING_KEPT = 64


class Programs:
    """Traced updates as VM code, cached: what every kernel path (the VM here, the CUDA
    kernels of ``backends/torch/cuda.py``) asks for a parameter's step. Framework-free.
    ``keep_costly``: :func:`.bytecode.schedule`'s (the CPU runner's programs keep a full
    value a later phase would compute again with divisions and square roots)."""

    keep_costly = False
    #: whether this runner runs matrix phases (the host's matrix calls between segments:
    #: :class:`Segmented`); a program with one is :class:`Untraceable` elsewhere
    matrix_phases = False

    def __init__(self):
        self._labels: dict = {}
        self._codes: dict = {}
        self._traces: dict = {}
        self._traced_step = None
        #: VM code -> whether it is its 1-D trace's code with the axes read as one
        self._flat: dict = {}
        #: (id(spec), rank, dtype, lr, step) -> (spec, flat code, flat scalars, shape_read)
        self._memo: dict = {}
        #: (id(spec), dtype) -> (spec, whether its last 1-D trace was rank-blind)
        self._blind: dict = {}
        #: (id(spec), shape, dtype, lr, step) -> (spec, Prepared)
        self._prepared: dict = {}
        #: (id(spec), shape, dtype) -> (spec, state order, state sizes, element count)
        self._fixed: dict = {}
        #: a kernel shape -> its canonical dims as the VM reads them
        self._dims: dict = {}

    def prepared(self, spec, shape: tuple[int, ...], dtype: str, lr: float,
                 step: int) -> Prepared:
        """A parameter's :class:`Prepared` job at this step; :class:`Untraceable` where
        its update cannot run here (as :meth:`plan`)."""
        key = (id(spec), shape, dtype, lr, step)
        found = self._prepared.get(key)
        if found is not None and found[0] is spec:
            return found[1]
        # what does not change with lr and step, kept across steps
        fixed = self._fixed.get(key[:3])
        if fixed is None or fixed[0] is not spec:
            self.plan(spec, shape, dtype, lr=lr, step=step)
            fixed = (spec, self.state_order(spec, shape, dtype),
                     self.state_sizes(spec, shape, dtype), math.prod(shape))
            if len(self._fixed) >= LABELS_KEPT:
                self._fixed.clear()
            self._fixed[key[:3]] = fixed
        kernel_shape, code, scalars, _ = self.program(spec, shape, dtype, lr, step)
        dims = self._dims.get(kernel_shape)
        if dims is None:
            dims = self._dims[kernel_shape] = np.asarray(canonical_dims(kernel_shape),
                                                         dtype=np.int64)
            if len(self._dims) >= LABELS_KEPT:
                self._dims.clear()
        made = Prepared(fixed[1], fixed[2], kernel_shape, code, _key(code), scalars,
                        dims, fixed[3])
        if len(self._prepared) >= LABELS_KEPT:      # lr and step change every step
            self._prepared.clear()
        self._prepared[key] = (spec, made)
        return made

    def state_order(self, spec, shape, dtype: str) -> tuple[str, ...]:
        """The order of the state arrays after the parameter and the gradient."""
        return tuple(self.state_labels(spec, shape, dtype))

    def state_labels(self, spec, shape, dtype):
        key = (spec, len(shape), dtype)
        if key not in self._labels:
            if len(self._labels) >= LABELS_KEPT:   # a knob schedule: a new spec each step
                self._labels.clear()
            self._labels[key] = state_masks(spec, shape, dtype)
        return self._labels[key]

    def states_flatten(self, spec, ndim: int, dtype: str) -> bool:
        """Whether each state array of a parameter of ``ndim`` dimensions is, key by key
        as for a 1-D parameter, either the whole parameter or 0-d: then the parameter and
        its state read as 1-D are a 1-D parameter's (see :attr:`.trace.Trace.rank_blind`)."""
        mine = self.state_labels(spec, (1,) * ndim, dtype)
        flat = self.state_labels(spec, (1,), dtype)
        whole = axis_labels(ndim)
        return mine.keys() == flat.keys() and all(
            flat[key] in ((C,), ()) and mine[key] in (whole, ())
            and (ndim == 0 or (mine[key] == whole) == (flat[key] == (C,)))
            for key in mine)

    def state_sizes(self, spec, shape, dtype: str) -> dict[str, int]:
        """The number of elements of each state array (the kernels walk them by the
        parameter's dims)."""
        dims = canonical_dims(shape)
        sizes = {}
        for key, labels in self.state_labels(spec, shape, dtype).items():
            mask = 0
            for label in labels:
                mask |= label
            sizes[key] = elements(mask, dims)
        return sizes

    def plan(self, spec, shape, dtype: str, *, lr: float, step: int) -> None:
        """Raise :class:`Untraceable` when this parameter's update cannot run here."""
        if dtype not in DTYPES:
            raise Untraceable(f"dtype {dtype} (the VM runs float32 and float64)")
        self.code_and_scalars(spec, tuple(shape), dtype, lr, step)

    def code_and_scalars(self, spec, shape, dtype, lr, step):
        """The VM code of the update at this step and its scalar slots' values."""
        trace, code = self.traced(spec, shape, dtype, lr, step)
        return code, trace.scalars

    def traced(self, spec, shape, dtype, lr, step):
        """``(trace, VM code)`` of the update at this step (see :class:`.trace.Trace`)."""
        if self._traced_step != (lr, step):
            self._traces.clear()
            self._traced_step = (lr, step)
        key = (spec, len(shape), dtype)
        found = self._traces.get(key)
        if found is not None and found[0].shape_read:     # its scalars belong to one size
            found = self._traces.get((key, shape))
        if found is None:
            trace = trace_update(spec, shape, dtype, self.state_labels(spec, shape, dtype),
                                 lr=lr, step=step)
            if trace.program.matrix_calls and not self.matrix_phases:
                raise Untraceable("ops.matrix_function (matrix products: the CPU kernels "
                                  "run them on the host between their phases)")
            code = self._codes.get(trace.program.key)
            if code is None:
                code = self._codes[trace.program.key] = (
                    Segmented.of(trace.program, self.keep_costly)
                    if trace.program.matrix_calls else
                    compile_program(trace.program, keep_costly=self.keep_costly))
            found = self._traces[key] = (trace, code)
            if trace.shape_read:
                self._traces[(key, shape)] = found
        return found

    def program(self, spec, shape, dtype, lr, step):
        """``(the shape the kernels see, VM code, scalars, whether they serve every shape
        of this rank)`` of a parameter's update at this step.

        A program that is elementwise but for whole-tensor sums (Adam, Lion, Lamb's and
        LARS's norms) runs every tensor as 1-D: its walk then does not depend on the
        tensor's last axis (a conv weight of shape (512, 512, 3, 3) walks as one
        2,359,296-element row, in chunks of the kernels' width, not in 786,432 rows of
        3), and tensors of every rank share one program. Checked, not assumed: the 1-D
        trace must be the same program with the tensor's axes read as one
        (:func:`flattens`), and the update must not read the tensor's size. Worked out
        once per spec, rank, dtype and step. An update that reduces over chosen axes
        (Adafactor's and CAME's factored moments) keeps the tensor's shape; its phases
        walk several short rows per chunk (``phases.h``), so a conv weight's rows of 3
        do not cost a chunk each, with the same bits as one row per chunk.

        Where the 1-D trace of this step is rank-blind (:attr:`.trace.Trace.rank_blind`:
        the update's Python never looked at the axes) and the state arrays are whole or
        0-d as for a 1-D parameter, the parameter's own trace would be that one with its
        axes read as one: a step then traces once for every rank."""
        shape = tuple(shape)
        memo_key = (id(spec), len(shape), dtype, lr, step)
        memo = self._memo.get(memo_key)
        if memo is not None and memo[0] is spec:
            if memo[1] is not None:                       # the rank's shared flat program
                return (math.prod(shape),), memo[1], memo[2], True
            if not memo[3]:
                code, scalars = self.code_and_scalars(spec, shape, dtype, lr, step)
                return shape, code, scalars, True
        if len(self._memo) >= LABELS_KEPT:
            self._memo.clear()
        # a spec that does not update 1-D parameters (Muon's matrices) has no flat trace
        if len(shape) != 1 and spec.updates_shape((math.prod(shape),)):
            blind = self._blind.get((id(spec), dtype))
            if blind is None or blind[0] is not spec or blind[1]:
                numel = math.prod(shape)
                flat_trace, flat_code = self.traced(spec, (numel,), dtype, lr, step)
                if len(self._blind) >= LABELS_KEPT:
                    self._blind.clear()
                self._blind[(id(spec), dtype)] = (spec, flat_trace.rank_blind)
                if flat_trace.rank_blind and self.states_flatten(spec, len(shape), dtype):
                    self._memo[memo_key] = (spec, flat_code, flat_trace.scalars, False)
                    return (numel,), flat_code, flat_trace.scalars, True
        trace, code = self.traced(spec, shape, dtype, lr, step)
        flat = None
        if len(shape) != 1 and not trace.shape_read and not isinstance(code, Segmented) \
                and spec.updates_shape((math.prod(shape),)):
            numel = math.prod(shape)
            flat_trace, flat_code = self.traced(spec, (numel,), dtype, lr, step)
            key = code.tobytes()
            if key not in self._flat:
                if len(self._flat) >= LABELS_KEPT:
                    self._flat.clear()
                self._flat[key] = (not flat_trace.shape_read
                                   and flattens(code, flat_code, len(shape))
                                   and np.array_equal(trace.scalars, flat_trace.scalars))
            if self._flat[key]:
                flat = (flat_code, flat_trace.scalars)
        self._memo[memo_key] = (spec, *(flat or (None, None)), trace.shape_read)
        if flat is not None:
            return (math.prod(shape),), flat[0], flat[1], True
        return shape, code, trace.scalars, not trace.shape_read


class KernelRunner(Programs):
    """Traces, compiles to VM code and runs parameters' updates (see the module)."""

    keep_costly = True
    matrix_phases = True

    def __init__(self, specialize="auto"):
        if specialize not in ("auto", True, False):
            raise ValueError(f"KernelRunner: specialize must be 'auto', True or False, got "
                             f"{specialize!r}")
        super().__init__()
        self.library = build.load()
        self.specialize = specialize
        self._crossing_kept: dict = {}

    def step(self, jobs: list[Job], threads: int = 0, matrix=None) -> None:
        """Run every job's update in place (in order) on ``threads`` threads (the
        framework's setting, :meth:`KernelPath.threads`; 0: ``OMP_NUM_THREADS``, else the
        CPU count). Every program is made (and, with ``specialize=True``, compiled)
        before the first job runs: a failure changes nothing. ``matrix(function, x,
        arguments, out)`` runs a matrix call on the host (:meth:`KernelPath.matrix_function`:
        the framework's operations over ``x``, a numpy array of the parameter's shape,
        into ``out``, one of the same shape); default numpy's."""
        if isinstance(threads, bool) or not isinstance(threads, int):
            raise TypeError(f"KernelRunner.step: threads must be an int, got {threads!r}")
        if threads < 0:
            raise ValueError(f"KernelRunner.step: threads must be >= 0, got {threads}")
        set_threads(self.library, threads)
        prepared = [job.prepared or self.prepared(job.spec, tuple(job.shape), job.dtype,
                                                  job.lr, job.step) for job in jobs]
        for job, made in zip(jobs, prepared):
            if isinstance(made.code, Segmented):
                for code in made.code.codes:
                    if code is not None:
                        self.specialized(code, made.numel, job.spec.name)
            else:
                self.specialized(made.code, made.numel, job.spec.name, made.key)
        for job, made in zip(jobs, prepared):
            if isinstance(made.code, Segmented):
                self._run_segmented(job, made, matrix or numpy_matrix_function)
            else:
                self._run(job, made, made.code, job.addresses)

    def _run(self, job: Job, made: Prepared, code: np.ndarray, addresses) -> None:
        if isinstance(addresses, list):
            addresses = (ctypes.c_void_p * len(addresses))(*addresses)
        pointers = made.pointers.get(id(code))
        if pointers is None:
            pointers = made.pointers[id(code)] = (code.ctypes.data, code.size,
                                                  made.dims.ctypes.data,
                                                  made.scalars.ctypes.data)
        status = self.library.uo_vm_run(DTYPES[job.dtype], pointers[0], pointers[1],
                                        addresses, pointers[2], pointers[3])
        if status:
            raise RuntimeError(f"the kernel VM rejected the code of {job.spec.name} "
                               f"(status {status})")

    def _run_segmented(self, job: Job, made: Prepared, matrix) -> None:
        """A program with matrix phases: its segments in order, each followed by its
        matrix calls on the host, over the crossing arrays (:meth:`_crossing`)."""
        plan = made.code
        crossing = self._crossing(plan, made, job.dtype)
        addresses = [*job.addresses, *(a.ctypes.data for a in crossing)]
        addresses = (ctypes.c_void_p * len(addresses))(*addresses)
        for code, calls in zip(plan.codes, plan.calls):
            if code is not None:
                self._run(job, made, code, addresses)
            for function, arguments, operand, result in calls:
                matrix(function, crossing[operand].reshape(job.shape), arguments,
                       crossing[result].reshape(job.shape))

    def _crossing(self, plan: Segmented, made: Prepared, dtype: str) -> list[np.ndarray]:
        """The crossing arrays of a segmented program for a parameter of ``made``'s shape,
        kept from one step to the next (per program, shape and dtype: the parameters of
        one shape share them, as their jobs run one after the other), so that a step
        does not fault fresh pages in for them."""
        key = (made.key, made.shape, dtype)
        found = self._crossing_kept.get(key)
        if found is None:
            found = [np.empty(elements(mask, made.dims), dtype=dtype) for mask in plan.crossing]
            if len(self._crossing_kept) >= CROSSING_KEPT:
                self._crossing_kept.clear()
            self._crossing_kept[key] = found
        return found

    def specialized(self, code: np.ndarray, numel: int, name: str,
                    key: bytes | None = None) -> None:
        """See that ``code`` (``key``: its bytes) gets its generated kernel as
        ``specialize`` says (the VM runs it from the moment it is registered)."""
        if key is None:
            key = code.tobytes()
        if key in _kernels or self.specialize is False:
            return
        if self.specialize is True:
            _register(self.library, key, code)
        elif numel >= SPECIALIZE_MIN:
            with _lock:
                start = key not in _compiling
                _compiling.add(key)
            if start:
                threading.Thread(target=_compile, args=(self.library, key, code.copy(), name),
                                 daemon=True, name="unified_opt kernel").start()


class KernelPath:
    """One own optimizer's use of the kernels, whatever the framework: the runner made
    on first use (``mode`` is the ``compile`` option: "auto" warns once and returns None
    where the VM cannot be built, True raises), and which updates do not trace (then the
    backend runs them eagerly)."""

    def __init__(self, mode, owner: str):
        self.mode, self.owner = mode, owner
        self._runner: KernelRunner | None = None
        self._unavailable = False
        self._untraceable: set = set()

    def runner(self) -> KernelRunner | None:
        if self._runner is None and not self._unavailable:
            try:
                self._runner = KernelRunner(specialize=self.mode)
            except build.KernelUnavailable as error:
                if self.mode is True:
                    raise
                self._unavailable = True
                warnings.warn(f"{self.owner}: compile='auto' found no kernel VM ({error}); "
                              "the update runs eagerly, the same numbers", RuntimeWarning,
                              stacklevel=4)
        return self._runner

    @classmethod
    def for_optimizer(cls, mode, owner: str, *, exchanges: bool):
        """An own optimizer's kernel path for its ``compile`` option ``mode``, or None
        where its updates run eagerly: ``False``, another backend's mode ("inductor"),
        and a data-parallel spec exchanging between ranks (its collectives sit between
        the update's halves), which ``True`` refuses."""
        if mode not in ("auto", True):
            return None
        if exchanges:
            if mode is True:
                raise ValueError(f"{owner}: options compile=True, but a data-parallel spec "
                                 "exchanging between ranks runs eagerly (its collectives "
                                 "sit between the update's halves); use compile='auto'")
            return None
        return cls(mode, owner)

    def require(self, parameters) -> None:
        """At the optimizer's build: the VM is loaded (built first where this machine's
        cache has none: seconds, once per machine), so that no training step waits for
        it. ``compile=True`` promises the kernels: raise, before any step, where a
        parameter's update cannot run on them (``"auto"`` runs it eagerly instead).
        ``parameters``: ``(name, spec, shape, dtype, why_not)``, ``why_not`` the backend's
        reason its tensors cannot be handed to the VM (device, layout) or ""."""
        parameters = list(parameters)
        if self.mode is not True:
            if any(not row[-1] for row in parameters):
                self.runner()                        # "auto": warns where it cannot
            return
        runner = self.runner()                       # KernelUnavailable: no VM here
        for name, spec, shape, dtype, why_not in parameters:
            if not why_not:
                try:
                    runner.plan(spec, tuple(shape), dtype, lr=float(spec.lr_at(0)), step=1)
                except Untraceable as error:
                    why_not = str(error)
            if why_not:
                raise ValueError(f"{self.owner}: options compile=True, but the {spec.name} "
                                 f"update of {name} cannot run on the kernels: {why_not} "
                                 "(compile='auto' runs such an update eagerly)")

    def prepared(self, spec, shape: tuple[int, ...], dtype: str, *, lr: float,
                 step: int) -> Prepared | None:
        """A parameter's :class:`Prepared` job at this step, or None when its update runs
        eagerly (no VM, a dtype it does not take, an update that does not trace)."""
        runner = self.runner()
        if runner is None:
            return None
        key = (spec, len(shape), dtype)
        if self._untraceable and key in self._untraceable:
            return None
        try:
            return runner.prepared(spec, shape, dtype, lr, step)
        except Untraceable:
            if len(self._untraceable) >= LABELS_KEPT:
                self._untraceable.clear()
            self._untraceable.add(key)
            return None

    def threads(self) -> int:
        """The framework's thread setting, which the kernels' parallel phases follow
        (a backend's subclass reads it; 0 here: ``OMP_NUM_THREADS``, else the CPU
        count)."""
        return 0

    def matrix_function(self, function, x: np.ndarray, arguments: tuple,
                        out: np.ndarray) -> None:
        """A matrix call of a program (``Ops.matrix_function``: Muon's iteration) run on
        the host over ``x`` (a numpy array of the parameter's shape) into ``out``, in the
        framework's operations (a backend's subclass; here numpy's)."""
        numpy_matrix_function(function, x, arguments, out)

    def run(self, jobs: list[Job]) -> None:
        self._runner.step(jobs, threads=self.threads(), matrix=self.matrix_function)


def numpy_matrix_function(function, x: np.ndarray, arguments: tuple, out: np.ndarray) -> None:
    """A matrix call in numpy's operations (:meth:`KernelPath.matrix_function`)."""
    out[...] = function(x, *arguments, ops=numpy_ops)


def set_threads(library, threads: int) -> None:
    """Hand ``threads`` to the VM ``library`` and to every loaded kernel (each library
    keeps its own count; phases.h), where it changed."""
    global _threads
    with _lock:
        if threads == _threads:
            return
        _threads = threads
        library.uo_vm_set_threads(threads)
        for kernel in _kernels.values():
            kernel.uo_kernel_set_threads(threads)


def threads_in_use(library) -> int:
    """The threads the VM ``library``'s parallel phases run on now."""
    return library.uo_vm_threads()


def _register(library, key: bytes, code: np.ndarray, background: bool = False) -> None:
    """Compile (at the lowest CPU priority where ``background``: the VM runs the program
    meanwhile, and the compiler must not take the step's cores), load and register the
    kernel of ``code``."""
    kernel = build.load_kernel(kernel_source(code), lowest_priority=background)
    with _lock:          # the count set_threads hands every kernel, this one included
        kernel.uo_kernel_set_threads(_threads)
        _kernels[key] = kernel        # kept loaded: the VM calls into it
    library.uo_vm_register(code.ctypes.data, code.size,
                           ctypes.cast(kernel.uo_kernel_run, ctypes.c_void_p).value)


def _compile(library, key: bytes, code: np.ndarray, name: str) -> None:
    try:
        _register(library, key, code, background=True)
    except build.KernelUnavailable as error:
        warnings.warn(f"unified_opt: the {name} update stays on the kernel VM (the same "
                      f"numbers, slower): {error}", RuntimeWarning, stacklevel=1)


def flattens(code: np.ndarray, flat_code: np.ndarray, ndim: int) -> bool:
    """Whether VM ``code`` of a parameter of ``ndim`` dimensions is ``flat_code`` (the same
    update traced on the parameter seen as 1-D) with every full mask read as the 1-D one:
    no array, phase or sum of ``code`` spans part of the parameter's axes."""
    full = {0: 0, 1: C, 2: R | C}.get(ndim, B | R | C)

    def normalized(decoded, whole):
        def axes(mask):
            return "all" if mask == whole else ("none" if mask == 0 else None)

        masks = [axes(m) for m in decoded.masks]
        phases = []
        for domain, instructions in decoded.phases:
            body = []
            for ins in instructions:
                ins = list(ins)
                if ins[0] == OPCODES["sum"]:
                    ins[2] = axes(ins[2])
                for kind, value in ((3, 4), (5, 6), (7, 8)):
                    if ins[kind] == OPERAND_KINDS["count"]:
                        ins[value] = axes(ins[value])
                body.append(tuple(ins))
            phases.append((axes(domain), tuple(body)))
        return decoded.n_inputs, tuple(masks), tuple(phases)

    mine = normalized(decode(code), full)
    if None in mine[1] or any(d is None for d, _ in mine[2]) or any(
            None in ins for _, body in mine[2] for ins in body):
        return False
    return mine == normalized(decode(flat_code), C)


def run_numpy(runner: KernelRunner, spec, param: np.ndarray, grad: np.ndarray, state: dict,
              *, lr: float, step: int) -> None:
    """One step on numpy arrays, in place (C-contiguous, float32 or float64): what the
    tests compare with the numpy update."""
    dtype = str(param.dtype)
    arrays = {"param": param, "grad": grad}
    arrays.update((k, state[k]) for k in runner.state_order(spec, param.shape, dtype))
    for name, a in arrays.items():
        if not a.flags.c_contiguous or a.dtype != param.dtype:
            raise ValueError(f"run_numpy: {name} is {a.dtype}"
                             f"{'' if a.flags.c_contiguous else ', not C-contiguous'}; the "
                             f"arrays must be C-contiguous {param.dtype}")
    arrays = list(arrays.values())
    runner.step([Job(spec, param.shape, dtype, lr, step, [a.ctypes.data for a in arrays])])
