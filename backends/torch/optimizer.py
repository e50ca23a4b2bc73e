"""A torch optimizer that runs a spec's own update (written once, in the spec)."""

from __future__ import annotations

import numpy as np
import torch

from unified_opt.param_groups import TORCH_HYPERPARAMETERS, GroupSurface
from unified_opt.pre_step import has_pre_step, prepare_gradients
from unified_opt.step_loop import Host, StepLoop
from unified_opt.storage import LOW_PRECISION, math_dtype, rounds, state_storage
from unified_opt.weight_swap import Moved, WeightSwap

from .compiled import check_mode
from .cuda import CudaKernels
from .engines import STEP, Eager, Inductor, Kernels, Offload, dtype_name, torch_dtype
from .kernels import TorchKernels
from .loading import check_loaded_state
from .offload import keep_state_on_host
from .ops import is_dtensor, torch_ops
from .state_dict import load, portable_state_dict
from .steps import SPARSE_HINT, STEPS_TAKEN, describe, steps_taken

#: torch's dtypes of :data:`~unified_opt.storage.LOW_PRECISION`
LOW_TORCH_DTYPES = frozenset(map(torch_dtype, LOW_PRECISION))


class SpecOptimizer(torch.optim.Optimizer):
    """``torch.optim.Optimizer`` driving each parameter's ``plan.spec.update``.

    ``plans`` (:class:`unified_opt.groups.ParameterPlan`, one per parameter) and ``lrs``
    (each parameter's lr for a spec lr of ``lr`` or, with a schedule, 1.0) make the param
    groups: one per distinct (spec, lr), as on the native path. The lr is
    ``param_groups[i]["lr"]``, so torch LR schedulers drive it as usual.

    The step is :class:`unified_opt.step_loop.StepLoop`'s, the same on every backend:
    every ``p.grad`` checked against its parameter first (the same shape, dtype, device,
    and dense: :func:`.steps.describe`; a mismatch raises naming the parameter before
    anything changes, on every engine, offload included), the gradient pre-step (loss
    scale, non-finite skip, clipping, centralisation; the prepared gradients are left in
    ``p.grad``), then ``plan.spec.at_step(t)`` for each
    parameter with a gradient, ``t`` the steps taken so far
    (``param_groups[0]["steps_taken"]``), on the parameter's engines
    (:mod:`.engines`). A skipped step changes nothing and appends True to ``skipped``
    (False otherwise).

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
    * CUDA tensors, "auto" or True: one Triton kernel per phase of the program over
      every tensor of a group (:mod:`.cuda`), the float32 references' operation order.
      Without Triton, or for an update these kernels do not run (DGC's top-k), "auto"
      warns once and runs eagerly; True raises when the optimizer is built.
    * any tensor with "inductor": traced by ``torch.compile`` into Inductor kernels, one
      per tensor (:mod:`.compiled`); Inductor may contract into fused multiply-adds.
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
        #: the groups' hyperparameters and what a step reads from them
        #: (:mod:`unified_opt.param_groups`); torch's own dicts, checked at the step
        self._surface = surface = GroupSurface(type(self).__name__, plans, params, 1.0,
                                               checked=False)
        for group, indices in zip(surface.groups, surface.members):
            group["lr"] = lrs[indices[0]]
        super().__init__(surface.groups, {**surface.defaults(spec), "lr": lrs[0]})
        self.spec = spec
        self.offload = offload
        self.plans = plans                 # one plan per parameter, in build order
        self.skipped = [] if skipped is None else skipped
        self._params = params
        self._group_of = surface.group_of
        self.param_groups[0][STEPS_TAKEN] = 0
        #: a data-parallel spec's exchange over the process group (None: world size 1)
        self.exchange = exchange
        if offload:
            self.register_load_state_dict_post_hook(keep_state_on_host)
        self.compile = check_mode(compile)
        eager = exchange is not None
        self._kernels = TorchKernels.for_optimizer(self.compile, type(self).__name__,
                                                   exchanges=eager)
        self._cuda = CudaKernels(self.compile, type(self).__name__) \
            if self.compile in ("auto", True) and not eager and not offload else None
        self._require_kernels(params, plans, 0)
        self._eager = Eager(exchange)
        vm = [Kernels(self._kernels)] if self._kernels is not None else []
        self._offload = Offload(vm + [self._eager]) if offload else None
        self._inductor = Inductor()
        # an optimizer holding any DTensor runs no parameter through Inductor
        self._sharded = any(is_dtensor(p) for p in params)
        self._vm = vm
        self._loop = StepLoop(spec, plans, params, self._engines, _Host(self))
        self._index = {id(p): i for i, p in enumerate(params)}
        self._init_shapes: dict = {}
        self.register_load_state_dict_pre_hook(_check_loaded_state)
        self._swap = WeightSwap(type(self).__name__)
        self._built = True

    def add_param_group(self, param_group: dict) -> None:
        """torch's ``add_param_group`` after ``uo.build`` (while torch's constructor
        runs, torch's own): the group's parameters get plans from its keys (torch's
        ``lr`` and the spec's hyperparameters: :func:`unified_opt.param_groups.
        added_group`), their engines and a param group read at every step like the
        others, and the build's record takes them, so ``uo.save_state`` writes their
        state and groups (names: give ``(name, parameter)`` pairs to save). Refused
        where the optimizer exchanges gradients over ranks (its exchange holds the
        parameters it was built with)."""
        if not getattr(self, "_built", False):
            super().add_param_group(param_group)
            return
        from unified_opt.backend import record_of
        from unified_opt.param_groups import added_group

        record = record_of(self)
        first = len(self._params)
        _, params, plans = added_group(record, param_group, "SpecOptimizer", "torch",
                                       lambda p: None, exchanges=self.exchange is not None)
        group = self._surface.add(plans, params, float(self.spec.lr), first, append=False)
        torch.optim.Optimizer.add_param_group(self, group)
        self._surface.groups = self.param_groups
        self._params.extend(params)
        self.plans.extend(plans)
        self._index.update({id(p): first + k for k, p in enumerate(params)})
        self._require_kernels(params, plans, first)
        self._loop.extend(params, plans)
        self._loop.host.resize(len(self._params))

    def _require_kernels(self, params, plans, first: int) -> None:
        """``compile=True``: every CPU parameter's update must run on the kernel VM and
        every CUDA one's on the CUDA kernels (raised before any step); ``first``: the
        first parameter's index, for the messages."""
        if self._kernels is not None and not self.offload:
            self._kernels.require(
                (f"parameter {first + k} {list(p.shape)}", plan.spec, tuple(p.shape),
                 dtype_name(p.dtype), _vm_refusal(p, plan.spec))
                for k, (p, plan) in enumerate(zip(params, plans))
                if p.device.type == "cpu" and not (self._cuda is not None
                                                   and self._cuda.claims(p, plan.spec)))
        if self._cuda is not None:
            self._cuda.require(params, plans)

    def _engines(self, index: int, spec) -> list:
        """The engines of a parameter, first to last (the module of each says what it
        runs)."""
        p = self._params[index]
        if self.exchange is not None:
            return [self._eager]
        if self._offload is not None:
            return [self._offload]
        if is_dtensor(p) or self.compile is False:
            return [self._eager]
        if self.compile == "inductor" and not self._sharded:
            return [self._inductor, self._eager]
        if self._cuda is not None and self._cuda.claims(p, spec):
            return [self._cuda, self._eager]
        if p.device.type == "cpu":
            return self._vm + [self._eager]
        return [self._eager]

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._check_groups()
        self._swap.check_step(plan.spec for plan in self.plans)
        taken = self._loop.step()
        self.skipped.append(not taken)
        if taken and self.exchange is not None:
            self.exchange.stats["steps"] += 1
        return loss

    @torch.no_grad()
    def train(self) -> None:
        """Parameters to the training point (schedule-free specs; see
        :mod:`unified_opt.weight_swap`)."""
        self._swap.train(self._moved())

    @torch.no_grad()
    def eval(self) -> None:
        """Parameters to the point to evaluate at (schedule-free specs; see
        :mod:`unified_opt.weight_swap`)."""
        self._swap.eval(self._moved())

    def _moved(self) -> list[Moved]:
        return [Moved(plan.spec, p.detach(), self.spec_state(p), torch_ops, p.detach().copy_)
                for p, plan in zip(self._params, self.plans)]

    def state_dict(self) -> dict:
        """The optimizer's state in the portable form, the same on every framework
        (:mod:`unified_opt.porting.state_dict`): ``{"format", "metadata", "tensors"}``,
        the tensors CPU copies (not the live state). torch's own form (which shares the
        live tensors; ``torch.distributed.checkpoint`` needs it):
        ``torch.optim.Optimizer.state_dict(opt)``."""
        return portable_state_dict(self)

    def load_state_dict(self, state_dict, *, transform=None, model=None) -> None:
        """Load the portable form, written on any framework (``transform``, ``model``:
        as for ``uo.load_state``), with ``uo.load_state``'s checks before anything
        changes; or torch's own form (``{"state", "param_groups"}``), through torch's
        load and this class's checks."""
        load(self, state_dict, super().load_state_dict, transform=transform, model=model)

    def spec_state(self, p) -> dict:
        return {k: t for k, t in self.state.get(p, {}).items() if k != STEP}

    def _check_groups(self) -> None:
        """The param groups' values, checked before the step changes anything
        (:meth:`unified_opt.param_groups.GroupSurface.check_groups`): ``load_state_dict``
        puts new dicts in place, so the surface reads the current ones."""
        self._surface.groups = self.param_groups
        self._surface.check_groups()

    def expected_state(self, p) -> dict[str, tuple]:
        """The shape of each state array the spec keeps for ``p`` (``spec.init`` run on
        a meta tensor of ``p``'s shape: nothing allocated)."""
        spec = self.plans[self._index[id(p)]].spec
        key = (id(spec), tuple(p.shape))
        if key not in self._init_shapes:
            like = torch.empty(p.shape, dtype=torch.float32, device="meta")
            self._init_shapes[key] = {name: tuple(array.shape)
                                      for name, array in spec.init(like, torch_ops).items()}
        return self._init_shapes[key]


def _check_loaded_state(optimizer: SpecOptimizer, state_dict: dict) -> None:
    """``load_state_dict``'s pre-hook: the groups hold no torch hyperparameter the spec
    does not have, steps taken an int >= 0, each parameter's state the spec's arrays
    (see :func:`.loading.check_loaded_state`)."""
    owner = "SpecOptimizer.load_state_dict"
    groups = state_dict["param_groups"]
    taken = groups[0].get(STEPS_TAKEN, 0) if groups else 0
    if isinstance(taken, bool) or not isinstance(taken, int) or taken < 0:
        raise ValueError(f"{owner}: param_groups[0][{STEPS_TAKEN!r}] must be an int >= 0, "
                         f"got {taken!r}")
    surface = optimizer._surface
    for g, group in enumerate(groups):
        exposed = surface.exposed[g] if g < len(surface.exposed) else {}
        for key in group.keys() & (TORCH_HYPERPARAMETERS - set(exposed)):
            raise ValueError(f"{owner}: param_groups[{g}] holds {key!r}, which "
                             f"{type(optimizer.spec).__name__} does not have: a state_dict "
                             f"of a native optimizer?")
    check_loaded_state(owner, optimizer, state_dict,
                       lambda group, p: optimizer.expected_state(p))


def _vm_refusal(p, spec) -> str:
    """Why the kernel VM cannot take this CPU parameter's update ("" where it can)."""
    if not p.is_contiguous():
        return "not contiguous"
    stored = dtype_name(p.dtype)
    if rounds(spec, stored) and stored not in LOW_PRECISION:
        return (f"state_dtype={spec.state_dtype!r} (the VM keeps the state in the "
                "parameter's dtype)")
    return ""


class _Host(Host):
    """What :class:`~unified_opt.step_loop.StepLoop` asks of a :class:`SpecOptimizer`."""

    ops = torch_ops
    owner = "SpecOptimizer"
    sparse_hint = SPARSE_HINT

    def __init__(self, optimizer: SpecOptimizer):
        self.optimizer = optimizer
        # every parameter's count of updates; each state's "step" is a 0-d view of it, so
        # a step counts with one operation (a state dict loaded or written by hand brings
        # other tensors: their values are taken back in, see advance)
        self.resize(len(optimizer._params))

    def resize(self, n: int) -> None:
        """Counts for ``n`` parameters (``add_param_group``): every state's "step" is
        linked again at its next update, its value taken back in (see advance)."""
        self._counts = torch.zeros(n)
        self._linked: list = [None] * n
        self._index: dict = {}

    def gradients(self) -> list:
        return [p.grad for p in self.optimizer._params]

    describe = staticmethod(describe)

    def prepare(self, spec, plans, grads: list) -> list | None:
        """The pre-step in the math dtype: bfloat16 and float16 gradients are read into
        float32 for it, and its results rounded back to their dtype
        (:mod:`unified_opt.storage`)."""
        if not has_pre_step(spec):
            return prepare_gradients(spec, plans, grads, self.ops)
        low = [g is not None and g.dtype in LOW_TORCH_DTYPES for g in grads]
        if not any(low):
            return prepare_gradients(spec, plans, grads, self.ops)
        prepared = prepare_gradients(spec, plans, [g.float() if widen else g
                                                   for g, widen in zip(grads, low)], self.ops)
        if prepared is None:
            return None
        return [g.to(given.dtype) if widen else g
                for g, given, widen in zip(prepared, grads, low)]

    def set_gradients(self, prepared: list) -> None:
        for p, grad in zip(self.optimizer._params, prepared):
            if grad is not None and grad is not p.grad:
                p.grad = grad

    def steps_taken(self) -> int:
        return steps_taken(self.optimizer)

    def lr_group(self, index: int) -> int:
        return self.optimizer._group_of[index]

    def lr(self, index: int, t: int) -> float:
        return self.optimizer.param_groups[self.optimizer._group_of[index]]["lr"]

    def group_spec(self, index: int, spec):
        return self.optimizer._surface.step_spec(self.optimizer._group_of[index])

    def state(self, index: int, spec) -> dict:
        optimizer = self.optimizer
        p = optimizer._params[index]
        state = optimizer.state[p]
        if not state:
            state[STEP] = torch.tensor(0.0)
            # made in the math dtype and kept in the state's (unified_opt.storage);
            # offloaded state is made from a host tensor of the parameter's shape
            stored = dtype_name(p.dtype)
            math = torch_dtype(math_dtype(stored))
            like = torch.empty(p.shape, dtype=math) \
                if optimizer.offload and p.device.type != "cpu" else p.detach().to(math)
            kept = torch_dtype(state_storage(spec, stored))
            state.update({key: array.to(kept)
                          for key, array in spec.init(like, torch_ops).items()})
        return state

    def states(self, indices: list[int], spec) -> list[dict]:
        state, params = self.optimizer.state, self.optimizer._params
        found = [state[params[i]] for i in indices]
        for k, held in enumerate(found):
            if not held:                        # made the first time
                found[k] = self.state(indices[k], spec)
        return found

    def advance(self, indices: list[int], states: list[dict]) -> list[int]:
        counts = self._counts
        values, linked = counts.numpy(), self._linked
        for i, held in zip(indices, states):
            if held[STEP] is not linked[i]:
                values[i] = float(held[STEP])
                held[STEP] = linked[i] = counts[i]
        key = tuple(indices)
        index = self._index.get(key)
        if index is None:
            if len(self._index) >= 64:
                self._index.clear()
            index = self._index[key] = np.asarray(indices, dtype=np.int64)
        values[index] += 1
        return values[index].astype(np.int64).tolist()

    def finish(self, t: int) -> None:
        self.optimizer.param_groups[0][STEPS_TAKEN] = t
