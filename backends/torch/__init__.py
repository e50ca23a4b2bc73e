"""The PyTorch backend: ``torch.optim`` classes where exact (:mod:`.classes`),
:class:`.optimizer.SpecOptimizer` otherwise. Importing this package imports no torch.

* The lr schedule becomes a ``LambdaLR`` (exact: ``1.0 * schedule(t)``; a group's lr
  factor is its initial lr, so its lr is ``factor * schedule(t)``). Step it after every
  ``optimizer.step()``, as usual. With ``skip_nonfinite`` it reads the optimizer's count
  of steps taken, so a skipped step keeps the schedule position.
* ``uo.Group`` plans become param groups (one per distinct hyperparameters and lr).
* On the native path the gradient pre-step and per-step weight decay / momentum run in
  the optimizer's step hooks (:mod:`.steps`); the own path runs them in its ``step``.
"""

from __future__ import annotations

from unified_opt.backend import COMPILE_MODES, Backend, Context, compile_option, launcher_ranks
from unified_opt.devices import check_device
from unified_opt.native import CONSTANT_HYPERPARAMETERS, every_group_condition, when
from unified_opt.pre_step import has_pre_step
from unified_opt.schedules import Schedule


def _cycles_momentum(spec) -> bool:
    return isinstance(spec.lr, Schedule) and spec.lr.momentum(0) is not None


class TorchBackend(Backend):
    name = "torch"
    own_class = "unified_opt.backends.torch.optimizer.SpecOptimizer (a torch.optim.Optimizer)"
    classes_module = "unified_opt.backends.torch.classes"

    def _exchange(self, spec, context):
        """The exchange of a data-parallel spec: over the process group where one is
        initialized (``options={"process_group": pg}``, else the default group)."""
        import torch.distributed as dist

        from .exchange import TorchExchange

        if not getattr(spec, "data_parallel", False):
            return None
        if dist.is_available() and dist.is_initialized():
            return TorchExchange(context.process_group)
        if context.process_group is not None or self.world_size() > 1:
            raise ValueError(f"build: {type(spec).__name__} on {self.world_size()} ranks "
                             "(WORLD_SIZE) with no process group: call "
                             "torch.distributed.init_process_group before uo.build, so that "
                             "it can exchange the compressed gradients")
        return None

    def world_size(self) -> int:
        # torchrun sets WORLD_SIZE before the script calls init_process_group
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_world_size()
        return launcher_ranks("WORLD_SIZE")

    def around(self, cls, lowering, spec, context):
        """What torch runs around each native class (:class:`.steps.NativeStepHooks`):
        the gradient pre-step always; per-step group values where the class reads them;
        the row's conditions for every group's spec; zero-size parameters and DTensor
        shards where the class takes them."""
        reads = cls.reads_per_step

        def per_step(s) -> bool:
            if isinstance(getattr(s, "weight_decay", None), Schedule) and \
                    "weight_decay" not in reads:
                return False
            return not _cycles_momentum(s) or bool(reads & {"momentum", "betas"})

        conditions = [when(CONSTANT_HYPERPARAMETERS.text + f"; {cls.name} does not read the "
                           "changed value from its param group at every step", per_step)]
        group = every_group_condition(lowering, context.plans)
        if group is not None:
            conditions.append(group)
        if cls.zero_size and context.zero_size:
            conditions.append(when(f"no zero-size parameter ({cls.name} {cls.zero_size}; "
                                   f"zero-size: {list(context.zero_size)})", lambda s: False))
        if cls.sharded and context.sharded:
            conditions.append(when(f"no DTensor parameter ({cls.name} {cls.sharded}; "
                                   f"DTensors: {list(context.sharded)})", lambda s: False))
        return conditions

    def notes(self, decision, spec, context):
        """How a native build runs the spec's parts that lie outside the native class."""
        from unified_opt.native import import_native

        from .native import fast_flags, fused_devices, fused_elsewhere

        parts = []
        cls = import_native(decision.native)
        if context.plans is not None and fast_flags(cls, context):
            parts.append(f"{decision.native} runs its fused kernel (fused=True: the same "
                         "update in one pass per tensor; options fused=False or foreach "
                         "choose another)")
        elif context.plans is not None and fused_elsewhere(cls, context):
            parts.append(f"{decision.native} runs without fused=True on {context.device}: "
                         f"uo.build takes its fused kernel on {fused_devices(cls)} only")
        if has_pre_step(spec):
            parts.append("the gradient pre-step (loss_scale, skip_nonfinite, grad_clip, "
                         "grad_centralization: unified_opt.pre_step) runs in a step pre-hook "
                         "(Optimizer.register_step_pre_hook) and writes p.grad")
        if spec.varies_per_step():
            parts.append("the step pre-hook writes each step's weight_decay / momentum / "
                         "betas (spec.at_step) into the param groups")
        if spec.skip_nonfinite:
            parts.append("a skipped step sets every p.grad to None for the step (restored "
                         "in a step post-hook), so torch changes nothing; the LambdaLR follows "
                         "the steps taken")
        return "; ".join(parts)

    def context(self, spec, named, plans, options):
        import torch

        for name, p in named:
            if not isinstance(p, torch.Tensor) or not p.is_leaf:
                raise TypeError(f"build: torch parameters must be leaf tensors, got "
                                f"{name or ''} {type(p).__name__}")
        empty = tuple(name or f"#{i}" for i, (name, p) in enumerate(named) if p.numel() == 0)
        for device in sorted({p.device.type for _, p in named}):
            check_device("torch", device)
        return Context(plans=tuple(plans),
                       dtypes=tuple(sorted({str(p.dtype).removeprefix("torch.")
                                            for _, p in named})),
                       device=",".join(sorted({p.device.type for _, p in named})),
                       zero_size=empty, all_zero_size=len(empty) == len(named),
                       options=options, process_group=_process_group(spec, options),
                       sharded=_sharded(named), own_compile=_own_compile(options))

    def _lrs(self, spec, plans):
        # each parameter's lr: with a schedule, the factor LambdaLR multiplies by
        # schedule(t) (a fixed group lr is refused upstream there); else the plan's lr
        scheduled = isinstance(spec.lr, Schedule)
        return [plan.lr(1.0 if scheduled else spec.lr) for plan in plans]

    def build_native(self, decision, spec, named, plans, context):
        from unified_opt.native import import_native

        from .native import fast_flags, native_optimizer
        from .steps import NativeStepHooks

        params = [p for _, p in named]
        skipped: list[bool] = []
        flags = fast_flags(import_native(decision.native), context)
        optimizer, group_specs = native_optimizer(decision.native_class, decision.lowering,
                                                  params, plans, self._lrs(spec, plans),
                                                  {**context.options, **flags})
        NativeStepHooks(optimizer, spec, decision.lowering, params, plans, group_specs,
                        skipped)
        return optimizer, _scheduler(spec, optimizer), skipped

    def build_own(self, decision, spec, named, plans, context):
        from .optimizer import SpecOptimizer

        if context.sharded:
            _check_sharded_own(spec, context)
        skipped: list[bool] = []
        # a spec whose state belongs on the host (adam_offload) keeps it there
        offload = getattr(spec, "state_device", None) == "host"
        optimizer = SpecOptimizer([p for _, p in named], spec, plans, self._lrs(spec, plans),
                                  offload=offload, skipped=skipped,
                                  exchange=self._exchange(spec, context),
                                  compile="auto" if context.own_compile is None
                                  else context.own_compile)
        return optimizer, _scheduler(spec, optimizer), skipped

    def native_state(self, record, optimizer, p, spec):
        import torch

        state = optimizer.state.get(p, {})
        return {ours: state[theirs] for ours, theirs in record.decision.native_class.state.items()
                if isinstance(state.get(theirs), torch.Tensor)}

    def plateau_scheduler(self, optimizer, rule, record, monitor):
        import torch

        from unified_opt.schedules.plateau import TORCH, native_arguments

        kwargs = native_arguments(rule, TORCH, record, monitor)
        return torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, **kwargs)


def _scheduler(spec, optimizer):
    """The ``LambdaLR`` of a scheduled lr (None for a constant one). Its factor is a plain
    function, so the scheduler's ``state_dict`` holds plain data only (LambdaLR saves the
    ``__dict__`` of callable objects, and a schedule is one)."""
    if not isinstance(spec.lr, Schedule):
        return None
    import torch

    from .steps import steps_taken

    schedule = spec.lr
    if spec.skip_nonfinite:
        # a skipped step keeps the schedule position: the factor reads the steps taken
        def factor(_epoch):
            return schedule(steps_taken(optimizer))
    else:
        def factor(epoch):
            return schedule(epoch)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


BACKEND = TorchBackend()


def _process_group(spec, options: dict):
    """``options["process_group"]`` (taken out of the native class's options): only a
    data-parallel spec exchanges over it."""
    if "process_group" not in options:
        return None
    group = options.pop("process_group")
    if not getattr(spec, "data_parallel", False):
        raise ValueError(f"build: options process_group={group!r} is for data-parallel "
                         f"specs (dgc_momentum); {spec.name!r} exchanges nothing (wrap the "
                         "model in DistributedDataParallel instead)")
    return group


def _sharded(named) -> tuple[str, ...]:
    """The names (or positions) of DTensor parameters."""
    from .ops import is_dtensor

    return tuple(name or f"#{i}" for i, (name, p) in enumerate(named) if is_dtensor(p))


def _check_sharded_own(spec, context) -> None:
    """Refuse what the own path cannot do with DTensor parameters (FSDP2 ``fully_shard``,
    tensor parallel). Their update runs eagerly through DTensor's operations, which reduce
    across the shards (a norm, a trust ratio, a factored moment's mean are those of the
    whole parameter); the kernel VM sees one rank's memory, Inductor is not tried on
    them, a data-parallel exchange would exchange shards, and host offload stages whole
    tensors."""
    names = list(context.sharded)
    if getattr(spec, "data_parallel", False):
        raise ValueError(f"build: parameters {names} are DTensors (FSDP2 fully_shard or "
                         f"tensor parallel); {spec.name!r} exchanges its gradients between "
                         "ranks itself and does not take sharded parameters (build it on "
                         "the unsharded model in the process group)")
    if getattr(spec, "state_device", None) == "host":
        raise ValueError(f"build: parameters {names} are DTensors (FSDP2 fully_shard or "
                         f"tensor parallel); {spec.name!r} keeps its state in host memory, "
                         "which stages whole tensors: refused (FSDP2's "
                         "CPUOffloadPolicy offloads shards)")
    if context.own_compile in (True, "inductor"):
        raise ValueError(f"build: options compile={context.own_compile!r}, but parameters "
                         f"{names} are DTensors (FSDP2 fully_shard or tensor parallel): "
                         "their update runs eagerly through DTensor's operations, which "
                         "reduce across the shards (compile='auto' or False)")


def _own_compile(options: dict):
    """``options["compile"]`` (taken out of the native class's options), checked; None
    when not given. torch adds "inductor" (:mod:`.compiled`)."""
    return compile_option(options, COMPILE_MODES + ("inductor",))
