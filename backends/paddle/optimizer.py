"""Paddle classes that run a spec: :class:`SpecOptimizer` (the spec's own update) and
:class:`ScheduleLR` (a scheduled lr as a Paddle LR scheduler)."""

from __future__ import annotations

import numpy as np
import paddle
from paddle.optimizer.lr import LRScheduler
from paddle.utils import unique_name

from unified_opt.step_loop import Host, StepLoop
from unified_opt.storage import refuse_rounding
from unified_opt.weight_swap import Moved, WeightSwap

from .engines import Eager, Kernels
from .kernels import PaddleKernels
from .loading import check_state_dict
from .native import SELECTED_ROWS_HINT, describe
from .ops import paddle_ops
from .surface import attach, step_lrs

STEP = "step"   # accumulator holding each parameter's count of updates
#: accumulator (int64 [1], on the first parameter) holding the optimizer's count of
#: steps taken: the position of the per-step hyperparameters (``spec.at_step``)
STEPS_TAKEN = "steps_taken"


class ScheduleLR(LRScheduler):
    """``paddle.optimizer.lr.LRScheduler`` whose lr at ``last_epoch = t`` is
    ``schedule(t - skipped_steps)``: in the usual loop ``opt.step(); sched.step()`` the
    0-based step t runs with ``schedule(t)``, and a step the optimizer skipped
    (``skip_nonfinite``) does not advance the schedule (the lr index is the count of
    steps taken; :class:`SpecOptimizer` counts the skips here)."""

    def __init__(self, schedule):
        self.schedule = schedule
        self.skipped_steps = 0
        super().__init__(learning_rate=schedule(0))   # sets last_epoch = 0

    def get_lr(self) -> float:
        return self.schedule(self.last_epoch - self.skipped_steps)

    def state_keys(self) -> None:
        self.keys = ["last_epoch", "last_lr", "skipped_steps"]

    def set_state_dict(self, state_dict) -> None:
        # state saved before skipped steps were counted has none
        super().set_state_dict({"skipped_steps": 0, **state_dict})


class SpecOptimizer(paddle.optimizer.Optimizer):
    """``paddle.optimizer.Optimizer`` running the spec's own update.

    The step is :class:`unified_opt.step_loop.StepLoop`'s, the same on every backend:
    every gradient checked against its parameter first (the same shape, no broadcasting,
    dtype, place, and dense: :func:`.native.describe`; a mismatch raises naming the
    parameter before anything changes: a float64 gradient would otherwise turn a float32
    parameter and its state into float64), the gradient pre-step
    (:func:`unified_opt.pre_step.prepare_gradients`: unscale, skip a non-finite step,
    clip, centralise) once over all parameters, then for each parameter with a gradient
    ``plan.spec.at_step(t).update(...)``, ``t`` the optimizer's steps
    taken, ``step`` the parameter's own count of updates, with the parameter's lr
    ``plan.lr(lr)`` (``plans``: one :class:`unified_opt.groups.ParameterPlan` each), on
    the engines of :mod:`.engines` (the kernel VM, then eagerly). ``skipped`` gets one
    bool per step call (``uo.skipped_steps``). A data-parallel spec (DGC) built after
    ``paddle.distributed.init_parallel_env`` gets an ``exchange``
    (:class:`.exchange.PaddleExchange`): this process is one worker of
    ``spec.exchange_step``.

    State lives in Paddle accumulators (so ``state_dict``/``set_state_dict`` carry it):
    the spec's state arrays under the spec's names plus ``step``, an int64 [1] count of
    the parameter's updates, and on the first parameter ``steps_taken``, an int64 [1]
    count of the optimizer's steps (a parameter without a gradient at a step is not
    updated, so no parameter's ``step`` can stand for it; an accumulator, unlike an
    attribute, travels in ``state_dict``). They are created here, not at the first
    step, inside ``unique_name.guard()``: their names are then
    ``<param.name>_<state>_0`` in every build, and a state dict saved from one build
    loads into the next one over the same parameters.
    """

    def __init__(self, params, spec, plans, learning_rate, skipped: list | None = None,
                 exchange=None, compile="auto"):
        params, plans = list(params), list(plans)
        refuse_rounding(type(self).__name__, "Paddle", [plan.spec for plan in plans],
                        [(p.name, str(p.dtype).removeprefix("paddle.")) for p in params])
        super().__init__(learning_rate=learning_rate, parameters=params)
        self.spec = spec
        #: how the update runs (``uo.build(..., options={"compile": ...})``): "auto" and
        #: True on the kernel VM (:mod:`.kernels`), False eagerly; a data-parallel spec's
        #: exchange and an update that does not trace run eagerly
        self.compile_mode = compile
        self._kernels = PaddleKernels.for_optimizer(compile, type(self).__name__,
                                                    exchanges=exchange is not None)
        self._require_kernels(params, plans)
        #: a data-parallel spec's exchange over the ranks (None: world size 1)
        self.exchange = exchange
        self.skipped = [] if skipped is None else skipped
        self._params = params
        self._plans = {p.name: plan for p, plan in zip(params, plans)}
        # per parameter, the state names its spec.init made (factored specs: they
        # depend on the parameter's shape)
        self._state_names: dict[str, tuple[str, ...]] = {}
        with unique_name.guard():
            for i, (p, plan) in enumerate(zip(params, plans)):
                initial = plan.spec.init(p.detach(), paddle_ops)
                clash = sorted({STEP, STEPS_TAKEN} & set(initial))
                if clash:
                    raise ValueError(f"SpecOptimizer: {plan.spec.name} has a state named "
                                     f"{clash[0]!r}, which is a step counter's accumulator")
                self._state_names[p.name] = tuple(initial)
                self._add_accumulator(STEP, p, dtype=paddle.int64, shape=[1])
                if i == 0:
                    self._add_accumulator(STEPS_TAKEN, p, dtype=paddle.int64, shape=[1])
                self._adopt_state(p, initial)
        engines = [Kernels(self._kernels)] if self._kernels is not None else []
        self._engines = engines + [Eager(exchange)]
        #: torch's surface: ``param_groups`` and ``defaults`` (:mod:`.surface`)
        self._surface = attach(self, spec, plans, params, None)
        self._host = _Host(self)
        self._loop = StepLoop(spec, plans, params, lambda index, spec: self._engines,
                              self._host)
        self._swap = WeightSwap(type(self).__name__)
        self._built = True

    def _require_kernels(self, params, plans) -> None:
        """``compile=True``: every parameter's update must run on the kernels (raised
        before any step; :meth:`unified_opt.kernels.runtime.KernelPath.require`)."""
        if self._kernels is not None:
            self._kernels.require(
                (p.name, plan.spec, tuple(p.shape), str(p.dtype).removeprefix("paddle."),
                 "" if p.place.is_cpu_place() and p.is_contiguous() else
                 f"a parameter on {p.place} or not contiguous")
                for p, plan in zip(params, plans))

    def _adopt_state(self, p, initial: dict) -> None:
        """Make ``initial`` (``spec.init``'s arrays for ``p``) ``p``'s accumulators
        without a copy: each accumulator is made empty (shape [0]: Paddle fills it
        with nothing) and then takes the initial tensor's storage
        (``Tensor._share_underline_tensor_to``: the accumulator keeps its name and
        takes the tensor's data, shape and dtype). Filling an accumulator of the full
        shape and copying the initial value in (``set_value``) held every state
        array twice while the optimizer was built: a 50M-element AdamW peaked at 1445
        MiB against 1249 for Paddle's own AdamW
        (benchmarks/results/paddle_own_memory.md). An initial tensor whose storage is
        already taken (the parameter's, or another state's: a spec may hand back
        one tensor twice) is copied instead, so no two of them share memory."""
        taken = [p]
        for key in list(initial):
            value = initial.pop(key)
            shared = any(value._is_shared_buffer_with(t) for t in taken)
            accumulator = self._add_accumulator(
                key, p, dtype=value.dtype, shape=list(value.shape) if shared else [0])
            if shared:
                accumulator.set_value(value)
            else:
                value._share_underline_tensor_to(accumulator)
            taken.append(accumulator)

    def _add_param_group(self, param_group) -> None:
        if not getattr(self, "_built", False):
            super()._add_param_group(param_group)
            return
        self.add_param_group(param_group)

    def add_param_group(self, param_group: dict) -> None:
        """torch's ``add_param_group`` (Paddle's ``_add_param_group`` too) after
        ``uo.build``: the group's parameters get plans from its keys (torch's ``lr``,
        Paddle's ``learning_rate`` factor, the spec's hyperparameters:
        :func:`unified_opt.param_groups.added_group`), their accumulators, a param group
        read at every step like the others, and the build's record takes them, so
        ``uo.save_state`` writes their state and groups. Refused where the optimizer
        exchanges gradients over ranks (its exchange holds the parameters it was built
        with)."""
        from unified_opt.backend import record_of
        from unified_opt.param_groups import added_group

        record = record_of(self)
        first = len(self._params)
        _, params, plans = added_group(record, param_group, "SpecOptimizer", "paddle",
                                       lambda p: p.name, exchanges=self.exchange is not None)
        refuse_rounding(type(self).__name__, "Paddle", [plan.spec for plan in plans],
                        [(p.name, str(p.dtype).removeprefix("paddle.")) for p in params])
        self._require_kernels(params, plans)
        with unique_name.guard():
            for p, plan in zip(params, plans):
                initial = plan.spec.init(p.detach(), paddle_ops)
                self._state_names[p.name] = tuple(initial)
                self._add_accumulator(STEP, p, dtype=paddle.int64, shape=[1])
                self._adopt_state(p, initial)
        self._surface.add(plans, params, float(self.spec.lr), first)
        self._params.extend(params)
        self._parameter_list.extend(params)      # (Paddle's _param_groups is this list)
        self._plans.update({p.name: plan for p, plan in zip(params, plans)})
        self._loop.extend(params, plans)

    def step(self, closure=None):
        """One step over every parameter with a gradient; ``closure`` (torch's form: it
        recomputes the loss and the gradients) runs first, with gradients on, and its
        loss is returned (None without one)."""
        loss = None
        if closure is not None:
            with paddle.enable_grad():
                loss = closure()
        with paddle.no_grad():
            self._step(self._parameter_list)
        return loss

    @paddle.no_grad()
    def train(self) -> None:
        """Parameters to the training point (schedule-free specs; see
        :mod:`unified_opt.weight_swap`)."""
        self._swap.train(self._moved())

    @paddle.no_grad()
    def eval(self) -> None:
        """Parameters to the point to evaluate at (schedule-free specs; see
        :mod:`unified_opt.weight_swap`)."""
        self._swap.eval(self._moved())

    def _moved(self) -> list[Moved]:
        return [Moved(self._plans[p.name].spec, p.detach(), self.spec_state(p), paddle_ops,
                      p.set_value) for p in self._params]

    @paddle.no_grad()
    def minimize(self, loss, startup_program=None, parameters=None, no_grad_set=None):
        # the base class's minimize would run each parameter's update without the
        # pre-step; this one collects the gradients its way and takes one step
        params_grads = self.backward(loss, startup_program, parameters, no_grad_set)
        self._step([p for p, _ in params_grads])
        return [], params_grads

    def _step(self, params) -> None:
        # Not the base class's step: that one skips zero-size parameters (Paddle counts
        # them as uninitialised), while a spec's scalar state (e.g. NAdam's mu_product)
        # advances for them too.
        self._check_unchanged()
        self._swap.check_step(plan.spec for plan in self._plans.values())
        found_inf = self._get_auxiliary_var("found_inf")
        if found_inf is not None:
            # paddle.amp.GradScaler sets it and reads it back; like Paddle's own
            # optimizers, skip the step when the unscaled gradients hold inf/nan (the
            # scaler's skip, not skip_nonfinite's: the schedule advances as natively).
            self._set_auxiliary_var("found_inf", bool(found_inf))
            if found_inf:
                self.skipped.append(False)
                return
        self._host.step_lrs = step_lrs(self)
        self._host.stepping = {id(p) for p in params if not p.stop_gradient}
        try:
            taken = self._loop.step()
        finally:
            self._host.stepping = set()
        self.skipped.append(not taken)
        if not taken:
            if isinstance(self._learning_rate, ScheduleLR):
                self._learning_rate.skipped_steps += 1
            return
        if self.exchange is not None:
            self.exchange.stats["steps"] += 1

    def _check_unchanged(self) -> None:
        """Refuse, before the step changes anything, what Paddle's optimizers would read
        and the own path would not: a parameter added to (or removed from) the parameter
        list after the build, and a regularizer, lr factor, need_clip or grad_clip set on
        the parameters or the optimizer after it (the build refuses them before)."""
        listed = self._parameter_list
        if len(listed) != len(self._params) or \
                any(a is not b for a, b in zip(listed, self._params)):
            built = {id(p) for p in self._params}
            added = [getattr(p, "name", type(p).__name__) for p in listed if id(p) not in built]
            removed = [p.name for p in self._params if all(p is not q for q in listed)]
            change = "; ".join((["added " + ", ".join(added)] if added else []) +
                               (["removed " + ", ".join(removed)] if removed else [])) \
                or "reordered"
            raise ValueError(
                f"SpecOptimizer: its parameter list (_parameter_list / _param_groups) changed "
                f"after uo.build ({change}): the own path makes each parameter's plan, state "
                f"and gradient pre-step when it is built, and would never update a parameter "
                f"added later; build a new optimizer with every parameter "
                f"(uo.build(spec, params))")
        for attribute in ("regularization", "_grad_clip"):
            if getattr(self, attribute, None) is not None:
                raise ValueError(
                    f"SpecOptimizer: {attribute} = {getattr(self, attribute)!r} was set after "
                    f"uo.build and the own path does not read it (the decay and clip are the "
                    f"spec's); build a new optimizer from spec.replace(...)")
        clipped = self.spec.grad_clip is not None
        for p in self._params:
            if p.regularizer is not None:
                raise ValueError(
                    f"SpecOptimizer: parameter {p.name} carries regularizer={p.regularizer!r}, "
                    f"set after uo.build, which the own path does not read; set "
                    f"p.regularizer = None and give the decay in the spec (or a uo.Group)")
            lr_scale = (p.optimize_attr or {}).get("learning_rate", 1.0)
            if lr_scale != 1.0:
                raise ValueError(
                    f"SpecOptimizer: parameter {p.name} carries optimize_attr['learning_rate']"
                    f"={lr_scale!r}, set after uo.build, which the own path does not read; set "
                    f"it to 1.0 (or give the factor as uo.Group(lr_scale=...))")
            if clipped and p.need_clip is False:
                raise ValueError(
                    f"SpecOptimizer: parameter {p.name} carries need_clip=False, set after "
                    f"uo.build, which the spec's grad_clip does not read; set it to True and "
                    f"leave it out with uo.Group(match=..., exclude_from=('grad_clip',))")

    def _create_accumulators(self, block, parameters):
        pass   # all made in __init__

    def set_state_dict(self, state_dict) -> None:
        """Paddle's load, after :func:`.loading.check_state_dict` found the whole dict
        fits (nothing is loaded otherwise); a dict saved before the optimizer counted its
        steps gets ``steps_taken`` from the parameters' counts."""
        check_state_dict(self, state_dict, counters=(STEP, STEPS_TAKEN),
                         optional=(STEPS_TAKEN,))
        counter = self._get_accumulator(STEPS_TAKEN, self._params[0])
        if counter.name not in state_dict:
            # saved before the optimizer counted its steps: every parameter had a
            # gradient at every step then as far as the state can tell, so the most
            # updates any parameter received is the count of steps taken
            counts = [int(np.asarray(state_dict[c.name]).reshape(-1)[0])
                      for c in self._accumulators[STEP].values() if c.name in state_dict]
            state_dict = {**state_dict,
                          counter.name: np.array([max(counts, default=0)], dtype=np.int64)}
        super().set_state_dict(state_dict)

    def steps_taken(self) -> int:
        """The optimizer's count of steps taken (skipped ones not counted)."""
        return int(self._get_accumulator(STEPS_TAKEN, self._params[0]).item())

    def spec_state(self, p) -> dict:
        return {key: self._get_accumulator(key, p) for key in self._state_names[p.name]}


class _Host(Host):
    """What :class:`~unified_opt.step_loop.StepLoop` asks of a :class:`SpecOptimizer`."""

    ops = paddle_ops
    owner = "SpecOptimizer"
    sparse_hint = SELECTED_ROWS_HINT

    def __init__(self, optimizer: SpecOptimizer):
        self.optimizer = optimizer
        #: ids of the parameters this step updates (``step``: every one that does not
        #: stop gradients; ``minimize``: those its backward gave)
        self.stepping: set[int] = set()
        #: each param group's lr for this step (:func:`.surface.step_lrs`)
        self.step_lrs: list[float] = []

    def gradients(self) -> list:
        return [p._grad_ivar() if id(p) in self.stepping else None
                for p in self.optimizer._params]

    describe = staticmethod(describe)

    def steps_taken(self) -> int:
        return self.optimizer.steps_taken()

    def lr_group(self, index: int) -> object:
        return self.optimizer._surface.group_of[index]

    def lr(self, index: int, t: int) -> float:
        # the param group's lr (:func:`.surface.step_lrs`: Paddle's lr, a ScheduleLR
        # stepped by the loop or a constant, times the group's factor, or the lr written
        # into the group)
        return self.step_lrs[self.optimizer._surface.group_of[index]]

    def group_spec(self, index: int, spec):
        return self.optimizer._surface.step_spec(self.optimizer._surface.group_of[index])

    def state(self, index: int, spec) -> dict:
        return self.optimizer.spec_state(self.optimizer._params[index])

    def advance(self, indices: list[int], states: list[dict]) -> list[int]:
        counts = []
        for i in indices:
            counter = self.optimizer._get_accumulator(STEP, self.optimizer._params[i])
            count = int(counter.item()) + 1
            counter.set_value(np.array([count], dtype=np.int64))
            counts.append(count)
        return counts

    def finish(self, t: int) -> None:
        counter = self.optimizer._get_accumulator(STEPS_TAKEN, self.optimizer._params[0])
        counter.set_value(np.array([t], dtype=np.int64))
