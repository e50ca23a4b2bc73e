"""The ``mindspore.nn`` optimizer classes of the common algorithms as descriptors
(MindSpore 2.10): presets, lowerings, state names and quirks
(:class:`.descriptor.MindSporeClass`)."""

from __future__ import annotations

import warnings

from unified_opt.algorithms import (
    ASGD,
    SGD,
    Adadelta,
    Adagrad,
    Adam,
    Adamax,
    AdamOffload,
    AdamW,
    RMSprop,
    Rprop,
)
from unified_opt.algorithms.ftrl import FTRL
from unified_opt.algorithms.proximal_adagrad import ProximalAdagrad
from unified_opt.native import Lowering, when
from unified_opt.presets._registry import require_float, unsupported
from unified_opt.schedules import Schedule

from .descriptor import (
    BETAS_NOTE,
    BIAS_CORRECTION,
    EPS_HAT,
    FLOAT32_ATTRIBUTES,
    LR_OUTSIDE,
    MAX_DROPS_NAN,
    NOT_MAXIMIZE,
    NOT_NESTEROV,
    POSITIVE_BETAS,
    SIGN_OF_NAN,
    TORCH_FIRST_STEP,
    MindSporeClass,
    check_adam_arguments,
    loss_scale_fields,
    nn_adam_arguments,
    nn_decay,
    nn_lr,
)

#: what nn.RMSProp(centered=False) computes on CPU (measured on MindSpore 2.10, element by
#: element over tensor sizes 1 to 100001 and 1, 2, 4 and 8 threads)
_RMSPROP_CPU = ("it puts eps outside the sqrt for the elements its 8-wide vector code "
                "handles and inside for the scalar tail of each chunk the thread pool cuts "
                "the tensor into, and the pool retunes its chunk sizes during the first "
                "steps, so which elements get which formula varies with the tensor size and "
                "the run")

# -- presets: the native call read as a spec -------------------------------------------------

def nn_sgd(learning_rate=0.1, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
           loss_scale=1.0):
    q = "mindspore.nn.SGD"
    return SGD(lr=nn_lr(q, "learning_rate", learning_rate), momentum=momentum,
               dampening=dampening, nesterov=nesterov, momentum_init="grad",
               **nn_decay(q, weight_decay, dynamic=False), **loss_scale_fields(q, loss_scale))


def nn_momentum(learning_rate, momentum, weight_decay=0.0, loss_scale=1.0,
                use_nesterov=False):
    # Documented: Nesterov when use_nesterov. On CPU the kernel ignores the flag; the
    # MindSpore backend therefore runs use_nesterov=True through its own implementation.
    q = "mindspore.nn.Momentum"
    return SGD(lr=nn_lr(q, "learning_rate", learning_rate), momentum=momentum,
               nesterov=use_nesterov, momentum_init="zeros",
               **nn_decay(q, weight_decay), **loss_scale_fields(q, loss_scale))


def nn_adam(learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, use_locking=False,
            use_nesterov=False, weight_decay=0.0, loss_scale=1.0, use_amsgrad=False,
            use_lazy=False, use_offload=False):
    q = "mindspore.nn.Adam"
    check_adam_arguments(q, beta1, beta2, eps, use_locking=use_locking,
                         use_nesterov=use_nesterov, use_amsgrad=use_amsgrad,
                         use_lazy=use_lazy, use_offload=use_offload)
    if use_offload and (use_lazy or use_amsgrad):
        # MindSpore's own constructor checks (mindspore/nn/optim/adam.py)
        raise ValueError(f"{q}: use_offload=True excludes use_lazy and use_amsgrad, got "
                         f"use_lazy={use_lazy!r}, use_amsgrad={use_amsgrad!r}")
    if use_offload:
        return nn_adam_offload(learning_rate=learning_rate, beta1=beta1, beta2=beta2, eps=eps,
                               use_nesterov=use_nesterov, weight_decay=weight_decay,
                               loss_scale=loss_scale)
    # use_lazy only changes sparse (RowTensor) gradients; dense ones are identical.
    return Adam(lr=nn_lr(q, "learning_rate", learning_rate), betas=(beta1, beta2),
                eps=eps, amsgrad=use_amsgrad, nesterov=use_nesterov, eps_placement="eps_hat",
                bias_correction=True, **nn_decay(q, weight_decay),
                **loss_scale_fields(q, loss_scale))


def nn_adam_offload(learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, use_locking=False,
                    use_nesterov=False, weight_decay=0.0, loss_scale=1.0):
    # nn.Adam's math (eps-hat, L2 with the beta/gamma filter) with the state on the host:
    # the kernel AdamNoUpdateParam runs on the host and returns the step
    q = "mindspore.nn.AdamOffload"
    check_adam_arguments(q, beta1, beta2, eps, use_locking=use_locking,
                         use_nesterov=use_nesterov)
    return AdamOffload(lr=nn_lr(q, "learning_rate", learning_rate),
                       betas=(beta1, beta2), eps=eps, nesterov=use_nesterov,
                       eps_placement="eps_hat", bias_correction=True,
                       **nn_decay(q, weight_decay), **loss_scale_fields(q, loss_scale))


def nn_adam_weight_decay(learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-6,
                         weight_decay=0.0):
    q = "mindspore.nn.AdamWeightDecay"
    check_adam_arguments(q, beta1, beta2, eps)
    return AdamW(lr=nn_lr(q, "learning_rate", learning_rate), betas=(beta1, beta2),
                 eps=eps, bias_correction=False, eps_placement="outside",
                 decay_form="in_update", decay_times_lr=True, **nn_decay(q, weight_decay))


def nn_lazy_adam(learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, use_locking=False,
                 use_nesterov=False, weight_decay=0.0, loss_scale=1.0):
    # Lazy updates only differ for sparse (RowTensor) gradients; dense ones are nn.Adam's.
    q = "mindspore.nn.LazyAdam"
    return Adam(lr=nn_lr(q, "learning_rate", learning_rate), betas=(beta1, beta2),
                eps=eps, nesterov=use_nesterov, eps_placement="eps_hat", bias_correction=True,
                **nn_decay(q, weight_decay), **loss_scale_fields(q, loss_scale))


def nn_adamax(learning_rate=0.001, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0,
              loss_scale=1.0):
    q = "mindspore.nn.AdaMax"
    check_adam_arguments(q, beta1, beta2, eps)
    return Adamax(lr=nn_lr(q, "learning_rate", learning_rate), betas=(beta1, beta2),
                  eps=eps, eps_placement="outside_max",
                  **nn_decay(q, weight_decay), **loss_scale_fields(q, loss_scale))


def nn_adadelta(learning_rate=1.0, rho=0.9, epsilon=1e-6, loss_scale=1.0, weight_decay=0.0):
    q = "mindspore.nn.Adadelta"
    return Adadelta(lr=nn_lr(q, "learning_rate", learning_rate), rho=rho, eps=epsilon,
                    **nn_decay(q, weight_decay), **loss_scale_fields(q, loss_scale))


def nn_adagrad(accum=0.1, learning_rate=0.001, update_slots=True, loss_scale=1.0,
               weight_decay=0.0):
    q = "mindspore.nn.Adagrad"
    if not update_slots:
        raise unsupported(q, "update_slots", update_slots,
                          "a frozen accumulator has no spec knob")
    # No eps at all; the accumulator starts at accum (0.1).
    return Adagrad(lr=nn_lr(q, "learning_rate", learning_rate), eps=0.0,
                   initial_accumulator_value=accum,
                   **nn_decay(q, weight_decay), **loss_scale_fields(q, loss_scale))


def nn_rmsprop(learning_rate=0.1, decay=0.9, momentum=0.0, epsilon=1e-10, use_locking=False,
               centered=False, loss_scale=1.0, weight_decay=0.0):
    # The documented formula: eps inside the sqrt. MindSpore 2.10's CPU kernel computes it
    # only centered; non-centered, see _RMSPROP_CPU.
    q = "mindspore.nn.RMSProp"
    if not centered and epsilon != 0:
        warnings.warn(f"{q}: with centered=False and epsilon={epsilon!r}, MindSpore's CPU "
                      f"kernel does not compute its documented formula ({_RMSPROP_CPU}); the "
                      "spec computes the documented formula (eps inside the sqrt)",
                      stacklevel=3)
    return RMSprop(lr=nn_lr(q, "learning_rate", learning_rate), alpha=decay,
                   momentum=momentum, eps=epsilon, centered=centered, eps_placement="inside",
                   lr_placement="inside", initial_square_avg=1.0,
                   **nn_decay(q, weight_decay), **loss_scale_fields(q, loss_scale))


def nn_rprop(learning_rate=0.1, etas=(0.5, 1.2), step_sizes=(1e-6, 50.0), weight_decay=0.0):
    q = "mindspore.nn.Rprop"
    return Rprop(lr=nn_lr(q, "learning_rate", learning_rate), etas=etas,
                 step_sizes=step_sizes, **nn_decay(q, weight_decay))


def nn_asgd(learning_rate=0.1, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0.0):
    q = "mindspore.nn.ASGD"
    return ASGD(lr=nn_lr(q, "learning_rate", learning_rate), lambd=lambd, alpha=alpha, t0=t0,
                **nn_decay(q, weight_decay))


def nn_ftrl(initial_accum=0.1, learning_rate=0.001, lr_power=-0.5, l1=0.0, l2=0.0,
            use_locking=False, loss_scale=1.0, weight_decay=0.0):
    # The CPU kernel's form (l1_sign='positive', measured); nn.FTRL decays every
    # parameter of a flat list (no beta/gamma name rule) and refuses a dynamic lr.
    q = "mindspore.nn.FTRL"
    if isinstance(learning_rate, Schedule):
        raise TypeError(f"{q}: learning_rate must be a float (nn.FTRL refuses a dynamic lr), "
                        f"got {learning_rate!r}")
    return FTRL(lr=require_float(q, "learning_rate", learning_rate), lr_power=lr_power,
                l1=l1, l2=l2, initial_accumulator_value=initial_accum, l1_sign="positive",
                **{**nn_decay(q, weight_decay), "no_decay_names": ()},
                **loss_scale_fields(q, loss_scale))


def nn_proximal_adagrad(accum=0.1, learning_rate=0.001, l1=0.0, l2=0.0, use_locking=False,
                        loss_scale=1.0, weight_decay=0.0):
    # The CPU kernel's form (the shrink by lr/sqrt(accum), measured), not the documented lr.
    q = "mindspore.nn.ProximalAdagrad"
    return ProximalAdagrad(lr=nn_lr(q, "learning_rate", learning_rate), l1=l1, l2=l2,
                           initial_accumulator_value=accum, shrinkage_lr="adaptive",
                           **nn_decay(q, weight_decay), **loss_scale_fields(q, loss_scale))


# -- lowerings: the spec read as the native call ---------------------------------------------

def _sgd_arguments(s):
    return {"momentum": float(s.momentum), "dampening": float(s.dampening),
            "nesterov": s.nesterov, "weight_decay": float(s.weight_decay)}


def _nn_adam_lowering_arguments(s):
    return {**nn_adam_arguments(s), "use_amsgrad": s.amsgrad, "use_nesterov": s.nesterov}


_ADAM_STATE = {"exp_avg": "moment1", "exp_avg_sq": "moment2", "max_exp_avg_sq": "vhat"}

CLASSES = (
    MindSporeClass(
        name="mindspore.nn.Momentum", from_native=nn_momentum,
        lowerings=(Lowering(
            "sgd",
            (LR_OUTSIDE, NOT_MAXIMIZE,
             when("momentum_init='zeros' (nn.Momentum starts its buffer at 0; specs with the "
                  "torch first-step rule go to nn.SGD)", lambda s: s.momentum_init == "zeros"),
             when("dampening=0 (nn.Momentum has no dampening)", lambda s: s.dampening == 0.0),
             when("nesterov=False (nn.Momentum(use_nesterov=True) runs plain momentum on CPU, "
                  "measured)", lambda s: not s.nesterov)),
            lambda s: {"momentum": float(s.momentum), "weight_decay": float(s.weight_decay)}),),
        state={"momentum_buffer": "moments"}, loss_scale=True, cell_weight_decay=True),
    MindSporeClass(
        name="mindspore.nn.SGD", from_native=nn_sgd,
        lowerings=(Lowering("sgd", (LR_OUTSIDE, TORCH_FIRST_STEP, NOT_MAXIMIZE),
                            _sgd_arguments),),
        state={"momentum_buffer": "accum"}, loss_scale=True),
    MindSporeClass(
        name="mindspore.nn.Adam", from_native=nn_adam,
        nonfinite="with amsgrad, " + MAX_DROPS_NAN,
        lowerings=(
            Lowering(
                "adam",
                (EPS_HAT, BIAS_CORRECTION, NOT_MAXIMIZE,
                 when("not both amsgrad and nesterov (nn.Adam(use_amsgrad=True) ignores "
                      "use_nesterov, measured)", lambda s: not (s.amsgrad and s.nesterov)),
                 POSITIVE_BETAS),
                _nn_adam_lowering_arguments, BETAS_NOTE),
            Lowering(
                "adam_offload",
                (EPS_HAT, BIAS_CORRECTION, NOT_MAXIMIZE,
                 when("amsgrad=False (the offload kernel AdamNoUpdateParam has no amsgrad)",
                      lambda s: not s.amsgrad),
                 POSITIVE_BETAS),
                lambda s: {**nn_adam_arguments(s), "use_nesterov": s.nesterov,
                           "use_offload": True},
                "nn.Adam(use_offload=True), the successor of the deprecated nn.AdamOffload: "
                "AdamNoUpdateParam on the host returns the step, added to the parameter; "
                + BETAS_NOTE)),
        state=_ADAM_STATE, loss_scale=True, cell_weight_decay=True,
        implementation_flags=("use_locking", "use_lazy")),
    MindSporeClass(
        name="mindspore.nn.AdamOffload", from_native=nn_adam_offload,
        not_lowered="deprecated by MindSpore; the build uses its successor "
                    "nn.Adam(use_offload=True)"),
    MindSporeClass(
        name="mindspore.nn.AdamWeightDecay", from_native=nn_adam_weight_decay,
        lowerings=(Lowering(
            "adamw",
            (when("bias_correction=False (nn.AdamWeightDecay corrects neither moment)",
                  lambda s: not s.bias_correction),
             when("eps_placement 'outside' or 'eps_hat' (the same without bias correction)",
                  lambda s: s.eps_placement in ("outside", "eps_hat")),
             when("decay_form='in_update' (wd*p is added to the lr-scaled update)",
                  lambda s: s.decay_form == "in_update"),
             when("decay_times_lr=True (the decay is scaled by the lr)",
                  lambda s: s.decay_times_lr),
             when("amsgrad=False (nn.AdamWeightDecay has no amsgrad)", lambda s: not s.amsgrad),
             NOT_NESTEROV, NOT_MAXIMIZE, POSITIVE_BETAS),
            nn_adam_arguments, BETAS_NOTE),),
        state={"exp_avg": "moments1", "exp_avg_sq": "moments2"}, cell_weight_decay=True),
    MindSporeClass(
        name="mindspore.nn.LazyAdam", from_native=nn_lazy_adam,
        not_lowered="for dense gradients it computes what nn.Adam computes, which the build "
                    "uses"),
    MindSporeClass(
        name="mindspore.nn.AdaMax", from_native=nn_adamax,
        nonfinite=MAX_DROPS_NAN,
        lowerings=(Lowering(
            "adamax",
            (when("eps_placement='outside_max' (nn.AdaMax divides by max(beta2*u, |g|) + eps)",
                  lambda s: s.eps_placement == "outside_max"), NOT_MAXIMIZE, POSITIVE_BETAS),
            nn_adam_arguments, FLOAT32_ATTRIBUTES),),
        state={"exp_avg": "moment1", "exp_inf": "moment2"}, loss_scale=True,
        cell_weight_decay=True),
    MindSporeClass(
        name="mindspore.nn.Adadelta", from_native=nn_adadelta,
        lowerings=(Lowering(
            "adadelta", (NOT_MAXIMIZE,),
            lambda s: {"rho": float(s.rho), "epsilon": float(s.eps),
                       "weight_decay": float(s.weight_decay)}),),
        state={"square_avg": "accum", "acc_delta": "accum_update"}, loss_scale=True,
        cell_weight_decay=True),
    MindSporeClass(
        name="mindspore.nn.Adagrad", from_native=nn_adagrad,
        lowerings=(Lowering(
            "adagrad",
            (when("eps=0 (nn.Adagrad divides by sqrt(sum) with no eps)",
                  lambda s: s.eps == 0.0),
             when("lr_decay=0 (nn.Adagrad has no lr_decay)", lambda s: s.lr_decay == 0.0),
             when("initial_accumulator_value >= 2**-126, float32's smallest normal number "
                  "(nn.Adagrad leaves an element unchanged where its sum is 0 and flushes "
                  "subnormal sums to 0, measured; the spec divides by zero there)",
                  lambda s: s.initial_accumulator_value >= 2.0 ** -126),
             NOT_MAXIMIZE),
            lambda s: {"accum": float(s.initial_accumulator_value),
                       "weight_decay": float(s.weight_decay)}),),
        state={"sum": "accum"}, loss_scale=True, cell_weight_decay=True),
    MindSporeClass(
        name="mindspore.nn.RMSProp", from_native=nn_rmsprop,
        nonfinite=("centered, the CPU kernel leaves the parameter and its momentum unchanged "
                   "where the gradient is inf or NaN"),
        lowerings=(Lowering(
            "rmsprop",
            (when("eps_placement='inside' (nn.RMSProp divides by sqrt(mean_square + eps))",
                  lambda s: s.eps_placement == "inside"),
             when("centered=True or eps=0 (non-centered, on CPU " + _RMSPROP_CPU + ")",
                  lambda s: s.centered or s.eps == 0.0),
             when("lr_placement='inside' or momentum=0 (nn.RMSProp puts the lr into the "
                  "momentum buffer)", lambda s: s.lr_placement == "inside" or s.momentum == 0.0),
             when("initial_square_avg=1 (nn.RMSProp starts mean_square at 1)",
                  lambda s: s.initial_square_avg == 1.0),
             NOT_MAXIMIZE),
            lambda s: {"decay": float(s.alpha), "momentum": float(s.momentum),
                       "epsilon": float(s.eps), "centered": s.centered,
                       "weight_decay": float(s.weight_decay)}),),
        state={"square_avg": "ms", "momentum_buffer": "moment", "grad_avg": "mg"},
        loss_scale=True, cell_weight_decay=True),
    MindSporeClass(
        name="mindspore.nn.Rprop", from_native=nn_rprop,
        nonfinite=SIGN_OF_NAN,
        lowerings=(Lowering(
            "rprop", (NOT_MAXIMIZE,),
            lambda s: {"etas": tuple(float(e) for e in s.etas),
                       "step_sizes": tuple(float(x) for x in s.step_sizes),
                       "weight_decay": float(s.weight_decay)}),),
        state={"prev": "prev", "step_size": "step_size"}, cell_weight_decay=True),
    MindSporeClass(
        name="mindspore.nn.ASGD", from_native=nn_asgd,
        lowerings=(Lowering(
            "asgd", (NOT_MAXIMIZE,),
            lambda s: {"lambd": float(s.lambd), "alpha": float(s.alpha), "t0": float(s.t0),
                       "weight_decay": float(s.weight_decay)},
            "with eta and mu computed in float32"),),
        state={"ax": "ax", "eta": "eta", "mu": "mu"}, shared_scalars=("eta", "mu"),
        cell_weight_decay=True),
    MindSporeClass(
        name="mindspore.nn.FTRL", from_native=nn_ftrl,
        nonfinite=("with l1, its test |linear| > l1 is false for a NaN linear term, so a "
                   "non-finite gradient sets the parameter to 0 where the spec makes it NaN "
                   "(measured)"),
        lowerings=(Lowering(
            "ftrl",
            (when("l1_sign='positive' or l1=0 (nn.FTRL's CPU kernel subtracts the linear term "
                  "from +l1, dropping its documented sign(linear), measured)",
                  lambda s: s.l1_sign == "positive" or s.l1 == 0.0),
             when("l2_shrinkage=0 (nn.FTRL has no shrinkage-type L2)",
                  lambda s: s.l2_shrinkage == 0.0),
             when("beta=0 (nn.FTRL has no beta)", lambda s: s.beta == 0.0),
             when("a constant lr (nn.FTRL refuses a dynamic lr)",
                  lambda s: not isinstance(s.lr, Schedule)),
             NOT_MAXIMIZE),
            lambda s: {"initial_accum": float(s.initial_accumulator_value),
                       "lr_power": float(s.lr_power), "l1": float(s.l1), "l2": float(s.l2),
                       "weight_decay": float(s.weight_decay)}),),
        state={"accumulator": "moments", "linear": "linear"}, loss_scale=True,
        cell_weight_decay=True, flat_only="nn.FTRL refuses group lrs"),
    MindSporeClass(
        name="mindspore.nn.ProximalAdagrad", from_native=nn_proximal_adagrad,
        nonfinite=("with l1, an infinite gradient sets the parameter to 0 where the spec "
                   "makes it NaN (measured)"),
        lowerings=(Lowering(
            "proximal_adagrad",
            (when("shrinkage_lr='adaptive' or l1=l2=0 (nn.ProximalAdagrad's CPU kernel "
                  "shrinks by lr/sqrt(accum), not by its documented lr, measured)",
                  lambda s: s.shrinkage_lr == "adaptive" or s.l1 == s.l2 == 0.0),
             NOT_MAXIMIZE),
            lambda s: {"accum": float(s.initial_accumulator_value), "l1": float(s.l1),
                       "l2": float(s.l2), "weight_decay": float(s.weight_decay)}),),
        state={"sum": "accum"}, loss_scale=True, cell_weight_decay=True),
)
