"""The torch lowering table (imports no framework)."""

from __future__ import annotations

import dataclasses

from unified_opt.lowering import (CONSTANT_HYPERPARAMETERS, NativeLowering, decide,
                                  every_group_condition, when)
from unified_opt.pre_step import has_pre_step
from unified_opt.schedules import Schedule

OWN_CLASS = "unified_opt.backends.torch.SpecOptimizer (a torch.optim.Optimizer)"

_ADAM_FORM = (
    when("eps_placement='outside' (torch adds eps outside the bias-corrected sqrt)",
         lambda s: s.eps_placement == "outside"),
    when("bias_correction=True (torch always corrects both moments)",
         lambda s: s.bias_correction),
    when("nesterov=False (torch Adam has no TF-style Nesterov numerator)",
         lambda s: not s.nesterov),
)


def _adam_arguments(s):
    return {"betas": s.betas, "eps": s.eps, "weight_decay": s.weight_decay,
            "amsgrad": s.amsgrad, "maximize": s.maximize}


_ADAM_STATE = {"exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq",
               "max_exp_avg_sq": "max_exp_avg_sq"}

TABLE = (
    NativeLowering(
        "sgd", "torch.optim.SGD",
        (when("lr_placement='outside' (torch keeps the lr out of the momentum buffer)",
              lambda s: s.lr_placement == "outside"),
         when("momentum_init='grad' or dampening=0 (torch's first buffer is the gradient)",
              lambda s: s.momentum_init == "grad" or s.dampening == 0.0)),
        lambda s: {"momentum": s.momentum, "dampening": s.dampening, "nesterov": s.nesterov,
                   "weight_decay": s.weight_decay, "maximize": s.maximize},
        {"momentum_buffer": "momentum_buffer"}),
    NativeLowering("adam", "torch.optim.Adam", _ADAM_FORM, _adam_arguments, _ADAM_STATE),
    NativeLowering(
        "adamw", "torch.optim.AdamW",
        _ADAM_FORM + (
            when("decay_form='before_update' (torch multiplies p by 1 - lr*wd first)",
                 lambda s: s.decay_form == "before_update"),
            when("decay_times_lr=True (torch scales the decay by the lr)",
                 lambda s: s.decay_times_lr)),
        _adam_arguments, _ADAM_STATE),
    NativeLowering(
        "nadam", "torch.optim.NAdam", (),
        lambda s: {"betas": s.betas, "eps": s.eps, "weight_decay": s.weight_decay,
                   "momentum_decay": s.momentum_decay,
                   "decoupled_weight_decay": s.decoupled_weight_decay, "maximize": s.maximize},
        {"exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq", "mu_product": "mu_product"}),
    NativeLowering(
        "radam", "torch.optim.RAdam",
        (when("rectify_threshold=5 (torch rectifies when rho_t > 5)",
              lambda s: s.rectify_threshold == 5.0),),
        lambda s: {"betas": s.betas, "eps": s.eps, "weight_decay": s.weight_decay,
                   "decoupled_weight_decay": s.decoupled_weight_decay, "maximize": s.maximize},
        {"exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq"}),
    NativeLowering(
        "adamax", "torch.optim.Adamax",
        (when("eps_placement='on_grad' (torch takes max(beta2*u, |g| + eps))",
              lambda s: s.eps_placement == "on_grad"),),
        lambda s: {"betas": s.betas, "eps": s.eps, "weight_decay": s.weight_decay,
                   "maximize": s.maximize},
        {"exp_avg": "exp_avg", "exp_inf": "exp_inf"}),
    NativeLowering(
        "adagrad", "torch.optim.Adagrad", (),
        lambda s: {"lr_decay": s.lr_decay, "weight_decay": s.weight_decay, "eps": s.eps,
                   "initial_accumulator_value": s.initial_accumulator_value,
                   "maximize": s.maximize},
        {"sum": "sum"}),
    NativeLowering(
        "adadelta", "torch.optim.Adadelta", (),
        lambda s: {"rho": s.rho, "eps": s.eps, "weight_decay": s.weight_decay,
                   "maximize": s.maximize},
        {"square_avg": "square_avg", "acc_delta": "acc_delta"}),
    NativeLowering(
        "rmsprop", "torch.optim.RMSprop",
        (when("eps_placement='outside' (torch adds eps to the sqrt)",
              lambda s: s.eps_placement == "outside"),
         when("lr_placement='outside' or momentum=0 (torch keeps the lr out of the buffer)",
              lambda s: s.lr_placement == "outside" or s.momentum == 0.0),
         when("initial_square_avg=0 (torch starts the mean square at 0)",
              lambda s: s.initial_square_avg == 0.0)),
        lambda s: {"alpha": s.alpha, "eps": s.eps, "weight_decay": s.weight_decay,
                   "momentum": s.momentum, "centered": s.centered, "maximize": s.maximize},
        {"square_avg": "square_avg", "momentum_buffer": "momentum_buffer",
         "grad_avg": "grad_avg"}),
    NativeLowering(
        "rprop", "torch.optim.Rprop",
        (when("weight_decay=0 (torch Rprop has no weight decay)",
              lambda s: s.weight_decay == 0.0),),
        lambda s: {"etas": s.etas, "step_sizes": s.step_sizes, "maximize": s.maximize},
        {"prev": "prev", "step_size": "step_size"}),
    NativeLowering(
        "adafactor", "torch.optim.Adafactor",
        (when("relative_step=True with warmup_init=False (torch's step size is "
              "min(lr, 1/sqrt(t)))", lambda s: s.relative_step and not s.warmup_init),
         when("scale_parameter=True (torch always scales by the parameter's RMS)",
              lambda s: s.scale_parameter),
         when("eps_mode='clamp' (torch clamps by eps[0] instead of adding it)",
              lambda s: s.eps_mode == "clamp"),
         when("decay_rate set, beta2=None (torch's beta2 is the 1 - t^-decay_rate schedule)",
              lambda s: s.beta2 is None),
         when("beta1=None (torch keeps no first moment)", lambda s: s.beta1 is None),
         when("decay_lr='raw' (torch decays by lr * weight_decay)",
              lambda s: s.decay_lr == "raw"),
         when("clip_threshold >= 1 (torch's d must be at least 1)",
              lambda s: s.clip_threshold >= 1.0)),
        lambda s: {"beta2_decay": -s.decay_rate, "eps": s.eps, "d": s.clip_threshold,
                   "weight_decay": s.weight_decay, "maximize": s.maximize},
        {"exp_avg_sq_row": "row_var", "exp_avg_sq_col": "col_var", "exp_avg_sq": "variance"}),
    NativeLowering(
        "adam_offload", "unified_opt.backends.torch.offload.OffloadAdam", _ADAM_FORM,
        _adam_arguments, _ADAM_STATE,
        note="torch's fused CPU Adam kernel over state in host memory; only the new "
             "parameters go back to their device"),
)


#: native classes that cannot take a zero-size parameter (the build runs the own
#: implementation then), with the reason
NO_ZERO_SIZE = {
    "torch.optim.Adafactor": "divides by the element count (ZeroDivisionError at the first "
                             "step, measured on torch 2.13)",
}


#: group values each native class reads from its param group at every step (verified
#: on torch 2.13): the step pre-hook can change them per step. A row missing here, or a
#: per-step change it does not read, keeps CONSTANT_HYPERPARAMETERS.
READS_PER_STEP = {
    "torch.optim.SGD": {"weight_decay", "momentum"},
    "torch.optim.Adam": {"weight_decay", "betas"},
    "torch.optim.AdamW": {"weight_decay", "betas"},
    "torch.optim.NAdam": {"weight_decay", "betas"},
    "torch.optim.RAdam": {"weight_decay", "betas"},
    "torch.optim.Adamax": {"weight_decay", "betas"},
    "torch.optim.Adagrad": {"weight_decay"},
    "torch.optim.Adadelta": {"weight_decay"},
    "torch.optim.RMSprop": {"weight_decay", "momentum"},
    "torch.optim.Rprop": set(),
    "torch.optim.Adafactor": {"weight_decay"},
    "unified_opt.backends.torch.offload.OffloadAdam": {"weight_decay", "betas"},
}


def _cycles_momentum(spec) -> bool:
    return isinstance(spec.lr, Schedule) and spec.lr.momentum(0) is not None


def _per_step_lowered(row):
    reads = READS_PER_STEP.get(row.native, set())

    def holds(spec) -> bool:
        if isinstance(getattr(spec, "weight_decay", None), Schedule) and \
                "weight_decay" not in reads:
            return False
        return not _cycles_momentum(spec) or bool(reads & {"momentum", "betas"})

    return when(CONSTANT_HYPERPARAMETERS.text + f"; {row.native} does not read the "
                "changed value from its param group at every step", holds)


#: RMSprop's row admits lr_placement='inside' when momentum=0; a cycled momentum is
#: not 0, and torch makes the momentum buffer only when the first step's momentum > 0
_RMSPROP_CYCLING = when(
    "with a momentum-cycling lr schedule: lr_placement='outside' (the cycled momentum "
    "is not 0, so the lr must stay out of the buffer)",
    lambda s: not _cycles_momentum(s) or s.lr_placement == "outside")


def _around(row):
    """What torch runs around each native class (see ``steps.NativeStepHooks``): the
    gradient pre-step always; per-step group values where the class reads them."""
    extra = [_per_step_lowered(row)]
    if row.native == "torch.optim.RMSprop":
        extra.append(_RMSPROP_CYCLING)
    return extra


def around_text(spec) -> str:
    """How a native build runs the spec's parts that lie outside the native class."""
    parts = []
    if has_pre_step(spec):
        parts.append("the gradient pre-step (loss_scale, skip_nonfinite, grad_clip, "
                     "grad_centralization: unified_opt.pre_step) runs in a step pre-hook "
                     "(Optimizer.register_step_pre_hook) and writes p.grad")
    if spec.varies_per_step():
        parts.append("the step pre-hook writes each step's weight_decay / momentum / betas "
                     "(spec.at_step) into the param groups")
    if spec.skip_nonfinite:
        parts.append("a skipped step sets every p.grad to None for the step (restored "
                     "in a step post-hook), so torch changes nothing; the LambdaLR follows "
                     "the steps taken")
    return "; ".join(parts)


def _with_groups(row, plans):
    """``_around(row)``, and the row's own conditions for every group's spec."""
    group_condition = every_group_condition(row, plans)
    return _around(row) + ([group_condition] if group_condition else [])


def decide_for(spec, path: str = "auto", plans=None):
    decision = decide("torch", TABLE, spec, path, OWN_CLASS,
                      extra=lambda row: _with_groups(row, plans))
    text = around_text(spec)
    if decision.path == "native" and text:
        decision = dataclasses.replace(decision, reason=f"{decision.reason}; {text}")
    return decision
