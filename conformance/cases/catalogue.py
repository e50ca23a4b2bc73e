"""Conformance cases of nadam, radam, adamax, adagrad, adadelta, rmsprop, rprop, lion:
every knob (eps large enough that its placement matters, a changing lr where the lr
placement matters) and every framework's own class through its preset."""

from __future__ import annotations

import unified_opt as uo
from unified_opt.schedules import Cosine

from .case import Case, dense

COSINE = Cosine(lr=0.02, T_max=50, eta_min=0.001)


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
        Case(id="radam_threshold_8", spec=uo.RAdam(**a, rectify_threshold=8.0),
             description="rectification starts later than torch's rho_t > 5"),
        Case(id="radam_maximize_cosine", spec=uo.RAdam(lr=COSINE, eps=1e-3, maximize=True)),
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


def _adagrad() -> list[Case]:
    return [
        Case(id="adagrad_default", spec=uo.Adagrad(lr=0.05)),
        Case(id="adagrad_lr_decay", spec=uo.Adagrad(lr=0.05, lr_decay=0.05)),
        Case(id="adagrad_initial_accumulator",
             spec=uo.Adagrad(lr=0.05, initial_accumulator_value=0.5, eps=1e-2)),
        Case(id="adagrad_no_eps", spec=uo.Adagrad(lr=0.05, eps=0.0,
                                                  initial_accumulator_value=0.1)),
        Case(id="adagrad_weight_decay_maximize",
             spec=uo.Adagrad(lr=0.05, weight_decay=0.1, maximize=True)),
        Case(id="adagrad_cosine", spec=uo.Adagrad(lr=COSINE)),
        dense(id="preset_torch_adagrad", spec=uo.preset(
            "torch.optim.Adagrad", lr=0.05, lr_decay=0.01, weight_decay=0.01,
            initial_accumulator_value=0.1)),
        dense(id="preset_paddle_adagrad", spec=uo.preset(
            "paddle.optimizer.Adagrad", learning_rate=0.05, epsilon=1e-2,
            initial_accumulator_value=0.1)),
        dense(id="preset_mindspore_nn_adagrad", spec=uo.preset(
            "mindspore.nn.Adagrad", learning_rate=0.05, weight_decay=0.1)),
        dense(id="preset_mindspore_experimental_adagrad", spec=uo.preset(
            "mindspore.experimental.optim.Adagrad", lr=0.05, lr_decay=0.01)),
    ]


def _adadelta() -> list[Case]:
    return [
        Case(id="adadelta_default", spec=uo.Adadelta(lr=1.0, eps=1e-3)),
        Case(id="adadelta_weight_decay", spec=uo.Adadelta(lr=1.0, eps=1e-3, weight_decay=0.1)),
        Case(id="adadelta_maximize_cosine",
             spec=uo.Adadelta(lr=Cosine(lr=1.0, T_max=50), rho=0.95, maximize=True)),
        dense(id="preset_torch_adadelta", spec=uo.preset("torch.optim.Adadelta", eps=1e-3,
                                                         weight_decay=0.01)),
        dense(id="preset_paddle_adadelta", spec=uo.preset(
            "paddle.optimizer.Adadelta", learning_rate=1.0, epsilon=1e-3)),
        dense(id="preset_mindspore_nn_adadelta", spec=uo.preset(
            "mindspore.nn.Adadelta", epsilon=1e-3, weight_decay=0.1)),
        dense(id="preset_mindspore_experimental_adadelta", spec=uo.preset(
            "mindspore.experimental.optim.Adadelta", eps=1e-3, maximize=True)),
    ]


def _rmsprop() -> list[Case]:
    a = {"lr": 0.01, "eps": 1e-3}
    return [
        Case(id="rmsprop_default", spec=uo.RMSprop(**a)),
        Case(id="rmsprop_centered_momentum", spec=uo.RMSprop(**a, centered=True, momentum=0.9)),
        Case(id="rmsprop_eps_inside", spec=uo.RMSprop(**a, eps_placement="inside")),
        Case(id="rmsprop_lr_inside_cosine",
             spec=uo.RMSprop(lr=COSINE, eps=1e-3, momentum=0.9, lr_placement="inside")),
        Case(id="rmsprop_initial_square_avg_1",
             spec=uo.RMSprop(**a, initial_square_avg=1.0)),
        Case(id="rmsprop_weight_decay_maximize",
             spec=uo.RMSprop(**a, weight_decay=0.1, maximize=True)),
        dense(id="preset_torch_rmsprop", spec=uo.preset(
            "torch.optim.RMSprop", lr=0.01, eps=1e-3, momentum=0.9, centered=True,
            weight_decay=0.01)),
        dense(id="preset_paddle_rmsprop", spec=uo.preset(
            "paddle.optimizer.RMSProp", learning_rate=0.01, epsilon=1e-3, momentum=0.9)),
        dense(id="preset_paddle_rmsprop_centered", spec=uo.preset(
            "paddle.optimizer.RMSProp", learning_rate=0.01, epsilon=1e-3, centered=True)),
        dense(id="preset_mindspore_nn_rmsprop", spec=uo.preset(
            "mindspore.nn.RMSProp", learning_rate=0.01, epsilon=1e-3, momentum=0.9,
            centered=True, weight_decay=0.01)),
        dense(id="preset_mindspore_experimental_rmsprop", spec=uo.preset(
            "mindspore.experimental.optim.RMSprop", lr=0.01, eps=1e-3, momentum=0.9)),
    ]


def _rprop() -> list[Case]:
    return [
        Case(id="rprop_default", spec=uo.Rprop(lr=0.01)),
        Case(id="rprop_narrow_step_sizes",
             spec=uo.Rprop(lr=0.01, etas=(0.3, 1.5), step_sizes=(1e-3, 0.02))),
        Case(id="rprop_weight_decay_maximize",
             spec=uo.Rprop(lr=0.01, weight_decay=0.1, maximize=True)),
        dense(id="preset_torch_rprop", spec=uo.preset("torch.optim.Rprop", lr=0.01)),
        dense(id="preset_paddle_rprop", spec=uo.preset(
            "paddle.optimizer.Rprop", learning_rate=0.01, learning_rate_range=(1e-4, 0.5))),
        dense(id="preset_mindspore_nn_rprop", spec=uo.preset(
            "mindspore.nn.Rprop", learning_rate=0.01, weight_decay=0.05)),
        dense(id="preset_mindspore_experimental_rprop", spec=uo.preset(
            "mindspore.experimental.optim.Rprop", lr=0.01, maximize=True)),
    ]


def _lion() -> list[Case]:
    return [
        Case(id="lion_default", spec=uo.Lion(lr=1e-3)),
        Case(id="lion_weight_decay", spec=uo.Lion(lr=1e-3, weight_decay=0.5)),
        Case(id="lion_maximize_cosine", spec=uo.Lion(lr=Cosine(lr=1e-3, T_max=50),
                                                     betas=(0.95, 0.98), maximize=True)),
    ]


def cases() -> list[Case]:
    return (_nadam() + _radam() + _adamax() + _adagrad() + _adadelta() + _rmsprop()
            + _rprop() + _lion())
