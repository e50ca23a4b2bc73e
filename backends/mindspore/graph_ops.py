r"""The own optimizer's update as MindSpore operations in ``construct``: the graph form
``options={"graph": "ops"}``, which MindSpore's graph compiler compiles for whatever
device it targets (CPU, GPU, Ascend), as it compiles ``nn.AdamWeightDecay``.

Nothing here is written per algorithm. Each parameter's ``spec.update`` is traced once,
at build, into the library's program (:mod:`unified_opt.kernels.trace`: the nodes of
the elementwise operations, sums and stores the update makes), the program is scheduled
into the :class:`~unified_opt.kernels.bytecode.KernelPlan` the VM and the C++ and Triton
kernels run, and the plan is written out as a Python function of MindSpore operations
(:mod:`.plan_source`; generated source, in the kernel cache, imported as a module so
that MindSpore's parser can read it). The
parameters that share a program, a shape and scalars are mapped by one ``ops.HyperMap``
over ``ops.partial(program, scalars)``, as MindFormers' CAME and ``nn.AdamWeightDecay``
map theirs.

The scalars
-----------
A program's scalar slots (the lr, ``1 - beta^t``, ``1 - t^-0.8``, ...) are what Python
computes from the step and the lr in double precision before they meet a tensor. Here
no Python runs per step, so the trace is made with a *symbolic* step and lr
(:class:`Sym`): every slot is recorded as an expression of them, and the graph computes
each expression in float64 operations from ``global_step`` and the step's lr, then
rounds it once to float32, as the kernel VM and the eager path round the Python double.
``math.sqrt`` and its kin in the algorithm modules take a :class:`Sym` while the trace
runs (:func:`_symbolic_math`). Measured on the CPU (MindSpore 2.10), these float64
operations give Python's values bit for bit, ``pow`` included.

The step's lr (:class:`LrSource`):

* a constant spec lr: the ``learning_rate`` Parameter, followed when something outside
  writes it (as the PyNative path does), else the spec's lr in double precision;
* a scheduled lr with ``options={"total_steps": N}``, or on a device other than the CPU:
  the per-step table ``[s(0), ..., s(N-1)]`` in float64, read at ``global_step`` (the
  form MindSpore's own optimizers take a per-step lr list in; past step N MindSpore's
  Gather raises its range error);
* a scheduled lr on the CPU without ``total_steps``: one ``ops.Custom`` pyfunc operator
  computes ``s(t)`` in Python at every step, with no step limit (MindSpore runs a pyfunc
  operator on the CPU only).

Decisions
---------
Where the update's Python decides on the step or the lr (AdamW's ``wd * lr != 0``,
SGD's first step, RAdam's rectification, Adafactor's ``min(lr, t^-1/2)``), ``Sym``
records the comparison and its outcome. :func:`symbolic_paths` traces the update again
with each decision taken the other way (depth first, as concolic testing explores a
program), at most :data:`MAX_PATHS` paths; paths that compute the same are one. In the
graph, paths that share a program differ only in their scalars, which ``ops.where``
chooses by the paths' conditions (float64 comparisons); different programs are the
branches of a tensor ``if``. :func:`check_paths` then holds every path against the
ordinary trace at :data:`CHECK_STEPS` (with three lrs): exactly one path's condition
holds, and its program and scalars (rounded to float32) are the trace's.

What it refuses (:attr:`OpsGraph.refusal`, raised when the graph compiles): an update
that reads the step or the lr as a plain number (``int()``, an index, ``//``: DGC's
sparsity ramp) or selects a top-k (DGC: MindSpore's sort keeps no order among ties),
one that does not trace, a hyperparameter schedule other than the lr
(``spec.varies_per_step()``: the spec changes every step), a scheduled lr off the CPU
without ``total_steps``, and what every graph refuses (:func:`.graph.common_refusal`:
the gradient pre-step, an exchange between ranks).

The numbers: elementwise operations round as the kernel VM's (IEEE float32, NaN kept
as numpy keeps it), so an update without sums gives the PyNative numbers bit for bit on
the CPU; a sum (a norm, a factored mean) adds in MindSpore's order, not the VM's, and
is held to the conformance rule (``tests/test_mindspore_graph_ops.py`` says which).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import math
import operator
import os
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from unified_opt.files import write_text
from unified_opt.kernels.bytecode import schedule
from unified_opt.kernels.trace import (
    Program,
    TraceOps,
    Tracer,
    Untraceable,
    _mask,
    axis_labels,
    state_masks,
    trace_update,
    traced_outputs,
)
from unified_opt.schedules import Schedule
from unified_opt.spec import algorithms, spec_class

from .plan_source import plan_source

#: the graph forms (``options={"graph": ...}``): "auto" (the CPU: the faster of the two
#: for the algorithm, :data:`CPU_STEP_MS`; elsewhere "ops"), "custom" (custom operators
#: over the kernel VM, :mod:`.graph`; CPU only) and "ops" (this module)
GRAPH_FORMS = ("auto", "custom", "ops")

#: the steps whose traces are checked against the symbolic one (values rounded to
#: float32 as the VM rounds them)
CHECK_STEPS = (1, 2, 3, 7, 10, 100, 1000, 10**5)

#: the measured figures "auto" chooses by (``graph_forms.json`` beside this module,
#: written by ``benchmarks/mindspore_graph_forms.py`` from its results; a test holds it
#: current): where and how they were measured, and algorithm -> (custom, ops) ms per
#: GRAPH_MODE step. "auto" takes the faster; an algorithm not listed takes "custom".
_TABLE = json.loads(Path(__file__).with_name("graph_forms.json").read_text())
CPU_SETTING: str = _TABLE["setting"]
CPU_STEP_MS: dict[str, tuple[float, float]] = {
    name: (forms["custom"], forms["ops"]) for name, forms in _TABLE["step_ms"].items()}


def graph_option(options: dict) -> str | None:
    """``options["graph"]`` taken out of ``options`` and checked; None when not given."""
    if "graph" not in options:
        return None
    value = options.pop("graph")
    if value not in GRAPH_FORMS:
        raise ValueError(f"build: options graph must be one of {GRAPH_FORMS}, got {value!r}")
    return value


def cpu_choice(algorithm: str) -> tuple[str, str]:
    """The CPU's "auto" form for ``algorithm`` and why (the measured figures)."""
    measured = CPU_STEP_MS.get(algorithm)
    if measured is None:
        return "custom", (f"{algorithm} was not measured in both forms; the custom "
                          "operators run the kernel VM's code")
    custom, ops_ms = measured
    form = "ops" if ops_ms < custom else "custom"
    return form, (f"measured on {CPU_SETTING}: custom operators "
                  f"{custom:g} ms, MindSpore operations {ops_ms:g} ms per step")


# -- symbolic scalars ------------------------------------------------------------------

class ScalarGraph:
    """The scalar expressions of one symbolic trace: nodes ``("step",)``, ``("lr",)``,
    ``("const", value)`` or ``(op, *operand nodes)``, shared where equal; the
    decisions Python took on them (:attr:`decisions`)."""

    def __init__(self, forced: tuple = ()):
        self.nodes: list[tuple] = []
        self._index: dict = {}
        #: the outcomes the first decisions take whatever the numbers say (a path)
        self.forced = forced
        #: ``(comparison, node, node, outcome)`` per decision taken, in order
        self.decisions: list[tuple] = []
        #: what Python read as a plain number (``float()``, an index, ...)
        self.concrete: list[str] = []

    def node(self, *key) -> int:
        found = self._index.get(key)
        if found is None:
            found = self._index[key] = len(self.nodes)
            self.nodes.append(key)
        return found

    def const(self, value) -> int:
        value = float(value)
        # 0.0 and -0.0 (and NaNs) are told apart by their bits
        return self.node("const", value, np.float64(value).tobytes())

    def operand(self, x) -> int:
        return x.node if isinstance(x, Sym) else self.const(x)


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) or isinstance(x, (np.integer, np.floating))


class Sym:
    """A Python number that records how it was computed from the step and the lr (see
    the module). ``value``: the number itself at the traced step, so Python computes
    with it as it would with the number; a decision Python takes on it (a comparison,
    ``bool``, ``int``, an index) is recorded in :attr:`ScalarGraph.decisions`."""

    __array_ufunc__ = None          # numpy scalars on the left defer to our operators
    __slots__ = ("graph", "node", "value")

    def __init__(self, graph: ScalarGraph, node: int, value):
        self.graph, self.node, self.value = graph, node, value

    def _make(self, op, operands, value):
        graph = self.graph
        return Sym(graph, graph.node(op, *(graph.operand(x) for x in operands)), value)

    @staticmethod
    def _value(fn, *args):
        # on a forced path the numbers may be another path's (a square root of a
        # negative, a division by zero): only the expression counts there
        try:
            return fn(*args)
        except (ArithmeticError, ValueError):
            return float("nan")

    def _binary(self, op, fn, other, reflected=False):
        if isinstance(other, Sym):
            if other.graph is not self.graph:
                return NotImplemented
            ov = other.value
        elif _is_number(other) and not isinstance(other, (np.integer, np.floating)):
            ov = other
        else:
            return NotImplemented
        a, b = (other, self) if reflected else (self, other)
        av, bv = (ov, self.value) if reflected else (self.value, ov)
        return self._make(op, (a, b), self._value(fn, av, bv))

    def __add__(self, o): return self._binary("add", operator.add, o)
    def __radd__(self, o): return self._binary("add", operator.add, o, True)
    def __sub__(self, o): return self._binary("sub", operator.sub, o)
    def __rsub__(self, o): return self._binary("sub", operator.sub, o, True)
    def __mul__(self, o): return self._binary("mul", operator.mul, o)
    def __rmul__(self, o): return self._binary("mul", operator.mul, o, True)
    def __truediv__(self, o): return self._binary("div", operator.truediv, o)
    def __rtruediv__(self, o): return self._binary("div", operator.truediv, o, True)

    def __pow__(self, o, modulo=None):
        if modulo is not None:
            return NotImplemented
        return self._binary("pow", operator.pow, o)

    def __rpow__(self, o): return self._binary("pow", operator.pow, o, True)
    def __neg__(self): return self._make("neg", (self,), -self.value)
    def __pos__(self): return self
    def __abs__(self): return self._make("abs", (self,), abs(self.value))

    def _compare(self, name, fn, other):
        """A decision: the forced outcome on a forced path, else the numbers'."""
        if isinstance(other, Sym):
            if other.graph is not self.graph:
                return NotImplemented
            other_value = other.value
        elif _is_number(other):
            other_value = other
        else:
            return NotImplemented
        graph = self.graph
        index = len(graph.decisions)
        outcome = graph.forced[index] if index < len(graph.forced) else \
            bool(self._value(fn, self.value, other_value))
        graph.decisions.append((name, self.node, graph.operand(other), outcome))
        return outcome

    def __lt__(self, o): return self._compare("lt", operator.lt, o)
    def __le__(self, o): return self._compare("le", operator.le, o)
    def __gt__(self, o): return self._compare("gt", operator.gt, o)
    def __ge__(self, o): return self._compare("ge", operator.ge, o)
    def __eq__(self, o): return self._compare("eq", operator.eq, o)
    def __ne__(self, o): return self._compare("ne", operator.ne, o)
    __hash__ = object.__hash__

    def __bool__(self): return self._compare("ne", operator.ne, 0)

    def _concrete(self, what: str, value):
        self.graph.concrete.append(what)
        return value

    def __floordiv__(self, o): return self._concrete("//", self.value // _plain(o))
    def __rfloordiv__(self, o): return self._concrete("//", _plain(o) // self.value)
    def __mod__(self, o): return self._concrete("%", self.value % _plain(o))
    def __rmod__(self, o): return self._concrete("%", _plain(o) % self.value)
    def __float__(self): return self._concrete("float()", float(self.value))
    def __int__(self): return self._concrete("int()", int(self.value))
    def __index__(self): return self._concrete("an index", operator.index(self.value))
    def __round__(self, n=None): return self._concrete("round()", round(self.value, n))
    def __trunc__(self): return self._concrete("trunc()", math.trunc(self.value))
    def __floor__(self): return self._concrete("floor()", math.floor(self.value))
    def __ceil__(self): return self._concrete("ceil()", math.ceil(self.value))

    def __repr__(self):
        return f"Sym({self.value!r})"


def _plain(x):
    return x.value if isinstance(x, Sym) else x


class _SymbolicMath:
    """``math`` for the algorithm modules while a symbolic trace runs: ``sqrt``, ``exp``,
    ``log``, ``cos`` and ``sin`` of a :class:`Sym` are recorded; everything else is the
    real ``math`` module (a ``Sym`` argument then records a decision)."""

    _RECORDED = ("sqrt", "exp", "log", "cos", "sin")

    def __getattr__(self, name):
        real = getattr(math, name)
        if name not in self._RECORDED:
            return real

        def recorded(x, *rest):
            if isinstance(x, Sym) and not rest:
                return x._make(name, (x,), Sym._value(real, x.value))
            return real(x, *rest)
        return recorded


_SYMBOLIC_MATH = _SymbolicMath()
_trace_lock = threading.Lock()


@contextlib.contextmanager
def _symbolic_math():
    """``math`` is :class:`_SymbolicMath` in every loaded ``unified_opt.algorithms``
    module, and in the module of every registered algorithm from outside the package
    (:mod:`unified_opt.records`), while the block runs (one trace at a time; numbers
    other than ``Sym`` get the real functions, so another thread's updates compute as
    before)."""
    owners = {spec_class(name).__module__ for name in algorithms()}
    with _trace_lock:
        patched = [module for name, module in list(sys.modules.items())
                   if (name.startswith("unified_opt.algorithms") or name in owners)
                   and module is not None and getattr(module, "math", None) is math]
        for module in patched:
            module.math = _SYMBOLIC_MATH
        try:
            yield
        finally:
            for module in patched:
                module.math = math


class _SymTracer(Tracer):
    """A :class:`Tracer` that also keeps each slot's expression."""

    def __init__(self, shape, dtype, graph: ScalarGraph):
        super().__init__(shape, dtype)
        self.graph = graph
        self.expressions: list[int] = []

    def scalar(self, value):
        if isinstance(value, Sym):
            if value.graph is not self.graph:
                raise Untraceable("a scalar of another trace")
            self.expressions.append(value.node)
            return super().scalar(float(value.value))
        traced = super().scalar(value)
        self.expressions.append(self.graph.const(self.scalars[-1]))
        return traced


@dataclass(frozen=True)
class SymbolicTrace:
    """A parameter's update on one path: its program, each slot's expression (a node
    of ``nodes``, the scalar graph), the decisions that lead to it (``(comparison,
    node, node, outcome)``: the path's condition) and the state order."""

    program: Program
    nodes: tuple[tuple, ...]
    slots: tuple[int, ...]
    decisions: tuple[tuple, ...]
    state_order: tuple[str, ...]

    @property
    def key(self) -> tuple:
        return (self.program.key, self.nodes, self.slots, self.decisions)


#: the most paths one parameter's update may take (each is a program in the graph)
MAX_PATHS = 8


def symbolic_paths(spec, shape, dtype: str = "float32") -> tuple[SymbolicTrace, ...]:
    """Every path of the update of a parameter of ``shape`` (see the module): traced with
    a symbolic step and lr, then again with each decision taken the other way, depth
    first. Raises :class:`Untraceable` past :data:`MAX_PATHS` paths, where Python reads
    the step or the lr as a plain number, or where the update does not trace."""
    paths, pending = [], [()]
    while pending:
        forced = pending.pop()
        trace = symbolic_trace(spec, shape, dtype, forced)
        paths.append(trace)
        outcomes = [d[3] for d in trace.decisions]
        for i in range(len(outcomes) - 1, len(forced) - 1, -1):
            pending.append(tuple(outcomes[:i]) + (not outcomes[i],))
        if len(paths) + len(pending) > MAX_PATHS:
            raise Untraceable(f"its update takes more than {MAX_PATHS} paths on the step "
                              "and the lr")
    if len({_outcome(trace) for trace in paths}) == 1:
        # the decisions change nothing (LARS's ``step == 1`` where its momentum_init
        # makes the first step like the others): one path, no condition
        trace = paths[0]
        return (SymbolicTrace(trace.program, trace.nodes, trace.slots, (),
                              trace.state_order),)
    return tuple(paths)


def _outcome(trace: SymbolicTrace) -> tuple:
    """What a path computes, comparable between traces: its program and each slot's
    expression as a nested tuple."""
    memo: dict = {}

    def expression(n):
        if n not in memo:
            node = trace.nodes[n]
            memo[n] = node if node[0] in ("step", "lr", "const") else \
                (node[0], *(expression(i) for i in node[1:]))
        return memo[n]

    return trace.program.key, tuple(expression(n) for n in trace.slots)


def symbolic_trace(spec, shape, dtype: str = "float32", forced: tuple = ()) -> SymbolicTrace:
    """The update of a parameter of ``shape`` traced with a symbolic step and lr on the
    path ``forced`` (the outcomes of its first decisions; the later ones follow the
    numbers at step 1); raises :class:`Untraceable` where Python reads the step or the
    lr as a plain number or the update does not trace."""
    shape = tuple(int(n) for n in shape)
    labels = state_masks(spec, shape, dtype)
    graph = ScalarGraph(tuple(forced))
    tracer = _SymTracer(shape, dtype, graph)
    axes = axis_labels(len(shape))
    names = ("param", "grad", *labels)
    param, grad = tracer.input(0, axes), tracer.input(1, axes)
    state = {key: tracer.input(2 + i, value) for i, (key, value) in enumerate(labels.items())}
    lr_value = float(spec.lr_at(0)) or 1e-3
    step = Sym(graph, graph.node("step"), 1)
    lr = Sym(graph, graph.node("lr"), lr_value)
    try:
        with _symbolic_math():
            new_param, new_state = spec.update(param, grad, state, lr=lr, step=step,
                                               ops=TraceOps(tracer))
    except Untraceable:
        raise
    except Exception as error:        # Python a symbolic step cannot stand in for
        raise Untraceable(f"its update cannot run with a symbolic step and lr "
                          f"({type(error).__name__}: {error})") from None
    if graph.concrete:
        raise Untraceable(f"its update reads the step or the lr as a plain number in "
                          f"Python ({graph.concrete[0]})")
    outputs = traced_outputs(tracer, names, new_param, new_state, axes, labels)
    for node in tracer.nodes:
        if node.op == "topk":
            raise Untraceable("ops.topk_mask (MindSpore's sort keeps no order among ties)")
    program = Program(nodes=tuple(tracer.nodes), inputs=names,
                      input_masks=(_mask(axes), _mask(axes),
                                   *(_mask(v) for v in labels.values())),
                      outputs=tuple(outputs), n_scalars=len(tracer.scalars))
    return SymbolicTrace(program, tuple(graph.nodes), tuple(tracer.expressions),
                         tuple(graph.decisions), tuple(labels))


def _node_values(trace: SymbolicTrace, step: int, lr: float) -> list:
    values: list = []
    for node in trace.nodes:
        op = node[0]
        if op == "step":
            v = np.float64(step)
        elif op == "lr":
            v = np.float64(lr)
        elif op == "const":
            v = np.float64(node[1])
        else:
            args = [values[i] for i in node[1:]]
            with np.errstate(all="ignore"):
                v = _NUMPY_SCALAR[op](*args)
        values.append(np.float64(v))
    return values


def evaluate(trace: SymbolicTrace, step: int, lr: float) -> np.ndarray:
    """The slots' values at ``step`` with ``lr``, in float64 operations as the graph
    computes them (numpy's ``power`` and ``sqrt`` are C's, as MindSpore's CPU kernels)."""
    values = _node_values(trace, step, lr)
    return np.array([values[i] for i in trace.slots], dtype=np.float64)


_COMPARE = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
            "eq": np.equal, "ne": np.not_equal}


def on_path(trace: SymbolicTrace, step: int, lr: float) -> bool:
    """Whether ``step`` and ``lr`` take the path of ``trace`` (its decisions' outcomes),
    in float64 comparisons as the graph makes them."""
    values = _node_values(trace, step, lr)
    return all(bool(_COMPARE[op](values[a], values[b])) == outcome
               for op, a, b, outcome in trace.decisions)


_NUMPY_SCALAR = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
                 "pow": np.power, "neg": np.negative, "abs": np.abs, "sqrt": np.sqrt,
                 "exp": np.exp, "log": np.log, "cos": np.cos, "sin": np.sin}


def check_paths(paths, spec, shape, dtype: str = "float32", lrs=()) -> None:
    """Raise :class:`Untraceable` unless, at every step of :data:`CHECK_STEPS` with the
    spec's lr and each of ``lrs``, exactly one path's condition holds, and its program
    and slot values (rounded to ``dtype``, as the kernels round them) are the ordinary
    trace's there (a step where the ordinary trace raises is not checked: the update
    raises there on every path)."""
    labels = state_masks(spec, shape, dtype)
    rounding = np.dtype(dtype).type
    for lr in (float(spec.lr_at(0)), *lrs):
        for step in CHECK_STEPS:
            try:
                plain = trace_update(spec, shape, dtype, labels, lr=lr, step=step)
            except Untraceable:
                raise
            except Exception:
                continue
            with np.errstate(all="ignore"):
                taken = [trace for trace in paths if on_path(trace, step, lr)]
            if len(taken) != 1:
                raise Untraceable(f"{len(taken)} of its paths hold at step {step} (lr {lr})")
            trace = taken[0]
            if plain.program.key != trace.program.key:
                raise Untraceable(f"its program at step {step} (lr {lr}) is not the one "
                                  "its path records")
            with np.errstate(all="ignore"):
                ours = evaluate(trace, step, lr).astype(rounding)
                theirs = plain.scalars.astype(rounding)
            if ours.tobytes() != theirs.tobytes():
                raise Untraceable(f"its scalars at step {step} (lr {lr}) do not follow the "
                                  "step and lr as recorded")


# -- MindSpore source ------------------------------------------------------------------

_HEADER = '''"""Generated by unified_opt.backends.mindspore.graph_ops from traced spec updates
(do not edit: the name holds a digest of this text)."""

from mindspore import ops
from mindspore import dtype as mstype

F32, F64 = mstype.float32, mstype.float64


def _kept(result, x, y):
    # numpy's maximum/minimum: NaN where either operand is NaN
    return ops.where(ops.logical_or(ops.isnan(x), ops.isnan(y)), x + y, result)


def _sign(x):
    return ops.where(ops.isnan(x), x, ops.sign(x))
'''


class _Source:
    def __init__(self):
        self.lines: list[str] = []

    def add(self, text: str = "", indent: int = 0) -> None:
        self.lines.append("    " * indent + text if text else "")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _program_source(name: str, program: Program, shape, state_shapes, out: _Source) -> None:
    """``def name(sc, param, grad, *states)``: the program over one parameter, from its
    :class:`~unified_opt.kernels.bytecode.KernelPlan` (:mod:`.plan_source`: the plan the
    VM and the C++ and Triton kernels run, as MindSpore operations over whole tensors)."""
    for line in plan_source(name, schedule(program), shape, state_shapes):
        out.add(line)
    out.add()
    out.add()


_SCALAR_OPS = {"add": "{0} + {1}", "sub": "{0} - {1}", "mul": "{0} * {1}",
               "div": "{0} / {1}", "pow": "ops.pow({0}, {1})", "neg": "-{0}",
               "abs": "ops.abs({0})", "sqrt": "ops.sqrt({0})", "exp": "ops.exp({0})",
               "log": "ops.log({0})", "cos": "ops.cos({0})", "sin": "ops.sin({0})"}
_COMPARE_SOURCE = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}


def _scalar_lines(trace: SymbolicTrace, roots, constant, out: _Source) -> None:
    """The scalar nodes ``roots`` depend on, one float64 operation a line (``e<node>``;
    ``step`` and ``lr`` 0-d float64 tensors, ``constant(value)`` the name of a
    constant)."""
    needed = set()
    stack = list(roots)
    while stack:
        n = stack.pop()
        if n in needed:
            continue
        needed.add(n)
        if trace.nodes[n][0] != "const":
            stack.extend(trace.nodes[n][1:])
    for n, node in enumerate(trace.nodes):
        if n not in needed:
            continue
        op = node[0]
        if op in ("step", "lr"):
            expr = op
        elif op == "const":
            expr = constant(node[1])
        else:
            expr = _SCALAR_OPS[op].format(*(f"e{i}" for i in node[1:]))
        out.add(f"e{n} = {expr}", 1)


def _scalars_source(name: str, trace: SymbolicTrace, constant, out: _Source) -> None:
    """``def name(step, lr, k)``: the slots in float64 operations, rounded once to
    float32 (``k``: the constants)."""
    out.add(f"def {name}(step, lr, k):")
    _scalar_lines(trace, trace.slots, constant, out)
    slots = ", ".join(f"e{n}" for n in trace.slots) or constant(0.0)
    out.add(f"return ops.cast(ops.stack(({slots},)), F32)", 1)
    out.add()
    out.add()


def _condition_source(name: str, trace: SymbolicTrace, constant, out: _Source) -> None:
    """``def name(step, lr, k)``: whether the step takes ``trace``'s path (its decisions'
    outcomes, as float64 comparisons), a bool tensor."""
    out.add(f"def {name}(step, lr, k):")
    roots = [n for _, a, b, _ in trace.decisions for n in (a, b)]
    _scalar_lines(trace, roots, constant, out)
    terms = []
    for op, a, b, outcome in trace.decisions:
        term = f"(e{a} {_COMPARE_SOURCE[op]} e{b})"
        terms.append(term if outcome else f"ops.logical_not{term}")
    condition = terms[0]
    for term in terms[1:]:
        condition = f"ops.logical_and({condition}, {term})"
    out.add(f"return {condition}", 1)
    out.add()
    out.add()


def _cache_dir() -> Path:
    from unified_opt.kernels import build

    for base in (build.cache_dir(), Path(tempfile.gettempdir()) / "unified_opt"):
        folder = base / "mindspore_graph"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            if os.access(folder, os.W_OK):
                return folder
        except OSError:
            continue
    raise Untraceable("no writable folder for the generated graph source")


_modules: dict = {}
_modules_lock = threading.Lock()


def load_source(text: str):
    """The module of generated source ``text``: written once into the kernel cache (its
    name holds the text's digest), imported under a name of its own (MindSpore's parser
    reads a function's source and imports its module)."""
    digest = hashlib.sha256(text.encode()).hexdigest()[:24]
    name = f"unified_opt_mindspore_graph_{digest}"
    with _modules_lock:
        if name in _modules:
            return _modules[name]
        path = _cache_dir() / f"{name}.py"
        if not path.exists() or path.read_text() != text:
            # atomically: a failed write (a full disk) removes its partial file
            write_text(path, text)
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        _modules[name] = module
        return module


# -- the optimizer's graph ---------------------------------------------------------------

@dataclass(frozen=True)
class LrSource:
    """Where the step's lr comes from (see the module): ``kind`` "constant", "table" or
    "host"; ``constant`` the spec's lr; ``table``/``next_table`` the per-step lrs."""

    kind: str
    constant: float = 0.0
    table: tuple = ()
    next_table: tuple = ()


def lr_source(spec, total_steps: int | None, on_cpu: bool) -> tuple[LrSource | None, str]:
    """The step's lr of ``spec`` in the ops form, or None and why not."""
    if not isinstance(spec.lr, Schedule):
        return LrSource("constant", float(spec.lr)), ""
    if total_steps is not None:
        return LrSource("table", table=tuple(float(spec.lr_at(t)) for t in range(total_steps)),
                        next_table=tuple(float(spec.lr_at(t + 1))
                                         for t in range(total_steps))), ""
    if on_cpu:
        return LrSource("host"), ""
    return None, ("its scheduled lr needs options={'total_steps': N} off the CPU (the "
                  "per-step table [s(0), ..., s(N-1)] in the graph; the Python schedule "
                  "operator runs on the CPU only)")


class OpsGraph:
    """The ops form of one optimizer (see the module): :attr:`refusal` ("" when it can
    run), else :attr:`step` (the generated function ``step(hyper_map, params, grads,
    states, global_step, lr, k)``), :attr:`constants` (``k``, float64) and
    :attr:`lr`."""

    def __init__(self, optimizer, *, total_steps: int | None, on_cpu: bool):
        self.refusal = ""
        owner = f"{type(optimizer).__name__} ({optimizer.spec.name})"
        spec = optimizer.spec
        try:
            self._build(optimizer, spec, total_steps, on_cpu)
        except Untraceable as error:
            self.refusal = (f"{owner}: compiled into a graph as MindSpore operations "
                            f"(options graph='ops') it cannot run: {error}")

    def _build(self, optimizer, spec, total_steps, on_cpu) -> None:
        if spec.varies_per_step() or any(plan.spec.varies_per_step()
                                         for plan in optimizer._plans):
            raise Untraceable("a weight-decay schedule or a momentum-cycling lr changes "
                              "the spec at every step, and the program is traced once")
        self.lr, why = lr_source(spec, total_steps, on_cpu)
        if self.lr is None:
            raise Untraceable(why)
        traces: dict = {}
        groups: dict = {}           # (paths, shape, state shapes, lr) -> indices
        lrs = (0.5 * float(spec.lr_at(0)) or 1e-3, 0.0)
        for i, (p, plan) in enumerate(zip(optimizer._parameters, optimizer._plans)):
            shape = tuple(int(n) for n in p.shape)
            if int(np.prod(shape, dtype=np.int64)) == 0:
                continue            # nothing to update
            key = (plan.spec, shape)
            if key not in traces:
                paths = symbolic_paths(plan.spec, shape)
                check_paths(paths, plan.spec, shape, lrs=lrs)
                traces[key] = paths
            paths = traces[key]
            slots = optimizer._slots[i]
            if tuple(slots) != paths[0].state_order:
                raise AssertionError(f"state order {tuple(slots)} != {paths[0].state_order}")
            state_shapes = tuple(tuple(int(n) for n in s.shape) for s in slots.values())
            lr_key = (plan.lr_scale, plan.fixed_lr,
                      None if plan.fixed_lr is None else float(plan.spec.lr))
            group = (tuple(t.key for t in paths), shape, state_shapes, lr_key)
            groups.setdefault(group, (paths, shape, state_shapes, lr_key, []))[4].append(i)
        self.groups = list(groups.values())
        self.paths = max((len(g[0]) for g in self.groups), default=0)
        self.source = self._source(optimizer)
        module = load_source(self.source)
        self.step = module.step

    def _source(self, optimizer) -> str:
        out = _Source()
        out.add(_HEADER)
        constants: dict = {}

        def constant(value) -> str:
            key = np.float64(value).tobytes()
            if key not in constants:
                constants[key] = len(constants)
            return f"k[{constants[key]}]"

        functions: dict = {}

        def function(kind, key, write) -> str:
            if (kind, key) not in functions:
                name = functions[(kind, key)] = f"_{kind}_{len(functions)}"
                write(name)
            return functions[(kind, key)]

        calls = []
        for paths, shape, state_shapes, lr_key, indices in self.groups:
            # paths of one program differ in their scalars only: the scalars are chosen
            # (ops.where), the program runs once; different programs are branches of a
            # tensor `if` (MindSpore cannot compile one function in two branches). The
            # last path needs no condition: the group holding it comes last.
            by_program: dict = {}
            for n, trace in enumerate(paths):
                by_program.setdefault(trace.program.key, []).append((n, trace))
            branches = []
            for members in by_program.values():
                trace = members[0][1]
                program = function("program", (trace.program.key, shape, state_shapes),
                                   lambda name, t=trace: _program_source(
                                       name, t.program, shape, state_shapes, out))
                chosen = []
                for n, trace in members:
                    scalars = function("scalars", (trace.nodes, trace.slots),
                                       lambda name, t=trace: _scalars_source(
                                           name, t, constant, out))
                    condition = None if n == len(paths) - 1 else function(
                        "condition", (trace.nodes, trace.decisions),
                        lambda name, t=trace: _condition_source(name, t, constant, out))
                    chosen.append((scalars, condition))
                last = any(n == len(paths) - 1 for n, _ in members)
                branches.append((last, program, chosen))
            branches.sort(key=lambda b: b[0])       # the branch of the last path last
            calls.append(([b[1:] for b in branches], lr_key, indices, len(state_shapes)))
        starts = np.cumsum([0] + [len(s) for s in optimizer._slots])
        out.add("def step(hyper_map, params, grads, states, global_step, lr, k):")
        out.add(f"t = ops.cast(ops.reshape(global_step, ()), F64) + {constant(1.0)}", 1)
        done = []
        lr_names: dict = {}
        for g, (branches, lr_key, indices, n_states) in enumerate(calls):
            if lr_key not in lr_names:
                name = lr_names[lr_key] = f"lr{len(lr_names)}"
                scale, fixed, spec_lr = lr_key
                if fixed is None:
                    expr = "lr" if scale == 1.0 else f"lr * {constant(scale)}"
                else:       # groups.ParameterPlan.lr: exactly the group's lr while the lr
                    # is the spec's (a constant lr), else in proportion
                    ratio = fixed / spec_lr if spec_lr != 0.0 else 0.0
                    expr = (f"ops.where(ops.logical_or(lr == {constant(spec_lr)}, "
                            f"{constant(spec_lr)} == {constant(0.0)}), {constant(fixed)}, "
                            f"lr * {constant(ratio)})")
                out.add(f"{name} = {expr}", 1)
            lr_name = lr_names[lr_key]
            arguments = f"(t, {lr_name}, k)"
            tuples = [", ".join(f"params[{i}]" for i in indices),
                      ", ".join(f"grads[{i}]" for i in indices)]
            for s in range(n_states):
                tuples.append(", ".join(f"states[{int(starts[i]) + s}]" for i in indices))
            args = ", ".join(f"({t},)" for t in tuples)
            for b, (program, chosen) in enumerate(branches):
                scalars = f"{chosen[-1][0]}{arguments}"
                for scalar_fn, condition in reversed(chosen[:-1]):
                    scalars = f"ops.where({condition}{arguments}, {scalar_fn}{arguments}, " \
                        f"{scalars})"
                depth = 1
                if len(branches) > 1:
                    depth = 2
                    if b == len(branches) - 1:
                        out.add("else:", 1)
                    else:
                        conditions = [f"{c}{arguments}" for _, c in chosen]
                        test = conditions[0]
                        for c in conditions[1:]:
                            test = f"ops.logical_or({test}, {c})"
                        out.add(f"{'if' if b == 0 else 'elif'} {test}:", 1)
                out.add(f"d{g} = hyper_map(ops.partial({program}, {scalars}), {args})", depth)
            done.append(f"d{g}")
        out.add(f"return ({', '.join(done)},)" if done else "return (True,)", 1)
        values = [0.0] * max(1, len(constants))
        for key, index in constants.items():
            values[index] = float(np.frombuffer(key, dtype=np.float64)[0])
        self.constants = np.array(values, dtype=np.float64)
        return out.text()
