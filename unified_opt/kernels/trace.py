r"""Tracing a spec's ``update`` into a :class:`Program`: the same Python code that the
numpy oracle and every eager backend run, called once with stand-in tensors that record
each operation instead of computing it.

What a trace records
--------------------
* **Nodes**: one per tensor operation (``+ - * /``, comparisons, and the ops interface:
  ``sqrt``, ``where``, ``mean``, ``norm``, ...), in the order the update made them.
* **Scalars**: every Python number that reaches a tensor operation (a hyperparameter, the
  lr, a bias correction ``1 - beta^t`` computed in double precision, ``numel``) becomes a
  numbered *slot*; the trace keeps its value. The program's structure depends only on
  the slots' positions, so the same program runs every step with that step's values:
  a schedule, a bias correction or a ramp never changes it. A step whose Python control
  flow takes another branch (SGD's first step, RAdam's rectification) gives another
  structure, and so another :attr:`Program.key`.
* **Axes**: every tensor is viewed as ``(B, R, C)``: C the last axis, R the one before,
  B all leading axes together (a 1-D parameter is ``(1, 1, N)``, a 0-d one ``(1, 1,
  1)``). A node's *mask* says which of B, R, C it spans; a factored moment's row is
  ``B|R``, its column ``B|C``, a norm ``0``. The program is therefore the same for every
  parameter of the same number of dimensions; the sizes are given when it runs.

``topk_mask`` (DGC) is a node of its own: the VM selects the k largest elements of its
operand, stored whole for it, as the numpy binding does (ties to the lower index, NaN
last). So is ``matrix_function`` (Muon's iteration): a ``"matrix"`` node whose
function and arguments the program keeps (:attr:`Program.matrix_calls`); its operand is
stored whole, and the host runs the function over it in the framework's operations
(:mod:`.bytecode`'s matrix phase). What cannot be traced raises :class:`Untraceable`:
Python reading a tensor's value (``bool(x > 0)``, ``float(norm)``,
``ops.all_finite``), reductions over other axes, ``stack``, and the matrix operations
themselves outside ``matrix_function``. The caller then runs the update eagerly,
unchanged.

Numbers follow numpy's rules, which the eager bindings follow too: a Python scalar meets a
tensor in the tensor's dtype (rounded once to float32 for a float32 parameter), and
every operation rounds to the parameter's dtype.
"""

from __future__ import annotations

import functools
import numbers
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..ops import Ops

B, R, C = 1, 2, 4
FULL = B | R | C

#: elementwise operations a program may hold, with their operand count
ELEMENTWISE = {"add": 2, "sub": 2, "mul": 2, "div": 2, "max": 2, "min": 2, "gt": 2, "ge": 2,
               "lt": 2, "le": 2, "eq": 2, "ne": 2, "and": 2, "or": 2, "neg": 1, "sqrt": 1,
               "abs": 1, "sign": 1, "where": 3}
#: comparisons and logic produce masks (1 or 0 in the parameter's dtype)
BOOLEAN = {"gt", "ge", "lt", "le", "eq", "ne", "and", "or"}


class Untraceable(Exception):
    """The update does something a program cannot hold (see the module)."""


class Node(NamedTuple):
    """One value of a program (a tuple: programs compare and hash fast).

    ``op``: "input" (``attr``: the input's index), "scalar" (``attr``: the slot), "fill"
    (one scalar broadcast over ``mask``), "count" (``attr``: the axes whose sizes it
    multiplies), "sum" (``attr``: the axes it adds over), "topk", "matrix" (``attr``: its
    place in :attr:`Program.matrix_calls`), or an :data:`ELEMENTWISE` name. ``args`` are
    node indices."""

    op: str
    args: tuple[int, ...]
    mask: int
    attr: int = 0
    boolean: bool = False


def _node(op: str, args: tuple, mask: int, attr: int, boolean: bool) -> Node:
    # Node's own constructor fills defaults through a Python function: a trace makes a
    # node per operation every step, so the hot paths build the tuple directly
    return _new_tuple(Node, (op, args, mask, attr, boolean))


_new_tuple = tuple.__new__


@dataclass(frozen=True)
class Program:
    """A traced update: ``nodes`` in order; ``inputs`` the names of the arrays it reads
    (``param``, ``grad``, then the state names) with their masks; ``outputs`` pairs
    ``(input index written, node)``. ``key`` identifies the structure: programs with the
    same key run the same code on different scalars. ``matrix_calls``: ``(function,
    arguments)`` of each "matrix" node (``Ops.matrix_function``), in order."""

    nodes: tuple[Node, ...]
    inputs: tuple[str, ...]
    input_masks: tuple[int, ...]
    outputs: tuple[tuple[int, int], ...]
    n_scalars: int
    matrix_calls: tuple[tuple, ...] = ()

    @property
    def key(self) -> tuple:
        return (self.nodes, self.inputs, self.input_masks, self.outputs, self.n_scalars,
                self.matrix_calls)


def canonical_dims(shape) -> tuple[int, int, int]:
    """``(B, R, C)`` of a tensor of ``shape`` (see the module)."""
    shape = tuple(int(n) for n in shape)
    if not shape:
        return 1, 1, 1
    if len(shape) == 1:
        return 1, 1, shape[0]
    return int(np.prod(shape[:-2], dtype=np.int64)), shape[-2], shape[-1]


def axis_labels(ndim: int) -> tuple[int, ...]:
    """The canonical axis of each axis of a parameter of ``ndim`` dimensions."""
    if ndim == 0:
        return ()
    if ndim == 1:
        return (C,)
    return (B,) * (ndim - 2) + (R, C)


class _Shape(tuple):
    """A stand-in tensor's shape: its length is the rank (one program serves a rank);
    reading a size marks the trace as that size's (:attr:`Tracer.shape_read`)."""

    def __new__(cls, tracer, sizes):
        shape = super().__new__(cls, sizes)
        shape._tracer = tracer
        return shape

    def _read(self):
        self._tracer.shape_read = True

    def __getitem__(self, index):
        self._read()
        return tuple.__getitem__(self, index)

    def __iter__(self):
        self._read()
        return tuple.__iter__(self)

    def __eq__(self, other):
        self._read()
        return tuple.__eq__(self, other)

    def __ne__(self, other):
        self._read()
        return tuple.__ne__(self, other)

    __hash__ = tuple.__hash__


class Traced:
    """A stand-in tensor: arithmetic and the ops interface record nodes on its tracer.

    ``labels``: per axis of the real shape, the canonical axis it stands for, or 0 for
    an axis of length 1 that a reduction kept (``keepdims``)."""

    __array_ufunc__ = None             # numpy scalars on the left defer to our operators
    __slots__ = ("_tracer", "_index", "_labels")

    def __init__(self, tracer: "Tracer", index: int, labels: tuple[int, ...]):
        self._tracer, self._index, self._labels = tracer, index, labels

    # what specs read of a tensor: its shape (for its number of dimensions; a size read
    # marks the trace as one size's)
    @property
    def shape(self) -> tuple[int, ...]:
        tracer = self._tracer
        tracer.rank_read = True
        if self._labels.count(B) > 1:
            # several leading axes read as one (B): aligned with the parameter's axes
            # (its own shape, a state array, a mean kept with keepdims), each is the
            # parameter's axis there
            if len(self._labels) != len(tracer.shape):
                raise Untraceable("the shape of a tensor with several leading axes")
            return _Shape(tracer, (n if label else 1
                                   for n, label in zip(tracer.shape, self._labels)))
        return _Shape(tracer, (tracer.size_of(label) if label else 1 for label in self._labels))

    @property
    def ndim(self) -> int:
        self._tracer.rank_read = True
        return len(self._labels)

    @property
    def dtype(self):
        return self._tracer.dtype

    def __len__(self):
        if not self._labels:
            raise TypeError("len() of a 0-d tensor")
        self._tracer.shape_read = True
        return self._tracer.size_of(self._labels[0]) if self._labels[0] else 1

    def _binary(self, op, other, reflected=False):
        tracer = self._tracer
        if type(other) is Traced and other._tracer is tracer:
            b = other
        else:
            b = tracer.scalar(other)
        x, y = (b, self) if reflected else (self, b)
        labels = x._labels if x._labels == y._labels else _broadcast((x._labels, y._labels))
        return tracer.add(_node(op, (x._index, y._index), _mask(labels), 0, op in BOOLEAN),
                          labels)

    def __add__(self, other): return self._binary("add", other)
    def __radd__(self, other): return self._binary("add", other, True)
    def __sub__(self, other): return self._binary("sub", other)
    def __rsub__(self, other): return self._binary("sub", other, True)
    def __mul__(self, other): return self._binary("mul", other)
    def __rmul__(self, other): return self._binary("mul", other, True)
    def __truediv__(self, other): return self._binary("div", other)
    def __rtruediv__(self, other): return self._binary("div", other, True)
    def __gt__(self, other): return self._binary("gt", other)
    def __ge__(self, other): return self._binary("ge", other)
    def __lt__(self, other): return self._binary("lt", other)
    def __le__(self, other): return self._binary("le", other)
    def __eq__(self, other): return self._binary("eq", other)
    def __ne__(self, other): return self._binary("ne", other)
    def __and__(self, other): return self._binary("and", other)
    def __rand__(self, other): return self._binary("and", other, True)
    def __or__(self, other): return self._binary("or", other)
    def __ror__(self, other): return self._binary("or", other, True)
    def __neg__(self): return self._tracer.elementwise("neg", self)
    def __pos__(self): return self
    def __abs__(self): return self._tracer.elementwise("abs", self)

    def __pow__(self, exponent):
        if isinstance(exponent, numbers.Real) and exponent == 2:
            return self * self            # numpy's x ** 2 is x * x, exactly
        raise Untraceable(f"x ** {exponent!r}")

    __hash__ = object.__hash__

    def __bool__(self):
        raise Untraceable("Python reads a traced tensor's truth value")

    def __float__(self):
        raise Untraceable("Python reads a traced tensor's value")

    __int__ = __index__ = __float__

    def __array__(self, *args, **kwargs):
        raise Untraceable("numpy reads a traced tensor")


_new_traced = object.__new__


class Tracer:
    """Records the nodes and scalar slots of one trace (see :func:`trace_update`)."""

    def __init__(self, shape, dtype):
        self.dtype = np.dtype(dtype)
        self.shape = tuple(int(n) for n in shape)
        self.dims = canonical_dims(shape)
        self.nodes: list[Node] = []
        self.scalars: list[float] = []
        self.matrix_calls: list[tuple] = []
        self.shape_read = False
        #: the update looked at the rank: read a shape or ``ndim``, or reduced over
        #: chosen axes (see :attr:`Trace.rank_blind`)
        self.rank_read = False

    def size_of(self, label: int) -> int:
        return {B: self.dims[0], R: self.dims[1], C: self.dims[2]}[label]

    def add(self, node: Node, labels: tuple[int, ...]) -> Traced:
        nodes = self.nodes
        nodes.append(node)
        traced = _new_traced(Traced)
        traced._tracer, traced._index, traced._labels = self, len(nodes) - 1, labels
        return traced

    def input(self, index: int, labels: tuple[int, ...]) -> Traced:
        return self.add(Node("input", (), _mask(labels), index), labels)

    @property
    def full(self) -> int:
        """The parameter's mask (input 0)."""
        return self.nodes[0].mask

    def scalar(self, value) -> Traced:
        if type(value) is not float:
            if not isinstance(value, (numbers.Real, np.bool_)):
                raise Untraceable(f"an operand of type {type(value).__name__}")
            value = float(value)
        scalars = self.scalars
        scalars.append(value)
        return self.add(_node("scalar", (), 0, len(scalars) - 1, False), ())

    def operand(self, x) -> Traced:
        if isinstance(x, Traced):
            if x._tracer is not self:
                raise Untraceable("a tensor of another trace")
            return x
        return self.scalar(x)

    def elementwise(self, op: str, *operands) -> Traced:
        args = [self.operand(x) for x in operands]
        labels = _broadcast(tuple(a._labels for a in args))
        boolean = op in BOOLEAN
        return self.add(_node(op, tuple(a._index for a in args), _mask(labels), 0, boolean),
                        labels)

    def fill(self, labels: tuple[int, ...], value) -> Traced:
        """``value`` broadcast over axes ``labels`` (``full_like``)."""
        slot = self.scalar(value)
        return self.add(Node("fill", (slot._index,), _mask(labels)), labels)

    def reduce_sum(self, x, axis, keepdims) -> tuple[Traced, int]:
        """The sum of ``x`` over ``axis`` (an int or None: all), and the axes summed."""
        x = self.operand(x)
        labels = x._labels
        if keepdims or axis is not None:
            self.rank_read = True
        if axis is None:
            positions = range(len(labels))
        else:
            if isinstance(axis, bool) or not isinstance(axis, int):
                raise Untraceable(f"reduction over axis {axis!r}")
            if not -len(labels) <= axis < len(labels):
                raise Untraceable(f"axis {axis} of a {len(labels)}-d tensor")
            positions = [axis % len(labels)]
        summed = 0
        for i in positions:
            summed |= labels[i]
        if axis is not None and labels[positions[0]] == B and labels.count(B) > 1:
            raise Untraceable("a reduction over one of several leading axes")
        kept = tuple((0 if i in positions else label) for i, label in enumerate(labels)) \
            if keepdims else tuple(label for i, label in enumerate(labels) if i not in positions)
        if axis is None and not keepdims:
            kept = ()
        if not summed & _mask(labels):       # only kept length-1 axes: the values as they are
            return Traced(self, x._index, kept), 0
        node = Node("sum", (x._index,), _mask(kept), summed & _mask(labels))
        return self.add(node, kept), summed & _mask(labels)

    def mean(self, x, axis, keepdims) -> Traced:
        total, summed = self.reduce_sum(x, axis, keepdims)
        if not summed:
            return total
        count = self.add(Node("count", (), 0, summed), ())
        return self.elementwise("div", total, count)


@functools.cache
def _mask(labels) -> int:
    mask = 0
    for label in labels:
        mask |= label
    return mask


@functools.cache
def _broadcast(label_sets) -> tuple[int, ...]:
    """numpy's broadcasting of the operands' axes (aligned on the right)."""
    ndim = max(len(labels) for labels in label_sets)
    out = []
    for position in range(ndim):
        found = 0
        for labels in label_sets:
            offset = position - (ndim - len(labels))
            label = labels[offset] if offset >= 0 else 0
            if label and found and label != found:
                raise Untraceable("operands whose axes do not line up")
            found = found or label
        out.append(found)
    return tuple(out)


class TraceOps(Ops):
    """The ops interface over :class:`Traced` tensors."""

    name = "trace"

    def __init__(self, tracer: Tracer):
        self.tracer = tracer

    def zeros_like(self, x): return self.tracer.fill(self.tracer.operand(x)._labels, 0.0)

    def full_like(self, x, value):
        return self.tracer.fill(self.tracer.operand(x)._labels, value)

    def scalar_like(self, x, value): return self.tracer.fill((), value)

    def sqrt(self, x): return self.tracer.elementwise("sqrt", x)
    def abs(self, x): return self.tracer.elementwise("abs", x)
    def sign(self, x): return self.tracer.elementwise("sign", x)
    def maximum(self, x, y): return self.tracer.elementwise("max", x, y)
    def minimum(self, x, y): return self.tracer.elementwise("min", x, y)
    def where(self, condition, x, y): return self.tracer.elementwise("where", condition, x, y)

    def clip(self, x, low, high):
        # numpy's clip is minimum(maximum(x, low), high), NaN kept by both
        return self.minimum(self.maximum(x, low), high)

    def norm(self, x):
        total, _ = self.tracer.reduce_sum(self.tracer.elementwise("mul", x, x), None, False)
        return self.sqrt(total)

    def mean(self, x, axis=None, keepdims=False):
        return self.tracer.mean(x, axis, keepdims)

    def numel(self, x):
        self.tracer.shape_read = True
        return int(np.prod(x.shape, dtype=np.int64))

    def machine_eps(self, x): return float(np.finfo(self.tracer.dtype).eps)

    def stack(self, xs): raise Untraceable("ops.stack")
    def matmul(self, a, b):
        raise Untraceable("ops.matmul outside ops.matrix_function (the VM has no matrix "
                          "product; a matrix phase runs one on the host)")
    def transpose(self, x): raise Untraceable("ops.transpose")
    def reshape(self, x, shape): raise Untraceable("ops.reshape")
    def addmm(self, c, a, b, *, beta, alpha): raise Untraceable("ops.addmm")
    def rounded(self, x, dtype): raise Untraceable("ops.rounded")
    def cast_like(self, x, other): raise Untraceable("ops.cast_like")
    def all_finite(self, x): raise Untraceable("ops.all_finite (Python reads the values)")
    def topk_mask(self, x, k):
        tracer = self.tracer
        x = tracer.operand(x)
        if _mask(x._labels) != tracer.full:
            raise Untraceable("ops.topk_mask of a tensor smaller than the parameter")
        slot = tracer.scalar(k)
        return tracer.add(Node("topk", (x._index, slot._index), _mask(x._labels), 0, True),
                          x._labels)

    def matrix_function(self, fn, x, *args):
        tracer = self.tracer
        x = tracer.operand(x)
        if _mask(x._labels) != tracer.full:
            raise Untraceable("ops.matrix_function of a tensor smaller than the parameter")
        try:
            hash((fn, args))
        except TypeError:
            raise Untraceable("ops.matrix_function with unhashable arguments") from None
        tracer.matrix_calls.append((fn, args))
        return tracer.add(Node("matrix", (x._index,), _mask(x._labels),
                               len(tracer.matrix_calls) - 1), x._labels)


@dataclass(frozen=True)
class Trace:
    """A traced step: its :class:`Program`, the values of its scalar slots, whether
    the update read the parameter's size (then the values belong to that size), and
    whether it read nothing of the parameter's axes at all (:attr:`rank_blind`)."""

    program: Program
    scalars: np.ndarray
    shape_read: bool
    rank_read: bool = True

    @property
    def rank_blind(self) -> bool:
        """The update read no size, shape or ``ndim`` and reduced over no chosen axis
        (sums of whole tensors only): then its Python ran the same way whatever the
        parameter's rank, so a parameter of any rank whose state arrays are each whole
        or 0-d has this step's program and scalars when read as 1-D."""
        return not (self.shape_read or self.rank_read)


def state_masks(spec, shape, dtype) -> dict[str, tuple[int, ...]]:
    """The axes of each state array ``spec.init`` makes for a parameter of ``shape``
    (traced, so a factored moment's row and column are told apart from the parameter
    even where a size is 1)."""
    tracer = Tracer(shape, dtype)
    param = tracer.input(0, axis_labels(len(shape)))
    state = spec.init(param, TraceOps(tracer))
    return {key: value._labels for key, value in state.items()}


def traced_outputs(tracer, names, new_param, new_state, param_labels, state_labels
                   ) -> list[tuple[int, int]]:
    """``(input position, node index)`` of every array a traced update writes: the new
    parameter and each new state array (``names``: the inputs, ``param``, ``grad``, then
    the state's keys), checked to be the state it was given, no mask, and no wider than
    the array it replaces; an array handed back unchanged is left out."""
    if set(new_state) != set(state_labels):
        raise Untraceable(f"the update returns state {sorted(new_state)}, the state is "
                          f"{sorted(state_labels)}")
    outputs = []
    for target, value in [(0, new_param)] + [(names.index(k), v) for k, v in new_state.items()]:
        value = tracer.operand(value)
        target_labels = param_labels if target == 0 else state_labels[names[target]]
        if tracer.nodes[value._index].boolean:
            raise Untraceable(f"{names[target]} would be a mask")
        if _mask(value._labels) & ~_mask(target_labels):
            raise Untraceable(f"the new {names[target]} spans more axes than the old")
        node = tracer.nodes[value._index]
        if node.op == "input" and node.attr == target:
            continue             # handed back unchanged: nothing to write
        outputs.append((target, value._index))
    return outputs


def trace_update(spec, shape, dtype, state_labels: dict, *, lr: float, step: int) -> Trace:
    """Trace ``spec.update`` for a parameter of ``shape`` and ``dtype`` at 1-based ``step``
    with ``lr``. ``state_labels``: :func:`state_masks` of the same spec and shape."""
    tracer = Tracer(shape, dtype)
    labels = axis_labels(len(shape))
    names = ("param", "grad", *state_labels)
    param, grad = tracer.input(0, labels), tracer.input(1, labels)
    state = {key: tracer.input(2 + i, value) for i, (key, value) in enumerate(state_labels.items())}
    new_param, new_state = spec.update(param, grad, state, lr=lr, step=step,
                                       ops=TraceOps(tracer))
    outputs = traced_outputs(tracer, names, new_param, new_state, labels, state_labels)
    program = Program(nodes=tuple(tracer.nodes), inputs=names,
                      input_masks=(_mask(labels), _mask(labels),
                                   *(_mask(v) for v in state_labels.values())),
                      outputs=tuple(outputs), n_scalars=len(tracer.scalars),
                      matrix_calls=tuple(tracer.matrix_calls))
    return Trace(program, np.asarray(tracer.scalars, dtype=np.float64), tracer.shape_read,
                 tracer.rank_read)
