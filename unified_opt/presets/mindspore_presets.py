"""Presets for ``mindspore.nn`` and ``mindspore.experimental.optim`` (MindSpore 2.10).

MindSpore's rules, as the presets state them:

* **Default weight-decay rule (a preset knob).** Given a flat parameter list, every
  ``mindspore.nn`` optimizer decays only the parameters whose *name* contains neither
  ``"beta"`` nor ``"gamma"`` (so ``"bias"`` is decayed): the ``nn`` presets return specs
  with ``no_decay_names=("beta", "gamma")`` (:data:`NN_NO_DECAY`) whenever the decay is
  not 0. ``experimental.optim`` classes decay every parameter (``no_decay_names=()``).
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

from .. import _validation as v
from ..algorithms import (CAME, LARS, SGD, Adadelta, Adafactor, Adagrad, Adam, Adamax,
                          AdamOffload, AdamW, Lamb, NAdam, RAdam, RMSprop, Rprop)
from ..schedules import Schedule
from ..spec import Spec
from ._registry import native_preset, refuse, require_float, unsupported

#: ``mindspore.nn`` optimizers given a flat parameter list decay every parameter whose
#: name contains neither substring (so "bias" is decayed).
NN_NO_DECAY = ("beta", "gamma")


def _nn_decay(qualified_name: str, weight_decay, dynamic: bool = True) -> dict:
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


def _nn_lr(qualified_name: str, argument: str, value):
    """An ``nn`` class's lr: a number, or a schedule (its per-step list or Cell)."""
    if isinstance(value, Schedule):
        return value
    return require_float(qualified_name, argument, value)


def _check_loss_scale(qualified_name: str, loss_scale) -> float:
    if isinstance(loss_scale, bool) or not isinstance(loss_scale, (int, float)):
        raise TypeError(f"{qualified_name}: loss_scale must be a float or an int, got "
                        f"{loss_scale!r} of type {type(loss_scale).__name__}")
    return v.check_range(qualified_name, "loss_scale", loss_scale, low=0.0, low_open=True)


def _loss_scale(qualified_name: str, loss_scale) -> dict:
    """The spec's ``loss_scale`` for a class that divides the gradients by it."""
    return {"loss_scale": float(_check_loss_scale(qualified_name, loss_scale))}


def _loss_scale_unused(qualified_name: str, loss_scale) -> None:
    """Classes that take ``loss_scale`` and never divide by it (their spec keeps 1)."""
    if _check_loss_scale(qualified_name, loss_scale) != 1.0:
        warnings.warn(f"{qualified_name}: loss_scale={loss_scale!r} is not applied by the "
                      "class (it does not divide the gradients by it); the spec computes "
                      "what the class does, on the gradients as given (loss_scale=1)",
                      stacklevel=3)


@native_preset("mindspore.nn.SGD")
def nn_sgd(learning_rate=0.1, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
           loss_scale=1.0):
    q = "mindspore.nn.SGD"
    return SGD(lr=_nn_lr(q, "learning_rate", learning_rate), momentum=momentum,
               dampening=dampening, nesterov=nesterov, momentum_init="grad",
               **_nn_decay(q, weight_decay, dynamic=False), **_loss_scale(q, loss_scale))


@native_preset("mindspore.nn.Momentum")
def nn_momentum(learning_rate, momentum, weight_decay=0.0, loss_scale=1.0,
                use_nesterov=False):
    # Documented: Nesterov when use_nesterov. On CPU the kernel ignores the flag; the
    # MindSpore backend therefore runs use_nesterov=True through its own implementation.
    q = "mindspore.nn.Momentum"
    return SGD(lr=_nn_lr(q, "learning_rate", learning_rate), momentum=momentum,
               nesterov=use_nesterov, momentum_init="zeros",
               **_nn_decay(q, weight_decay), **_loss_scale(q, loss_scale))


@native_preset("mindspore.nn.Adam")
def nn_adam(learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, use_locking=False,
            use_nesterov=False, weight_decay=0.0, loss_scale=1.0, use_amsgrad=False,
            use_lazy=False, use_offload=False):
    q = "mindspore.nn.Adam"
    if use_offload and (use_lazy or use_amsgrad):
        # MindSpore's own constructor checks (mindspore/nn/optim/adam.py)
        raise ValueError(f"{q}: use_offload=True excludes use_lazy and use_amsgrad, got "
                         f"use_lazy={use_lazy!r}, use_amsgrad={use_amsgrad!r}")
    if use_offload:
        return nn_adam_offload(learning_rate=learning_rate, beta1=beta1, beta2=beta2, eps=eps,
                               use_nesterov=use_nesterov, weight_decay=weight_decay,
                               loss_scale=loss_scale)
    # use_lazy only changes sparse (RowTensor) gradients; dense ones are identical.
    return Adam(lr=_nn_lr(q, "learning_rate", learning_rate), betas=(beta1, beta2),
                eps=eps, amsgrad=use_amsgrad, nesterov=use_nesterov, eps_placement="eps_hat",
                bias_correction=True, **_nn_decay(q, weight_decay), **_loss_scale(q, loss_scale))


@native_preset("mindspore.nn.AdamWeightDecay")
def nn_adam_weight_decay(learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-6,
                         weight_decay=0.0):
    q = "mindspore.nn.AdamWeightDecay"
    return AdamW(lr=_nn_lr(q, "learning_rate", learning_rate), betas=(beta1, beta2),
                 eps=eps, bias_correction=False, eps_placement="outside",
                 decay_form="in_update", decay_times_lr=True, **_nn_decay(q, weight_decay))


@native_preset("mindspore.experimental.optim.SGD")
def exp_sgd(lr, momentum=0, dampening=0, weight_decay=0.0, nesterov=False, *, maximize=False):
    q = "mindspore.experimental.optim.SGD"
    return SGD(lr=require_float(q, "lr", lr), momentum=momentum, dampening=dampening,
               weight_decay=weight_decay, nesterov=nesterov, maximize=maximize,
               momentum_init="grad")


@native_preset("mindspore.experimental.optim.Adam")
def exp_adam(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, *,
             maximize=False):
    # Documented: amsgrad applies. On CPU the class ignores it; the backend knows.
    q = "mindspore.experimental.optim.Adam"
    return Adam(lr=require_float(q, "lr", lr), betas=betas, eps=eps, weight_decay=weight_decay,
                amsgrad=amsgrad, maximize=maximize, eps_placement="eps_hat",
                bias_correction=True)


@native_preset("mindspore.experimental.optim.AdamW")
def exp_adamw(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, *,
              maximize=False):
    q = "mindspore.experimental.optim.AdamW"
    return AdamW(lr=require_float(q, "lr", lr), betas=betas, eps=eps, weight_decay=weight_decay,
                 amsgrad=amsgrad, maximize=maximize, eps_placement="outside",
                 bias_correction=True, decay_form="before_update")


@native_preset("mindspore.nn.LazyAdam")
def nn_lazy_adam(learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, use_locking=False,
                 use_nesterov=False, weight_decay=0.0, loss_scale=1.0):
    # Lazy updates only differ for sparse (RowTensor) gradients; dense ones are nn.Adam's.
    q = "mindspore.nn.LazyAdam"
    return Adam(lr=_nn_lr(q, "learning_rate", learning_rate), betas=(beta1, beta2),
                eps=eps, nesterov=use_nesterov, eps_placement="eps_hat", bias_correction=True,
                **_nn_decay(q, weight_decay), **_loss_scale(q, loss_scale))


@native_preset("mindspore.nn.AdaMax")
def nn_adamax(learning_rate=0.001, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0,
              loss_scale=1.0):
    q = "mindspore.nn.AdaMax"
    return Adamax(lr=_nn_lr(q, "learning_rate", learning_rate), betas=(beta1, beta2),
                  eps=eps, eps_placement="outside_max",
                  **_nn_decay(q, weight_decay), **_loss_scale(q, loss_scale))


@native_preset("mindspore.nn.Adadelta")
def nn_adadelta(learning_rate=1.0, rho=0.9, epsilon=1e-6, loss_scale=1.0, weight_decay=0.0):
    q = "mindspore.nn.Adadelta"
    return Adadelta(lr=_nn_lr(q, "learning_rate", learning_rate), rho=rho, eps=epsilon,
                    **_nn_decay(q, weight_decay), **_loss_scale(q, loss_scale))


@native_preset("mindspore.nn.Adagrad")
def nn_adagrad(accum=0.1, learning_rate=0.001, update_slots=True, loss_scale=1.0,
               weight_decay=0.0):
    q = "mindspore.nn.Adagrad"
    if not update_slots:
        raise unsupported(q, "update_slots", update_slots,
                          "a frozen accumulator has no spec knob")
    # No eps at all; the accumulator starts at accum (0.1).
    return Adagrad(lr=_nn_lr(q, "learning_rate", learning_rate), eps=0.0,
                   initial_accumulator_value=accum,
                   **_nn_decay(q, weight_decay), **_loss_scale(q, loss_scale))


@native_preset("mindspore.nn.RMSProp")
def nn_rmsprop(learning_rate=0.1, decay=0.9, momentum=0.0, epsilon=1e-10, use_locking=False,
               centered=False, loss_scale=1.0, weight_decay=0.0):
    q = "mindspore.nn.RMSProp"
    return RMSprop(lr=_nn_lr(q, "learning_rate", learning_rate), alpha=decay,
                   momentum=momentum, eps=epsilon, centered=centered, eps_placement="inside",
                   lr_placement="inside", initial_square_avg=1.0,
                   **_nn_decay(q, weight_decay), **_loss_scale(q, loss_scale))


@native_preset("mindspore.nn.Rprop")
def nn_rprop(learning_rate=0.1, etas=(0.5, 1.2), step_sizes=(1e-6, 50.0), weight_decay=0.0):
    q = "mindspore.nn.Rprop"
    return Rprop(lr=_nn_lr(q, "learning_rate", learning_rate), etas=etas,
                 step_sizes=step_sizes, **_nn_decay(q, weight_decay))


@native_preset("mindspore.experimental.optim.Adadelta")
def exp_adadelta(lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0, *, maximize=False):
    q = "mindspore.experimental.optim.Adadelta"
    return Adadelta(lr=require_float(q, "lr", lr), rho=rho, eps=eps, weight_decay=weight_decay,
                    maximize=maximize)


@native_preset("mindspore.experimental.optim.Adagrad")
def exp_adagrad(lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0,
                eps=1e-10, *, maximize=False):
    q = "mindspore.experimental.optim.Adagrad"
    return Adagrad(lr=require_float(q, "lr", lr), lr_decay=lr_decay, weight_decay=weight_decay,
                   initial_accumulator_value=initial_accumulator_value, eps=eps,
                   maximize=maximize)


@native_preset("mindspore.experimental.optim.Adamax")
def exp_adamax(lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, *, maximize=False):
    q = "mindspore.experimental.optim.Adamax"
    return Adamax(lr=require_float(q, "lr", lr), betas=betas, eps=eps, weight_decay=weight_decay,
                  maximize=maximize, eps_placement="on_grad")


@native_preset("mindspore.experimental.optim.NAdam")
def exp_nadam(lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, momentum_decay=4e-3):
    q = "mindspore.experimental.optim.NAdam"
    return NAdam(lr=require_float(q, "lr", lr), betas=betas, eps=eps, weight_decay=weight_decay,
                 momentum_decay=momentum_decay)


@native_preset("mindspore.experimental.optim.RAdam")
def exp_radam(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
    q = "mindspore.experimental.optim.RAdam"
    return RAdam(lr=require_float(q, "lr", lr), betas=betas, eps=eps, weight_decay=weight_decay)


@native_preset("mindspore.experimental.optim.RMSprop")
def exp_rmsprop(lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False,
                maximize=False):
    q = "mindspore.experimental.optim.RMSprop"
    return RMSprop(lr=require_float(q, "lr", lr), alpha=alpha, eps=eps, weight_decay=weight_decay,
                   momentum=momentum, centered=centered, maximize=maximize)


@native_preset("mindspore.experimental.optim.Rprop")
def exp_rprop(lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), *, maximize=False):
    q = "mindspore.experimental.optim.Rprop"
    return Rprop(lr=require_float(q, "lr", lr), etas=etas, step_sizes=step_sizes,
                 maximize=maximize)


# -- the seed algorithms ---------------------------------------------------------------

@native_preset("mindspore.nn.AdamOffload")
def nn_adam_offload(learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, use_locking=False,
                    use_nesterov=False, weight_decay=0.0, loss_scale=1.0):
    # nn.Adam's math (eps-hat, L2 with the beta/gamma filter) with the state on the host
    # (mindspore.md §7)
    q = "mindspore.nn.AdamOffload"
    return AdamOffload(lr=_nn_lr(q, "learning_rate", learning_rate),
                       betas=(beta1, beta2), eps=eps, nesterov=use_nesterov,
                       eps_placement="eps_hat", bias_correction=True,
                       **_nn_decay(q, weight_decay), **_loss_scale(q, loss_scale))


@native_preset("mindspore.nn.Lamb")
def nn_lamb(learning_rate, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.0):
    # The documented formula (and the GPU kernel): the trust ratio on every parameter,
    # also those the beta/gamma filter keeps from decaying. No CPU kernel (mindspore.md §2).
    q = "mindspore.nn.Lamb"
    return Lamb(lr=_nn_lr(q, "learning_rate", learning_rate), betas=(beta1, beta2),
                eps=eps, bias_correction="moments", always_adapt=True,
                **_nn_decay(q, weight_decay))


#: mindspore.nn.LARS's default lars_filter: no LARS (and no decay) for these names
LARS_EXCLUDED = ("LayerNorm", "bias")


@native_preset("mindspore.nn.LARS")
def nn_lars(optimizer, epsilon=1e-05, coefficient=0.001, use_clip=False, lars_filter=None):
    """``optimizer`` is the wrapped ``nn`` optimizer as a spec: ``uo.preset(
    "mindspore.nn.Momentum", ...)`` or ``uo.preset("mindspore.nn.SGD", ...)``.
    ``lars_filter=None`` is MindSpore's default filter (names without ``LayerNorm`` and
    ``bias``); a callable cannot be serialised: give ``exclude_names`` instead."""
    q = "mindspore.nn.LARS"
    if not isinstance(optimizer, SGD):
        kind = optimizer.name if isinstance(optimizer, Spec) else type(optimizer).__name__
        raise unsupported(q, "optimizer", kind,
                          "LARS wraps a momentum optimizer here: pass the spec of the inner "
                          "optimizer, uo.preset('mindspore.nn.Momentum', ...) or "
                          "uo.preset('mindspore.nn.SGD', ...)")
    if optimizer.loss_scale != 1.0:
        raise unsupported(q, "optimizer", f"a spec with loss_scale={optimizer.loss_scale!r}",
                          "LARS folds the loss scale into its trust ratio (the inner "
                          "optimizer's reciprocal scale is reset to 1)")
    if lars_filter is not None:
        raise unsupported(q, "lars_filter", lars_filter,
                          "a callable cannot be part of a serialisable spec; give the names "
                          "it leaves out as uo.preset('mindspore.nn.LARS', ...).replace("
                          "exclude_names=(...))")
    # LARSUpdate on the gradient, then the inner optimizer with its decay switched off
    # (mindspore/nn/optim/lars.py): excluded names get neither ratio nor decay.
    return LARS(lr=optimizer.lr, momentum=optimizer.momentum, dampening=optimizer.dampening,
                nesterov=optimizer.nesterov, lr_placement=optimizer.lr_placement,
                momentum_init=optimizer.momentum_init, weight_decay=optimizer.weight_decay,
                no_decay_names=optimizer.no_decay_names, trust_coefficient=coefficient,
                eps=epsilon, clip=use_clip, always_adapt=True, zero_norm_rule="none",
                exclude_names=LARS_EXCLUDED)


@native_preset("mindspore.nn.AdaFactor")
def nn_adafactor(learning_rate=None, eps=(1e-30, 1e-3), clip_threshold=1.0, decay_rate=0.8,
                 beta1=0.9, weight_decay=0.0, scale_parameter=True, relative_step=True,
                 warmup_init=False, compression=False, loss_scale=1.0):
    # The Hugging Face form (mindspore.md §4): eps added, first moment after the lr
    # scaling, decay with the scaled lr on every parameter.
    q = "mindspore.nn.AdaFactor"
    _loss_scale_unused(q, loss_scale)
    lr = _relative_step_lr(q, learning_rate, relative_step, warmup_init)
    if compression:
        raise unsupported(q, "compression", compression,
                          "float16 running averages are not a spec knob")
    v.check_range(q, "decay_rate", decay_rate, low=0.0, high=1.0, low_open=True,
                  high_open=True)
    v.check_range(q, "weight_decay", weight_decay, low=0.0, high=1.0, high_open=True)
    return Adafactor(lr=lr, eps=eps, eps_mode="add", clip_threshold=clip_threshold,
                     decay_rate=decay_rate, beta2=None,
                     beta1=None if beta1 is None or beta1 == 0 else beta1,
                     weight_decay=weight_decay, decay_lr="scaled", relative_step=relative_step,
                     warmup_init=warmup_init, scale_parameter=scale_parameter)


def _relative_step_lr(q: str, learning_rate, relative_step, warmup_init) -> float:
    """The spec lr for AdaFactor-style classes: with relative_step, the cap of
    min(cap, 1/sqrt(t)) (1e-2, or 1e-6 per step with warmup_init); else the lr."""
    if learning_rate is not None and relative_step:
        raise ValueError(f"{q}: cannot combine a manual learning_rate={learning_rate!r} with "
                         "relative_step=True")
    if warmup_init and not relative_step:
        raise ValueError(f"{q}: warmup_init=True requires relative_step=True")
    if learning_rate is None and not relative_step:
        raise ValueError(f"{q}: learning_rate=None requires relative_step=True")
    if relative_step:
        return 1e-6 if warmup_init else 1e-2
    return require_float(q, "learning_rate", learning_rate)


@native_preset("mindformers.core.Came")
def mindformers_came(learning_rate=None, eps=(1e-30, 1e-3, 1e-16), clip_threshold=1.0,
                     decay_rate=0.8, beta1=0.9, beta3=0.99, weight_decay=0.0,
                     scale_parameter=False, relative_step=False, warmup_init=False,
                     compression=False, loss_scale=1):
    # The documented algorithm (mindspore.md §8): its CPU fused path crashes, and its
    # relative_step and beta1=0 never move the parameters; the spec does what the
    # documentation says.
    q = "mindformers.core.Came"
    if compression:
        raise ValueError(f"{q}: Currently, came only supports compression equals False, got "
                         f"compression={compression!r}")
    if isinstance(loss_scale, bool) or not isinstance(loss_scale, int):
        raise TypeError(f"{q}: loss_scale must be an int, got {loss_scale!r}")
    _loss_scale_unused(q, loss_scale)
    for name, value in (("decay_rate", decay_rate), ("beta1", beta1), ("beta3", beta3),
                        ("weight_decay", weight_decay)):
        v.check_range(q, name, value, low=0.0, high=1.0)
    eps = v.check_sequence(q, "eps", eps, 3)
    return CAME(lr=_relative_step_lr(q, learning_rate, relative_step, warmup_init),
                betas=(beta1, None, beta3), eps=(eps[0], eps[2]), eps_scale=eps[1],
                decay_rate=decay_rate, clip_threshold=clip_threshold,
                weight_decay=weight_decay, scale_parameter=scale_parameter,
                relative_step=relative_step, warmup_init=warmup_init)


_ASGD = "averaged SGD (the ax average, eta and mu schedules) is not a registered algorithm"
refuse("mindspore.nn.ASGD", _ASGD)
refuse("mindspore.experimental.optim.ASGD", _ASGD)
refuse("mindspore.nn.FTRL", "FTRL-proximal is not a registered algorithm (and its CPU kernel "
                            "drops sign(linear) when l1 > 0, unlike its documentation)")
refuse("mindspore.nn.ProximalAdagrad", "proximal Adagrad is not a registered algorithm (and "
                                       "its CPU kernel shrinks with lr/sqrt(accum), not the "
                                       "documented lr)")
