"""The ``paddle.optimizer`` classes of the common algorithms as descriptors (Paddle 3.3
signatures and defaults): presets, lowerings, state names (:class:`.descriptor.PaddleClass`)."""

from __future__ import annotations

from unified_opt.algorithms import (
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
from unified_opt.presets._registry import require_float, unsupported
from unified_opt.schedules import Schedule

from .descriptor import (
    FLOAT32_ATTRIBUTES,
    NOT_MAXIMIZE,
    PaddleClass,
    betas_epsilon,
    grad_clip_spec,
    l2_coefficient,
    learning_rate_spec,
    no_decay_callable,
)

# -- presets: the native call read as a spec -------------------------------------------------

def sgd(learning_rate=0.001, weight_decay=None, grad_clip=None, multi_precision=False,
        name=None):
    q = "paddle.optimizer.SGD"
    return SGD(lr=learning_rate_spec(q, learning_rate), grad_clip=grad_clip_spec(q, grad_clip),
               weight_decay=l2_coefficient(q, weight_decay))


def momentum(learning_rate=0.001, momentum=0.9, use_nesterov=False, weight_decay=None,
             grad_clip=None, multi_precision=False, rescale_grad=1.0, use_multi_tensor=False,
             name=None):
    q = "paddle.optimizer.Momentum"
    if rescale_grad != 1.0:
        raise unsupported(q, "rescale_grad", rescale_grad,
                          "the CPU kernel ignores it (measured) and no spec knob scales "
                          "the gradient; scale the loss instead")
    return SGD(lr=learning_rate_spec(q, learning_rate), momentum=momentum,
               grad_clip=grad_clip_spec(q, grad_clip),
               nesterov=use_nesterov, weight_decay=l2_coefficient(q, weight_decay),
               momentum_init="zeros")


def adam(learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, weight_decay=None,
         grad_clip=None, lazy_mode=False, multi_precision=False, use_multi_tensor=False,
         amsgrad=False, name=None):
    q = "paddle.optimizer.Adam"
    # lazy_mode only changes sparse (SelectedRows) gradients; dense ones are identical.
    return Adam(lr=learning_rate_spec(q, learning_rate), betas=(beta1, beta2),
                grad_clip=grad_clip_spec(q, grad_clip),
                eps=epsilon, weight_decay=l2_coefficient(q, weight_decay), amsgrad=amsgrad,
                eps_placement="outside", bias_correction=True)


def adamw(learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, weight_decay=0.01,
          use_lowprecision_moment=False, lr_ratio=None, apply_decay_param_fun=None,
          grad_clip=None, lazy_mode=False, multi_precision=False, amsgrad=False, name=None):
    q = "paddle.optimizer.AdamW"
    if use_lowprecision_moment:
        raise unsupported(q, "use_lowprecision_moment", use_lowprecision_moment,
                          "low-precision moments only exist for fp16/bf16 parameters, which "
                          "no Paddle CPU kernel takes")
    if lr_ratio is not None:
        raise unsupported(q, "lr_ratio", lr_ratio,
                          "Paddle raises NotImplementedError for it on CPU")
    no_decay_callable(q, "apply_decay_param_fun", apply_decay_param_fun,
                       "the parameter's name; it returns True for the decayed ones")
    return AdamW(lr=learning_rate_spec(q, learning_rate), betas=(beta1, beta2),
                 grad_clip=grad_clip_spec(q, grad_clip),
                 eps=epsilon, weight_decay=weight_decay, amsgrad=amsgrad,
                 eps_placement="outside", bias_correction=True, decay_form="before_update")


def adadelta(learning_rate=0.001, epsilon=1e-6, rho=0.95, weight_decay=None, grad_clip=None,
             name=None):
    q = "paddle.optimizer.Adadelta"
    return Adadelta(lr=learning_rate_spec(q, learning_rate), rho=rho, eps=epsilon,
                    grad_clip=grad_clip_spec(q, grad_clip),
                    weight_decay=l2_coefficient(q, weight_decay))


def adagrad(learning_rate, epsilon=1e-6, weight_decay=None, grad_clip=None, name=None,
            initial_accumulator_value=0.0):
    q = "paddle.optimizer.Adagrad"
    return Adagrad(lr=learning_rate_spec(q, learning_rate), eps=epsilon,
                   grad_clip=grad_clip_spec(q, grad_clip),
                   initial_accumulator_value=initial_accumulator_value,
                   weight_decay=l2_coefficient(q, weight_decay))


def adamax(learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, weight_decay=None,
           grad_clip=None, name=None):
    q = "paddle.optimizer.Adamax"
    return Adamax(lr=learning_rate_spec(q, learning_rate), betas=(beta1, beta2),
                  grad_clip=grad_clip_spec(q, grad_clip),
                  eps=epsilon, weight_decay=l2_coefficient(q, weight_decay),
                  eps_placement="on_decayed_norm")


def nadam(learning_rate=0.002, beta1=0.9, beta2=0.999, epsilon=1e-8, momentum_decay=0.004,
          weight_decay=None, grad_clip=None, name=None):
    q = "paddle.optimizer.NAdam"
    return NAdam(lr=learning_rate_spec(q, learning_rate), betas=(beta1, beta2),
                 grad_clip=grad_clip_spec(q, grad_clip),
                 eps=epsilon, momentum_decay=momentum_decay,
                 weight_decay=l2_coefficient(q, weight_decay))


def radam(learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, weight_decay=None,
          grad_clip=None, name=None):
    q = "paddle.optimizer.RAdam"
    return RAdam(lr=learning_rate_spec(q, learning_rate), betas=(beta1, beta2),
                 grad_clip=grad_clip_spec(q, grad_clip),
                 eps=epsilon, weight_decay=l2_coefficient(q, weight_decay))


def rmsprop(learning_rate, rho=0.95, epsilon=1e-6, momentum=0.0, centered=False,
            weight_decay=None, grad_clip=None, name=None):
    q = "paddle.optimizer.RMSProp"
    return RMSprop(lr=learning_rate_spec(q, learning_rate), alpha=rho, eps=epsilon,
                   grad_clip=grad_clip_spec(q, grad_clip),
                   momentum=momentum, centered=centered,
                   weight_decay=l2_coefficient(q, weight_decay), eps_placement="inside",
                   lr_placement="inside")


def rprop(learning_rate=0.001, learning_rate_range=(1e-5, 50), etas=(0.5, 1.2), grad_clip=None,
          multi_precision=False, name=None):
    q = "paddle.optimizer.Rprop"
    lr = require_float(q, "learning_rate", learning_rate)
    spec = Rprop(lr=lr, etas=etas, step_sizes=learning_rate_range,
                 grad_clip=grad_clip_spec(q, grad_clip))
    low, high = spec.step_sizes
    if not low <= lr <= high:   # Paddle's own constructor check
        raise ValueError(f"{q}: learning_rate must lie in learning_rate_range "
                         f"{learning_rate_range!r}, got {lr!r}")
    return spec


# -- lowerings: the spec read as the native call ---------------------------------------------

_ADAM_FORM = (
    when("eps_placement='outside' (Paddle's eps*sqrt(1-beta2^t) in the denominator is eps "
         "outside the bias-corrected sqrt)", lambda s: s.eps_placement == "outside"),
    when("bias_correction=True (Paddle always corrects both moments)",
         lambda s: s.bias_correction),
    when("nesterov=False (Paddle Adam has no TF-style Nesterov numerator)",
         lambda s: not s.nesterov),
    NOT_MAXIMIZE,
)


def _coupled_decay(s):
    # None, not L2Decay(0.0): a zero L2 term still adds 0*p, which is NaN where p is inf.
    return float(s.weight_decay) if s.weight_decay != 0.0 else None


def _adam_arguments(s, weight_decay):
    return {"beta1": float(s.betas[0]), "beta2": float(s.betas[1]), "epsilon": float(s.eps),
            "weight_decay": weight_decay, "amsgrad": s.amsgrad}


# Measured on paddle 3.3.1 (a test checks it): the float32 kernels form 1-beta from
# float32(beta); 1-0.999 becomes 0.00099998713.
_ADAM_NOTE = ("its float32 kernel forms 1-beta from float32(beta): with beta2=0.999 "
              "exp_avg_sq runs 1.3e-5 relative low (parameters measured within the float32 "
              "noise floor)")
_ADAM_STATE = {"exp_avg": "moment1", "exp_avg_sq": "moment2",
               "max_exp_avg_sq": "moment2_max"}
_L2_ONLY = when("decoupled_weight_decay=False (Paddle adds weight_decay to the gradient as "
                "L2; it has no decoupled form of this class)",
                lambda s: not s.decoupled_weight_decay)
#: measured on Paddle 3.3 (the non-finite conformance cases)
MAX_DROPS_NAN = ("its max keeps the other operand where one is NaN, so the running maximum "
                 "(and the parameter) stays finite where the spec makes it NaN")
_CONSTANT_LR = when("a constant lr (paddle.optimizer.Rprop takes no LRScheduler: its "
                    "constructor compares the lr with learning_rate_range)",
                    lambda s: not isinstance(s.lr, Schedule))

CLASSES = (
    PaddleClass(
        name="paddle.optimizer.SGD", from_native=sgd,
        lowerings=(Lowering(
            "sgd",
            (when("momentum=0 (paddle.optimizer.SGD keeps no momentum buffer)",
                  lambda s: s.momentum == 0.0),
             NOT_MAXIMIZE),
            lambda s: {"weight_decay": _coupled_decay(s)}),)),
    PaddleClass(
        name="paddle.optimizer.Momentum", from_native=momentum,
        lowerings=(Lowering(
            "sgd",
            (when("momentum>0", lambda s: s.momentum > 0.0),
             when("dampening=0 (Paddle's buffer v = mu*v + g has no dampening; it starts at 0, "
                  "which matches either first-step rule only without dampening)",
                  lambda s: s.dampening == 0.0),
             when("lr_placement='outside' (Paddle keeps the lr out of the velocity)",
                  lambda s: s.lr_placement == "outside"),
             NOT_MAXIMIZE),
            lambda s: {"momentum": float(s.momentum), "use_nesterov": s.nesterov,
                       "weight_decay": _coupled_decay(s)}),),
        state={"momentum_buffer": "velocity"}),
    PaddleClass(
        name="paddle.optimizer.Adam", from_native=adam,
        nonfinite="with amsgrad, " + MAX_DROPS_NAN,
        lowerings=(Lowering("adam", _ADAM_FORM,
                            lambda s: _adam_arguments(s, _coupled_decay(s)), _ADAM_NOTE),),
        state=_ADAM_STATE),
    PaddleClass(
        name="paddle.optimizer.AdamW", from_native=adamw,
        nonfinite="with amsgrad, " + MAX_DROPS_NAN,
        lowerings=(Lowering(
            "adamw",
            _ADAM_FORM + (
                when("decay_form='before_update' (Paddle multiplies p by 1 - lr*wd first)",
                     lambda s: s.decay_form == "before_update"),
                when("decay_times_lr=True (Paddle scales the decay by the lr)",
                     lambda s: s.decay_times_lr)),
            lambda s: _adam_arguments(s, float(s.weight_decay)),
            "no_decay_names become apply_decay_param_fun; " + _ADAM_NOTE
            + "; beta1^t and beta2^t are running float32 products (beta1_pow, beta2_pow): "
            "with beta2=0.999, 1-beta2^t is 1.4e-5 relative off at step 3, which the "
            "float32 noise floor's kernel reference computes the same way"),),
        state=_ADAM_STATE, decay_selector="apply_decay_param_fun"),
    PaddleClass(
        name="paddle.optimizer.NAdam", from_native=nadam,
        lowerings=(Lowering(
            "nadam", (_L2_ONLY, NOT_MAXIMIZE),
            lambda s: {**betas_epsilon(s), "momentum_decay": float(s.momentum_decay),
                       "weight_decay": _coupled_decay(s)},
            "Paddle keeps mu_product parameter-shaped, every element the spec's 0-d value; "
            + FLOAT32_ATTRIBUTES),),
        state={"exp_avg": "moment1", "exp_avg_sq": "moment2", "mu_product": "mu_product"},
        # NAdam's mu_product depends only on the step and shared hyperparameters
        parameter_shaped_scalars=("mu_product",)),
    PaddleClass(
        name="paddle.optimizer.RAdam", from_native=radam,
        lowerings=(Lowering(
            "radam",
            (when("rectify_threshold=5 (Paddle rectifies when rho_t > 5)",
                  lambda s: s.rectify_threshold == 5.0),
             when("unrectified_step='momentum' (paddle.optimizer.RAdam takes the momentum step "
                  "before rectifying)", lambda s: s.unrectified_step == "momentum"),
             _L2_ONLY, NOT_MAXIMIZE),
            lambda s: {**betas_epsilon(s), "weight_decay": _coupled_decay(s)},
            FLOAT32_ATTRIBUTES),),
        state={"exp_avg": "moment1", "exp_avg_sq": "moment2"}),
    PaddleClass(
        name="paddle.optimizer.Adamax", from_native=adamax,
        nonfinite=MAX_DROPS_NAN,
        lowerings=(Lowering(
            "adamax",
            (when("eps_placement='on_decayed_norm' (Paddle takes max(|g|, beta2*u + eps))",
                  lambda s: s.eps_placement == "on_decayed_norm"),
             NOT_MAXIMIZE),
            lambda s: {**betas_epsilon(s), "weight_decay": _coupled_decay(s)},
            FLOAT32_ATTRIBUTES),),
        state={"exp_avg": "moment", "exp_inf": "inf_norm"}),
    PaddleClass(
        name="paddle.optimizer.Adagrad", from_native=adagrad,
        lowerings=(Lowering(
            "adagrad",
            (when("lr_decay=0 (paddle.optimizer.Adagrad has no lr_decay)",
                  lambda s: s.lr_decay == 0.0),
             NOT_MAXIMIZE),
            lambda s: {"epsilon": float(s.eps),
                       "initial_accumulator_value": float(s.initial_accumulator_value),
                       "weight_decay": _coupled_decay(s)}),),
        state={"sum": "moment"}),
    PaddleClass(
        name="paddle.optimizer.Adadelta", from_native=adadelta,
        lowerings=(Lowering(
            "adadelta", (NOT_MAXIMIZE,),
            lambda s: {"rho": float(s.rho), "epsilon": float(s.eps),
                       "weight_decay": _coupled_decay(s)},
            FLOAT32_ATTRIBUTES),),
        state={"square_avg": "_avg_squared_grad", "acc_delta": "_avg_squared_update"}),
    PaddleClass(
        name="paddle.optimizer.RMSProp", from_native=rmsprop,
        lowerings=(Lowering(
            "rmsprop",
            (when("eps_placement='inside' (Paddle divides by sqrt(mean_square + eps))",
                  lambda s: s.eps_placement == "inside"),
             when("lr_placement='inside' or momentum=0 (Paddle puts the lr into the momentum "
                  "buffer)", lambda s: s.lr_placement == "inside" or s.momentum == 0.0),
             when("initial_square_avg=0 (Paddle starts mean_square at 0)",
                  lambda s: s.initial_square_avg == 0.0),
             NOT_MAXIMIZE),
            lambda s: {"rho": float(s.alpha), "epsilon": float(s.eps),
                       "momentum": float(s.momentum), "centered": s.centered,
                       "weight_decay": _coupled_decay(s)},
            FLOAT32_ATTRIBUTES),),
        state={"square_avg": "mean_square", "momentum_buffer": "momentum",
               "grad_avg": "mean_grad"}),
    PaddleClass(
        name="paddle.optimizer.Rprop", from_native=rprop,
        nonfinite=("a NaN gradient element reads uninitialised memory for its step size (the "
                   "kernel's branches on the sign of g*prev all miss NaN): the build refuses "
                   "such a step"),
        lowerings=(Lowering(
            "rprop",
            (when("weight_decay=0 (paddle.optimizer.Rprop has no weight decay)",
                  lambda s: s.weight_decay == 0.0),
             NOT_MAXIMIZE, _CONSTANT_LR,
             when("0 < step_sizes[0] <= lr <= step_sizes[1] (Paddle's constructor requires "
                  "the lr inside learning_rate_range, with a positive minimum)",
                  lambda s: not isinstance(s.lr, Schedule) and
                  0.0 < s.step_sizes[0] <= s.lr <= s.step_sizes[1])),
            lambda s: {"learning_rate_range": tuple(float(x) for x in s.step_sizes),
                       "etas": tuple(float(x) for x in s.etas)},
            "step_sizes become learning_rate_range"),),
        state={"prev": "prevs", "step_size": "learning_rates"},
        decay_keyword="", refuses_nonfinite=True,
        no_groups="Paddle's Rprop starts its per-element step sizes at the optimizer's lr "
                  "and ignores a group's learning_rate"),
    PaddleClass(
        name="paddle.optimizer.ASGD",
        refused="Paddle's ASGD is SAG (stochastic average gradient: each step descends "
                "along the mean of a table of the last batch_num gradients), not the "
                "averaged SGD of uo.ASGD (an average of the iterates kept beside the "
                "parameters); no knob of uo.ASGD reaches it and SAG is not a registered "
                "algorithm (with batch_num=1 it is plain SGD: uo.SGD)"),
    PaddleClass(
        name="paddle.optimizer.LBFGS",
        refused="L-BFGS steps through a closure that evaluates the loss again, several "
                "times per step with its strong-Wolfe line search: its numbers depend on "
                "the loss function, which the conformance suite's gradient streams do not "
                "have, and no registered algorithm models its history of curvature pairs"),
)
