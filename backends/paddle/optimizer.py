"""Paddle classes that run a spec: :class:`SpecOptimizer` (the spec's own update) and
:class:`ScheduleLR` (a scheduled lr as a Paddle LR scheduler)."""

from __future__ import annotations

import paddle
from paddle.optimizer.lr import LRScheduler
from paddle.utils import unique_name

from unified_opt.pre_step import prepare_gradients

from .kernels import PaddleKernels
from .ops import paddle_ops

STEP = "step"   # accumulator holding each parameter's count of completed steps


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

    Each step: the gradient pre-step (:func:`unified_opt.pre_step.prepare_gradients`:
    unscale, skip a non-finite step, clip, centralise) once over all parameters, then
    per parameter ``plan.spec.at_step(t).update(...)`` with the parameter's lr
    ``plan.lr(lr)`` (``plans``: one :class:`unified_opt.groups.ParameterPlan` each).
    ``skipped`` gets one bool per step call (``uo.skipped_steps``). A data-parallel
    spec (DGC) built after ``paddle.distributed.init_parallel_env`` gets an ``exchange``
    (:class:`.exchange.PaddleExchange`): this process is one worker of
    ``spec.exchange_step``.

    State lives in Paddle accumulators (so ``state_dict``/``set_state_dict`` carry it):
    the spec's state arrays under the spec's names plus ``step``, an int64 [1] counter.
    They are created here, not at the first step, inside ``unique_name.guard()``: their
    names are then ``<param.name>_<state>_0`` in every build, and a state dict saved
    from one build loads into the next one over the same parameters.
    """

    def __init__(self, params, spec, plans, learning_rate, skipped: list | None = None,
                 exchange=None, compile="auto"):
        super().__init__(learning_rate=learning_rate, parameters=params)
        self.spec = spec
        #: how the update runs (``uo.build(..., options={"compile": ...})``): "auto" and
        #: True on the kernel VM (:mod:`.kernels`), False eagerly; a data-parallel spec's
        #: exchange and an update that does not trace run eagerly
        self.compile_mode = compile
        self._kernels = PaddleKernels.for_optimizer(compile, type(self).__name__,
                                                    exchanges=exchange is not None)
        if self._kernels is not None:
            self._kernels.require(
                (p.name, plan.spec, tuple(p.shape), str(p.dtype).removeprefix("paddle."),
                 "" if p.place.is_cpu_place() and p.is_contiguous() else
                 f"a parameter on {p.place} or not contiguous")
                for p, plan in zip(params, plans))
        #: a data-parallel spec's exchange over the ranks (None: world size 1)
        self.exchange = exchange
        self.skipped = [] if skipped is None else skipped
        self._plans = {p.name: plan for p, plan in zip(params, plans)}
        # per parameter, the state names its spec.init made (factored specs: they
        # depend on the parameter's shape)
        self._state_names: dict[str, tuple[str, ...]] = {}
        with unique_name.guard():
            for p, plan in zip(params, plans):
                initial = plan.spec.init(p.detach(), paddle_ops)
                if STEP in initial:
                    raise ValueError(f"SpecOptimizer: {plan.spec.name} has a state named "
                                     f"{STEP!r}, which is the step counter's accumulator")
                self._state_names[p.name] = tuple(initial)
                self._add_accumulator(STEP, p, dtype=paddle.int64, shape=[1])
                for key, value in initial.items():
                    self._add_accumulator(key, p, dtype=value.dtype,
                                          shape=value.shape).set_value(value)

    @paddle.no_grad()
    def step(self) -> None:
        self._step(self._parameter_list)

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
        found_inf = self._get_auxiliary_var("found_inf")
        if found_inf is not None:
            # paddle.amp.GradScaler sets it and reads it back; like Paddle's own
            # optimizers, skip the step when the unscaled gradients hold inf/nan (the
            # scaler's skip, not skip_nonfinite's: the schedule advances as natively).
            self._set_auxiliary_var("found_inf", bool(found_inf))
            if found_inf:
                self.skipped.append(False)
                return
        params = [p for p in params if not p.stop_gradient]
        grads = [p._grad_ivar() for p in params]
        prepared = prepare_gradients(self.spec, [self._plans[p.name] for p in params],
                                     grads, paddle_ops)
        self.skipped.append(prepared is None)
        if prepared is None:
            if isinstance(self._learning_rate, ScheduleLR):
                self._learning_rate.skipped_steps += 1
            return
        lr = self.get_lr()
        jobs, kept, on_vm = [], [], []
        for param, grad in zip(params, prepared):
            if grad is not None:
                job = self._update(param, grad, lr, kept)
                if job is not None:
                    jobs.append(job)
                    on_vm.append(param)
        if jobs:
            self._kernels.run(jobs)
            for param in on_vm:    # the VM wrote in place: autograd's version check sees it
                param._bump_inplace_version()
        if self.exchange is not None:
            self.exchange.stats["steps"] += 1

    def _create_accumulators(self, block, parameters):
        pass   # all made in __init__

    def _update(self, param, grad, lr: float, kept: list):
        """One parameter's update at the spec's lr ``lr``: eagerly, or the kernel VM's
        job for it (returned; the caller runs the jobs)."""
        plan = self._plans[param.name]
        counter = self._get_accumulator(STEP, param)
        taken = int(counter.item())
        state = {key: self._get_accumulator(key, param)
                 for key in self._state_names[param.name]}
        spec = plan.spec.at_step(taken)
        paddle.assign(counter + 1, output=counter)
        if self._kernels is not None:
            job = self._kernels.job(param, grad, spec, state, plan.lr(lr), taken + 1, kept)
            if job is not None:
                return job
        if self.exchange is None:
            new_param, new_state = spec.update(param.detach(), grad, state, lr=plan.lr(lr),
                                               step=taken + 1, ops=paddle_ops)
        else:       # one local worker; the exchange sums over the ranks
            new_param, (new_state,) = spec.exchange_step(
                param.detach(), [grad], [state], lr=plan.lr(lr), step=taken + 1,
                ops=paddle_ops, exchange=self.exchange)
        paddle.assign(new_param, output=param)
        for key, value in new_state.items():
            paddle.assign(value, output=state[key])
        return None

    def spec_state(self, p) -> dict:
        return {key: self._get_accumulator(key, p) for key in self._state_names[p.name]}
