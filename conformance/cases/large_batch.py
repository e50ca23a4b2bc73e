"""Conformance cases of the large-batch optimizers: lamb and lars. Every knob with values
that move the numbers far beyond float32 rounding (trust coefficients large enough that
LARS moves, clamps that bite), and every framework's own class through its preset."""

from __future__ import annotations

import unified_opt as uo
from unified_opt.schedules import Cosine

from .case import Case, dense

COSINE = Cosine(lr=0.02, T_max=50, eta_min=0.001)
NN_NAMES = ("*beta*", "*gamma*")


def _lamb() -> list[Case]:
    a = {"lr": 0.01, "weight_decay": 0.05}
    return [
        Case(id="lamb_default", spec=uo.Lamb(**a)),
        Case(id="lamb_no_decay_is_adam", spec=uo.Lamb(lr=0.01, weight_decay=0.0)),
        Case(id="lamb_always_adapt", spec=uo.Lamb(lr=0.01, weight_decay=0.0, always_adapt=True)),
        Case(id="lamb_no_bias_correction_clamp",
             spec=uo.Lamb(**a, bias_correction="none", weight_norm_clamp=2.0,
                          always_adapt=True)),
        Case(id="lamb_bias_correction_step", spec=uo.Lamb(**a, bias_correction="step")),
        Case(id="lamb_bias_correction_first_moment_step",
             spec=uo.Lamb(**a, bias_correction="first_moment_step")),
        Case(id="lamb_trust_eps", spec=uo.Lamb(**a, trust_eps=0.05, eps=1e-3)),
        Case(id="lamb_no_decay_names_drop_ratio",
             spec=uo.Lamb(**a, no_decay_names=NN_NAMES)),
        Case(id="lamb_no_decay_names_keep_ratio",
             spec=uo.Lamb(**a, no_decay_names=NN_NAMES, always_adapt=True)),
        Case(id="lamb_cosine", spec=uo.Lamb(lr=COSINE, weight_decay=0.05, betas=(0.8, 0.99))),
        # eps 100 keeps the update ~g/100, so the trust ratio is ~100 from step 1: a ratio
        # clipped at 10 (or a clamp) shows at once, not after many steps (issue 22)
        Case(id="lamb_trust_ratio_above_10",
             spec=uo.Lamb(lr=0.01, weight_decay=0.0, always_adapt=True, eps=100.0)),
        dense(id="preset_paddle_lamb", spec=uo.preset(
            "paddle.optimizer.Lamb", learning_rate=0.01, lamb_weight_decay=0.05)),
        dense(id="preset_paddle_lamb_no_decay", spec=uo.preset(
            "paddle.optimizer.Lamb", learning_rate=0.01, lamb_weight_decay=0.0)),
        dense(id="preset_paddle_lamb_always_adapt", spec=uo.preset(
            "paddle.optimizer.Lamb", learning_rate=0.01, lamb_weight_decay=0.0,
            always_adapt=True)),
        dense(id="preset_mindspore_nn_lamb", spec=uo.preset(
            "mindspore.nn.Lamb", learning_rate=0.01, weight_decay=0.05)),
    ]


def _lars() -> list[Case]:
    a = {"lr": 0.5, "momentum": 0.9, "weight_decay": 0.01, "trust_coefficient": 0.02}
    momentum = uo.preset("mindspore.nn.Momentum", learning_rate=0.5, momentum=0.9,
                         weight_decay=0.01)
    sgd = uo.preset("mindspore.nn.SGD", learning_rate=0.5, momentum=0.9, dampening=0.1,
                    weight_decay=0.01)
    return [
        Case(id="lars_default", spec=uo.LARS(**a)),
        Case(id="lars_no_decay_is_momentum", spec=uo.LARS(**{**a, "weight_decay": 0.0})),
        Case(id="lars_always_adapt_eps",
             spec=uo.LARS(**{**a, "weight_decay": 0.0}, always_adapt=True, eps=0.5)),
        Case(id="lars_torch_optimizer",
             spec=uo.LARS(**a, eps=1e-8, lr_placement="outside", momentum_init="grad",
                          zero_norm_rule="raw_if_norm_zero", dampening=0.1)),
        Case(id="lars_pytorch_optimizer",
             spec=uo.LARS(**a, lr_placement="outside", always_adapt=True,
                          zero_norm_rule="one_if_denominator_zero", exclude_1d=True)),
        Case(id="lars_zero_rule_none",
             spec=uo.LARS(**a, eps=1e-5, zero_norm_rule="none", always_adapt=True)),
        Case(id="lars_clip", spec=uo.LARS(**{**a, "lr": 0.01}, clip=True, always_adapt=True,
                                          lr_placement="outside")),
        Case(id="lars_nesterov", spec=uo.LARS(**a, nesterov=True)),
        Case(id="lars_names", spec=uo.LARS(**a, exclude_names=("*bias",),
                                           no_decay_names=NN_NAMES, always_adapt=True)),
        Case(id="lars_cosine", spec=uo.LARS(**{**a, "lr": COSINE})),
        dense(id="preset_paddle_lars", spec=uo.preset(
            "paddle.incubate.optimizer.LarsMomentumOptimizer", learning_rate=0.5, momentum=0.9,
            lars_coeff=0.02, lars_weight_decay=0.01, exclude_from_weight_decay=["bias"])),
        dense(id="preset_mindspore_nn_lars", spec=uo.preset(
            "mindspore.nn.LARS", optimizer=momentum, coefficient=0.02)),
        dense(id="preset_mindspore_nn_lars_sgd_clip", spec=uo.preset(
            "mindspore.nn.LARS", optimizer=sgd, coefficient=0.02, use_clip=True)),
    ]


def cases() -> list[Case]:
    return _lamb() + _lars()
