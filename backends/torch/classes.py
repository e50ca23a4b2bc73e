"""The ``torch.optim`` classes as descriptors (torch 2.13 signatures and defaults; imports
no framework): each class's preset (``from_native``), the conditions under which it
computes a spec exactly with the arguments ``to_native`` gives, its state names, and
what the build needs to know about it (:class:`TorchClass`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from unified_opt import _validation as v
from unified_opt.algorithms import (
    ASGD,
    SGD,
    Adadelta,
    Adafactor,
    Adagrad,
    Adam,
    Adamax,
    AdamOffload,
    AdamW,
    Muon,
    NAdam,
    RAdam,
    RMSprop,
    Rprop,
)
from unified_opt.native import Lowering, NativeClass, when
from unified_opt.presets._registry import require_float
from unified_opt.schedules import Schedule


@dataclass(frozen=True, kw_only=True)
class TorchClass(NativeClass):
    """A torch optimizer class. ``reads_per_step``: the param-group values the class
    reads at every step (measured on torch 2.13), which the step pre-hook may change
    per step (a weight-decay schedule, momentum cycling); ``zero_size``: why the class
    cannot take a zero-size parameter (empty: it can); ``sharded``: why it cannot step
    DTensor parameters sharded by rows (FSDP2 ``fully_shard``; empty: it can, measured on
    2 gloo ranks against the same class on whole tensors)."""

    reads_per_step: frozenset = field(default_factory=frozenset)
    zero_size: str = ""
    sharded: str = ""


# -- presets: the native call read as a spec -------------------------------------------------

def sgd(lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False, *, maximize=False,
        foreach=None, differentiable=False, fused=None):
    return SGD(lr=require_float("torch.optim.SGD", "lr", lr), momentum=momentum,
               dampening=dampening, weight_decay=weight_decay, nesterov=nesterov,
               maximize=maximize, lr_placement="outside", momentum_init="grad")


def _adam_like(cls, qualified_name, lr, betas, eps, weight_decay, amsgrad, maximize):
    return cls(lr=require_float(qualified_name, "lr", lr), betas=betas, eps=eps,
               weight_decay=weight_decay, amsgrad=amsgrad, maximize=maximize,
               eps_placement="outside", bias_correction=True)


def adam(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, *,
         foreach=None, maximize=False, capturable=False, differentiable=False, fused=None,
         decoupled_weight_decay=False):
    cls = AdamW if decoupled_weight_decay else Adam
    return _adam_like(cls, "torch.optim.Adam", lr, betas, eps, weight_decay, amsgrad, maximize)


def adamw(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, *,
          maximize=False, foreach=None, capturable=False, differentiable=False, fused=None):
    return _adam_like(AdamW, "torch.optim.AdamW", lr, betas, eps, weight_decay, amsgrad,
                      maximize)


def offload_adam(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False, *,
                 maximize=False):
    return _adam_like(AdamOffload, "unified_opt.backends.torch.offload.OffloadAdam", lr,
                      betas, eps, weight_decay, amsgrad, maximize)


def adadelta(lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, foreach=None, *, capturable=False,
             maximize=False, differentiable=False):
    return Adadelta(lr=require_float("torch.optim.Adadelta", "lr", lr), rho=rho, eps=eps,
                    weight_decay=weight_decay, maximize=maximize)


def adagrad(lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10,
            foreach=None, *, maximize=False, differentiable=False, fused=None):
    return Adagrad(lr=require_float("torch.optim.Adagrad", "lr", lr), lr_decay=lr_decay,
                   weight_decay=weight_decay, initial_accumulator_value=initial_accumulator_value,
                   eps=eps, maximize=maximize)


def adamax(lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, foreach=None, *,
           maximize=False, differentiable=False, capturable=False):
    return Adamax(lr=require_float("torch.optim.Adamax", "lr", lr), betas=betas, eps=eps,
                  weight_decay=weight_decay, maximize=maximize, eps_placement="on_grad")


def nadam(lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, momentum_decay=4e-3,
          decoupled_weight_decay=False, *, foreach=None, maximize=False, capturable=False,
          differentiable=False):
    return NAdam(lr=require_float("torch.optim.NAdam", "lr", lr), betas=betas, eps=eps,
                 weight_decay=weight_decay, momentum_decay=momentum_decay,
                 decoupled_weight_decay=decoupled_weight_decay, maximize=maximize)


def radam(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, decoupled_weight_decay=False,
          *, foreach=None, maximize=False, capturable=False, differentiable=False):
    return RAdam(lr=require_float("torch.optim.RAdam", "lr", lr), betas=betas, eps=eps,
                 weight_decay=weight_decay, decoupled_weight_decay=decoupled_weight_decay,
                 maximize=maximize)


def rmsprop(lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False,
            capturable=False, foreach=None, maximize=False, differentiable=False):
    return RMSprop(lr=require_float("torch.optim.RMSprop", "lr", lr), alpha=alpha, eps=eps,
                   weight_decay=weight_decay, momentum=momentum, centered=centered,
                   maximize=maximize, eps_placement="outside", lr_placement="outside")


def rprop(lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), *, capturable=False, foreach=None,
          maximize=False, differentiable=False):
    return Rprop(lr=require_float("torch.optim.Rprop", "lr", lr), etas=etas,
                 step_sizes=step_sizes, maximize=maximize)


def adafactor(lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0, weight_decay=0.0, *,
              foreach=None, maximize=False):
    # torch's form: relative step capped by lr, parameter scaling, eps as clamps, no first
    # moment, decay with the raw lr (torch/optim/_adafactor.py)
    q = "torch.optim.Adafactor"
    beta2_decay = v.check_range(q, "beta2_decay", beta2_decay, high=0.0)
    d = v.check_range(q, "d", d, low=1.0)
    return Adafactor(lr=require_float(q, "lr", lr), decay_rate=-beta2_decay, eps=eps,
                     clip_threshold=d, weight_decay=weight_decay, maximize=maximize,
                     relative_step=True, warmup_init=False, scale_parameter=True,
                     eps_mode="clamp", beta1=None, beta2=None, decay_lr="raw")


def asgd(lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0, foreach=None,
         maximize=False, differentiable=False, capturable=False):
    return ASGD(lr=require_float("torch.optim.ASGD", "lr", lr), lambd=lambd, alpha=alpha,
                t0=t0, weight_decay=weight_decay, maximize=maximize)


def muon(lr=1e-3, weight_decay=0.1, momentum=0.95, nesterov=True,
         ns_coefficients=(3.4445, -4.775, 2.0315), eps=1e-7, ns_steps=5, adjust_lr_fn=None):
    # torch's iteration runs in bfloat16; adjust_lr_fn=None is "original"
    # (torch/optim/_muon.py)
    return Muon(lr=require_float("torch.optim.Muon", "lr", lr), weight_decay=weight_decay,
                momentum=momentum, nesterov=nesterov, ns_coefficients=ns_coefficients,
                eps=eps, ns_steps=ns_steps,
                adjust_lr_fn="original" if adjust_lr_fn is None else adjust_lr_fn,
                ns_dtype="bfloat16")


# -- lowerings: the spec read as the native call ---------------------------------------------

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


def _cycles_momentum(spec) -> bool:
    return isinstance(spec.lr, Schedule) and spec.lr.momentum(0) is not None


_ADAM_STATE = {"exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq",
               "max_exp_avg_sq": "max_exp_avg_sq"}
#: measured on torch 2.13 (the non-finite conformance cases)
_SIGN_OF_NAN = ("torch.sign(NaN) is 0, so a NaN gradient element leaves its parameter "
                "unchanged, where the spec makes it NaN")
_ADAM_READS = frozenset({"weight_decay", "betas"})

#: why L-BFGS (torch's and Paddle's) is refused
_LINE_SEARCH = ("L-BFGS steps through a closure that evaluates the loss again, several times "
                "per step with its strong-Wolfe line search: its numbers depend on the loss "
                "function, which the conformance suite's gradient streams do not have, and "
                "no registered algorithm models its history of curvature pairs")

CLASSES = (
    TorchClass(
        name="torch.optim.SGD", from_native=sgd,
        lowerings=(Lowering(
            "sgd",
            (when("lr_placement='outside' (torch keeps the lr out of the momentum buffer)",
                  lambda s: s.lr_placement == "outside"),
             when("momentum_init='grad' or dampening=0 (torch's first buffer is the gradient)",
                  lambda s: s.momentum_init == "grad" or s.dampening == 0.0)),
            lambda s: {"momentum": s.momentum, "dampening": s.dampening,
                       "nesterov": s.nesterov, "weight_decay": s.weight_decay,
                       "maximize": s.maximize}),),
        state={"momentum_buffer": "momentum_buffer"},
        reads_per_step=frozenset({"weight_decay", "momentum"})),
    TorchClass(
        name="torch.optim.Adam", from_native=adam,
        lowerings=(Lowering("adam", _ADAM_FORM, _adam_arguments),),
        state=_ADAM_STATE, reads_per_step=_ADAM_READS),
    TorchClass(
        name="torch.optim.AdamW", from_native=adamw,
        lowerings=(Lowering(
            "adamw",
            _ADAM_FORM + (
                when("decay_form='before_update' (torch multiplies p by 1 - lr*wd first)",
                     lambda s: s.decay_form == "before_update"),
                when("decay_times_lr=True (torch scales the decay by the lr)",
                     lambda s: s.decay_times_lr)),
            _adam_arguments),),
        state=_ADAM_STATE, reads_per_step=_ADAM_READS),
    TorchClass(
        name="torch.optim.NAdam", from_native=nadam,
        lowerings=(Lowering(
            "nadam", (),
            lambda s: {"betas": s.betas, "eps": s.eps, "weight_decay": s.weight_decay,
                       "momentum_decay": s.momentum_decay,
                       "decoupled_weight_decay": s.decoupled_weight_decay,
                       "maximize": s.maximize}),),
        state={"exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq", "mu_product": "mu_product"},
        reads_per_step=_ADAM_READS),
    TorchClass(
        name="torch.optim.RAdam", from_native=radam,
        lowerings=(Lowering(
            "radam",
            (when("rectify_threshold=5 (torch rectifies when rho_t > 5)",
                  lambda s: s.rectify_threshold == 5.0),
             when("unrectified_step='momentum' (torch.optim.RAdam takes the momentum step "
                  "before rectifying)", lambda s: s.unrectified_step == "momentum")),
            lambda s: {"betas": s.betas, "eps": s.eps, "weight_decay": s.weight_decay,
                       "decoupled_weight_decay": s.decoupled_weight_decay,
                       "maximize": s.maximize}),),
        state={"exp_avg": "exp_avg", "exp_avg_sq": "exp_avg_sq"},
        reads_per_step=_ADAM_READS),
    TorchClass(
        name="torch.optim.Adamax", from_native=adamax,
        lowerings=(Lowering(
            "adamax",
            (when("eps_placement='on_grad' (torch takes max(beta2*u, |g| + eps))",
                  lambda s: s.eps_placement == "on_grad"),),
            lambda s: {"betas": s.betas, "eps": s.eps, "weight_decay": s.weight_decay,
                       "maximize": s.maximize}),),
        state={"exp_avg": "exp_avg", "exp_inf": "exp_inf"}, reads_per_step=_ADAM_READS),
    TorchClass(
        name="torch.optim.Adagrad", from_native=adagrad,
        lowerings=(Lowering(
            "adagrad", (),
            lambda s: {"lr_decay": s.lr_decay, "weight_decay": s.weight_decay, "eps": s.eps,
                       "initial_accumulator_value": s.initial_accumulator_value,
                       "maximize": s.maximize}),),
        state={"sum": "sum"}, reads_per_step=frozenset({"weight_decay"})),
    TorchClass(
        name="torch.optim.Adadelta", from_native=adadelta,
        lowerings=(Lowering(
            "adadelta", (),
            lambda s: {"rho": s.rho, "eps": s.eps, "weight_decay": s.weight_decay,
                       "maximize": s.maximize}),),
        state={"square_avg": "square_avg", "acc_delta": "acc_delta"},
        reads_per_step=frozenset({"weight_decay"})),
    TorchClass(
        name="torch.optim.RMSprop", from_native=rmsprop,
        lowerings=(Lowering(
            "rmsprop",
            (when("eps_placement='outside' (torch adds eps to the sqrt)",
                  lambda s: s.eps_placement == "outside"),
             when("lr_placement='outside' or momentum=0 (torch keeps the lr out of the buffer)",
                  lambda s: s.lr_placement == "outside" or s.momentum == 0.0),
             when("initial_square_avg=0 (torch starts the mean square at 0)",
                  lambda s: s.initial_square_avg == 0.0),
             # lr_placement='inside' passes with momentum=0, but a cycled momentum is not
             # 0, and torch makes the momentum buffer only when the first momentum > 0
             when("with a momentum-cycling lr schedule: lr_placement='outside' (the cycled "
                  "momentum is not 0, so the lr must stay out of the buffer)",
                  lambda s: not _cycles_momentum(s) or s.lr_placement == "outside")),
            lambda s: {"alpha": s.alpha, "eps": s.eps, "weight_decay": s.weight_decay,
                       "momentum": s.momentum, "centered": s.centered,
                       "maximize": s.maximize}),),
        state={"square_avg": "square_avg", "momentum_buffer": "momentum_buffer",
               "grad_avg": "grad_avg"},
        reads_per_step=frozenset({"weight_decay", "momentum"})),
    TorchClass(
        name="torch.optim.Rprop", from_native=rprop,
        nonfinite=_SIGN_OF_NAN,
        lowerings=(Lowering(
            "rprop",
            (when("weight_decay=0 (torch Rprop has no weight decay)",
                  lambda s: s.weight_decay == 0.0),),
            lambda s: {"etas": s.etas, "step_sizes": s.step_sizes,
                       "maximize": s.maximize}),),
        state={"prev": "prev", "step_size": "step_size"},
        sharded="raises on a row shard (its in-place masked write, aten.index_put_, cannot "
                "keep the placement; measured on torch 2.13)"),
    TorchClass(
        name="torch.optim.Adafactor", from_native=adafactor,
        nonfinite=("Python's max drops a NaN RMS (torch/optim/_adafactor.py), so a NaN "
                   "gradient element turns only its own elements NaN, where the spec turns the "
                   "whole parameter NaN"),
        lowerings=(Lowering(
            "adafactor",
            (when("relative_step=True with warmup_init=False (torch's step size is "
                  "min(lr, 1/sqrt(t)))", lambda s: s.relative_step and not s.warmup_init),
             when("scale_parameter=True (torch always scales by the parameter's RMS)",
                  lambda s: s.scale_parameter),
             when("eps_mode='clamp' (torch clamps by eps[0] instead of adding it)",
                  lambda s: s.eps_mode == "clamp"),
             when("decay_rate set, beta2=None (torch's beta2 is the 1 - t^-decay_rate "
                  "schedule)", lambda s: s.beta2 is None),
             when("beta1=None (torch keeps no first moment)", lambda s: s.beta1 is None),
             when("decay_lr='raw' (torch decays by lr * weight_decay)",
                  lambda s: s.decay_lr == "raw"),
             when("clip_threshold >= 1 (torch's d must be at least 1)",
                  lambda s: s.clip_threshold >= 1.0)),
            lambda s: {"beta2_decay": -s.decay_rate, "eps": s.eps, "d": s.clip_threshold,
                       "weight_decay": s.weight_decay, "maximize": s.maximize}),),
        state={"exp_avg_sq_row": "row_var", "exp_avg_sq_col": "col_var",
               "exp_avg_sq": "variance"},
        reads_per_step=frozenset({"weight_decay"}),
        zero_size="divides by the element count (ZeroDivisionError at the first step, "
                  "measured on torch 2.13)",
        sharded="raises on a row shard (its in-place column norm, aten.pow_ of a partial "
                "norm, cannot keep the placement; measured on torch 2.13)"),
    TorchClass(
        name="unified_opt.backends.torch.offload.OffloadAdam", from_native=offload_adam,
        lowerings=(Lowering(
            "adam_offload", _ADAM_FORM, _adam_arguments,
            note="torch's fused CPU Adam kernel over state in host memory; only the new "
                 "parameters go back to their device"),),
        state=_ADAM_STATE, reads_per_step=_ADAM_READS,
        sharded="keeps whole-tensor state in host memory (a fused step over a DTensor and "
                "a plain state tensor raises)"),
    TorchClass(
        name="torch.optim.ASGD", from_native=asgd,
        lowerings=(Lowering(
            "asgd", (),
            lambda s: {"lambd": s.lambd, "alpha": s.alpha, "t0": s.t0,
                       "weight_decay": s.weight_decay, "maximize": s.maximize},
            "with eta and mu kept as float32 0-d tensors (torch's scalar dtype)"),),
        state={"ax": "ax", "eta": "eta", "mu": "mu"},
        reads_per_step=frozenset({"weight_decay", "lambd", "alpha", "t0"})),
    TorchClass(
        name="torch.optim.Muon", from_native=muon,
        lowerings=(Lowering(
            "muon",
            (when("ns_dtype='bfloat16' (torch runs the iteration in bfloat16)",
                  lambda s: s.ns_dtype == "bfloat16"),
             when("others='refuse' and muon_params='matrices' (torch.optim.Muon takes "
                  "matrices only: the rest go to another optimizer)",
                  lambda s: s.others == "refuse" and s.muon_params == "matrices")),
            lambda s: {"weight_decay": s.weight_decay, "momentum": s.momentum,
                       "nesterov": s.nesterov, "ns_coefficients": s.ns_coefficients,
                       "eps": s.eps, "ns_steps": s.ns_steps, "adjust_lr_fn": s.adjust_lr_fn}),),
        state={"momentum_buffer": "momentum_buffer"},
        reads_per_step=frozenset({"weight_decay", "momentum", "nesterov", "ns_coefficients",
                                  "eps", "ns_steps", "adjust_lr_fn"})),
    TorchClass(
        name="torch.optim.LBFGS",
        refused=_LINE_SEARCH),
    TorchClass(
        name="torch.optim.SparseAdam",
        refused="it takes sparse gradients (torch.sparse COO tensors), which no own path, "
                "backend or conformance case of unified-opt holds; on dense gradients it "
                "raises"),
)
