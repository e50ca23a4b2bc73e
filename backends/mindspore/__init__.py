"""The MindSpore backend: ``mindspore.nn`` / ``mindspore.experimental.optim`` classes where
exact (:mod:`.classes`), :class:`.optimizer.SpecOptimizer` otherwise. Importing this
package imports no mindspore.

The optimizer steps its lr itself (MindSpore has no separate scheduler object to step):
an ``nn`` class calls its lr and weight decay with its ``global_step``. Where the device
is in :data:`SCHEDULE_CELL_DEVICES` (CPU), a scheduled lr or weight decay is a
:class:`.cells.ScheduleCell`: Python computes ``float32(s(t))`` at every step, with no
step limit. Elsewhere (MindSpore runs its Python-calling op on CPU only) it is the
per-step list ``[s(0), ..., s(N-1)]`` (a weight decay: a Cell reading it), which needs
``options={"total_steps": N}``; without it the own implementation runs. The own
implementation evaluates ``s(step)`` itself. ``total_steps`` given is a step limit on
every path: the step after the N-th raises our RuntimeError (on the per-step list, only
where Python calls the optimizer; compiled into a GRAPH_MODE train step it ends with
MindSpore's Gather range error).

Parameter groups (``uo.Group``) become MindSpore's: ``nn`` group dicts ``{"params",
"lr", "weight_decay"}`` plus ``{"order_params": [...]}`` (a group lr is a float or, for
a scheduled lr, the schedule scaled by ``lr_scale``, ``float32(lr_scale * s(t))``),
``experimental`` groups as runs of consecutive parameters. ``loss_scale`` goes to the
``nn`` classes that divide by it; clipping, overflow skipping and gradient
centralization run in the own implementation. What lies around each native class
(:meth:`MindSporeBackend.around`):

* ``loss_scale`` alone: the classes whose descriptor says ``loss_scale`` take it, store
  the decay as ``wd * loss_scale`` and multiply the decayed gradients by
  ``1 / loss_scale`` (``g / S + wd * p``). Clipping and overflow skipping belong to
  MindSpore's train step (``TrainOneStepWithLossScaleCell``), and the CPU kernel cannot
  centralize ("Unsupported op [Centralization] on CPU"): those go to the own path.
* a weight-decay schedule: the classes whose descriptor says ``cell_weight_decay`` take
  a Cell called with ``global_step`` (the 0-based step), the schedule's form above.
  A momentum-cycling lr schedule always goes to the own implementation.
* a schedule on a device outside ``SCHEDULE_CELL_DEVICES``: ``options={"total_steps":
  N}`` (the per-step list's length).
* parameter groups: every group's hyperparameters must meet the row's conditions too,
  and the ``flat_only`` classes take no group lr or group decay here.
* the device: a class runs where it was measured exact (``devices``); nn.Lamb and nn.LARS
  have no CPU kernel.
* zero-size parameters are left out of a native optimizer (they have nothing to update,
  and MindSpore cannot allocate their state); when every parameter has zero size, the
  own implementation runs.
"""

from __future__ import annotations

import dataclasses

from unified_opt.backend import Backend, Context, compile_option, launcher_ranks
from unified_opt.devices import check_device
from unified_opt.native import CONSTANT_HYPERPARAMETERS, NO_PRE_STEP, every_group_condition, when
from unified_opt.schedules import Schedule

_LOSS_SCALE_ONLY = when(
    "no gradient pre-step but loss_scale: grad_clip=None, skip_nonfinite=False, "
    "grad_centralization=False (the native class divides by loss_scale; clipping and "
    "overflow skipping belong to the train step, and the CPU kernel cannot centralize)",
    lambda s: s.grad_clip is None and not s.skip_nonfinite and not s.grad_centralization)
_NO_MOMENTUM_CYCLING = when(
    "no momentum-cycling lr schedule (the native class holds one momentum; a weight-decay "
    "schedule becomes its Cell form)",
    lambda s: not (isinstance(s.lr, Schedule) and s.lr.momentum(0) is not None))

#: devices where a scheduled lr or weight decay runs as a ScheduleCell (an ops.Custom
#: "pyfunc" op, which MindSpore runs on CPU only); elsewhere it is the per-step list
SCHEDULE_CELL_DEVICES = ("CPU",)


@dataclasses.dataclass(frozen=True)
class MindSporeContext(Context):
    """:class:`Context` plus the own optimizer's graph form (``options={"graph":
    ...}``: "auto", "custom" or "ops"; None: not given)."""

    graph: str | None = None


class MindSporeBackend(Backend):
    name = "mindspore"
    own_class = ("unified_opt.backends.mindspore.optimizer.SpecOptimizer "
                 "(a mindspore.nn.Optimizer)")
    classes_module = "unified_opt.backends.mindspore.classes"

    def world_size(self) -> int:
        # msrun sets MS_WORKER_NUM before the script calls communication.init()
        from mindspore.communication import GlobalComm, get_group_size

        return get_group_size() if GlobalComm.INITED else launcher_ranks("MS_WORKER_NUM")

    def around(self, cls, lowering, spec, context):
        """The conditions on what lies around ``cls``'s algorithm (see the module)."""
        conditions = [_LOSS_SCALE_ONLY if cls.loss_scale else NO_PRE_STEP,
                      _NO_MOMENTUM_CYCLING if cls.cell_weight_decay
                      else CONSTANT_HYPERPARAMETERS]
        if cls.no_cpu_kernel:
            conditions.append(when(
                f"device in {cls.devices} ({cls.name} has no CPU kernel in MindSpore 2.10; "
                f"this is {context.device})", lambda s: context.device in cls.devices))
        else:
            conditions.append(when(
                f"device in {cls.devices} (where {cls.name} was measured exact; this is "
                f"{context.device})", lambda s: context.device in cls.devices))
        if context.device not in SCHEDULE_CELL_DEVICES and context.total_steps is None:
            plans = context.plans
            conditions.append(when(
                f"options={{'total_steps': N}} for a scheduled lr or weight decay (on "
                f"{context.device} a schedule is MindSpore's per-step list [s(0), ..., "
                "s(N-1)]; the Python schedule Cell runs on CPU only)",
                lambda s: not _scheduled(s, plans)))
        if context.all_zero_size:
            conditions.append(when(f"a parameter with elements ({cls.name} cannot hold "
                                   "none)", lambda s: False))
        if context.plans and cls.wraps_optimizer:
            # name rules are the class's own (lars_filter, the wrapped optimizer's filter)
            plans = context.plans
            conditions.append(when(
                f"no uo.Group ({cls.name} wraps one optimizer over a flat parameter list)",
                lambda s: all(p.group is None for p in plans)))
        elif context.plans:
            conditions.append(every_group_condition(lowering, context.plans))
            if cls.flat_only:
                plans = context.plans
                conditions.append(when(
                    f"no group lr and one weight decay for every parameter ({cls.name} is "
                    f"built over one flat parameter list: {cls.flat_only})",
                    lambda s: all(p.lr_scale == 1.0 and p.fixed_lr is None for p in plans)
                    and len({repr(p.spec.weight_decay) for p in plans}) == 1))
        return conditions

    def decide(self, spec, path="auto", context=None, *args, **kwargs):
        """:meth:`Backend.decide`, the own implementation's reason followed by the graph
        form GRAPH_MODE and ``@ms.jit`` compile it into (the rule; a built optimizer's
        record says the form it took, :meth:`build`)."""
        decision = super().decide(spec, path, context, *args, **kwargs)
        if decision.path != "own":
            return decision
        return dataclasses.replace(decision, reason=f"{decision.reason}; "
                                   f"{_graph_note(spec, context)}")

    def build(self, spec, named, **kwargs):
        optimizer, record = super().build(spec, named, **kwargs)
        # a parameter passed bare is named by its own name (a Cell's structural one,
        # "0.weight": the same in a rebuilt network), where those are distinct
        own = [n if n is not None else p.name for n, p in named]
        if len(set(own)) == len(own):
            record.names = own
        why = getattr(optimizer, "graph_why", None)
        if record.decision.path == "own" and why is not None:
            reason = record.decision.reason.split("; in GRAPH_MODE")[0]
            record.decision = dataclasses.replace(
                record.decision, reason=f"{reason}; in GRAPH_MODE and @ms.jit: {why}")
        return optimizer, record

    def notes(self, decision, spec, context):
        notes = []
        scheduled = _scheduled(spec, context.plans)
        if scheduled:
            notes.append(_schedule_note(scheduled, context))
        if context.zero_size and not context.all_zero_size:
            notes.append(f"zero-size parameters {list(context.zero_size)} are left out of "
                         "it (nothing to update)")
        return "; ".join(notes)

    def context(self, spec, named, plans, options):
        import mindspore as ms

        for name, p in named:
            if not isinstance(p, ms.Parameter):
                # a plain Tensor has no name, requires_grad or the Parameter storage a
                # MindSpore optimizer assigns into
                label = f"{name} " if name else ""
                raise TypeError(f"build: mindspore parameters must be mindspore.Parameter, "
                                f"got {label}{type(p).__name__}"
                                + (f" (shape {list(p.shape)}); make it a Parameter "
                                   "(mindspore.Parameter(tensor, name=...), or pass a "
                                   "Cell's trainable_params())"
                                   if isinstance(p, ms.Tensor) else ""))
            if p.dtype != ms.float32:
                # MindSpore rounds Python float scalars to float32 even in float64 tensor
                # arithmetic, and its optimizer kernels compute in float32.
                raise TypeError(f"build: the MindSpore backend takes float32 parameters, "
                                f"got {name or p.name} {p.dtype}")
            if not p.requires_grad:
                raise ValueError(f"build: parameter {name or p.name} has requires_grad="
                                 "False; a MindSpore optimizer updates every parameter it "
                                 "holds (pass net.trainable_params())")
        from .graph_ops import graph_option

        _check_total_steps(spec, plans, options.get("total_steps"))
        empty = tuple(n or p.name for n, p in named if p.size == 0)
        own_compile = compile_option(options)
        graph = graph_option(options)
        check_device("mindspore", ms.get_context("device_target"))
        return MindSporeContext(
            plans=tuple(plans), dtypes=("float32",), device=ms.get_context("device_target"),
            zero_size=empty, all_zero_size=len(empty) == len(named),
            options={k: v for k, v in options.items() if k != "total_steps"},
            total_steps=options.get("total_steps"), own_compile=own_compile, graph=graph)

    def build_native(self, decision, spec, named, plans, context):
        from .native import native_optimizer

        if getattr(context, "graph", None) is not None:
            raise ValueError(f"build: options graph={context.graph!r} is for the own "
                             f"implementation; this spec runs natively ({decision.native}), "
                             "whose construct is the class's own")
        # around() sent a schedule without total_steps off a device that needs the list
        optimizer = native_optimizer(decision.native_class, decision.lowering,
                                     [p for _, p in named], plans, spec, context.options,
                                     cells=context.device in SCHEDULE_CELL_DEVICES,
                                     total_steps=context.total_steps)
        from .added_native import add_experimental, refuse_nn

        if hasattr(optimizer, "add_param_group"):    # the experimental.optim classes
            # an instance attribute: the class's __init__ has made the build's groups
            optimizer.add_param_group = lambda param_group: add_experimental(optimizer,
                                                                             param_group)
            from .surface import attach_state_dict

            attach_state_dict(optimizer)     # state_dict(): the portable form
        else:       # (the experimental.optim classes have torch's param_groups already)
            from .surface import attach

            attach(optimizer, spec, plans, [p for _, p in named], decision.native)
            object.__setattr__(optimizer, "add_param_group",
                               refuse_nn(optimizer, decision.native))
        return optimizer, None, []   # a native class never skips: skip_nonfinite is own

    def build_own(self, decision, spec, named, plans, context):
        from .optimizer import SpecOptimizer

        optimizer = SpecOptimizer([p for _, p in named], spec, plans, context.total_steps,
                                  exchange=self._exchange(spec),
                                  compile="auto" if context.own_compile is None
                                  else context.own_compile,
                                  graph=getattr(context, "graph", None) or "auto")
        return optimizer, None, optimizer.skipped

    def _exchange(self, spec):
        """A data-parallel spec's exchange over the communication group's ranks."""
        from mindspore.communication import GlobalComm

        from .exchange import MindSporeExchange

        if not getattr(spec, "data_parallel", False) or self.world_size() == 1:
            return None
        if not GlobalComm.INITED:
            raise ValueError(f"build: {type(spec).__name__} on {self.world_size()} ranks "
                             "(MS_WORKER_NUM) before communication.init(): call "
                             "mindspore.communication.init() before uo.build, so that it "
                             "can exchange the compressed gradients")
        return MindSporeExchange()

    def native_state(self, record, optimizer, p, spec):
        from .native import native_state

        return native_state(record.decision.native_class, optimizer, p, spec)

    def plateau_scheduler(self, optimizer, rule, record, monitor):
        from mindspore import Parameter
        from mindspore.experimental.optim import Optimizer

        from unified_opt.schedules.plateau import MS_CALLBACK, MS_EXP, native_arguments

        if isinstance(optimizer, Optimizer):
            from mindspore.experimental.optim.lr_scheduler import ReduceLROnPlateau

            return ReduceLROnPlateau(optimizer, **native_arguments(rule, MS_EXP, record,
                                                                   monitor))
        from mindspore.train import ReduceLROnPlateau

        kwargs = native_arguments(rule, MS_CALLBACK, record, monitor)
        if not isinstance(optimizer.learning_rate, Parameter) or optimizer.is_group_lr:
            raise NotImplementedError(f"plateau_scheduler: {MS_CALLBACK} reduces one "
                                      "constant lr Parameter; this optimizer has group lrs")
        if record.decision.path == "own" and not getattr(optimizer, "follows_learning_rate",
                                                         False):
            raise NotImplementedError(
                f"plateau_scheduler: the own MindSpore implementation "
                f"({type(optimizer).__name__}) takes its lr from the spec and refuses an lr "
                f"written from outside, which {MS_CALLBACK} does; build a spec that lowers "
                "to a mindspore.nn class")
        return ReduceLROnPlateau(**kwargs)


def _graph_note(spec, context) -> str:
    """The graph form an own optimizer of ``spec`` compiles into, by the rule of
    ``backends/mindspore/graph.py`` (the measured CPU figures of ``graph_ops``)."""
    from .graph_ops import cpu_choice

    option = getattr(context, "graph", None) or "auto"
    device = context.device if context is not None else "CPU"
    names = {"custom": "custom operators over the kernel VM", "ops": "the update as "
             "MindSpore operations"}
    if option != "auto":
        form, why = option, f"options graph={option!r}"
    elif device != "CPU":
        form, why = "ops", (f"graph='ops': on {device}; verified on the CPU only "
                            "(docs/devices.md)")
    elif context is not None and context.own_compile is False:
        form, why = "ops", "graph='ops': options compile=False"
    else:
        form, measured = cpu_choice(spec.name)
        why = f"graph={form!r}; {measured}"
    return f"in GRAPH_MODE and @ms.jit: {names[form]} ({why})"


def _decay_scheduled(plans) -> bool:
    return any(isinstance(getattr(plan.spec, "weight_decay", None), Schedule)
               for plan in plans)


def _scheduled(spec, plans) -> str:
    """What of ``spec`` (with its parameters' ``plans``, when known) is scheduled: "lr",
    "weight decay", "lr and weight decay" or ""."""
    decay = _decay_scheduled(plans) if plans else \
        isinstance(getattr(spec, "weight_decay", None), Schedule)
    parts = ["lr"] * isinstance(spec.lr, Schedule) + ["weight decay"] * decay
    return " and ".join(parts)


def _schedule_note(scheduled: str, context) -> str:
    """How a native class gets its scheduled lr / weight decay (the module docstring)."""
    n = context.total_steps
    if context.device in SCHEDULE_CELL_DEVICES:
        note = (f"its scheduled {scheduled} is a ScheduleCell: Python computes "
                "float32(s(global_step)) at every step (an ops.Custom pyfunc op, CPU only)")
        if n is None:
            return note + ", with no step limit"
        return (note + f"; options total_steps={n} limits it: step {n + 1} raises "
                "RuntimeError")
    return (f"its scheduled {scheduled} is MindSpore's per-step list [s(0), ..., "
            f"s({n - 1})] (options total_steps={n}; the Python schedule Cell runs on CPU "
            f"only), so it ends at step {n}: step {n + 1} raises our RuntimeError where "
            "Python calls the optimizer (PyNative, or opt(grads) in GRAPH_MODE); compiled "
            "into a GRAPH_MODE train step or @ms.jit it fails with MindSpore's Gather "
            "index error instead")


def _check_total_steps(spec, plans, total_steps) -> None:
    if total_steps is None:
        return
    if isinstance(total_steps, bool) or not isinstance(total_steps, int):
        raise TypeError(f"build: options['total_steps'] must be an int, got {total_steps!r}")
    if total_steps < 1:
        raise ValueError(f"build: options['total_steps'] must be >= 1, got {total_steps}")
    if not isinstance(spec.lr, Schedule) and not _decay_scheduled(plans):
        raise ValueError(f"build: options['total_steps']={total_steps} is for a scheduled "
                         f"lr or weight decay; this spec's lr is the constant {spec.lr!r} "
                         "and its weight decay is constant")


BACKEND = MindSporeBackend()
