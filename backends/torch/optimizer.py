"""A torch optimizer that runs a spec's own update (written once, in the spec)."""

from __future__ import annotations

import math
import warnings

import torch
from torch.autograd.graph import increment_version

from unified_opt.pre_step import prepare_gradients

from .compiled import check_mode, compilable, first_compiled_step, kernel
from .kernels import TorchKernels
from .offload import HostStaging, keep_state_on_host
from .ops import DTensor, torch_ops
from .steps import STEPS_TAKEN, checked_gradients, partition, steps_taken

STEP = "step"


class SpecOptimizer(torch.optim.Optimizer):
    """``torch.optim.Optimizer`` driving each parameter's ``plan.spec.update``.

    ``plans`` (:class:`unified_opt.groups.ParameterPlan`, one per parameter) and ``lrs``
    (each parameter's lr for a spec lr of ``lr`` or, with a schedule, 1.0) make the param
    groups: one per distinct (spec, lr), as on the native path. The lr is
    ``param_groups[i]["lr"]``, so torch LR schedulers drive it as usual.

    Each step runs ``unified_opt.pre_step.prepare_gradients`` once over every parameter
    (loss scale, non-finite skip, clipping, centralisation; the prepared gradients are
    left in ``p.grad``), then ``plan.spec.at_step(t)`` for each parameter, ``t`` the
    steps taken so far (``param_groups[0]["steps_taken"]``). A skipped step changes
    nothing and appends True to ``skipped`` (False otherwise).

    State per parameter: ``step`` (a float tensor, like torch's own optimizers) and the
    spec's state arrays under the spec's names (those ``spec.init`` made: for factored
    specs they depend on the parameter's shape).

    A data-parallel spec (DGC) built in a ``torch.distributed`` process group gets an
    ``exchange`` (:class:`.exchange.TorchExchange`): its step runs
    ``spec.exchange_step`` with this process as one worker, and the exchange sums over
    the ranks.

    ``compile`` (``uo.build(..., options={"compile": ...})``) says how the spec's update
    runs, in place and written once in the spec whichever way:

    * CPU tensors, "auto" (default) or True: on the kernel VM, with a kernel of its own
      per program for large parameters (:mod:`.kernels`, :mod:`unified_opt.kernels`):
      "auto" compiles those in the background and the VM runs meanwhile (the same bits),
      True compiles every program before its first step. Where no C++ compiler runs,
      "auto" warns once and runs eagerly; True raises.
    * CUDA tensors, "auto" or True, and any tensor with "inductor": traced by
      ``torch.compile`` into Inductor kernels (:mod:`.compiled`; "auto" from the step at
      which the eager steps would have cost about one compile, the same on every rank).
    * False: eagerly, one framework operation at a time.

    A data-parallel spec in a process group runs eagerly (its exchange runs collectives
    between the update's halves). So do DTensor parameters (FSDP2 ``fully_shard``, tensor
    parallel): DTensor's operations reduce across the shards, so a norm, a trust ratio or
    a factored moment's mean is the whole parameter's; the new value and state keep the
    placements they started with. (An optimizer holding any DTensor runs no parameter
    through Inductor; plain CPU parameters beside them still take the kernel VM.)

    With ``offload=True`` the state lives in host memory and the update runs there on
    host copies of the parameter and gradient; only the new value goes back to the
    parameter's device (see :mod:`.offload`).
    """

    def __init__(self, params, spec, plans, lrs, offload: bool = False,
                 skipped: list | None = None, exchange=None, compile="auto"):
        params, plans, lrs = list(params), list(plans), list(lrs)
        parts = partition([(plan.spec, lr) for plan, lr in zip(plans, lrs)])
        super().__init__([{"params": [params[i] for i in indices], "lr": lrs[indices[0]]}
                          for indices in parts], {"lr": lrs[0]})
        self.spec = spec
        self.offload = offload
        self.plans = plans                 # one plan per parameter, in build order
        self.skipped = [] if skipped is None else skipped
        self._params = params
        self._group_of = [0] * len(params)
        for g, indices in enumerate(parts):
            for i in indices:
                self._group_of[i] = g
        self.param_groups[0][STEPS_TAKEN] = 0
        self._staging = HostStaging() if offload else None
        #: a data-parallel spec's exchange over the process group (None: world size 1)
        self.exchange = exchange
        if offload:
            self.register_load_state_dict_post_hook(keep_state_on_host)
        self.compile = check_mode(compile)
        eager = exchange is not None
        self._kernels = TorchKernels.for_optimizer(self.compile, type(self).__name__,
                                                   exchanges=eager)
        if self._kernels is not None and not offload:
            self._kernels.require(
                (f"parameter {i} {list(p.shape)}", plan.spec, tuple(p.shape),
                 str(p.dtype).removeprefix("torch."),
                 "" if p.device.type != "cpu" or p.is_contiguous() else "not contiguous")
                for i, (p, plan) in enumerate(zip(params, plans))
                if p.device.type == "cpu")          # CUDA: Inductor's kernels
        # the step from which Inductor runs updates (.compiled: the same step on every rank)
        sharded = any(isinstance(p, DTensor) for p in params)
        self._compiled_from = (math.inf if offload or eager or sharded else
                               first_compiled_step(self.compile, sum(p.numel() for p in params)))
        self._owned: set[int] = set()      # parameters whose state tensors own their memory

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        grads = checked_gradients(self._params, "SpecOptimizer")
        prepared = prepare_gradients(self.spec, self.plans, grads, torch_ops)
        if prepared is None:
            self.skipped.append(True)
            return loss
        t = steps_taken(self)
        jobs, kept, staged = [], [], []
        for p, grad, plan, g in zip(self._params, prepared, self.plans, self._group_of):
            if grad is None:
                continue
            if grad is not p.grad:
                p.grad = grad
            spec = plan.spec.at_step(t)
            value, grad = self._staging.fetch(p) if self.offload else (p.detach(), grad)
            state = self.state[p]
            if not state:
                state[STEP] = torch.tensor(0.0)
                state.update(plan.spec.init(value, torch_ops))
            state[STEP] += 1
            arrays = {k: a for k, a in state.items() if k != STEP}
            lr, step = self.param_groups[g]["lr"], int(state[STEP].item())
            if self._kernels is not None:
                job = self._kernels.job(value, grad, spec, arrays, lr, step, kept)
                if job is not None:
                    state.update(arrays)          # copies made for the VM's in-place writes
                    jobs.append(job)
                    staged.append((p, value))
                    continue
            if step >= self._compiled_from and compilable(spec, value) and \
                    (value.device.type == "cuda" or self.compile == "inductor") and \
                    self._step_compiled(p, value, grad, spec, state, lr, step):
                continue
            if self.exchange is None:
                new_p, new_state = spec.update(value, grad, arrays, lr=lr, step=step,
                                               ops=torch_ops)
            else:       # one local worker; the exchange sums over the ranks
                new_p, (new_state,) = spec.exchange_step(value, [grad], [arrays], lr=lr,
                                                         step=step, ops=torch_ops,
                                                         exchange=self.exchange)
            if self.offload and p.device.type != "cpu":
                value.copy_(new_p)
                HostStaging.write_back(p, value)
            else:
                p.copy_(_placed_as(new_p, p))
            for key, array in new_state.items():
                state[key] = _placed_as(array, state.get(key))
        if jobs:
            self._kernels.run(jobs)
            # the VM wrote through data_ptr: tell autograd, as an in-place op would (a
            # parameter saved for a pending backward then raises instead of misleading)
            increment_version([value for _, value in staged])
            for p, value in staged:
                HostStaging.write_back(p, value)
        self.param_groups[0][STEPS_TAKEN] = t + 1
        if self.exchange is not None:
            self.exchange.stats["steps"] += 1
        self.skipped.append(False)
        return loss

    def _step_compiled(self, p, value, grad, spec, state, lr, step) -> bool:
        """The spec's update as one compiled in-place kernel (:mod:`.compiled`); False
        when "auto" could not compile it (then this and later steps run eagerly, the
        same update, after a warning). With ``compile=True`` the failure is raised."""
        if id(p) not in self._owned:
            # the eager update may have left a state tensor aliasing the gradient or
            # another state tensor (a previous gradient kept as is): the kernel writes
            # in place, so each gets memory of its own once
            for key, array in list(state.items()):
                if key != STEP:
                    state[key] = array.clone(memory_format=torch.contiguous_format)
            self._owned.add(id(p))
        try:
            kernel(spec)(value, grad, {k: a for k, a in state.items() if k != STEP}, lr, step)
        except torch._dynamo.exc.BackendCompilerFailed as error:   # compiling, not stepping
            if self.compile in (True, "inductor"):
                raise
            warnings.warn(f"SpecOptimizer: compile='auto' could not compile the "
                          f"{spec.name} update ({type(error).__name__}: "
                          f"{str(error).splitlines()[0]}); it runs eagerly, the same update",
                          RuntimeWarning, stacklevel=3)
            self._compiled_from = math.inf
            return False
        return True

    def spec_state(self, p) -> dict:
        return {k: t for k, t in self.state.get(p, {}).items() if k != STEP}


def _placed_as(new, old):
    """``new`` with ``old``'s DTensor placements: DTensor's operations may leave a result
    replicated (a 1-row parameter's shard 0) or partial, where the parameter and its
    state stay sharded as they were made."""
    if isinstance(new, DTensor) and isinstance(old, DTensor) and \
            new.placements != old.placements:
        return new.redistribute(old.device_mesh, old.placements)
    return new
