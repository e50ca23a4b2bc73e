"""The PaddlePaddle backend: ``paddle.optimizer`` classes where exact (:mod:`.classes`),
:class:`.optimizer.SpecOptimizer` otherwise. A scheduled lr becomes a
:class:`.optimizer.ScheduleLR` (``paddle.optimizer.lr.LRScheduler``, exact:
``schedule(last_epoch)``). Importing this package imports no paddle.

Parameter groups become Paddle's own (``{"params", "learning_rate": <multiplier>,
"weight_decay"/"lamb_weight_decay"}``) and the spec's ``grad_clip`` Paddle's
``grad_clip`` (``paddle.nn.ClipGradBy*``, ``need_clip=False`` for the excluded
parameters), see :mod:`.layout`; what Paddle writes onto the Parameter objects for them
stays in the optimizer between steps (:class:`.native._HeldAttributes`). A group added
after the build (``add_param_group``, Paddle's ``_add_param_group``) joins the native
class as a build with it would have laid it out (:mod:`.added_groups`)."""

from __future__ import annotations

import types

from unified_opt.backend import Backend, Context, compile_option, launcher_ranks
from unified_opt.clipping import ClipByGlobalNorm, ClipByNorm
from unified_opt.devices import check_device
from unified_opt.native import CONSTANT_HYPERPARAMETERS, when
from unified_opt.schedules import Schedule


def _native_pre_step(s) -> bool:
    clip = s.grad_clip
    return (s.loss_scale == 1.0 and not s.skip_nonfinite and not s.grad_centralization
            and (not isinstance(clip, (ClipByGlobalNorm, ClipByNorm)) or clip.eps == 0.0))


#: What Paddle's optimizers run around their update themselves: ``grad_clip`` (clip,
#: then the coupled regularizer, as the spec); the rest of the pre-step is the own path's.
NATIVE_PRE_STEP = when(
    "loss_scale=1, skip_nonfinite=False, grad_centralization=False and a grad_clip with "
    "eps=0 (Paddle's optimizers run only paddle.nn.ClipGradByGlobalNorm/ByNorm/ByValue, "
    "whose norms have no eps)", _native_pre_step)


def _check_parameter(name, p, spec, paddle) -> None:
    """Refuse what Paddle's optimizers would mishandle. A plain ``paddle.Tensor`` (not a
    Parameter, ``paddle.base.framework.EagerParamBase``) lacks the attributes every
    Paddle optimizer reads at the step (``regularizer``, ``optimize_attr``,
    ``need_clip``; measured on Paddle 3.3: ``AttributeError: 'Tensor' object has no
    attribute 'regularizer'`` at the first step), so it is refused here, before
    anything is built."""
    from paddle.base.framework import EagerParamBase

    label = name if name is not None else getattr(p, "name", "")
    if not isinstance(p, paddle.Tensor) or not p.is_leaf:
        raise TypeError(f"build: paddle parameters must be leaf tensors, got {label} "
                        f"{type(p).__name__}")
    if not isinstance(p, EagerParamBase):
        raise TypeError(f"build: params holds {label or 'a tensor'} (shape {list(p.shape)}), "
                        f"a plain paddle.Tensor, not a Parameter: Paddle's optimizers read "
                        f"a Parameter's regularizer, optimize_attr and need_clip at the "
                        f"step; make it a Parameter (paddle.create_parameter(shape, dtype), "
                        f"or a paddle.nn.Layer's parameter via Layer.create_parameter)")
    # Set by ParamAttr or left behind by a param-group optimizer built by hand: Paddle
    # optimizers would apply them on top of the spec.
    if getattr(p, "regularizer", None) is not None:
        raise ValueError(f"build: parameter {label} carries regularizer={p.regularizer!r}, "
                         "which Paddle adds to the spec's update; set p.regularizer = None "
                         "and give the decay in the spec (or a uo.Group)")
    lr_scale = (getattr(p, "optimize_attr", None) or {}).get("learning_rate", 1.0)
    if lr_scale != 1.0:
        raise ValueError(f"build: parameter {label} carries optimize_attr['learning_rate']="
                         f"{lr_scale!r}, which Paddle multiplies into the spec's lr; "
                         "set it to 1.0 (or give the factor as uo.Group(lr_scale=...))")
    if spec.grad_clip is not None and getattr(p, "need_clip", True) is False:
        raise ValueError(f"build: parameter {label} carries need_clip=False, which Paddle's "
                         "clip honours and the spec's grad_clip does not; set it to True "
                         "and leave it out with uo.Group(match=..., "
                         "exclude_from=('grad_clip',))")


class PaddleBackend(Backend):
    name = "paddle"
    own_class = ("unified_opt.backends.paddle.optimizer.SpecOptimizer "
                 "(a paddle.optimizer.Optimizer)")
    classes_module = "unified_opt.backends.paddle.classes"

    def around(self, cls, lowering, spec, context):
        """Paddle runs ``grad_clip`` itself; with ``plans`` (one per parameter, from the
        build's groups) and the parameters' dtypes, Paddle's parameter groups and clip
        must compute them (:mod:`.layout`)."""
        conditions = [NATIVE_PRE_STEP, CONSTANT_HYPERPARAMETERS]
        if cls.parameter_shaped_scalars and context.all_zero_size:
            # Paddle's step skips zero-size parameters, so their per-parameter scalar
            # state (read from a non-empty parameter) would never advance
            conditions.append(when(
                f"a parameter with elements ({cls.name} keeps no advancing "
                f"{'/'.join(cls.parameter_shaped_scalars)} when every parameter has zero "
                "size)", lambda s: False))
        if lowering.unmet(spec) or not (_native_pre_step(spec)
                                        and CONSTANT_HYPERPARAMETERS.holds(spec)):
            return conditions   # refused already: the layout would not say more
        from .layout import name_free_plans, paddle_layout

        plans = name_free_plans(spec) if context.plans is None else context.plans
        layout = paddle_layout(cls, lowering, spec, plans, context.dtypes)
        if isinstance(layout, str):
            conditions.append(when(layout, lambda s: False))
        return conditions

    def context(self, spec, named, plans, options):
        import paddle

        from .to_static import check_dynamic_mode, run_eagerly_under_to_static

        check_dynamic_mode(paddle)
        run_eagerly_under_to_static()
        for name, p in named:
            _check_parameter(name, p, spec, paddle)
        names = [name if name is not None else p.name for name, p in named]
        params = [p for _, p in named]
        if len(set(names)) != len(names) or len({p.name for p in params}) != len(params):
            raise ValueError(f"build: parameters and their names must be unique, got names "
                             f"{names} for Paddle parameters {[p.name for p in params]}")
        empty = tuple(n for n, p in zip(names, params) if p.size == 0)
        own_compile = compile_option(options)
        check_device("paddle", paddle.device.get_device())
        return Context(plans=tuple(plans),
                       dtypes=tuple(sorted({str(p.dtype).removeprefix("paddle.")
                                            for p in params})),
                       device=paddle.device.get_device(), zero_size=empty,
                       all_zero_size=len(empty) == len(params), options=options,
                       own_compile=own_compile)

    def build_native(self, decision, spec, named, plans, context):
        from .added_groups import add_native_group
        from .native import native_optimizer
        from .optimizer import ScheduleLR

        scheduler = ScheduleLR(spec.lr) if isinstance(spec.lr, Schedule) else None
        learning_rate = scheduler if scheduler is not None else float(spec.lr)
        # the native path never skips a step (skip_nonfinite runs the own update)
        optimizer = native_optimizer(decision.native_class, decision.lowering, spec,
                                     [p for _, p in named], plans, learning_rate,
                                     context.options, context.dtypes)
        # an instance attribute: Paddle's __init__ has made the build's groups already
        # through the class's method, which the added groups' code calls too
        optimizer._add_param_group = types.MethodType(add_native_group, optimizer)
        optimizer.add_param_group = optimizer._add_param_group     # (torch's name)
        return optimizer, scheduler, []

    def build_own(self, decision, spec, named, plans, context):
        from .optimizer import ScheduleLR, SpecOptimizer

        scheduler = ScheduleLR(spec.lr) if isinstance(spec.lr, Schedule) else None
        learning_rate = scheduler if scheduler is not None else float(spec.lr)
        skipped: list[bool] = []
        optimizer = SpecOptimizer([p for _, p in named], spec, plans, learning_rate, skipped,
                                  exchange=self._exchange(spec),
                                  compile="auto" if context.own_compile is None
                                  else context.own_compile)
        return optimizer, scheduler, skipped

    def _exchange(self, spec):
        """A data-parallel spec's exchange over the parallel env's ranks."""
        import paddle.distributed as dist

        from .exchange import PaddleExchange

        if not getattr(spec, "data_parallel", False) or self.world_size() == 1:
            return None
        if not dist.is_initialized():
            raise ValueError(f"build: {type(spec).__name__} on {self.world_size()} ranks "
                             "(PADDLE_TRAINERS_NUM) before the parallel env: call "
                             "paddle.distributed.init_parallel_env() before uo.build, so that "
                             "it can exchange the compressed gradients")
        return PaddleExchange()

    def build(self, spec, named, **kwargs):
        optimizer, record = super().build(spec, named, **kwargs)
        record.names = [n if n is not None else p.name for n, p in named]
        return optimizer, record

    def world_size(self) -> int:
        # paddle.distributed.launch sets PADDLE_TRAINERS_NUM before init_parallel_env;
        # read it here: get_world_size() caches the environment of its first call
        import paddle.distributed

        if paddle.distributed.is_initialized():
            return paddle.distributed.get_world_size()
        return launcher_ranks("PADDLE_TRAINERS_NUM")

    def parameter_name(self, p) -> str:
        """The name rules see for a Paddle parameter passed without a name: its own."""
        return p.name

    def native_state(self, record, optimizer, p, spec):
        from .native import native_state

        return native_state(record.decision.native_class, optimizer, p, spec)

    def plateau_scheduler(self, optimizer, rule, record, monitor):
        import paddle

        from unified_opt.schedules.plateau import PADDLE, native_arguments

        scheduler = paddle.optimizer.lr.ReduceOnPlateau(
            **native_arguments(rule, PADDLE, record, monitor))
        optimizer.set_lr_scheduler(scheduler)
        return scheduler


BACKEND = PaddleBackend()
