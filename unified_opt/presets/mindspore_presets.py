"""Presets for ``mindspore.nn`` and ``mindspore.experimental.optim`` (MindSpore 2.10)."""

from __future__ import annotations

from ..algorithms import (SGD, Adadelta, Adagrad, Adam, Adamax, AdamW, NAdam, RAdam, RMSprop,
                          Rprop)
from ._registry import native_preset, refuse, require_float, unsupported

#: ``mindspore.nn`` optimizers given a flat parameter list decay every parameter whose
#: name contains neither substring (so "bias" is decayed).
NN_NO_DECAY = ("beta", "gamma")


def _nn_decay(qualified_name: str, weight_decay) -> dict:
    if not isinstance(weight_decay, (int, float)) or isinstance(weight_decay, bool):
        raise unsupported(qualified_name, "weight_decay", weight_decay,
                          "dynamic weight decay (a Cell) has no spec form yet")
    return {"weight_decay": weight_decay, "no_decay_names": NN_NO_DECAY if weight_decay else ()}


def _loss_scale(qualified_name: str, loss_scale) -> None:
    if loss_scale != 1.0:
        raise unsupported(qualified_name, "loss_scale", loss_scale,
                          "loss scaling is not part of these specs yet")


@native_preset("mindspore.nn.SGD")
def nn_sgd(learning_rate=0.1, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
           loss_scale=1.0):
    q = "mindspore.nn.SGD"
    _loss_scale(q, loss_scale)
    return SGD(lr=require_float(q, "learning_rate", learning_rate), momentum=momentum,
               dampening=dampening, nesterov=nesterov, momentum_init="grad",
               **_nn_decay(q, weight_decay))


@native_preset("mindspore.nn.Momentum")
def nn_momentum(learning_rate, momentum, weight_decay=0.0, loss_scale=1.0,
                use_nesterov=False):
    # Documented: Nesterov when use_nesterov. On CPU the kernel ignores the flag; the
    # MindSpore backend therefore runs use_nesterov=True through its own implementation.
    q = "mindspore.nn.Momentum"
    _loss_scale(q, loss_scale)
    return SGD(lr=require_float(q, "learning_rate", learning_rate), momentum=momentum,
               nesterov=use_nesterov, momentum_init="zeros", **_nn_decay(q, weight_decay))


@native_preset("mindspore.nn.Adam")
def nn_adam(learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-8, use_locking=False,
            use_nesterov=False, weight_decay=0.0, loss_scale=1.0, use_amsgrad=False,
            use_lazy=False, use_offload=False):
    q = "mindspore.nn.Adam"
    _loss_scale(q, loss_scale)
    if use_offload:
        raise unsupported(q, "use_offload", use_offload,
                          "host offload is the adam_offload algorithm, not yet registered")
    # use_lazy only changes sparse (RowTensor) gradients; dense ones are identical.
    return Adam(lr=require_float(q, "learning_rate", learning_rate), betas=(beta1, beta2),
                eps=eps, amsgrad=use_amsgrad, nesterov=use_nesterov, eps_placement="eps_hat",
                bias_correction=True, **_nn_decay(q, weight_decay))


@native_preset("mindspore.nn.AdamWeightDecay")
def nn_adam_weight_decay(learning_rate=1e-3, beta1=0.9, beta2=0.999, eps=1e-6,
                         weight_decay=0.0):
    q = "mindspore.nn.AdamWeightDecay"
    return AdamW(lr=require_float(q, "learning_rate", learning_rate), betas=(beta1, beta2),
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
    _loss_scale(q, loss_scale)
    return Adam(lr=require_float(q, "learning_rate", learning_rate), betas=(beta1, beta2),
                eps=eps, nesterov=use_nesterov, eps_placement="eps_hat", bias_correction=True,
                **_nn_decay(q, weight_decay))


@native_preset("mindspore.nn.AdaMax")
def nn_adamax(learning_rate=0.001, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0,
              loss_scale=1.0):
    q = "mindspore.nn.AdaMax"
    _loss_scale(q, loss_scale)
    return Adamax(lr=require_float(q, "learning_rate", learning_rate), betas=(beta1, beta2),
                  eps=eps, eps_placement="outside_max", **_nn_decay(q, weight_decay))


@native_preset("mindspore.nn.Adadelta")
def nn_adadelta(learning_rate=1.0, rho=0.9, epsilon=1e-6, loss_scale=1.0, weight_decay=0.0):
    q = "mindspore.nn.Adadelta"
    _loss_scale(q, loss_scale)
    return Adadelta(lr=require_float(q, "learning_rate", learning_rate), rho=rho, eps=epsilon,
                    **_nn_decay(q, weight_decay))


@native_preset("mindspore.nn.Adagrad")
def nn_adagrad(accum=0.1, learning_rate=0.001, update_slots=True, loss_scale=1.0,
               weight_decay=0.0):
    q = "mindspore.nn.Adagrad"
    _loss_scale(q, loss_scale)
    if not update_slots:
        raise unsupported(q, "update_slots", update_slots,
                          "a frozen accumulator has no spec knob")
    # No eps at all; the accumulator starts at accum (0.1).
    return Adagrad(lr=require_float(q, "learning_rate", learning_rate), eps=0.0,
                   initial_accumulator_value=accum, **_nn_decay(q, weight_decay))


@native_preset("mindspore.nn.RMSProp")
def nn_rmsprop(learning_rate=0.1, decay=0.9, momentum=0.0, epsilon=1e-10, use_locking=False,
               centered=False, loss_scale=1.0, weight_decay=0.0):
    q = "mindspore.nn.RMSProp"
    _loss_scale(q, loss_scale)
    return RMSprop(lr=require_float(q, "learning_rate", learning_rate), alpha=decay,
                   momentum=momentum, eps=epsilon, centered=centered, eps_placement="inside",
                   lr_placement="inside", initial_square_avg=1.0, **_nn_decay(q, weight_decay))


@native_preset("mindspore.nn.Rprop")
def nn_rprop(learning_rate=0.1, etas=(0.5, 1.2), step_sizes=(1e-6, 50.0), weight_decay=0.0):
    q = "mindspore.nn.Rprop"
    return Rprop(lr=require_float(q, "learning_rate", learning_rate), etas=etas,
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


_ASGD = "averaged SGD (the ax average, eta and mu schedules) is not a registered algorithm"
refuse("mindspore.nn.ASGD", _ASGD)
refuse("mindspore.experimental.optim.ASGD", _ASGD)
refuse("mindspore.nn.FTRL", "FTRL-proximal is not a registered algorithm (and its CPU kernel "
                            "drops sign(linear) when l1 > 0, unlike its documentation)")
refuse("mindspore.nn.ProximalAdagrad", "proximal Adagrad is not a registered algorithm (and "
                                       "its CPU kernel shrinks with lr/sqrt(accum), not the "
                                       "documented lr)")
