"""The ``mindspore.experimental.optim`` classes (torch-style arguments) as descriptors
(MindSpore 2.10): presets, lowerings, state names and quirks."""

from __future__ import annotations

from unified_opt.algorithms import (
    ASGD,
    SGD,
    Adadelta,
    Adagrad,
    Adam,
    Adamax,
    AdamW,
    NAdam,
    RAdam,
    RMSprop,
    Rprop,
)
from unified_opt.native import Lowering, when
from unified_opt.presets._registry import require_float
from unified_opt.schedules import Schedule
from unified_opt.spec import spec_class

from .descriptor import (
    BETAS_NOTE,
    BIAS_CORRECTION,
    CONSTANT_LR,
    EPS_HAT,
    EPS_OUTSIDE,
    L2_ONLY,
    LR_OUTSIDE,
    MAX_DROPS_NAN,
    NOT_MAXIMIZE,
    NOT_NESTEROV,
    POSITIVE_LR,
    SIGN_OF_NAN,
    TORCH_FIRST_STEP,
    MindSporeClass,
    experimental_betas,
)

# -- presets: the native call read as a spec -------------------------------------------------

def exp_sgd(lr, momentum=0, dampening=0, weight_decay=0.0, nesterov=False, *, maximize=False):
    q = "mindspore.experimental.optim.SGD"
    return SGD(lr=require_float(q, "lr", lr), momentum=momentum, dampening=dampening,
               weight_decay=weight_decay, nesterov=nesterov, maximize=maximize,
               momentum_init="grad")


def exp_adam(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, *,
             maximize=False):
    # Documented: amsgrad applies. On CPU the class ignores it; the backend knows.
    q = "mindspore.experimental.optim.Adam"
    return Adam(lr=require_float(q, "lr", lr), betas=betas, eps=eps, weight_decay=weight_decay,
                amsgrad=amsgrad, maximize=maximize, eps_placement="eps_hat",
                bias_correction=True)


def exp_adamw(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, *,
              maximize=False):
    q = "mindspore.experimental.optim.AdamW"
    return AdamW(lr=require_float(q, "lr", lr), betas=betas, eps=eps, weight_decay=weight_decay,
                 amsgrad=amsgrad, maximize=maximize, eps_placement="outside",
                 bias_correction=True, decay_form="before_update")


def exp_adadelta(lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0, *, maximize=False):
    q = "mindspore.experimental.optim.Adadelta"
    return Adadelta(lr=require_float(q, "lr", lr), rho=rho, eps=eps, weight_decay=weight_decay,
                    maximize=maximize)


def exp_adagrad(lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0,
                eps=1e-10, *, maximize=False):
    q = "mindspore.experimental.optim.Adagrad"
    return Adagrad(lr=require_float(q, "lr", lr), lr_decay=lr_decay, weight_decay=weight_decay,
                   initial_accumulator_value=initial_accumulator_value, eps=eps,
                   maximize=maximize)


def exp_adamax(lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, *, maximize=False):
    q = "mindspore.experimental.optim.Adamax"
    return Adamax(lr=require_float(q, "lr", lr), betas=betas, eps=eps, weight_decay=weight_decay,
                  maximize=maximize, eps_placement="on_grad")


def exp_nadam(lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, momentum_decay=4e-3):
    q = "mindspore.experimental.optim.NAdam"
    return NAdam(lr=require_float(q, "lr", lr), betas=betas, eps=eps, weight_decay=weight_decay,
                 momentum_decay=momentum_decay)


def exp_radam(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
    q = "mindspore.experimental.optim.RAdam"
    return RAdam(lr=require_float(q, "lr", lr), betas=betas, eps=eps, weight_decay=weight_decay)


def exp_rmsprop(lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False,
                maximize=False):
    q = "mindspore.experimental.optim.RMSprop"
    return RMSprop(lr=require_float(q, "lr", lr), alpha=alpha, eps=eps, weight_decay=weight_decay,
                   momentum=momentum, centered=centered, maximize=maximize)


def exp_rprop(lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), *, maximize=False):
    q = "mindspore.experimental.optim.Rprop"
    return Rprop(lr=require_float(q, "lr", lr), etas=etas, step_sizes=step_sizes,
                 maximize=maximize)


def exp_asgd(lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0.0, maximize=False):
    q = "mindspore.experimental.optim.ASGD"
    return ASGD(lr=require_float(q, "lr", lr), lambd=lambd, alpha=alpha, t0=t0,
                weight_decay=weight_decay, maximize=maximize)


# -- lowerings: the spec read as the native call ---------------------------------------------

def _adam_arguments(s):
    return {"betas": tuple(s.betas), "eps": float(s.eps),
            "weight_decay": float(s.weight_decay), "amsgrad": s.amsgrad,
            "maximize": s.maximize}


def _as_adam(adamw_spec):
    """``AdamW(weight_decay=0)`` read as the Adam it computes."""
    fields = {k: v for k, v in adamw_spec.hyperparameters().items()
              if k not in ("decay_form", "decay_times_lr")}
    return spec_class("adam")(**fields)


def _step_sizes(s):
    return {"etas": tuple(float(e) for e in s.etas),
            "step_sizes": tuple(float(x) for x in s.step_sizes)}


_ADAM_STATE = {"exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq",
               "max_exp_avg_sq": "max_exp_avg_sq"}
_ADAM_FORM = (BIAS_CORRECTION, NOT_NESTEROV, CONSTANT_LR)

CLASSES = (
    MindSporeClass(
        name="mindspore.experimental.optim.SGD", from_native=exp_sgd, lr_keyword="lr",
        lowerings=(Lowering(
            "sgd", (LR_OUTSIDE, TORCH_FIRST_STEP, CONSTANT_LR),
            lambda s: {"momentum": float(s.momentum), "dampening": float(s.dampening),
                       "nesterov": s.nesterov, "weight_decay": float(s.weight_decay),
                       "maximize": s.maximize}),),
        state={"momentum_buffer": "accum"}),
    MindSporeClass(
        name="mindspore.experimental.optim.AdamW", from_native=exp_adamw, lr_keyword="lr",
        lowerings=(
            Lowering(
                "adam",
                (EPS_OUTSIDE,) + _ADAM_FORM + (
                    when("weight_decay=0 (AdamW(weight_decay=0) is Adam; Adam's L2 decay has "
                         "no experimental.AdamW form)", lambda s: s.weight_decay == 0.0),),
                _adam_arguments, "as AdamW with weight_decay=0; " + BETAS_NOTE,
                read_back=_as_adam),
            Lowering(
                "adamw",
                (EPS_OUTSIDE,) + _ADAM_FORM + (
                    when("decay_form='before_update' (p is multiplied by 1 - lr*wd first)",
                         lambda s: s.decay_form == "before_update"),
                    when("decay_times_lr=True (the decay is scaled by the lr)",
                         lambda s: s.decay_times_lr)),
                _adam_arguments, BETAS_NOTE)),
        state=_ADAM_STATE),
    MindSporeClass(
        name="mindspore.experimental.optim.Adam", from_native=exp_adam, lr_keyword="lr",
        lowerings=(Lowering(
            "adam",
            (EPS_HAT,) + _ADAM_FORM + (
                when("amsgrad=False (experimental.optim.Adam ignores amsgrad on CPU, measured)",
                     lambda s: not s.amsgrad),),
            _adam_arguments, BETAS_NOTE),),
        state={"exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq"}),
    MindSporeClass(
        name="mindspore.experimental.optim.NAdam", from_native=exp_nadam, lr_keyword="lr",
        lowerings=(Lowering(
            "nadam", (L2_ONLY, NOT_MAXIMIZE, CONSTANT_LR, POSITIVE_LR),
            lambda s: {**experimental_betas(s), "momentum_decay": float(s.momentum_decay)},
            "its mu_product lives in an unregistered list, which checkpoints leave out"),),
        state={"exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq", "mu_product": "mu_product"},
        shared_scalars=("mu_product",)),
    MindSporeClass(
        name="mindspore.experimental.optim.RAdam", from_native=exp_radam, lr_keyword="lr",
        lowerings=(Lowering(
            "radam",
            (when("rectify_threshold=5 (experimental.optim.RAdam rectifies when rho_t > 5)",
                  lambda s: s.rectify_threshold == 5.0),
             when("unrectified_step='momentum' (experimental.optim.RAdam takes the momentum step "
                  "before rectifying)", lambda s: s.unrectified_step == "momentum"),
             L2_ONLY, NOT_MAXIMIZE, CONSTANT_LR, POSITIVE_LR),
            experimental_betas),),
        state={"exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq"}),
    MindSporeClass(
        name="mindspore.experimental.optim.Adamax", from_native=exp_adamax, lr_keyword="lr",
        nonfinite=MAX_DROPS_NAN,
        lowerings=(Lowering(
            "adamax",
            (when("eps_placement='on_grad' (experimental.optim.Adamax takes "
                  "max(beta2*u, |g| + eps))", lambda s: s.eps_placement == "on_grad"),
             CONSTANT_LR, POSITIVE_LR),
            lambda s: {**experimental_betas(s), "maximize": s.maximize}),),
        state={"exp_avg": "exp_avg", "exp_inf": "exp_inf"}),
    MindSporeClass(
        name="mindspore.experimental.optim.Adagrad", from_native=exp_adagrad, lr_keyword="lr",
        lowerings=(Lowering(
            "adagrad",
            (when("eps > 0 (experimental.optim.Adagrad's constructor refuses eps=0)",
                  lambda s: s.eps > 0.0), CONSTANT_LR, POSITIVE_LR),
            lambda s: {"lr_decay": float(s.lr_decay), "weight_decay": float(s.weight_decay),
                       "initial_accumulator_value": float(s.initial_accumulator_value),
                       "eps": float(s.eps), "maximize": s.maximize},
            "on float32 parameters, the only ones the backend takes (on float64 it does "
            "nothing)"),),
        state={"sum": "accum"}),
    MindSporeClass(
        name="mindspore.experimental.optim.Adadelta", from_native=exp_adadelta,
        lr_keyword="lr",
        lowerings=(Lowering(
            "adadelta", (CONSTANT_LR, POSITIVE_LR),
            lambda s: {"rho": float(s.rho), "eps": float(s.eps),
                       "weight_decay": float(s.weight_decay), "maximize": s.maximize}),),
        state={"square_avg": "accum", "acc_delta": "accum_update"}),
    MindSporeClass(
        name="mindspore.experimental.optim.RMSprop", from_native=exp_rmsprop, lr_keyword="lr",
        lowerings=(Lowering(
            "rmsprop",
            (when("eps_placement='outside' (experimental.optim.RMSprop adds eps to the sqrt)",
                  lambda s: s.eps_placement == "outside"),
             when("lr_placement='outside' or momentum=0 (experimental.optim.RMSprop keeps "
                  "the lr out of the buffer)",
                  lambda s: s.lr_placement == "outside" or s.momentum == 0.0),
             when("initial_square_avg=0 (experimental.optim.RMSprop starts mean_square at 0)",
                  lambda s: s.initial_square_avg == 0.0),
             CONSTANT_LR, POSITIVE_LR),
            lambda s: {"alpha": float(s.alpha), "eps": float(s.eps),
                       "weight_decay": float(s.weight_decay), "momentum": float(s.momentum),
                       "centered": s.centered, "maximize": s.maximize}),),
        state={"square_avg": "mean_square", "momentum_buffer": "moment",
               "grad_avg": "mean_grad"}),
    MindSporeClass(
        name="mindspore.experimental.optim.Rprop", from_native=exp_rprop, lr_keyword="lr",
        nonfinite=SIGN_OF_NAN,
        lowerings=(Lowering(
            "rprop",
            (when("weight_decay=0 (experimental.optim.Rprop has no weight decay)",
                  lambda s: s.weight_decay == 0.0), CONSTANT_LR, POSITIVE_LR),
            lambda s: {**_step_sizes(s), "maximize": s.maximize}),),
        state={"prev": "prev", "step_size": "step_size"}),
    MindSporeClass(
        name="mindspore.experimental.optim.ASGD", from_native=exp_asgd, lr_keyword="lr",
        lowerings=(Lowering(
            "asgd",
            (CONSTANT_LR,
             when("lr > 0 (experimental.optim.ASGD's constructor refuses lr=0)",
                  lambda s: isinstance(s.lr, Schedule) or s.lr > 0.0)),
            lambda s: {"lambd": float(s.lambd), "alpha": float(s.alpha), "t0": float(s.t0),
                       "weight_decay": float(s.weight_decay), "maximize": s.maximize},
            "with eta and mu computed in float32"),),
        state={"ax": "ax", "eta": "eta", "mu": "mu"}, shared_scalars=("eta", "mu")),
)
