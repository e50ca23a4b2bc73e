"""Conformance cases of the communication-compressing optimizer: dgc_momentum. DGC runs
at world size 1 here (the exchange is the identity); its multi-worker behaviour is
tested against the simulated workers of the reference (tests/test_communication.py)."""

from __future__ import annotations

import unified_opt as uo
from unified_opt.schedules import Cosine

from .case import Case, dense

COSINE = Cosine(lr=0.02, T_max=50, eta_min=0.001)


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
    return _dgc()
