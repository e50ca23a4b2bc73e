"""A MindSpore optimizer that runs a spec's own update (written once, in the spec).

GRAPH mode does not work: the step reads its counter as a Python int and the spec's
update is Python code over tensors, which MindSpore cannot compile. ``build`` refuses
GRAPH_MODE; a call under GRAPH_MODE or ``@ms.jit`` (also inside a compiled
TrainOneStepCell) fails to compile ("'asnumpy' is not supported in 'construct'") before
changing anything (tested). In PyNative mode it works in ``ms.Model(net, loss_fn,
optimizer=opt).train(...)``, ``nn.TrainOneStepCell`` and ``value_and_grad`` then
``opt(grads)`` (tested).
"""

from __future__ import annotations

import numpy as np
from mindspore import Parameter, ParameterTuple, Tensor, nn, ops
from mindspore import dtype as mstype

from unified_opt.pre_step import prepare_gradients
from unified_opt.schedules import Schedule

from .cells import past_total_steps
from .kernels import MindSporeKernels
from .ops import mindspore_ops


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
    parameter's ``plan.spec.at_step(step)`` update. A skipped call (``skip_nonfinite``
    and non-finite unscaled gradients) changes nothing, not ``global_step`` either, and
    returns False; ``skipped`` (``uo.skipped_steps``) gets one bool per call. A
    data-parallel spec (DGC) built after ``mindspore.communication.init()`` gets an
    ``exchange`` (:class:`.exchange.MindSporeExchange`): this process is one worker of
    ``spec.exchange_step``.
    """

    def __init__(self, params, spec, plans, total_steps: int | None = None, exchange=None,
                 compile="auto"):
        super().__init__(float(spec.lr_at(0)), list(params))
        #: how the update runs (``uo.build(..., options={"compile": ...})``): "auto" and
        #: True on the kernel VM (:mod:`.kernels`), False eagerly; a data-parallel spec's
        #: exchange and an update that does not trace run eagerly (not ``compile``: that
        #: is ``Cell.compile``)
        self.compile_mode = compile
        self._kernels = (MindSporeKernels(compile, type(self).__name__)
                         if compile in ("auto", True) and exchange is None else None)
        self.spec = spec
        #: a data-parallel spec's exchange over the ranks (None: world size 1)
        self.exchange = exchange
        self.total_steps = total_steps
        self._plans = list(plans)               # one plan per parameter (groups applied)
        self._slots = []                        # per parameter: state name -> Parameter
        self.skipped: list[bool] = []
        flat = []
        for p, plan in zip(self._parameters, self._plans):
            initial = plan.spec.init(p, mindspore_ops)
            slots = {key: Parameter(initial[key], name=f"{key}.{p.name}",
                                    requires_grad=False)
                     for key in initial}
            self._slots.append(slots)
            flat.extend(slots.values())
        self.spec_state_parameters = ParameterTuple(flat)
        self._one = Tensor([1], mstype.int32)

    @property
    def follows_learning_rate(self) -> bool:
        """Whether an lr written into ``learning_rate`` from outside is used (constant
        spec lr) rather than refused (scheduled lr: the spec owns every step's lr)."""
        return not isinstance(self.spec.lr, Schedule)

    def next_lr(self) -> float:
        """The lr the next call will use (before any group's factor)."""
        return self._lr_of_step(int(self.global_step.asnumpy()[0]))

    def _lr_of_step(self, step0: int) -> float:
        lr = float(self.spec.lr_at(step0))
        stored = self.learning_rate.asnumpy()
        if stored == np.float32(lr):
            return lr                      # the spec's value, in double precision
        if self.follows_learning_rate:
            return float(stored)
        raise RuntimeError(f"SpecOptimizer: learning_rate was set to {float(stored)} from "
                           f"outside; with a scheduled lr the own implementation takes the lr "
                           f"from the spec ({lr} at step {step0})")

    def construct(self, gradients):
        self._check(gradients)
        step0 = int(self.global_step.asnumpy()[0])
        if self.total_steps is not None and step0 >= self.total_steps:
            raise past_total_steps(type(self).__name__, self.total_steps, step0)
        lr = self._lr_of_step(step0)
        prepared = prepare_gradients(self.spec, self._plans, list(gradients), mindspore_ops)
        self.skipped.append(prepared is None)
        if prepared is None:
            return False
        jobs, kept = [], []
        for p, grad, plan, slots in zip(self._parameters, prepared, self._plans, self._slots):
            spec = plan.spec.at_step(step0)
            if self._kernels is not None:
                job = self._kernels.job(p, grad, spec, slots, plan.lr(lr), step0 + 1, kept)
                if job is not None:
                    jobs.append(job)
                    continue
            if self.exchange is None:
                new_p, new_state = spec.update(p, grad, dict(slots), lr=plan.lr(lr),
                                               step=step0 + 1, ops=mindspore_ops)
            else:       # one local worker; the exchange sums over the ranks
                new_p, (new_state,) = spec.exchange_step(
                    p, [grad], [dict(slots)], lr=plan.lr(lr), step=step0 + 1,
                    ops=mindspore_ops, exchange=self.exchange)
            ops.assign(p, new_p)
            for key, value in new_state.items():
                ops.assign(slots[key], value)
        if jobs:
            self._kernels.run(jobs)
        ops.assign_add(self.global_step, self._one)
        if self.exchange is not None:
            self.exchange.stats["steps"] += 1
        if not self.follows_learning_rate:
            ops.assign(self.learning_rate, Tensor(self.spec.lr_at(step0 + 1), mstype.float32))
        return True

    def _check(self, gradients) -> None:
        if not isinstance(gradients, tuple):
            raise TypeError(f"SpecOptimizer: gradients must be a tuple of Tensors in parameter "
                            f"order, got {type(gradients).__name__}")
        if len(gradients) != len(self._parameters):
            raise ValueError(f"SpecOptimizer: got {len(gradients)} gradients for "
                             f"{len(self._parameters)} parameters")
        for p, grad in zip(self._parameters, gradients):
            if not isinstance(grad, Tensor):
                raise TypeError(f"SpecOptimizer: the gradient of {p.name} must be a Tensor, "
                                f"got {type(grad).__name__}")
            if grad.dtype != p.dtype:
                raise TypeError(f"SpecOptimizer: the gradient of {p.name} is {grad.dtype}, "
                                f"the parameter is {p.dtype}")
            if grad.shape != p.shape:
                raise ValueError(f"SpecOptimizer: the gradient of {p.name} has shape "
                                 f"{grad.shape}, the parameter {p.shape}")

    def spec_state(self, p) -> dict:
        index = next(i for i, q in enumerate(self._parameters) if q is p)
        return dict(self._slots[index])
