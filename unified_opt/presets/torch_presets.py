"""Presets for ``torch.optim`` (torch 2.13 signatures and defaults)."""

from __future__ import annotations

from ..algorithms import SGD, Adam, AdamW
from ._registry import native_preset, require_float


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
