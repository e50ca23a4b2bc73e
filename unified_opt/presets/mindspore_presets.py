"""Presets for ``mindspore.nn`` and ``mindspore.experimental.optim`` (MindSpore 2.10)."""

from __future__ import annotations

from ..algorithms import SGD, Adam, AdamW
from ._registry import native_preset, require_float, unsupported

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
