"""Conformance cases of the Adam family: adam, adamw, nadam, radam, adamax. Every knob
(eps 1e-3 and more, so its placement shows; a changing lr where the lr placement
matters) and every framework's own class through its preset."""

from __future__ import annotations

import unified_opt as uo
from unified_opt.schedules import Cosine

from .case import Case, dense

COSINE = Cosine(lr=0.02, T_max=50, eta_min=0.001)


def adam_cases() -> list[Case]:
    a = {"lr": 0.01, "eps": 1e-3}
    cosine = COSINE
    return [
        Case(id="adam_default", spec=uo.Adam(**a)),
        Case(id="adam_eps_hat", spec=uo.Adam(**a, eps_placement="eps_hat")),
        Case(id="adam_eps_inside", spec=uo.Adam(**a, eps_placement="inside")),
        Case(id="adam_no_bias_correction", spec=uo.Adam(**a, bias_correction=False)),
        Case(id="adam_amsgrad", spec=uo.Adam(**a, amsgrad=True)),
        Case(id="adam_amsgrad_eps_hat",
             spec=uo.Adam(**a, amsgrad=True, eps_placement="eps_hat")),
        Case(id="adam_nesterov", spec=uo.Adam(**a, nesterov=True)),
        Case(id="adam_nesterov_eps_hat",
             spec=uo.Adam(**a, nesterov=True, eps_placement="eps_hat")),
        Case(id="adam_weight_decay", spec=uo.Adam(**a, weight_decay=0.1)),
        Case(id="adam_maximize", spec=uo.Adam(**a, maximize=True, betas=(0.8, 0.99))),
        Case(id="adam_no_decay_names",
             spec=uo.Adam(**a, weight_decay=0.1, no_decay_names=("*beta*", "*gamma*"))),
        Case(id="adam_cosine", spec=uo.Adam(lr=cosine, eps=1e-3, weight_decay=0.05)),
        dense(id="preset_torch_adam",
             spec=uo.preset("torch.optim.Adam", lr=0.01, eps=1e-3, weight_decay=0.01)),
        dense(id="preset_paddle_adam",
             spec=uo.preset("paddle.optimizer.Adam", learning_rate=0.01, epsilon=1e-3,
                            weight_decay=0.01)),
        dense(id="preset_paddle_adam_amsgrad",
             spec=uo.preset("paddle.optimizer.Adam", learning_rate=0.01, epsilon=1e-3,
                            amsgrad=True)),
        dense(id="preset_mindspore_nn_adam",
             spec=uo.preset("mindspore.nn.Adam", learning_rate=0.01, eps=1e-3,
                            weight_decay=0.1)),
        dense(id="preset_mindspore_nn_adam_nesterov",
             spec=uo.preset("mindspore.nn.Adam", learning_rate=0.01, eps=1e-3,
                            use_nesterov=True)),
        dense(id="preset_mindspore_nn_adam_amsgrad",
             spec=uo.preset("mindspore.nn.Adam", learning_rate=0.01, eps=1e-3,
                            use_amsgrad=True)),
        dense(id="preset_mindspore_experimental_adam",
             spec=uo.preset("mindspore.experimental.optim.Adam", lr=0.01, eps=1e-3,
                            weight_decay=0.01, maximize=True)),
        dense(id="preset_mindspore_experimental_adam_amsgrad",
             spec=uo.preset("mindspore.experimental.optim.Adam", lr=0.01, eps=1e-3,
                            amsgrad=True)),
    ]


def adamw_cases() -> list[Case]:
    a = {"lr": 0.01, "eps": 1e-3, "weight_decay": 0.1}
    cosine = COSINE
    return [
        Case(id="adamw_default", spec=uo.AdamW(**a)),
        Case(id="adamw_decay_not_times_lr",
             spec=uo.AdamW(**{**a, "weight_decay": 0.005}, decay_times_lr=False)),
        Case(id="adamw_in_update", spec=uo.AdamW(**a, decay_form="in_update")),
        Case(id="adamw_no_decay_names", spec=uo.AdamW(**a, no_decay_names=("*beta*", "*gamma*"))),
        Case(id="adamw_amsgrad", spec=uo.AdamW(**a, amsgrad=True)),
        Case(id="adamw_maximize", spec=uo.AdamW(**a, maximize=True)),
        Case(id="adamw_eps_hat", spec=uo.AdamW(**a, eps_placement="eps_hat")),
        Case(id="adamw_no_bias_correction", spec=uo.AdamW(**a, bias_correction=False)),
        Case(id="adamw_cosine", spec=uo.AdamW(**{**a, "lr": cosine})),
        dense(id="preset_torch_adamw",
             spec=uo.preset("torch.optim.AdamW", lr=0.01, eps=1e-3, weight_decay=0.1)),
        dense(id="preset_paddle_adamw",
             spec=uo.preset("paddle.optimizer.AdamW", learning_rate=0.01, epsilon=1e-3,
                            weight_decay=0.1)),
        dense(id="preset_paddle_adamw_amsgrad",
             spec=uo.preset("paddle.optimizer.AdamW", learning_rate=0.01, epsilon=1e-3,
                            weight_decay=0.1, amsgrad=True)),
        dense(id="preset_mindspore_nn_adamweightdecay",
             spec=uo.preset("mindspore.nn.AdamWeightDecay", learning_rate=0.01, eps=1e-3,
                            weight_decay=0.1),
             description="no bias correction, decay inside the update, beta/gamma not decayed"),
        dense(id="preset_mindspore_experimental_adamw",
             spec=uo.preset("mindspore.experimental.optim.AdamW", lr=0.01, eps=1e-3,
                            weight_decay=0.1, maximize=True)),
    ]


def _nadam() -> list[Case]:
    a = {"lr": 0.01, "eps": 1e-3}
    return [
        Case(id="nadam_default", spec=uo.NAdam(**a)),
        Case(id="nadam_weight_decay", spec=uo.NAdam(**a, weight_decay=0.1)),
        Case(id="nadam_decoupled", spec=uo.NAdam(**a, weight_decay=0.1,
                                                 decoupled_weight_decay=True)),
        Case(id="nadam_momentum_decay", spec=uo.NAdam(**a, momentum_decay=0.05)),
        Case(id="nadam_maximize_cosine", spec=uo.NAdam(lr=COSINE, eps=1e-3, maximize=True)),
        Case(id="nadam_no_decay_names",
             spec=uo.NAdam(**a, weight_decay=0.1, no_decay_names=("*beta*", "*gamma*"))),
        dense(id="preset_torch_nadam", spec=uo.preset(
            "torch.optim.NAdam", lr=0.01, eps=1e-3, weight_decay=0.1,
            decoupled_weight_decay=True)),
        dense(id="preset_paddle_nadam", spec=uo.preset(
            "paddle.optimizer.NAdam", learning_rate=0.01, epsilon=1e-3, weight_decay=0.01)),
        dense(id="preset_mindspore_experimental_nadam", spec=uo.preset(
            "mindspore.experimental.optim.NAdam", lr=0.01, eps=1e-3, weight_decay=0.01)),
    ]


def _radam() -> list[Case]:
    a = {"lr": 0.01, "eps": 1e-3, "betas": (0.9, 0.99)}
    return [
        Case(id="radam_default", spec=uo.RAdam(**a)),
        Case(id="radam_weight_decay", spec=uo.RAdam(**a, weight_decay=0.1)),
        Case(id="radam_decoupled", spec=uo.RAdam(**a, weight_decay=0.1,
                                                 decoupled_weight_decay=True)),
        Case(id="radam_large_eps", spec=uo.RAdam(lr=0.01, eps=0.05, betas=(0.9, 0.99)),
             description="eps large enough to show on the rectified steps"),
        Case(id="radam_threshold_8", spec=uo.RAdam(**a, rectify_threshold=8.0),
             description="rectification starts later than torch's rho_t > 5"),
        Case(id="radam_maximize_cosine", spec=uo.RAdam(lr=COSINE, eps=1e-3, maximize=True)),
        Case(id="radam_no_unrectified_step", spec=uo.RAdam(**a, weight_decay=0.1,
                                                           unrectified_step="none"),
             description="no step and no L2 decay before rectification "
                         "(pytorch_optimizer.RAdam's default)"),
        dense(id="preset_torch_radam", spec=uo.preset("torch.optim.RAdam", lr=0.01, eps=1e-3,
                                                      weight_decay=0.01)),
        dense(id="preset_paddle_radam", spec=uo.preset(
            "paddle.optimizer.RAdam", learning_rate=0.01, epsilon=1e-3, beta2=0.99)),
        dense(id="preset_mindspore_experimental_radam", spec=uo.preset(
            "mindspore.experimental.optim.RAdam", lr=0.01, eps=1e-3, weight_decay=0.01)),
    ]


def _adamax() -> list[Case]:
    a = {"lr": 0.01, "eps": 0.05}
    return [
        Case(id="adamax_on_grad", spec=uo.Adamax(**a)),
        Case(id="adamax_on_decayed_norm", spec=uo.Adamax(**a, eps_placement="on_decayed_norm")),
        Case(id="adamax_outside_max", spec=uo.Adamax(**a, eps_placement="outside_max")),
        Case(id="adamax_weight_decay", spec=uo.Adamax(**a, weight_decay=0.1)),
        Case(id="adamax_maximize_cosine", spec=uo.Adamax(lr=COSINE, eps=0.05, maximize=True)),
        dense(id="preset_torch_adamax", spec=uo.preset("torch.optim.Adamax", lr=0.01, eps=0.05,
                                                       weight_decay=0.01)),
        dense(id="preset_paddle_adamax", spec=uo.preset(
            "paddle.optimizer.Adamax", learning_rate=0.01, epsilon=0.05, weight_decay=0.01)),
        dense(id="preset_mindspore_nn_adamax", spec=uo.preset(
            "mindspore.nn.AdaMax", learning_rate=0.01, eps=0.05, weight_decay=0.1)),
        dense(id="preset_mindspore_experimental_adamax", spec=uo.preset(
            "mindspore.experimental.optim.Adamax", lr=0.01, eps=0.05, maximize=True)),
    ]


def cases() -> list[Case]:
    return adam_cases() + adamw_cases() + _nadam() + _radam() + _adamax()
