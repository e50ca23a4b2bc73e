"""The torch lowering table (imports no framework)."""

from __future__ import annotations

from unified_opt.lowering import NativeLowering, decide, when

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
)


def decide_for(spec, path: str = "auto"):
    return decide("torch", TABLE, spec, path, OWN_CLASS)
