"""Conformance cases of averaged SGD (``asgd``) beyond its record's sketches: each
framework's own class through its preset, on the parameters of a network being ported,
with knobs large enough that the step-size decay and the average show."""

from __future__ import annotations

import unified_opt as uo

from .case import Case, dense


def cases() -> list[Case]:
    return [
        dense(id="preset_torch_asgd", spec=uo.preset(
            "torch.optim.ASGD", lr=0.05, lambd=0.5, alpha=0.6, t0=5.0, weight_decay=0.1)),
        dense(id="preset_mindspore_nn_asgd", spec=uo.preset(
            "mindspore.nn.ASGD", learning_rate=0.05, lambd=0.5, t0=5.0, weight_decay=0.1)),
        dense(id="preset_mindspore_experimental_asgd", spec=uo.preset(
            "mindspore.experimental.optim.ASGD", lr=0.05, lambd=0.3, alpha=0.6, t0=5.0,
            maximize=True)),
    ]
