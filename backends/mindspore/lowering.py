"""The MindSpore lowering table (imports no framework).

Every claim was measured with MindSpore 2.10 on CPU (shared/research/mindspore.md), on
float32 parameters (the only dtype the backend takes). A row also depends on the device
(nn.Lamb and nn.LARS have no CPU kernel): :func:`decide_for` adds that condition to
every row, and the conditions on what lies around the algorithm:

* ``loss_scale`` alone: the ``nn`` classes in :data:`LOSS_SCALE` take it, store the
  decay as ``wd * loss_scale`` and multiply the decayed gradients by ``1 / loss_scale``
  (``g / S + wd * p``). Clipping and overflow skipping belong to MindSpore's train step
  (``TrainOneStepWithLossScaleCell``), and the CPU kernel cannot centralize
  ("Unsupported op [Centralization] on CPU"): those go to the own implementation.
* a weight-decay schedule: the ``nn`` classes in :data:`CELL_WEIGHT_DECAY` take a Cell
  called with ``global_step`` (the 0-based step), which reads the per-step table
  ``[wd(0), ..., wd(N-1)]`` (so it needs ``total_steps``, as a scheduled lr does).
  A momentum-cycling lr schedule always goes to the own implementation.
* parameter groups (``plans``): every group's hyperparameters must meet the row's
  conditions too, and nn.AdaFactor / nn.LARS take no group lr or group decay here.
"""

from __future__ import annotations

import dataclasses

from unified_opt.lowering import (CONSTANT_HYPERPARAMETERS, NO_PRE_STEP, NativeLowering,
                                  decide, every_group_condition, when)
from unified_opt.schedules import Schedule

OWN_CLASS = "unified_opt.backends.mindspore.SpecOptimizer (a mindspore.nn.Optimizer)"

#: Devices where a row's native class was measured exact; rows not listed: CPU only.
MEASURED_DEVICES: dict[str, tuple[str, ...]] = {}
#: Rows whose native class has no CPU kernel: the devices it has kernels on, and why the
#: row is not measured here (their arguments follow the documented formula)
NO_CPU_KERNEL: dict[str, tuple[str, ...]] = {
    "mindspore.nn.Lamb": ("GPU", "Ascend"),
    "mindspore.nn.LARS": ("GPU", "Ascend"),
}

_CONSTANT_LR = when(
    "a constant lr (experimental.optim classes change their lr only through an "
    "lr_scheduler object, and uo.build makes none on MindSpore)",
    lambda s: not isinstance(s.lr, Schedule))
_NOT_MAXIMIZE = when("maximize=False (mindspore.nn optimizers have no maximize)",
                     lambda s: not s.maximize)
_LR_OUTSIDE = when("lr_placement='outside' (MindSpore keeps the lr out of the momentum buffer)",
                   lambda s: s.lr_placement == "outside")
_TORCH_FIRST_STEP = when(
    "momentum_init='grad' or dampening=0 (the first buffer is the gradient)",
    lambda s: s.momentum_init == "grad" or s.dampening == 0.0)
_BIAS_CORRECTION = when("bias_correction=True (both moments are bias-corrected)",
                        lambda s: s.bias_correction)
_NOT_NESTEROV = when("nesterov=False (no TF-style Nesterov numerator)",
                     lambda s: not s.nesterov)
_EPS_OUTSIDE = when("eps_placement='outside' (eps is added outside the bias-corrected sqrt)",
                    lambda s: s.eps_placement == "outside")
_EPS_HAT = when("eps_placement='eps_hat' (the Adam kernel adds eps to the uncorrected sqrt)",
                lambda s: s.eps_placement == "eps_hat")


def _sgd_arguments(s):
    return {"momentum": float(s.momentum), "dampening": float(s.dampening),
            "nesterov": s.nesterov, "weight_decay": float(s.weight_decay)}


def _experimental_adam_arguments(s):
    return {"betas": tuple(s.betas), "eps": float(s.eps),
            "weight_decay": float(s.weight_decay), "amsgrad": s.amsgrad,
            "maximize": s.maximize}


# Measured: the Adam-family kernels compute 1 - beta from float32 betas, so they run the
# spec with betas rounded to float32 (the second moment for beta2=0.999 is 1.3e-5
# relative off the spec's; the parameters stay within the float32 noise).
_BETAS_NOTE = ("with the betas rounded to float32: the kernel's 1 - beta2 for 0.999 is "
               "1.3e-5 relative off, and so is the second moment")

_EXPERIMENTAL_ADAM_STATE = {"exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq",
                            "max_exp_avg_sq": "max_exp_avg_sq"}

_POSITIVE_LR = when(
    "lr > 0 (the constructors of experimental.optim NAdam, RAdam, Adamax, Adagrad, "
    "Adadelta, RMSprop and Rprop refuse lr=0)",
    lambda s: isinstance(s.lr, Schedule) or s.lr > 0.0)
_POSITIVE_BETAS = when("betas > 0 (the nn constructor refuses beta1=0 or beta2=0)",
                       lambda s: min(s.betas) > 0.0)
_L2_ONLY = when("decoupled_weight_decay=False (the decay is L2 in the gradient; MindSpore "
                "has no decoupled form of this class)", lambda s: not s.decoupled_weight_decay)
_FLOAT32_ATTRIBUTES = "its kernel holds the hyperparameters in float32"


def _experimental_betas(s):
    return {"betas": tuple(float(b) for b in s.betas), "eps": float(s.eps),
            "weight_decay": float(s.weight_decay)}


def _step_sizes(s):
    return {"etas": tuple(float(e) for e in s.etas),
            "step_sizes": tuple(float(x) for x in s.step_sizes)}


# Rows are tried in order; `state` maps spec state names to the native optimizer's
# ParameterTuple attributes.
TABLE = (
    NativeLowering(
        "sgd", "mindspore.nn.Momentum",
        (_LR_OUTSIDE, _NOT_MAXIMIZE,
         when("momentum_init='zeros' (nn.Momentum starts its buffer at 0; specs with the "
              "torch first-step rule go to nn.SGD)", lambda s: s.momentum_init == "zeros"),
         when("dampening=0 (nn.Momentum has no dampening)", lambda s: s.dampening == 0.0),
         when("nesterov=False (nn.Momentum(use_nesterov=True) runs plain momentum on CPU, "
              "measured)", lambda s: not s.nesterov)),
        lambda s: {"momentum": float(s.momentum), "weight_decay": float(s.weight_decay)},
        {"momentum_buffer": "moments"}),
    NativeLowering(
        "sgd", "mindspore.nn.SGD", (_LR_OUTSIDE, _TORCH_FIRST_STEP, _NOT_MAXIMIZE),
        _sgd_arguments, {"momentum_buffer": "accum"}),
    NativeLowering(
        "sgd", "mindspore.experimental.optim.SGD", (_LR_OUTSIDE, _TORCH_FIRST_STEP, _CONSTANT_LR),
        lambda s: {**_sgd_arguments(s), "maximize": s.maximize},
        {"momentum_buffer": "accum"}),
    NativeLowering(
        "adam", "mindspore.nn.Adam",
        (_EPS_HAT, _BIAS_CORRECTION, _NOT_MAXIMIZE,
         when("not both amsgrad and nesterov (nn.Adam(use_amsgrad=True) ignores "
              "use_nesterov, measured)", lambda s: not (s.amsgrad and s.nesterov)),
         _POSITIVE_BETAS),
        lambda s: {"beta1": float(s.betas[0]), "beta2": float(s.betas[1]), "eps": float(s.eps),
                   "use_amsgrad": s.amsgrad, "use_nesterov": s.nesterov,
                   "weight_decay": float(s.weight_decay)},
        {"exp_avg": "moment1", "exp_avg_sq": "moment2", "max_exp_avg_sq": "vhat"},
        note=_BETAS_NOTE),
    NativeLowering(
        "adam", "mindspore.experimental.optim.AdamW",
        (_EPS_OUTSIDE, _BIAS_CORRECTION, _NOT_NESTEROV, _CONSTANT_LR,
         when("weight_decay=0 (AdamW(weight_decay=0) is Adam; Adam's L2 decay has no "
              "experimental.AdamW form)", lambda s: s.weight_decay == 0.0)),
        _experimental_adam_arguments, _EXPERIMENTAL_ADAM_STATE,
        note="as AdamW with weight_decay=0; " + _BETAS_NOTE),
    NativeLowering(
        "adam", "mindspore.experimental.optim.Adam",
        (_EPS_HAT, _BIAS_CORRECTION, _NOT_NESTEROV, _CONSTANT_LR,
         when("amsgrad=False (experimental.optim.Adam ignores amsgrad on CPU, measured)",
              lambda s: not s.amsgrad)),
        _experimental_adam_arguments, _EXPERIMENTAL_ADAM_STATE, note=_BETAS_NOTE),
    NativeLowering(
        "adamw", "mindspore.experimental.optim.AdamW",
        (_EPS_OUTSIDE, _BIAS_CORRECTION, _NOT_NESTEROV, _CONSTANT_LR,
         when("decay_form='before_update' (p is multiplied by 1 - lr*wd first)",
              lambda s: s.decay_form == "before_update"),
         when("decay_times_lr=True (the decay is scaled by the lr)",
              lambda s: s.decay_times_lr)),
        _experimental_adam_arguments, _EXPERIMENTAL_ADAM_STATE, note=_BETAS_NOTE),
    NativeLowering(
        "adamw", "mindspore.nn.AdamWeightDecay",
        (when("bias_correction=False (nn.AdamWeightDecay corrects neither moment)",
              lambda s: not s.bias_correction),
         when("eps_placement 'outside' or 'eps_hat' (the same without bias correction)",
              lambda s: s.eps_placement in ("outside", "eps_hat")),
         when("decay_form='in_update' (wd*p is added to the lr-scaled update)",
              lambda s: s.decay_form == "in_update"),
         when("decay_times_lr=True (the decay is scaled by the lr)",
              lambda s: s.decay_times_lr),
         when("amsgrad=False (nn.AdamWeightDecay has no amsgrad)", lambda s: not s.amsgrad),
         _NOT_NESTEROV, _NOT_MAXIMIZE, _POSITIVE_BETAS),
        lambda s: {"beta1": float(s.betas[0]), "beta2": float(s.betas[1]), "eps": float(s.eps),
                   "weight_decay": float(s.weight_decay)},
        {"exp_avg": "moments1", "exp_avg_sq": "moments2"}, note=_BETAS_NOTE),
    NativeLowering(
        "nadam", "mindspore.experimental.optim.NAdam",
        (_L2_ONLY, _NOT_MAXIMIZE, _CONSTANT_LR, _POSITIVE_LR),
        lambda s: {**_experimental_betas(s), "momentum_decay": float(s.momentum_decay)},
        {"exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq", "mu_product": "mu_product"},
        note="its mu_product lives in an unregistered list, which checkpoints leave out"),
    NativeLowering(
        "radam", "mindspore.experimental.optim.RAdam",
        (when("rectify_threshold=5 (experimental.optim.RAdam rectifies when rho_t > 5)",
              lambda s: s.rectify_threshold == 5.0),
         _L2_ONLY, _NOT_MAXIMIZE, _CONSTANT_LR, _POSITIVE_LR),
        _experimental_betas, {"exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq"}),
    NativeLowering(
        "adamax", "mindspore.nn.AdaMax",
        (when("eps_placement='outside_max' (nn.AdaMax divides by max(beta2*u, |g|) + eps)",
              lambda s: s.eps_placement == "outside_max"), _NOT_MAXIMIZE, _POSITIVE_BETAS),
        lambda s: {"beta1": float(s.betas[0]), "beta2": float(s.betas[1]), "eps": float(s.eps),
                   "weight_decay": float(s.weight_decay)},
        {"exp_avg": "moment1", "exp_inf": "moment2"}, note=_FLOAT32_ATTRIBUTES),
    NativeLowering(
        "adamax", "mindspore.experimental.optim.Adamax",
        (when("eps_placement='on_grad' (experimental.optim.Adamax takes max(beta2*u, |g| + eps))",
              lambda s: s.eps_placement == "on_grad"), _CONSTANT_LR, _POSITIVE_LR),
        lambda s: {**_experimental_betas(s), "maximize": s.maximize},
        {"exp_avg": "exp_avg", "exp_inf": "exp_inf"}),
    NativeLowering(
        "adagrad", "mindspore.nn.Adagrad",
        (when("eps=0 (nn.Adagrad divides by sqrt(sum) with no eps)", lambda s: s.eps == 0.0),
         when("lr_decay=0 (nn.Adagrad has no lr_decay)", lambda s: s.lr_decay == 0.0),
         when("initial_accumulator_value >= 2**-126, float32's smallest normal number "
              "(nn.Adagrad leaves an element unchanged where its sum is 0 and flushes "
              "subnormal sums to 0, measured; the spec divides by zero there)",
              lambda s: s.initial_accumulator_value >= 2.0 ** -126),
         _NOT_MAXIMIZE),
        lambda s: {"accum": float(s.initial_accumulator_value),
                   "weight_decay": float(s.weight_decay)},
        {"sum": "accum"}),
    NativeLowering(
        "adagrad", "mindspore.experimental.optim.Adagrad",
        (when("eps > 0 (experimental.optim.Adagrad's constructor refuses eps=0)",
              lambda s: s.eps > 0.0), _CONSTANT_LR, _POSITIVE_LR),
        lambda s: {"lr_decay": float(s.lr_decay), "weight_decay": float(s.weight_decay),
                   "initial_accumulator_value": float(s.initial_accumulator_value),
                   "eps": float(s.eps), "maximize": s.maximize},
        {"sum": "accum"},
        note="on float32 parameters, the only ones the backend takes (on float64 it does "
             "nothing)"),
    NativeLowering(
        "adadelta", "mindspore.nn.Adadelta", (_NOT_MAXIMIZE,),
        lambda s: {"rho": float(s.rho), "epsilon": float(s.eps),
                   "weight_decay": float(s.weight_decay)},
        {"square_avg": "accum", "acc_delta": "accum_update"}),
    NativeLowering(
        "adadelta", "mindspore.experimental.optim.Adadelta", (_CONSTANT_LR, _POSITIVE_LR),
        lambda s: {"rho": float(s.rho), "eps": float(s.eps),
                   "weight_decay": float(s.weight_decay), "maximize": s.maximize},
        {"square_avg": "accum", "acc_delta": "accum_update"}),
    NativeLowering(
        "rmsprop", "mindspore.nn.RMSProp",
        (when("eps_placement='inside' (nn.RMSProp divides by sqrt(mean_square + eps))",
              lambda s: s.eps_placement == "inside"),
         when("lr_placement='inside' or momentum=0 (nn.RMSProp puts the lr into the momentum "
              "buffer)", lambda s: s.lr_placement == "inside" or s.momentum == 0.0),
         when("initial_square_avg=1 (nn.RMSProp starts mean_square at 1)",
              lambda s: s.initial_square_avg == 1.0),
         _NOT_MAXIMIZE),
        lambda s: {"decay": float(s.alpha), "momentum": float(s.momentum),
                   "epsilon": float(s.eps), "centered": s.centered,
                   "weight_decay": float(s.weight_decay)},
        {"square_avg": "ms", "momentum_buffer": "moment", "grad_avg": "mg"}),
    NativeLowering(
        "rmsprop", "mindspore.experimental.optim.RMSprop",
        (when("eps_placement='outside' (experimental.optim.RMSprop adds eps to the sqrt)",
              lambda s: s.eps_placement == "outside"),
         when("lr_placement='outside' or momentum=0 (experimental.optim.RMSprop keeps the lr "
              "out of the buffer)", lambda s: s.lr_placement == "outside" or s.momentum == 0.0),
         when("initial_square_avg=0 (experimental.optim.RMSprop starts mean_square at 0)",
              lambda s: s.initial_square_avg == 0.0),
         _CONSTANT_LR, _POSITIVE_LR),
        lambda s: {"alpha": float(s.alpha), "eps": float(s.eps),
                   "weight_decay": float(s.weight_decay), "momentum": float(s.momentum),
                   "centered": s.centered, "maximize": s.maximize},
        {"square_avg": "mean_square", "momentum_buffer": "moment", "grad_avg": "mean_grad"}),
    NativeLowering(
        "rprop", "mindspore.nn.Rprop", (_NOT_MAXIMIZE,),
        lambda s: {**_step_sizes(s), "weight_decay": float(s.weight_decay)},
        {"prev": "prev", "step_size": "step_size"}),
    NativeLowering(
        "rprop", "mindspore.experimental.optim.Rprop",
        (when("weight_decay=0 (experimental.optim.Rprop has no weight decay)",
              lambda s: s.weight_decay == 0.0), _CONSTANT_LR, _POSITIVE_LR),
        lambda s: {**_step_sizes(s), "maximize": s.maximize},
        {"prev": "prev", "step_size": "step_size"}),

    # -- the seed algorithms (mindspore.md §4, §7); no native CAME (MindFormers is not
    # installable beside mindspore 2.10) and no DGC
    NativeLowering(
        "adam_offload", "mindspore.nn.Adam",
        (_EPS_HAT, _BIAS_CORRECTION, _NOT_MAXIMIZE,
         when("amsgrad=False (the offload kernel AdamNoUpdateParam has no amsgrad)",
              lambda s: not s.amsgrad),
         _POSITIVE_BETAS),
        lambda s: {"beta1": float(s.betas[0]), "beta2": float(s.betas[1]), "eps": float(s.eps),
                   "use_nesterov": s.nesterov, "weight_decay": float(s.weight_decay),
                   "use_offload": True},
        {"exp_avg": "moment1", "exp_avg_sq": "moment2"},
        note="nn.Adam(use_offload=True), the successor of the deprecated nn.AdamOffload: "
             "AdamNoUpdateParam on the host returns the step, added to the parameter; "
             + _BETAS_NOTE),
    NativeLowering(
        "adafactor", "mindspore.nn.AdaFactor",
        (when("eps_mode='add' (nn.AdaFactor adds eps[0] to g^2)",
              lambda s: s.eps_mode == "add"),
         when("eps[0] given (nn.AdaFactor takes a float, not the dtype's machine eps)",
              lambda s: s.eps[0] is not None),
         when("beta2=None with 0 < decay_rate < 1 (nn.AdaFactor's beta2 is 1 - t^-decay_rate)",
              lambda s: s.beta2 is None and 0.0 < s.decay_rate < 1.0),
         when("decay_lr='scaled' (nn.AdaFactor decays by weight_decay * the scaled lr)",
              lambda s: s.decay_lr == "scaled"),
         when("weight_decay < 1 (the constructor's range)", lambda s: s.weight_decay < 1.0),
         when("lr=1e-2 with relative_step (1e-6 with warmup_init): nn.AdaFactor's fixed caps; "
              "any constant lr without relative_step",
              lambda s: not s.relative_step or s.lr == (1e-6 if s.warmup_init else 1e-2)),
         when("a constant lr (nn.AdaFactor skips the relative step and parameter scaling "
              "for a per-step lr list)", lambda s: not isinstance(s.lr, Schedule)),
         _NOT_MAXIMIZE),
        lambda s: {"learning_rate": None if s.relative_step else float(s.lr),
                   "eps": tuple(float(e) for e in s.eps),
                   "clip_threshold": float(s.clip_threshold),
                   "decay_rate": float(s.decay_rate),
                   "beta1": 0.0 if s.beta1 is None else float(s.beta1),
                   "weight_decay": float(s.weight_decay), "scale_parameter": s.scale_parameter,
                   "relative_step": s.relative_step, "warmup_init": s.warmup_init},
        {"exp_avg": "exp_avg", "exp_avg_sq_row": "exp_avg_sq_row",
         "exp_avg_sq_col": "exp_avg_sq_col", "exp_avg_sq": "exp_avg_sq"},
        note="the fused CPU kernel FusedAdaFactor; it keeps the row and column moments "
             "without the reduced axis (read back in the spec's keepdims shapes); "
             + _FLOAT32_ATTRIBUTES),
    NativeLowering(
        "lamb", "mindspore.nn.Lamb",
        (when("bias_correction='moments' (nn.Lamb corrects both moments)",
              lambda s: s.bias_correction == "moments"),
         when("always_adapt=True (nn.Lamb applies the trust ratio to every parameter)",
              lambda s: s.always_adapt),
         when("weight_norm_clamp=None and trust_eps=0 (nn.Lamb's ratio is ||p||/||r||)",
              lambda s: s.weight_norm_clamp is None and s.trust_eps == 0.0),
         _POSITIVE_BETAS),
        lambda s: {"beta1": float(s.betas[0]), "beta2": float(s.betas[1]), "eps": float(s.eps),
                   "weight_decay": float(s.weight_decay)},
        {"exp_avg": "moments1", "exp_avg_sq": "moments2"}),
    NativeLowering(
        "lars", "mindspore.nn.LARS",
        (when("lr_placement='outside' and momentum_init='zeros' and dampening=0 (LARS wraps "
              "nn.Momentum here)", lambda s: s.lr_placement == "outside" and
              s.momentum_init == "zeros" and s.dampening == 0.0 and not s.nesterov),
         when("always_adapt=True and zero_norm_rule='none' (LARSUpdate scales every "
              "gradient by the raw ratio)",
              lambda s: s.always_adapt and s.zero_norm_rule == "none"),
         when("exclude_1d=False", lambda s: not s.exclude_1d)),
        lambda s: {"momentum": float(s.momentum), "weight_decay": float(s.weight_decay),
                   "epsilon": float(s.eps), "coefficient": float(s.trust_coefficient),
                   "use_clip": s.clip, "exclude_names": s.exclude_names},
        {"momentum_buffer": "moments"}),
)


def _on_device(row, device: str):
    if row.native in NO_CPU_KERNEL:
        devices = NO_CPU_KERNEL[row.native]
        return when(f"device in {devices} ({row.native} has no CPU kernel, mindspore.md §2; "
                    f"this is {device})", lambda s: device in devices)
    devices = MEASURED_DEVICES.get(row.native, ("CPU",))
    return when(f"device in {devices} (where {row.native} was measured exact; this is "
                f"{device})", lambda s: device in devices)


#: nn classes that take ``loss_scale`` and divide the gradients by it (measured exact:
#: tests/test_training_mindspore.py). nn.AdamWeightDecay and nn.Lamb take none,
#: nn.AdaFactor takes one and does not divide, experimental.optim classes take none.
LOSS_SCALE = ("mindspore.nn.SGD", "mindspore.nn.Momentum", "mindspore.nn.Adam",
              "mindspore.nn.AdaMax", "mindspore.nn.Adagrad", "mindspore.nn.Adadelta",
              "mindspore.nn.RMSProp")
#: nn classes that take a weight-decay Cell (measured exact). nn.SGD refuses one
#: ("dynamic weight decay is currently not supported"), nn.AdaFactor keeps a float.
CELL_WEIGHT_DECAY = ("mindspore.nn.Momentum", "mindspore.nn.Adam",
                     "mindspore.nn.AdamWeightDecay", "mindspore.nn.AdaMax",
                     "mindspore.nn.Adagrad", "mindspore.nn.Adadelta", "mindspore.nn.RMSProp",
                     "mindspore.nn.Rprop")
#: nn classes built here over one flat parameter list: no group lr, one decay
NO_GROUPS = ("mindspore.nn.AdaFactor", "mindspore.nn.LARS")

_LOSS_SCALE_ONLY = when(
    "no gradient pre-step but loss_scale: grad_clip=None, skip_nonfinite=False, "
    "grad_centralization=False (the native class divides by loss_scale; clipping and "
    "overflow skipping belong to the train step, and the CPU kernel cannot centralize)",
    lambda s: s.grad_clip is None and not s.skip_nonfinite and not s.grad_centralization)
_NO_MOMENTUM_CYCLING = when(
    "no momentum-cycling lr schedule (the native class holds one momentum; a weight-decay "
    "schedule becomes its Cell form)",
    lambda s: not (isinstance(s.lr, Schedule) and s.lr.momentum(0) is not None))


def _around(row, plans):
    """The conditions on what lies around ``row``'s algorithm (see the module docstring)."""
    conditions = [_LOSS_SCALE_ONLY if row.native in LOSS_SCALE else NO_PRE_STEP,
                  _NO_MOMENTUM_CYCLING if row.native in CELL_WEIGHT_DECAY
                  else CONSTANT_HYPERPARAMETERS]
    if not plans:
        return conditions
    conditions.append(every_group_condition(row, plans))
    if row.native in NO_GROUPS:
        conditions.append(when(
            f"no group lr and one weight decay for every parameter ({row.native} is built "
            "over one flat parameter list: nn.AdaFactor fails on group lrs and ignores "
            "group decay; LARS wraps one nn.Momentum)",
            lambda s: all(p.lr_scale == 1.0 and p.fixed_lr is None for p in plans)
            and len({repr(p.spec.weight_decay) for p in plans}) == 1))
    return conditions


def decide_for(spec, path: str = "auto", *, device: str = "CPU", plans=None):
    """The decision for ``spec`` on ``device`` (``ms.get_context("device_target")``);
    ``plans`` (:func:`unified_opt.groups.plan_parameters`): the parameter groups."""
    table = tuple(dataclasses.replace(row, conditions=row.conditions +
                                      (_on_device(row, device),))
                  for row in TABLE)
    return decide("mindspore", table, spec, path, OWN_CLASS,
                  extra=lambda row: _around(row, plans))
