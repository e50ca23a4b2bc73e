"""Conformance cases of sgd: every knob, schedule step semantics, the presets."""

from __future__ import annotations

import unified_opt as uo
from unified_opt.schedules import Cosine, Exponential, LinearWarmup, Step

from .case import Case, dense


def cases() -> list[Case]:
    cosine = Cosine(lr=0.1, T_max=50, eta_min=0.005)
    m = {"lr": 0.05, "momentum": 0.9}
    return [
        Case(id="sgd_plain", spec=uo.SGD(lr=0.05)),
        Case(id="sgd_momentum", spec=uo.SGD(**m)),
        Case(id="sgd_nesterov", spec=uo.SGD(**m, nesterov=True)),
        Case(id="sgd_dampening_grad_init",
             spec=uo.SGD(**m, dampening=0.5, momentum_init="grad"),
             description="torch/MindSpore first step: buffer = gradient, no dampening"),
        Case(id="sgd_dampening_zeros_init",
             spec=uo.SGD(**m, dampening=0.5, momentum_init="zeros"),
             description="buffer starts at 0, so dampening acts on the first step"),
        Case(id="sgd_zeros_init_no_dampening", spec=uo.SGD(**m, momentum_init="zeros"),
             description="with dampening 0 both first-step rules coincide"),
        Case(id="sgd_lr_inside_cosine",
             spec=uo.SGD(lr=cosine, momentum=0.9, lr_placement="inside"),
             description="lr inside the buffer; the lr changes every step"),
        Case(id="sgd_lr_inside_nesterov",
             spec=uo.SGD(lr=cosine, momentum=0.9, nesterov=True, lr_placement="inside")),
        Case(id="sgd_cosine", spec=uo.SGD(lr=cosine, momentum=0.9)),
        Case(id="sgd_step_schedule",
             spec=uo.SGD(lr=Step(lr=0.1, step_size=10, gamma=0.5), momentum=0.9)),
        Case(id="sgd_warmup_exponential",
             spec=uo.SGD(lr=LinearWarmup(after=Exponential(lr=0.1, gamma=0.97),
                                         warmup_steps=8, start_lr=0.01))),
        Case(id="sgd_weight_decay", spec=uo.SGD(**m, weight_decay=0.05)),
        Case(id="sgd_maximize", spec=uo.SGD(**m, maximize=True)),
        Case(id="sgd_no_decay_names",
             spec=uo.SGD(**m, weight_decay=0.1, no_decay_names=("*beta*", "*gamma*"))),
        dense(id="preset_torch_sgd",
             spec=uo.preset("torch.optim.SGD", lr=0.05, momentum=0.9, dampening=0.2,
                            weight_decay=0.01)),
        dense(id="preset_paddle_momentum",
             spec=uo.preset("paddle.optimizer.Momentum", learning_rate=0.05, momentum=0.9,
                            weight_decay=0.01)),
        dense(id="preset_paddle_momentum_nesterov",
             spec=uo.preset("paddle.optimizer.Momentum", learning_rate=0.05, momentum=0.9,
                            use_nesterov=True)),
        dense(id="preset_paddle_sgd",
             spec=uo.preset("paddle.optimizer.SGD", learning_rate=0.05, weight_decay=0.01)),
        dense(id="preset_mindspore_nn_momentum",
             spec=uo.preset("mindspore.nn.Momentum", learning_rate=0.05, momentum=0.9,
                            weight_decay=0.05)),
        dense(id="preset_mindspore_nn_momentum_nesterov",
             spec=uo.preset("mindspore.nn.Momentum", learning_rate=0.05, momentum=0.9,
                            use_nesterov=True)),
        dense(id="preset_mindspore_nn_sgd",
             spec=uo.preset("mindspore.nn.SGD", learning_rate=0.05, momentum=0.9,
                            dampening=0.3, weight_decay=0.05, nesterov=False)),
        dense(id="preset_mindspore_nn_sgd_nesterov",
             spec=uo.preset("mindspore.nn.SGD", learning_rate=0.05, momentum=0.9,
                            nesterov=True)),
        dense(id="preset_mindspore_experimental_sgd",
             spec=uo.preset("mindspore.experimental.optim.SGD", lr=0.05, momentum=0.9,
                            dampening=0.3, weight_decay=0.01, maximize=True)),
    ]
