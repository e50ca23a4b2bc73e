"""Conformance cases of the proximal algorithms, FTRL and proximal Adagrad: the
documented forms (``l1_sign='linear'``, ``shrinkage_lr='constant'``), the knobs of
TensorFlow's FTRL (``l2_shrinkage``, ``beta``, a ``lr_power`` other than -1/2) with a
schedule, and MindSpore's own classes through their presets (the forms their CPU kernels
compute), with L1 large enough that coordinates sit at exactly 0 and leave it."""

from __future__ import annotations

import unified_opt as uo
from unified_opt.algorithms.ftrl import RECORD as FTRL_RECORD
from unified_opt.algorithms.proximal_adagrad import RECORD as PROXIMAL_RECORD
from unified_opt.schedules import Cosine

from .case import Case, dense


def cases() -> list[Case]:
    documented, _, _ = FTRL_RECORD.samples
    _, constant, scheduled = PROXIMAL_RECORD.samples
    return [
        Case(id="ftrl_documented", spec=documented,
             description="the paper's sign(z) * l1, online L2"),
        Case(id="ftrl_keras_knobs_cosine", spec=uo.FTRL(
            lr=Cosine(lr=0.2, T_max=40, eta_min=0.02), lr_power=-0.7, l1=0.05,
            l2_shrinkage=0.2, beta=0.5, initial_accumulator_value=0.5, maximize=True),
             description="l2_shrinkage, beta, lr_power=-0.7, ascending, a cosine lr"),
        dense(id="preset_mindspore_nn_ftrl", spec=uo.preset(
            "mindspore.nn.FTRL", learning_rate=0.1, lr_power=-0.3, l1=0.3, l2=0.05,
            weight_decay=0.01)),
        Case(id="proximal_adagrad_constant", spec=constant,
             description="the documented shrink by the constant lr"),
        Case(id="proximal_adagrad_decay_maximize_cosine", spec=scheduled,
             description="L2 decay but on ln.gamma, ascending, a cosine lr"),
        dense(id="preset_mindspore_nn_proximal_adagrad", spec=uo.preset(
            "mindspore.nn.ProximalAdagrad", learning_rate=0.1, l1=0.05, l2=0.3,
            weight_decay=0.01)),
    ]
