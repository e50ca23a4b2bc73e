"""A MindSpore optimizer that runs a spec's own update (written once, in the spec).

Two ways in, the same numbers bit for bit:

* Python calls it (PyNative: ``opt(grads)``, a PyNative ``nn.TrainOneStepCell`` or
  ``ms.Model.train``): :meth:`SpecOptimizer.__call__` runs the step in Python, the step
  of :class:`unified_opt.step_loop.StepLoop` (every backend's): the gradient pre-step,
  then each update on the engines of :mod:`.engines`: the kernel VM (:mod:`.kernels`),
  a data-parallel spec's exchange in numpy on the host, else eagerly (``compile=False``,
  an update that does not trace).
* Compiled into a graph (GRAPH_MODE, a GRAPH_MODE ``TrainOneStepCell`` or
  ``ms.Model.train``, an ``@ms.jit`` step calling ``opt(grads)``): ``construct`` is one
  of two graph forms (``options={"graph": "auto" | "custom" | "ops"}``, :mod:`.graph`):
  the same VM programs as custom operators (the CPU), or the spec's update traced and
  written as MindSpore operations (:mod:`.graph_ops`, any device). What a graph cannot
  run is refused when it compiles, naming why.

Every gradient is checked against its parameter before anything changes (the same
shape, no broadcasting, and dtype: :func:`.native.describe`): by the step loop's check
(:func:`unified_opt.step_loop.check_gradients`, naming the parameter) where Python calls
the optimizer, in either mode; compiled into an outer graph, by ``construct`` when the
graph compiles (shapes and dtypes are constants there), before any step runs.
"""

from __future__ import annotations

import mindspore as ms
import numpy as np
from mindspore import Parameter, ParameterTuple, Tensor, nn, ops
from mindspore import dtype as mstype

from unified_opt.ops import numpy_ops
from unified_opt.pre_step import has_pre_step, prepare_gradients
from unified_opt.schedules import Schedule
from unified_opt.step_loop import Host, StepLoop, check_gradients
from unified_opt.storage import refuse_rounding
from unified_opt.weight_swap import Moved, WeightSwap

from . import graph as graph_forms
from .added_groups import check_joined, length_refusal
from .cells import past_total_steps
from .engines import Eager, ExchangeOnHost, Kernels, OnHost
from .kernels import MindSporeKernels, host_copy, host_view, numpy_dtype, on_cpu
from .loading import check_loaded_state, loaded_state_keys
from .native import describe
from .ops import mindspore_ops
from .surface import attach


class SpecOptimizer(nn.Optimizer):
    """``mindspore.nn.Optimizer`` driving ``spec.update`` per parameter.

    State: the spec's arrays as Parameters named ``<state name>.<parameter name>``
    (``spec_state``), the base class's ``global_step`` and ``learning_rate`` (the spec's lr
    of the next step, kept for ``get_lr()``), so ``ms.save_checkpoint(opt, ...)`` holds it
    all. The lr is the spec's, ``spec.lr_at(global_step)`` in double precision, times each
    parameter's group factor (``plans``: :func:`unified_opt.groups.plan_parameters`), at
    any step; given ``total_steps`` (``options={"total_steps": N}``) it refuses step N+1
    with the error every MindSpore path raises there. With a constant spec lr, an lr
    written into ``learning_rate`` from outside (``mindspore.train.ReduceLROnPlateau``)
    is followed, as by the native classes (``follows_learning_rate``); with a scheduled
    lr it is refused at the next step rather than ignored.

    Each call runs :func:`unified_opt.pre_step.prepare_gradients` once over all
    parameters (loss scale, overflow skip, clipping, centralization), then each
    parameter's ``plan.spec.at_step(t)`` update, ``t = global_step`` (the steps taken)
    and the update's ``step`` ``t + 1``: every parameter has a gradient at every step
    here, so its count of updates is the optimizer's (less the step it joined at, for a
    parameter added by :meth:`add_param_group` after a step: :mod:`.added_groups`). A
    skipped call (``skip_nonfinite`` and non-finite unscaled gradients) changes
    nothing, not ``global_step`` either, and
    returns False; ``skipped`` (``uo.skipped_steps``) gets one bool per call. A
    data-parallel spec (DGC) built after ``mindspore.communication.init()`` gets an
    ``exchange`` (:class:`.exchange.MindSporeExchange`): this process is one worker of
    ``spec.exchange_step``.

    Loading state: ``Cell.load_state_dict`` (``opt.load_state_dict(opt.state_dict())``,
    or a dict from ``mindspore.load_checkpoint``) first checks the dict in a pre-hook and
    refuses, before anything is copied, an array of another shape, part of the spec's
    state missing, and a ``global_step`` that is not a whole count >= 0 (each a
    ValueError naming the key). ``mindspore.load_param_into_net`` and
    ``mindspore.load_checkpoint(path, opt)`` call no hook of the Cell: MindSpore itself
    refuses another shape or a float ``global_step`` (RuntimeError, after copying the
    Parameters before it) and reports missing Parameters in its return value and a
    warning; a negative ``global_step`` it copies is refused by the next step, before
    anything changes.
    """

    def __init__(self, params, spec, plans, total_steps: int | None = None, exchange=None,
                 compile="auto", graph="auto"):
        params, plans = list(params), list(plans)
        refuse_rounding(type(self).__name__, "MindSpore", [plan.spec for plan in plans],
                        [(p.name, str(p.dtype).lower()) for p in params])
        super().__init__(float(spec.lr_at(0)), params)
        #: how the update runs (``uo.build(..., options={"compile": ...})``): "auto" and
        #: True on the kernel VM (:mod:`.kernels`), False eagerly; a data-parallel spec's
        #: exchange and an update that does not trace run eagerly (not ``compile``: that
        #: is ``Cell.compile``)
        self.compile_mode = compile
        self._kernels = MindSporeKernels.for_optimizer(compile, type(self).__name__,
                                                       exchanges=exchange is not None)
        if self._kernels is not None:
            self._kernels.require(
                (p.name, plan.spec, tuple(p.shape), str(p.dtype).lower(),
                 "" if on_cpu() else
                 f"the device_target is {ms.get_context('device_target')!r}")
                for p, plan in zip(self._parameters, plans))
        self.spec = spec
        #: a data-parallel spec's exchange over the ranks (None: world size 1)
        self.exchange = exchange
        self.total_steps = total_steps
        self._plans = list(plans)               # one plan per parameter (groups applied)
        self._slots = []                        # per parameter: state name -> Parameter
        self.skipped: list[bool] = []
        flat = []
        for p, plan in zip(self._parameters, self._plans):
            # the initial state from numpy (no MindSpore operation): init reads the shape,
            # and a schedule-free spec the values (its base point starts at the parameter)
            if p.dtype not in (mstype.float32, mstype.float64):
                raise TypeError(f"SpecOptimizer: parameter {p.name} is {p.dtype}; the own "
                                "implementation takes float32 or float64 parameters")
            dtype = numpy_dtype(p.dtype)      # the state in the parameter's dtype
            initial = plan.spec.init(np.asarray(p.asnumpy(), dtype=dtype), numpy_ops)
            slots = {key: Parameter(Tensor(np.array(initial[key], dtype=dtype)),
                                    name=f"{key}.{p.name}", requires_grad=False)
                     for key in initial}
            self._slots.append(slots)
            flat.extend(slots.values())
        self.spec_state_parameters = ParameterTuple(flat)
        self._one = Tensor([1], mstype.int32)
        self._follows = not isinstance(spec.lr, Schedule)
        # the graph form (.graph), its operators as attributes of this Cell for the compiler
        self.graph_option = graph
        self.set_graph_form(graph_forms.choose(self, graph, total_steps))
        #: the parameter counts before each ``add_param_group`` (a train step made before
        #: one passes that many gradients: :func:`.added_groups.length_refusal`)
        self.lengths_before_adds: list[int] = []
        self._swap = WeightSwap(type(self).__name__)
        #: torch's surface: ``param_groups`` and ``defaults`` (:mod:`.surface`)
        self._surface = attach(self, spec, plans, list(self._parameters), None)
        engines = [Kernels(self._kernels)] if self._kernels is not None else []
        if exchange is not None:
            engines.append(ExchangeOnHost(exchange))
        elif self._kernels is not None:
            engines.append(OnHost())
        self._engine_list = engines + [Eager(exchange)]
        self._loop_host = _Host(self)
        self._loop = StepLoop(spec, self._plans, list(self._parameters),
                              lambda index, spec: self._engine_list, self._loop_host)
        # Cell.load_state_dict (MindSpore's torch-style loading) runs these;
        # mindspore.load_param_into_net and load_checkpoint run no hook (see the class)
        self._load_prefix = ""
        self._loaded_joined = None
        #: ``global_step`` as Python last set it (a step Python ran, a load): another
        #: value means a compiled graph stepped (:func:`.added_groups.add_group`)
        self.python_global_step = 0
        #: whether a step ran compiled into a graph (``global_step`` moved without Python)
        self.stepped_in_graph = False
        self.register_load_state_dict_pre_hook(check_loaded_state)
        self.register_load_state_dict_post_hook(loaded_state_keys)

    def set_graph_form(self, choice) -> None:
        """The graph form ``construct`` compiles (:func:`.graph.choose`'s ``choice``), its
        operators as attributes of this Cell for the compiler."""
        #: the graph form ``construct`` compiles ("custom", "ops", or "" where refused)
        #: and why (``uo.explain``)
        self.graph_form, self.graph_why = choice.form, choice.why
        self._graph_built = choice.built
        self._graph_refusal = choice.refusal
        self._n = len(self._parameters) if not choice.refusal else 0
        self._length_message = (f"SpecOptimizer: the step compiled into a graph passes "
                                f"gradients of other parameters than the {self._n} it "
                                "holds; a train step made before add_param_group passes "
                                "those it held then: make it again after add_param_group")
        if choice.form == "custom":
            self._custom_form(choice.built)
        elif choice.form == "ops":
            self._ops_form(choice.built)

    def _custom_form(self, graph) -> None:
        """The custom operators' attributes (:class:`.graph.GraphStep`)."""
        starts = np.cumsum([0] + [len(s) for s in self._slots])
        self._state_layout = tuple((int(starts[i]), len(order))
                                   for i, order in enumerate(graph.order))
        for slots, order in zip(self._slots, graph.order):
            if tuple(slots) != tuple(order):
                raise AssertionError(f"state order {tuple(slots)} != {order}")
        self._host, self._aot, self._aot_index = graph.host, graph.kernels, graph.indices

    def _ops_form(self, graph) -> None:
        """The ops form's attributes (:class:`.graph_ops.OpsGraph`): its generated step,
        its float64 constants, the map over parameters and the step's lr source."""
        self._ops_step = graph.step
        self._ops_k = Tensor(graph.constants, mstype.float64)
        self._ops_map = ops.HyperMap()
        source = graph.lr
        self._ops_lr_kind = source.kind
        if source.kind == "constant":
            self._ops_lr32 = Tensor(np.float32(source.constant), mstype.float32)
            self._ops_lr64 = Tensor(np.float64(source.constant), mstype.float64)
        elif source.kind == "table":
            self._ops_lr_table = Tensor(np.array(source.table, np.float64))
            self._ops_next_table = Tensor(np.array(source.next_table, np.float64))
        else:
            self._ops_host = ops.Custom(_host_lr(self), out_shape=(2,),
                                        out_dtype=mstype.float64, func_type="pyfunc")

    def add_param_group(self, param_group) -> None:
        """torch's ``add_param_group`` after ``uo.build``, in PyNative mode: the group's
        parameters (``mindspore.Parameter``, float32, names new to this Cell) get plans
        from its keys (torch's ``lr``, Paddle's ``learning_rate`` factor, the spec's
        hyperparameters: :func:`unified_opt.param_groups.added_group`), their state
        Parameters, a param group read at every step like the others, and the build's
        record takes them, so ``uo.save_state`` writes their state and groups (names:
        give ``(name, parameter)`` pairs to save). A parameter added after k steps counts
        its own updates from there (:mod:`.added_groups`). Make the train step
        (``nn.TrainOneStepCell``, ``ms.Model``) after the add: one made before passes
        the old parameters' gradients only, which the step refuses. Refused, before
        anything changes: GRAPH_MODE, an optimizer that exchanges gradients over ranks,
        and what ``added_group`` refuses."""
        from .added_groups import add_group

        add_group(self, param_group)

    @property
    def follows_learning_rate(self) -> bool:
        """Whether an lr written into ``learning_rate`` from outside is used (constant
        spec lr) rather than refused (scheduled lr: the spec owns every step's lr)."""
        return not isinstance(self.spec.lr, Schedule)

    def next_lr(self) -> float:
        """The lr the next call will use (before any group's factor)."""
        return self._lr_of_step(int(host_copy(self.global_step)[0]))

    def _lr_of_step(self, step0: int) -> float:
        return self.lr_of_step(step0, float(host_copy(self.learning_rate).reshape(-1)[0]))

    def lr_of_step(self, step0: int, stored: float) -> float:
        """The lr of 0-based step ``step0`` with ``stored`` in ``learning_rate`` (see
        ``follows_learning_rate``); past ``total_steps`` our RuntimeError, a negative
        ``global_step`` (loaded or assigned from outside) our ValueError."""
        if step0 < 0:
            raise ValueError(f"SpecOptimizer: global_step is {step0}; it counts the steps "
                             "taken, a whole number >= 0 (loaded from a checkpoint that "
                             "does not fit, or assigned from outside?)")
        if self.total_steps is not None and step0 >= self.total_steps:
            raise past_total_steps(type(self).__name__, self.total_steps, step0)
        lr = float(self.spec.lr_at(step0))
        stored = np.float32(stored)
        if stored == np.float32(lr):
            return lr                      # the spec's value, in double precision
        if self.follows_learning_rate:
            return float(stored)
        raise RuntimeError(f"SpecOptimizer: learning_rate was set to {float(stored)} from "
                           f"outside; with a scheduled lr the own implementation takes the lr "
                           f"from the spec ({lr} at step {step0})")

    def __call__(self, gradients):
        self._swap.check_step(plan.spec for plan in self._plans)
        if ms.get_context("mode") == ms.PYNATIVE_MODE:
            return self.step_python(gradients)
        # GRAPH_MODE opt(grads): Python sees the gradients, so they are checked here
        # with the parameters' names (compiled into an outer graph, construct checks them)
        self._check(gradients)
        check_gradients(type(self).__name__, [p.name for p in self._parameters],
                        self._parameters, gradients, describe)
        return super().__call__(gradients)

    def construct(self, gradients):
        """The step compiled into a graph (:mod:`.graph`: :attr:`graph_form`)."""
        if self._graph_refusal:
            raise RuntimeError(self._graph_refusal)
        if len(gradients) != self._n:
            # (a step compiled over the parameters held before add_param_group)
            raise ValueError(self._length_message)
        for i in range(self._n):
            # checked when the graph compiles (shapes and dtypes are constants there), so
            # a mismatch changes nothing; the AOT operator checks them again
            if gradients[i].dtype != self._parameters[i].dtype or \
                    gradients[i].shape != self._parameters[i].shape:
                raise TypeError("SpecOptimizer: each gradient must have its parameter's "
                                "dtype and shape")
        if self.graph_form == "ops":
            return self._construct_ops(gradients)
        return self._construct_custom(gradients)

    def _construct_ops(self, gradients):
        """The ops form (:mod:`.graph_ops`): the step's lr, the generated step over the
        parameters, then ``global_step`` (and a scheduled lr's next value)."""
        if self._follows:
            done = self._ops_step(self._ops_map, self._parameters, gradients,
                                  self.spec_state_parameters, self.global_step,
                                  self._ops_constant_lr(), self._ops_k)
            ops.assign_add(self.global_step, ops.depend(self._one, done))
            return ops.depend(True, done)
        both = self._ops_scheduled_lr()
        done = self._ops_step(self._ops_map, self._parameters, gradients,
                              self.spec_state_parameters, self.global_step, both[0],
                              self._ops_k)
        ops.assign_add(self.global_step, ops.depend(self._one, done))
        ops.assign(self.learning_rate, ops.depend(ops.cast(both[1], mstype.float32), done))
        return ops.depend(True, done)

    def _ops_constant_lr(self):
        """A constant spec lr as :meth:`lr_of_step` takes it: in double precision, unless
        ``learning_rate`` was written from outside (then that float32 value)."""
        stored = self.learning_rate
        return ops.where(stored == self._ops_lr32, self._ops_lr64,
                         ops.cast(stored, mstype.float64))

    def _ops_scheduled_lr(self):
        """A scheduled lr: this step's and the next step's, float64 (see
        :class:`.graph_ops.LrSource`)."""
        if self._ops_lr_kind == "table":
            return ops.concat((ops.gather(self._ops_lr_table, self.global_step, 0),
                               ops.gather(self._ops_next_table, self.global_step, 0)))
        return self._ops_host(self.global_step, self.learning_rate)

    def _construct_custom(self, gradients):
        """The custom form (:mod:`.graph`): the host operator, then one AOT operator of
        the kernel VM per parameter."""
        packed = self._host(self.global_step, self.learning_rate)
        done = ()
        for i in range(self._n):
            start, count = self._state_layout[i]
            args = (packed, self._aot_index[i], self._parameters[i], gradients[i]) + \
                self.spec_state_parameters[start:start + count]
            done = done + (self._aot[i](*args),)
        ops.assign_add(self.global_step, ops.depend(self._one, done))
        if not self._follows:
            ops.assign(self.learning_rate,
                       ops.depend(ops.cast(packed[0], mstype.float32), done))
        return ops.depend(True, done)

    def step_python(self, gradients):
        """One step where Python calls the optimizer (see the module): the step of
        :class:`unified_opt.step_loop.StepLoop` on the engines of :mod:`.engines`."""
        self._check(gradients)
        step0 = int(host_copy(self.global_step)[0])
        if step0 != self.python_global_step:
            self.stepped_in_graph = True         # (add_param_group refuses from now on)
        # the lr first: past total_steps (or an lr set from outside with a schedule)
        # raises before anything changes
        self._surface.check_groups()
        lr = self._lr_of_step(step0)
        joined = check_joined(self, step0)
        self._loop_host.begin(list(gradients), self._surface.lrs(lr), step0, joined)
        try:
            taken = self._loop.step()
        finally:
            self._loop_host.begin(None, None, None, None)
        self.skipped.append(not taken)
        if not taken:
            return False
        if self.exchange is not None:
            self.exchange.stats["steps"] += 1
        if not self.follows_learning_rate:
            self._write(self.learning_rate, self.spec.lr_at(step0 + 1))
        return True

    @staticmethod
    def _write(parameter, value) -> None:
        """``parameter`` (a counter or the lr) set to ``value``: in its host memory on the
        CPU (no MindSpore operation), else by ``ops.assign``."""
        view = host_view(parameter)
        if view is not None:
            view[...] = value
        else:
            ops.assign(parameter, Tensor(np.full(parameter.shape, value,
                                                 dtype=numpy_dtype(parameter.dtype))))

    def _check(self, gradients) -> None:
        if not isinstance(gradients, tuple):
            raise TypeError(f"SpecOptimizer: gradients must be a tuple of Tensors in parameter "
                            f"order, got {type(gradients).__name__}")
        if len(gradients) != len(self._parameters):
            raise ValueError(length_refusal(self, len(gradients)))
        for p, grad in zip(self._parameters, gradients):
            if not isinstance(grad, Tensor):
                # a RowTensor (a sparse embedding's gradient in a graph) is not a Tensor
                raise TypeError(f"SpecOptimizer: the gradient of {p.name} must be a Tensor, "
                                f"got {type(grad).__name__} (sparse gradients are not "
                                f"supported here)")
        # shape, dtype: the step loop's check (unified_opt.step_loop.check_gradients)

    def spec_state(self, p) -> dict:
        index = next(i for i, q in enumerate(self._parameters) if q is p)
        return dict(self._slots[index])

    def train(self) -> None:
        """Parameters to the training point (schedule-free specs; see
        :mod:`unified_opt.weight_swap`): Python, not a graph (call it outside
        ``construct``), in numpy over the parameters' host copies."""
        self._swap.train(self._moved())

    def eval(self) -> None:
        """Parameters to the point to evaluate at (schedule-free specs; see
        :mod:`unified_opt.weight_swap`), as :meth:`train`."""
        self._swap.eval(self._moved())

    def _moved(self) -> list[Moved]:
        return [Moved(plan.spec, host_copy(p),
                      {key: host_copy(slot) for key, slot in slots.items()}, numpy_ops,
                      lambda value, p=p: _assign(p, value))
                for p, plan, slots in zip(self._parameters, self._plans, self._slots)]


def _assign(parameter, value) -> None:
    """``parameter`` set to the array ``value``: in its host memory on the CPU, else by
    ``ops.assign``."""
    view = host_view(parameter)
    if view is not None:
        view[...] = value
    else:
        ops.assign(parameter, Tensor(np.asarray(value, dtype=numpy_dtype(parameter.dtype))))


def _host_lr(optimizer):
    """The ops form's lr operator on the CPU (a scheduled lr without total_steps): the
    step's lr as :meth:`SpecOptimizer.lr_of_step` gives it, and the next step's spec lr,
    float64. A function, not a method: MindSpore's registry of pyfunc operators keeps
    it."""
    def value(global_step, learning_rate) -> np.ndarray:
        step0 = int(np.asarray(global_step).reshape(-1)[0])
        lr = optimizer.lr_of_step(step0, float(np.asarray(learning_rate).reshape(-1)[0]))
        return np.array([lr, optimizer.spec.lr_at(step0 + 1)], dtype=np.float64)
    return value


class _Host(Host):
    """What :class:`~unified_opt.step_loop.StepLoop` asks of a :class:`SpecOptimizer`.

    MindSpore's gradient tuple holds one gradient for every parameter (a parameter the
    loss does not reach gets zeros), so every parameter is updated at every step taken:
    each parameter's count of updates is ``global_step``, the one counter (as in
    MindSpore's own optimizers), less the step it joined at (a parameter added by
    ``add_param_group``: :mod:`.added_groups`), and the update's ``step`` is that count
    plus one."""

    ops = mindspore_ops
    owner = "SpecOptimizer"
    describe = staticmethod(describe)

    def __init__(self, optimizer: SpecOptimizer):
        self.optimizer = optimizer
        self._gradients: list | None = None
        self._lrs: list[float] | None = None
        self._taken: int | None = None
        self._joined = None

    def begin(self, gradients: list | None, lrs: list[float] | None,
              taken: int | None, joined) -> None:
        """The step's gradients, each param group's lr, ``global_step`` and each
        parameter's joining step (:mod:`.added_groups`; read before the loop runs: the lr
        may refuse the step)."""
        self._gradients, self._lrs, self._taken = gradients, lrs, taken
        self._joined = joined

    def gradients(self) -> list:
        return self._gradients

    def prepare(self, spec, plans, grads: list) -> list | None:
        """The gradient pre-step (:mod:`unified_opt.pre_step`). On the CPU with the kernel
        VM or an exchange it runs in numpy over the gradients' own memory (one MindSpore
        operation in PyNative costs about 0.5 ms; numpy's float32 follows the same
        rules), its results numpy arrays the engines read; else in MindSpore
        operations."""
        optimizer, gradients = self.optimizer, grads
        on_host = optimizer._kernels is not None or optimizer.exchange is not None
        if not on_host or not has_pre_step(spec):
            return prepare_gradients(spec, plans, gradients, mindspore_ops)
        views = [host_view(g) for g in gradients]
        if any(v is None for v in views):
            return prepare_gradients(spec, plans, gradients, mindspore_ops)
        with np.errstate(all="ignore"):          # inf and NaN are the pre-step's to judge
            return prepare_gradients(spec, plans, views, numpy_ops)

    def steps_taken(self) -> int:
        return self._taken

    def lr_group(self, index: int) -> object:
        return self.optimizer._surface.group_of[index]

    def lr(self, index: int, t: int) -> float:
        return self._lrs[self.optimizer._surface.group_of[index]]

    def group_spec(self, index: int, spec):
        return self.optimizer._surface.step_spec(self.optimizer._surface.group_of[index])

    def state(self, index: int, spec) -> dict:
        return self.optimizer._slots[index]

    def advance(self, indices: list[int], states: list[dict]) -> list[int]:
        # every parameter has a gradient at every step (see the class): global_step + 1
        # (which finish() writes) less the step the parameter joined at (add_param_group)
        after = self.steps_taken() + 1
        return [after - int(self._joined[i]) for i in indices]

    def finish(self, t: int) -> None:
        self.optimizer._write(self.optimizer.global_step, t)
        self.optimizer.python_global_step = t
