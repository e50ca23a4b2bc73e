"""Conformance cases of the seed algorithms: lamb, lars, adafactor, came, adam_offload,
dgc_momentum. Every knob with values that move the numbers far beyond float32 rounding
(trust coefficients large enough that LARS moves, clamps that bite), and every
framework's own class through its preset. DGC runs at world size 1 here (the exchange
is the identity); its multi-worker behaviour is tested against the simulated workers
of the reference (tests/test_seed_dgc.py)."""

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
        Case(id="lamb_trust_eps", spec=uo.Lamb(**a, trust_eps=0.05, eps=1e-3)),
        Case(id="lamb_no_decay_names_drop_ratio",
             spec=uo.Lamb(**a, no_decay_names=NN_NAMES)),
        Case(id="lamb_no_decay_names_keep_ratio",
             spec=uo.Lamb(**a, no_decay_names=NN_NAMES, always_adapt=True)),
        Case(id="lamb_cosine", spec=uo.Lamb(lr=COSINE, weight_decay=0.05, betas=(0.8, 0.99))),
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


def _adafactor() -> list[Case]:
    hf = {"eps": (1e-30, 1e-3), "eps_mode": "add", "beta1": 0.9, "decay_lr": "scaled"}
    return [
        Case(id="adafactor_default", spec=uo.Adafactor(lr=0.01)),
        Case(id="adafactor_weight_decay", spec=uo.Adafactor(lr=0.01, weight_decay=0.5)),
        Case(id="adafactor_maximize_clip",
             spec=uo.Adafactor(lr=0.01, maximize=True, clip_threshold=0.3)),
        Case(id="adafactor_eps1_clamp", spec=uo.Adafactor(lr=0.01, eps=(0.05, 1e-3))),
        Case(id="adafactor_eps1_add",
             spec=uo.Adafactor(lr=0.01, eps=(0.05, 1e-3), eps_mode="add")),
        # an lr above 1/sqrt(t) for t > 11: the relative step caps it
        Case(id="adafactor_relative_step_cap", spec=uo.Adafactor(lr=0.3)),
        Case(id="adafactor_hugging_face",
             spec=uo.Adafactor(lr=0.01, weight_decay=0.5, **hf)),
        Case(id="adafactor_manual_lr",
             spec=uo.Adafactor(lr=COSINE, relative_step=False, scale_parameter=False, **hf)),
        Case(id="adafactor_warmup_init",
             spec=uo.Adafactor(lr=1e-3, warmup_init=True, eps_mode="add", eps=(1e-30, 1e-3))),
        Case(id="adafactor_constant_beta2",
             spec=uo.Adafactor(lr=0.01, beta2=0.9, decay_rate=None, beta1=0.5)),
        dense(id="preset_torch_adafactor", spec=uo.preset("torch.optim.Adafactor", lr=0.01)),
        dense(id="preset_torch_adafactor_decay", spec=uo.preset(
            "torch.optim.Adafactor", lr=0.01, weight_decay=0.5, beta2_decay=-0.5)),
        dense(id="preset_mindspore_nn_adafactor", spec=uo.preset("mindspore.nn.AdaFactor")),
        dense(id="preset_mindspore_nn_adafactor_manual", spec=uo.preset(
            "mindspore.nn.AdaFactor", learning_rate=0.01, relative_step=False,
            scale_parameter=False, weight_decay=0.1)),
    ]


def _came() -> list[Case]:
    a = {"lr": 0.01, "betas": (0.9, 0.999, 0.99)}
    return [
        Case(id="came_default", spec=uo.CAME(**a)),
        Case(id="came_weight_decay", spec=uo.CAME(**a, weight_decay=0.5, clip_threshold=0.5)),
        Case(id="came_beta2_schedule",
             spec=uo.CAME(lr=0.01, betas=(0.9, None, 0.99), decay_rate=0.8)),
        Case(id="came_scale_parameter",
             spec=uo.CAME(lr=0.05, betas=(0.9, 0.999, 0.99), scale_parameter=True,
                          eps_scale=0.5)),
        Case(id="came_relative_step",
             spec=uo.CAME(lr=0.01, betas=(0.9, 0.999, 0.99), relative_step=True)),
        Case(id="came_cosine", spec=uo.CAME(lr=COSINE, eps=(1e-3, 1e-3))),
        dense(id="preset_mindformers_came", spec=uo.preset(
            "mindformers.core.Came", learning_rate=0.01, weight_decay=0.1)),
        dense(id="preset_mindformers_came_scale", spec=uo.preset(
            "mindformers.core.Came", learning_rate=0.05, scale_parameter=True)),
    ]


def _adam_offload() -> list[Case]:
    a = {"lr": 0.01, "eps": 1e-3}
    return [
        Case(id="adam_offload_default", spec=uo.AdamOffload(**a)),
        Case(id="adam_offload_amsgrad_decay",
             spec=uo.AdamOffload(**a, amsgrad=True, weight_decay=0.1)),
        Case(id="adam_offload_eps_hat_nesterov",
             spec=uo.AdamOffload(**a, eps_placement="eps_hat", nesterov=True)),
        dense(id="preset_mindspore_nn_adam_offload", spec=uo.preset(
            "mindspore.nn.AdamOffload", learning_rate=0.01, eps=1e-3, weight_decay=0.1)),
        dense(id="preset_mindspore_nn_adam_use_offload", spec=uo.preset(
            "mindspore.nn.Adam", learning_rate=0.01, eps=1e-3, use_nesterov=True,
            use_offload=True)),
    ]


def _dgc() -> list[Case]:
    a = {"lr": 0.05, "momentum": 0.9, "rampup_begin_step": 5, "rampup_step": 20,
         "sparsity": (0.5, 0.75, 0.9), "min_numel": 1}
    return [
        Case(id="dgc_default", spec=uo.DGCMomentum(**a)),
        Case(id="dgc_nesterov", spec=uo.DGCMomentum(**a, use_nesterov=True)),
        Case(id="dgc_local_clip_decay",
             spec=uo.DGCMomentum(**a, local_grad_clip_norm=2.0, num_trainers=1,
                                 weight_decay=0.01)),
        Case(id="dgc_small_dense_clip",
             spec=uo.DGCMomentum(**{**a, "min_numel": 30}, dense_clip_norm=1.0,
                                 weight_decay=0.01)),
        Case(id="dgc_cosine_from_step_one",
             spec=uo.DGCMomentum(**{**a, "lr": COSINE, "rampup_begin_step": 0})),
        dense(id="preset_paddle_dgc_momentum", spec=uo.preset(
            "paddle.distributed.fleet.DGCMomentumOptimizer", learning_rate=0.05, momentum=0.9,
            rampup_begin_step=3, sparsity=[0.75, 0.9], rampup_step=10)),
    ]


def cases() -> list[Case]:
    return _lamb() + _lars() + _adafactor() + _came() + _adam_offload() + _dgc()
