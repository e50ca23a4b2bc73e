"""Conformance cases of the sign-based updates: rprop and lion, every knob and every
framework's own class through its preset."""

from __future__ import annotations

import unified_opt as uo
from unified_opt.schedules import Cosine

from .case import Case, dense


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
            "mindspore.experimental.optim.Rprop", lr=0.01, maximize=True,
            step_sizes=(1e-3, 0.02))),
    ]


def _lion() -> list[Case]:
    return [
        Case(id="lion_default", spec=uo.Lion(lr=1e-3)),
        Case(id="lion_weight_decay", spec=uo.Lion(lr=1e-3, weight_decay=0.5)),
        Case(id="lion_maximize_cosine", spec=uo.Lion(lr=Cosine(lr=1e-3, T_max=50),
                                                     betas=(0.95, 0.98), maximize=True)),
    ]


def cases() -> list[Case]:
    return _rprop() + _lion()
