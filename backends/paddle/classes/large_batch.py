"""Paddle's large-batch optimizers as descriptors: ``paddle.optimizer.Lamb`` and
``paddle.incubate.optimizer.LarsMomentumOptimizer`` (Paddle 3.3)."""

from __future__ import annotations

from unified_opt.algorithms import LARS, Lamb
from unified_opt.native import Lowering, when
from unified_opt.presets._registry import unsupported

from .descriptor import (
    FLOAT32_ATTRIBUTES,
    PaddleClass,
    betas_epsilon,
    grad_clip_spec,
    learning_rate_spec,
    no_decay_callable,
)


def lamb(learning_rate=0.001, lamb_weight_decay=0.01, beta1=0.9, beta2=0.999, epsilon=1e-6,
         grad_clip=None, exclude_from_weight_decay_fn=None, multi_precision=False,
         always_adapt=False, name=None):
    # The paper's Algorithm 2 (paddle/phi/kernels/impl/lamb_kernel_impl.h): bias-corrected
    # moments, no clamp, and no trust ratio where the decay is 0 unless always_adapt.
    q = "paddle.optimizer.Lamb"
    # A decay of 0 drops the trust ratio too (unless always_adapt), in Paddle and the spec.
    no_decay_callable(q, "exclude_from_weight_decay_fn", exclude_from_weight_decay_fn,
                       "the parameter tensor")
    return Lamb(lr=learning_rate_spec(q, learning_rate), betas=(beta1, beta2),
                grad_clip=grad_clip_spec(q, grad_clip),
                eps=epsilon, weight_decay=lamb_weight_decay, bias_correction="moments",
                always_adapt=always_adapt)


def lars_momentum(learning_rate, momentum, lars_coeff=0.001, lars_weight_decay=0.0005,
                  regularization=None, grad_clip=None, name=None,
                  exclude_from_weight_decay=None, epsilon=0, multi_precision=False,
                  rescale_grad=1.0):
    # paddle/phi/kernels/cpu/lars_momentum_kernel.cc: lr inside the velocity, no trust
    # ratio where the decay is 0 or a norm is 0.
    q = "paddle.incubate.optimizer.LarsMomentumOptimizer"
    if regularization is not None:
        raise unsupported(q, "regularization", regularization,
                          "a coupled regularizer inside the LARS gradient norm has no knob")
    if rescale_grad != 1.0:
        raise unsupported(q, "rescale_grad", rescale_grad,
                          "no spec knob scales the gradient; scale the loss instead")
    # Paddle excludes every parameter whose name contains one of the strings
    names = tuple(f"*{n}*" for n in (exclude_from_weight_decay or ()))
    return LARS(lr=learning_rate_spec(q, learning_rate), momentum=momentum,
                grad_clip=grad_clip_spec(q, grad_clip),
                trust_coefficient=lars_coeff, weight_decay=lars_weight_decay, eps=epsilon,
                lr_placement="inside", momentum_init="zeros", always_adapt=False,
                zero_norm_rule="one_if_norm_zero", no_decay_names=names)


CLASSES = (
    PaddleClass(
        name="paddle.optimizer.Lamb", from_native=lamb,
        lowerings=(Lowering(
            "lamb",
            (when("bias_correction='moments' (Paddle's kernel divides m and v by 1-beta^t)",
                  lambda s: s.bias_correction == "moments"),
             when("weight_norm_clamp=None (Paddle does not clamp ||p|| in the trust ratio)",
                  lambda s: s.weight_norm_clamp is None),
             when("trust_eps=0 (Paddle's trust ratio is ||p||/||r||, no eps)",
                  lambda s: s.trust_eps == 0.0)),
            lambda s: {"lamb_weight_decay": float(s.weight_decay), **betas_epsilon(s),
                       "always_adapt": s.always_adapt},
            "no_decay_names become exclude_from_weight_decay_fn, which drops the decay and, "
            "unless always_adapt, the trust ratio as the spec does; " + FLOAT32_ATTRIBUTES),),
        state={"exp_avg": "moment1", "exp_avg_sq": "moment2"},
        decay_keyword="lamb_weight_decay", decay_selector="exclude_from_weight_decay_fn"),
    PaddleClass(
        name="paddle.incubate.optimizer.LarsMomentumOptimizer", from_native=lars_momentum,
        lowerings=(Lowering(
            "lars",
            (when("lr_placement='inside' (Paddle's velocity is mu*v + local_lr*(g + wd*p))",
                  lambda s: s.lr_placement == "inside"),
             when("dampening=0 (Paddle's velocity starts at 0 and has no dampening)",
                  lambda s: s.dampening == 0.0),
             when("nesterov=False (LarsMomentumOptimizer has no Nesterov form)",
                  lambda s: not s.nesterov),
             when("zero_norm_rule='one_if_norm_zero' (Paddle uses the plain lr, decay kept, "
                  "when ||p|| or ||g|| is 0)", lambda s: s.zero_norm_rule == "one_if_norm_zero"),
             when("clip=False (Paddle does not clip the local lr)", lambda s: not s.clip),
             when("exclude_1d=False (Paddle treats 1-D parameters like the others)",
                  lambda s: not s.exclude_1d),
             when("always_adapt=False, or every parameter decays (Paddle applies the trust "
                  "ratio only where lars_weight_decay > 0)",
                  lambda s: not s.always_adapt or (s.weight_decay > 0.0
                                                   and not s.no_decay_names))),
            lambda s: {"momentum": float(s.momentum), "lars_coeff": float(s.trust_coefficient),
                       "lars_weight_decay": float(s.weight_decay), "epsilon": float(s.eps)},
            "no_decay_names and exclude_names (the same without always_adapt: no decay, no "
            "ratio) become exclude_from_weight_decay, the excluded parameters' Paddle names; "
            + FLOAT32_ATTRIBUTES),),
        state={"momentum_buffer": "velocity"},
        decay_keyword="lars_weight_decay", decay_selector="exclude_from_weight_decay",
        parameters_keyword="parameter_list",
        no_groups="LarsMomentumOptimizer takes no parameter groups (old-style "
                  "parameter_list)"),
)
