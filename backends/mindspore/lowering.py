"""The MindSpore lowering table (imports no framework).

Every claim was measured with MindSpore 2.10 on CPU (shared/research/mindspore.md), on
float32 parameters (the only dtype the backend takes). A row also depends on the device
(nn.Lamb and nn.LARS have no CPU kernel): :func:`decide_for` adds that condition to
every row.
"""

from __future__ import annotations

import dataclasses

from unified_opt.lowering import NativeLowering, decide, when
from unified_opt.schedules import Schedule

OWN_CLASS = "unified_opt.backends.mindspore.SpecOptimizer (a mindspore.nn.Optimizer)"

#: Devices where a row's native class was measured exact; rows not listed: CPU only.
MEASURED_DEVICES: dict[str, tuple[str, ...]] = {}

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
              "use_nesterov, measured)", lambda s: not (s.amsgrad and s.nesterov))),
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
         _NOT_NESTEROV, _NOT_MAXIMIZE),
        lambda s: {"beta1": float(s.betas[0]), "beta2": float(s.betas[1]), "eps": float(s.eps),
                   "weight_decay": float(s.weight_decay)},
        {"exp_avg": "moments1", "exp_avg_sq": "moments2"}, note=_BETAS_NOTE),
)


def _on_device(row, device: str):
    devices = MEASURED_DEVICES.get(row.native, ("CPU",))
    return when(f"device in {devices} (where {row.native} was measured exact; this is "
                f"{device})", lambda s: device in devices)


def decide_for(spec, path: str = "auto", *, device: str = "CPU"):
    """The decision for ``spec`` on ``device`` (``ms.get_context("device_target")``)."""
    table = tuple(dataclasses.replace(row, conditions=row.conditions +
                                      (_on_device(row, device),))
                  for row in TABLE)
    return decide("mindspore", table, spec, path, OWN_CLASS)
