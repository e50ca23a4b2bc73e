"""Presets for ``torch.optim`` (torch 2.13 signatures and defaults)."""

from __future__ import annotations

from .. import _validation as v
from ..algorithms import (SGD, Adadelta, Adafactor, Adagrad, Adam, Adamax, AdamW, NAdam, RAdam,
                          RMSprop, Rprop)
from ._registry import native_preset, refuse, require_float


@native_preset("torch.optim.SGD")
def sgd(lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False, *, maximize=False,
        foreach=None, differentiable=False, fused=None):
    return SGD(lr=require_float("torch.optim.SGD", "lr", lr), momentum=momentum,
               dampening=dampening, weight_decay=weight_decay, nesterov=nesterov,
               maximize=maximize, lr_placement="outside", momentum_init="grad")


def _adam_like(cls, qualified_name, lr, betas, eps, weight_decay, amsgrad, maximize):
    return cls(lr=require_float(qualified_name, "lr", lr), betas=betas, eps=eps,
               weight_decay=weight_decay, amsgrad=amsgrad, maximize=maximize,
               eps_placement="outside", bias_correction=True)


@native_preset("torch.optim.Adam")
def adam(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False, *,
         foreach=None, maximize=False, capturable=False, differentiable=False, fused=None,
         decoupled_weight_decay=False):
    cls = AdamW if decoupled_weight_decay else Adam
    return _adam_like(cls, "torch.optim.Adam", lr, betas, eps, weight_decay, amsgrad, maximize)


@native_preset("torch.optim.AdamW")
def adamw(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, *,
          maximize=False, foreach=None, capturable=False, differentiable=False, fused=None):
    return _adam_like(AdamW, "torch.optim.AdamW", lr, betas, eps, weight_decay, amsgrad,
                      maximize)


@native_preset("torch.optim.Adadelta")
def adadelta(lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, foreach=None, *, capturable=False,
             maximize=False, differentiable=False):
    return Adadelta(lr=require_float("torch.optim.Adadelta", "lr", lr), rho=rho, eps=eps,
                    weight_decay=weight_decay, maximize=maximize)


@native_preset("torch.optim.Adagrad")
def adagrad(lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0, eps=1e-10,
            foreach=None, *, maximize=False, differentiable=False, fused=None):
    return Adagrad(lr=require_float("torch.optim.Adagrad", "lr", lr), lr_decay=lr_decay,
                   weight_decay=weight_decay, initial_accumulator_value=initial_accumulator_value,
                   eps=eps, maximize=maximize)


@native_preset("torch.optim.Adamax")
def adamax(lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, foreach=None, *,
           maximize=False, differentiable=False, capturable=False):
    return Adamax(lr=require_float("torch.optim.Adamax", "lr", lr), betas=betas, eps=eps,
                  weight_decay=weight_decay, maximize=maximize, eps_placement="on_grad")


@native_preset("torch.optim.NAdam")
def nadam(lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, momentum_decay=4e-3,
          decoupled_weight_decay=False, *, foreach=None, maximize=False, capturable=False,
          differentiable=False):
    return NAdam(lr=require_float("torch.optim.NAdam", "lr", lr), betas=betas, eps=eps,
                 weight_decay=weight_decay, momentum_decay=momentum_decay,
                 decoupled_weight_decay=decoupled_weight_decay, maximize=maximize)


@native_preset("torch.optim.RAdam")
def radam(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, decoupled_weight_decay=False,
          *, foreach=None, maximize=False, capturable=False, differentiable=False):
    return RAdam(lr=require_float("torch.optim.RAdam", "lr", lr), betas=betas, eps=eps,
                 weight_decay=weight_decay, decoupled_weight_decay=decoupled_weight_decay,
                 maximize=maximize)


@native_preset("torch.optim.RMSprop")
def rmsprop(lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0, centered=False,
            capturable=False, foreach=None, maximize=False, differentiable=False):
    return RMSprop(lr=require_float("torch.optim.RMSprop", "lr", lr), alpha=alpha, eps=eps,
                   weight_decay=weight_decay, momentum=momentum, centered=centered,
                   maximize=maximize, eps_placement="outside", lr_placement="outside")


@native_preset("torch.optim.Rprop")
def rprop(lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), *, capturable=False, foreach=None,
          maximize=False, differentiable=False):
    return Rprop(lr=require_float("torch.optim.Rprop", "lr", lr), etas=etas,
                 step_sizes=step_sizes, maximize=maximize)


@native_preset("torch.optim.Adafactor")
def adafactor(lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0, weight_decay=0.0, *,
              foreach=None, maximize=False):
    # torch's form: relative step capped by lr, parameter scaling, eps as clamps, no
    # first moment, decay with the raw lr (torch_peers.md §2.3)
    q = "torch.optim.Adafactor"
    beta2_decay = v.check_range(q, "beta2_decay", beta2_decay, high=0.0)
    d = v.check_range(q, "d", d, low=1.0)
    return Adafactor(lr=require_float(q, "lr", lr), decay_rate=-beta2_decay, eps=eps,
                     clip_threshold=d, weight_decay=weight_decay, maximize=maximize,
                     relative_step=True, warmup_init=False, scale_parameter=True,
                     eps_mode="clamp", beta1=None, beta2=None, decay_lr="raw")


refuse("torch.optim.ASGD", "averaged SGD (the ax average, eta and mu schedules) is not a "
                           "registered algorithm")
