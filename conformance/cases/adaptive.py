"""Conformance cases of the per-coordinate adaptive rates: adagrad, adadelta, rmsprop.
Every knob (eps large enough that its placement matters, a changing lr where the lr
placement matters) and every framework's own class through its preset."""

from __future__ import annotations

import unified_opt as uo
from unified_opt.schedules import Cosine

from .case import Case, dense

COSINE = Cosine(lr=0.02, T_max=50, eta_min=0.001)


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


def cases() -> list[Case]:
    return _adagrad() + _adadelta() + _rmsprop()
