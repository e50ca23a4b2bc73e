"""What every MindSpore descriptor shares: :class:`MindSporeClass`, the conditions many
rows use, and the readers of MindSpore's argument forms used by the presets. Every
claim was measured with MindSpore 2.10 on CPU, on float32 parameters (the only dtype the
backend takes). Imports no framework.

MindSpore's rules, as the presets state them:

* **Default weight-decay rule (a preset knob).** Given a flat parameter list, every
  ``mindspore.nn`` optimizer decays only the parameters whose *name* contains neither
  ``"beta"`` nor ``"gamma"`` (so ``"bias"`` is decayed): the ``nn`` presets return specs
  with ``no_decay_names=("*beta*", "*gamma*")`` (:data:`NN_NO_DECAY`) whenever the decay
  is not 0. ``experimental.optim`` classes decay every parameter (``no_decay_names=()``).
* **Parameter groups.** In groups the name rule is off: a group decays exactly when its
  ``weight_decay > 0``, and a group without ``lr`` / ``weight_decay`` takes the
  optimizer's. :func:`unified_opt.presets.mindspore_groups.mindspore_groups` turns
  MindSpore group dicts (parameters by name, ``order_params``) into ``uo.Group`` rules
  that reproduce this exactly.
* **loss_scale.** The ``nn`` classes that take it (SGD, Momentum, Adam, LazyAdam,
  AdamOffload, AdaMax, Adagrad, Adadelta, RMSProp) divide the gradients by it and scale
  their stored decay by it: the spec's ``loss_scale``. nn.AdaFactor and MindFormers'
  Came take the argument and do not divide: their specs keep ``loss_scale=1`` (they
  compute on the gradients as given) and the preset warns.
* **Dynamic lr and weight decay.** The ``nn`` presets take a ``uo.schedules`` schedule
  as ``learning_rate`` (MindSpore's per-step list or LearningRateSchedule Cell: read it
  with ``uo.schedules.preset("mindspore.nn.cosine_decay_lr", ...)``) and as
  ``weight_decay`` (MindSpore's Cell form, ``weight_decay=<Cell>(global_step)``;
  nn.SGD refuses one, as MindSpore does).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from unified_opt import _validation as v
from unified_opt.groups import MINDSPORE_NO_DECAY
from unified_opt.native import NativeClass, when
from unified_opt.presets._registry import require_float
from unified_opt.schedules import Schedule

EXPERIMENTAL = "mindspore.experimental."


@dataclass(frozen=True, kw_only=True)
class MindSporeClass(NativeClass):
    """A MindSpore optimizer class.

    ``loss_scale``: it takes ``loss_scale`` and divides the gradients by it (measured
    exact); ``cell_weight_decay``: it takes a weight-decay Cell called with the 0-based
    step (MindSpore's dynamic weight decay); ``flat_only``: why it is built over one flat
    parameter list here, with no group lr and one decay ("": it takes groups);
    ``scalar_decay``: it keeps one weight_decay of its own and ignores a group's;
    ``shared_scalars``: spec states that are one 0-d value per parameter, the same for
    every parameter (a left-out zero-size parameter reads them from a held one);
    ``devices``: where it was measured exact (``no_cpu_kernel``: it has no CPU kernel,
    and ``devices`` lists where it runs, unmeasured); ``implementation_flags``:
    constructor arguments that choose an implementation, not the math (the ``nn``
    constructors hide their signatures behind a (*args, **kwargs) decorator);
    ``wraps_optimizer``: it wraps an inner ``nn`` optimizer (nn.LARS), given to
    ``from_native`` as that optimizer's spec."""

    lr_keyword: str = "learning_rate"
    loss_scale: bool = False
    cell_weight_decay: bool = False
    flat_only: str = ""
    scalar_decay: bool = False
    shared_scalars: tuple[str, ...] = ()
    devices: tuple[str, ...] = ("CPU",)
    no_cpu_kernel: bool = False
    implementation_flags: tuple[str, ...] = ()
    wraps_optimizer: bool = False

    @property
    def experimental(self) -> bool:
        return self.name.startswith(EXPERIMENTAL)


# -- conditions and argument maps many rows share ------------------------------------------

CONSTANT_LR = when(
    "a constant lr (experimental.optim classes change their lr only through an "
    "lr_scheduler object, and uo.build makes none on MindSpore)",
    lambda s: not isinstance(s.lr, Schedule))
NOT_MAXIMIZE = when("maximize=False (mindspore.nn optimizers have no maximize)",
                    lambda s: not s.maximize)
LR_OUTSIDE = when("lr_placement='outside' (MindSpore keeps the lr out of the momentum buffer)",
                  lambda s: s.lr_placement == "outside")
TORCH_FIRST_STEP = when(
    "momentum_init='grad' or dampening=0 (the first buffer is the gradient)",
    lambda s: s.momentum_init == "grad" or s.dampening == 0.0)
BIAS_CORRECTION = when("bias_correction=True (both moments are bias-corrected)",
                       lambda s: s.bias_correction)
NOT_NESTEROV = when("nesterov=False (no TF-style Nesterov numerator)", lambda s: not s.nesterov)
EPS_OUTSIDE = when("eps_placement='outside' (eps is added outside the bias-corrected sqrt)",
                   lambda s: s.eps_placement == "outside")
EPS_HAT = when("eps_placement='eps_hat' (the Adam kernel adds eps to the uncorrected sqrt)",
               lambda s: s.eps_placement == "eps_hat")
POSITIVE_LR = when(
    "lr > 0 (the constructors of experimental.optim NAdam, RAdam, Adamax, Adagrad, "
    "Adadelta, RMSprop and Rprop refuse lr=0)",
    lambda s: isinstance(s.lr, Schedule) or s.lr > 0.0)
POSITIVE_BETAS = when("betas > 0 (the nn constructor refuses beta1=0 or beta2=0)",
                      lambda s: min(s.betas) > 0.0)
L2_ONLY = when("decoupled_weight_decay=False (the decay is L2 in the gradient; MindSpore "
               "has no decoupled form of this class)", lambda s: not s.decoupled_weight_decay)
FLOAT32_ATTRIBUTES = "its kernel holds the hyperparameters in float32"
# Measured: the Adam-family kernels compute 1 - beta from float32 betas, so they run the
# spec with betas rounded to float32 (the second moment for beta2=0.999 is 1.3e-5
# relative off the spec's; the parameters stay within the float32 noise).
BETAS_NOTE = ("with the betas rounded to float32: the kernel's 1 - beta2 for 0.999 is "
              "1.3e-5 relative off, and so is the second moment")


#: how classes depart from the spec under a non-finite gradient (measured on MindSpore 2.10,
#: the non-finite conformance cases)
SIGN_OF_NAN = ("its sign(NaN) is 0, so a NaN gradient element leaves its parameter "
               "unchanged, where the spec makes it NaN")
MAX_DROPS_NAN = ("its max keeps the other operand where one is NaN, so the running maximum "
                 "(and the parameter) stays finite where the spec makes it NaN")


def nn_adam_arguments(s) -> dict:
    return {"beta1": float(s.betas[0]), "beta2": float(s.betas[1]), "eps": float(s.eps),
            "weight_decay": float(s.weight_decay)}


def experimental_betas(s) -> dict:
    return {"betas": tuple(float(b) for b in s.betas), "eps": float(s.eps),
            "weight_decay": float(s.weight_decay)}


# -- readers of MindSpore's argument forms (the presets) --------------------------------------

#: ``mindspore.nn`` optimizers given a flat parameter list decay every parameter whose
#: name contains neither "beta" nor "gamma" (so "bias" is decayed)
NN_NO_DECAY = MINDSPORE_NO_DECAY   # the core knows it: a rule that may match nothing


def nn_decay(qualified_name: str, weight_decay, dynamic: bool = True) -> dict:
    """The spec's decay fields for an ``nn`` class given a flat parameter list;
    ``dynamic``: whether the class takes MindSpore's dynamic weight decay (a schedule)."""
    if isinstance(weight_decay, Schedule):
        if not dynamic:
            raise TypeError(f"{qualified_name}: weight_decay must be a float or int here (the "
                            f"class refuses dynamic weight decay), got {weight_decay!r}")
        return {"weight_decay": weight_decay, "no_decay_names": NN_NO_DECAY}
    if not isinstance(weight_decay, (int, float)) or isinstance(weight_decay, bool):
        raise TypeError(f"{qualified_name}: weight_decay must be a float, an int or a "
                        f"uo.schedules schedule (MindSpore's dynamic weight decay Cell), got "
                        f"{weight_decay!r} of type {type(weight_decay).__name__}")
    return {"weight_decay": weight_decay, "no_decay_names": NN_NO_DECAY if weight_decay else ()}


def nn_lr(qualified_name: str, argument: str, value):
    """An ``nn`` class's lr: a number, or a schedule (its per-step list or Cell)."""
    if isinstance(value, Schedule):
        return value
    return require_float(qualified_name, argument, value)


def check_adam_arguments(qualified_name: str, beta1, beta2, eps, **flags) -> None:
    """MindSpore's own checks of the Adam family's arguments (``nn/optim/adam.py``'s
    ``_check_param_value``, which ``Adam``, ``AdamOffload``, ``AdamWeightDecay`` and
    ``AdaMax`` call): ``beta1``, ``beta2`` and ``eps`` are floats (an int is a
    TypeError there), the betas in the open (0, 1), ``eps`` > 0; ``flags`` are bools."""
    for name, value in (("beta1", beta1), ("beta2", beta2), ("eps", eps)):
        v.check_float(qualified_name, name, value)
    for name, value in (("beta1", beta1), ("beta2", beta2)):
        v.check_range(qualified_name, name, value, low=0.0, high=1.0, low_open=True,
                      high_open=True)
    v.check_range(qualified_name, "eps", eps, low=0.0, low_open=True)
    for name, value in flags.items():
        v.check_bool(qualified_name, name, value)


def check_loss_scale(qualified_name: str, loss_scale) -> float:
    if isinstance(loss_scale, bool) or not isinstance(loss_scale, (int, float)):
        raise TypeError(f"{qualified_name}: loss_scale must be a float or an int, got "
                        f"{loss_scale!r} of type {type(loss_scale).__name__}")
    return v.check_range(qualified_name, "loss_scale", loss_scale, low=0.0, low_open=True)


def loss_scale_fields(qualified_name: str, loss_scale) -> dict:
    """The spec's ``loss_scale`` for a class that divides the gradients by it."""
    return {"loss_scale": float(check_loss_scale(qualified_name, loss_scale))}


def loss_scale_unused(qualified_name: str, loss_scale) -> None:
    """Classes that take ``loss_scale`` and never divide by it (their spec keeps 1)."""
    if check_loss_scale(qualified_name, loss_scale) != 1.0:
        warnings.warn(f"{qualified_name}: loss_scale={loss_scale!r} is not applied by the "
                      "class (it does not divide the gradients by it); the spec computes "
                      "what the class does, on the gradients as given (loss_scale=1)",
                      stacklevel=3)


def relative_step_lr(q: str, learning_rate, relative_step, warmup_init,
                     schedule: str | None = None):
    """The spec lr for AdaFactor-style classes: with relative_step, the cap of
    min(cap, 1/sqrt(t)) (1e-2, or 1e-6 per step with warmup_init); else the lr, a
    number or a schedule (:func:`nn_lr`). ``schedule``: why the class's lr cannot be a
    schedule (None: it can)."""
    if schedule is not None and isinstance(learning_rate, Schedule):
        raise ValueError(f"{q}: learning_rate={learning_rate!r}: {schedule}")
    if learning_rate is not None and relative_step:
        raise ValueError(f"{q}: cannot combine a manual learning_rate={learning_rate!r} with "
                         "relative_step=True")
    if warmup_init and not relative_step:
        raise ValueError(f"{q}: warmup_init=True requires relative_step=True")
    if learning_rate is None and not relative_step:
        raise ValueError(f"{q}: learning_rate=None requires relative_step=True")
    if relative_step:
        return 1e-6 if warmup_init else 1e-2
    return nn_lr(q, "learning_rate", learning_rate)
