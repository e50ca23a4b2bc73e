"""Conformance cases of the communication-compressing optimizer: dgc_momentum, at world
size 1 (the exchange is the identity) and distributed: ``workers=N`` ranks launched in
the framework's process group (torchrun / gloo, paddle.distributed.launch, msrun),
exchanging the compressed gradients over its collectives, through the dense warm-up,
the sparsity ramp and its end, every rank against the reference over N simulated
workers and the ranks against each other bit for bit (:mod:`..distributed`)."""

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
            "paddle.distributed.fleet.meta_optimizers.DGCMomentumOptimizer", learning_rate=0.05,
            momentum=0.9, rampup_begin_step=3, sparsity=[0.75, 0.9], rampup_step=10)),
    ]


#: Paddle's ramp to the default 0.999, reached 5 steps before the end of the run
RAMP = (0.75, 0.9375, 0.984375, 0.996, 0.999)


def _distributed() -> list[Case]:
    a = {"lr": 0.05, "momentum": 0.9, "rampup_begin_step": 5, "rampup_step": 40,
         "sparsity": RAMP, "min_numel": 1, "weight_decay": 0.01}
    return [
        Case(id="dgc_2_workers", spec=uo.DGCMomentum(**a), workers=2,
             description="2 ranks in the framework's process group"),
        # 4 processes of MindSpore's own path on 2 cores take 97 s (2: 41 s): torch and
        # Paddle run the 4 ranks, MindSpore the 2
        Case(id="dgc_4_workers_nesterov_local_clip",
             spec=uo.DGCMomentum(**a, use_nesterov=True, local_grad_clip_norm=2.0,
                                 num_trainers=4), workers=4, backends=("torch", "paddle"),
             description="4 ranks, Nesterov, the local clip scaled by num_trainers"),
    ]


def cases() -> list[Case]:
    return _dgc() + _distributed()
