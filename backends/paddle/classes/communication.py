"""Paddle's communication-compressing optimizer as descriptors: DGC momentum, in the
fleet API (Paddle 3.3's ``paddle.distributed.fleet.meta_optimizers``, parameters given
as ``parameter_list``) and the seed document's ``paddle.fluid`` signature (Paddle 1.x).
Presets only: ``DGCMomentumOptimizer`` runs only on GPU inside fleet's collective mode."""

from __future__ import annotations

from unified_opt.algorithms import DGCMomentum
from unified_opt.presets._registry import require_float

from .descriptor import PaddleClass, clip_norm, l2_coefficient


def _dgc(q, learning_rate, momentum, rampup_begin_step, rampup_step, sparsity, use_nesterov,
         num_trainers, regularization, local_clip, dense_clip):
    if isinstance(sparsity, list):
        sparsity = tuple(sparsity)
    return DGCMomentum(lr=require_float(q, "learning_rate", learning_rate), momentum=momentum,
                       rampup_begin_step=rampup_begin_step, rampup_step=rampup_step,
                       sparsity=sparsity, use_nesterov=use_nesterov,
                       local_grad_clip_norm=local_clip, num_trainers=num_trainers,
                       dense_clip_norm=dense_clip, weight_decay=l2_coefficient(q, regularization),
                       min_numel=16384)


def dgc_momentum(learning_rate, momentum, rampup_begin_step, rampup_step=1, sparsity=[0.999],
                 use_nesterov=False, num_trainers=None, regularization=None, grad_clip=None,
                 name=None):
    # paddle/fluid/optimizer.py (DGCMomentumOptimizer._clip_by_norm): grad_clip=
    # ClipGradByNorm(c) clips the compressed parameters locally with c * num_trainers**-0.5
    # and the others with c on the averaged gradient.
    q = "paddle.distributed.fleet.meta_optimizers.DGCMomentumOptimizer"
    clip = clip_norm(q, grad_clip)
    return _dgc(q, learning_rate, momentum, rampup_begin_step, rampup_step, sparsity,
                use_nesterov, num_trainers, regularization, clip, clip)


def fluid_dgc_momentum(learning_rate, momentum, rampup_begin_step, rampup_step=1,
                       sparsity=[0.999], use_nesterov=False, local_grad_clip_norm=None,
                       num_trainers=None, regularization=None, grad_clip=None, name=None):
    # The seed document's (Paddle 1.x) signature: the local clip norm is its own argument.
    q = "paddle.fluid.optimizer.DGCMomentumOptimizer"
    return _dgc(q, learning_rate, momentum, rampup_begin_step, rampup_step, sparsity,
                use_nesterov, num_trainers, regularization, local_grad_clip_norm,
                clip_norm(q, grad_clip))


_GPU_ONLY = ("DGCMomentumOptimizer runs only on GPU inside fleet's collective mode; the "
             "Paddle backend runs the spec's own DGC update")

CLASSES = (
    PaddleClass(name="paddle.distributed.fleet.meta_optimizers.DGCMomentumOptimizer",
                from_native=dgc_momentum, not_lowered=_GPU_ONLY,
                example=lambda: {"rampup_begin_step": 0}, parameters_keyword="parameter_list"),
    PaddleClass(name="paddle.fluid.optimizer.DGCMomentumOptimizer",
                from_native=fluid_dgc_momentum, not_lowered=_GPU_ONLY,
                example=lambda: {"rampup_begin_step": 0}),
)
