"""Presets for ``paddle.optimizer`` (Paddle 3.3 signatures and defaults)."""

from __future__ import annotations

from ..algorithms import (LARS, SGD, Adadelta, Adagrad, Adam, Adamax, AdamW, DGCMomentum, Lamb,
                          NAdam, RAdam, RMSprop, Rprop)
from ..clipping import ClipByGlobalNorm, ClipByNorm, ClipByValue
from ..schedules import Schedule
from ._registry import native_preset, refuse, require_float, unsupported


def _l2_coefficient(qualified_name: str, weight_decay) -> float:
    """Paddle's ``weight_decay``: None, a float (L2Decay) or an ``L2Decay`` object."""
    if weight_decay is None:
        return 0.0
    kind = type(weight_decay).__name__
    if kind == "L2Decay":
        return float(weight_decay._coeff)
    if kind == "L1Decay":
        raise unsupported(qualified_name, "weight_decay", weight_decay,
                          "L1 regularisation has no spec knob")
    if isinstance(weight_decay, int) and not isinstance(weight_decay, bool):
        # Paddle accepts an int at construction and fails inside step() (paddle.md §12).
        raise TypeError(f"{qualified_name}: weight_decay must be a float or L2Decay, got "
                        f"the int {weight_decay!r}")
    return weight_decay


_CLIP_NAMES = {"ClipGradByGlobalNorm", "ClipGradByNorm", "ClipGradByValue",
               "GradientClipByGlobalNorm", "GradientClipByNorm", "GradientClipByValue"}


def _is_paddle(value, class_name: str) -> bool:
    """Whether ``value`` is an instance of Paddle's ``class_name`` (read from its class
    hierarchy: presets never import paddle)."""
    return any(k.__name__ == class_name and (k.__module__ or "").startswith("paddle")
               for k in type(value).__mro__)


def _grad_clip(qualified_name: str, grad_clip):
    """Paddle's ``grad_clip`` as the spec's: ``ClipGradByGlobalNorm(c)`` is
    ``ClipByGlobalNorm(c, per_group=True)`` (Paddle takes one norm per parameter group;
    ``auto_skip_clip`` and ``group_name`` give the same numbers in dygraph),
    ``ClipGradByNorm(c)`` ``ClipByNorm(c)``, ``ClipGradByValue(max, min)``
    ``ClipByValue(max, min)``; no eps (Paddle's norms have none)."""
    if grad_clip is None:
        return None
    kind = type(grad_clip).__name__
    if not _is_paddle(grad_clip, "ClipGradBase"):
        raise TypeError(f"{qualified_name}: grad_clip must be None or a paddle.nn "
                        f"ClipGradByGlobalNorm, ClipGradByNorm or ClipGradByValue, got "
                        f"{grad_clip!r} of type {kind}")
    if kind not in _CLIP_NAMES or (type(grad_clip).__module__ or "").split(".")[0] != "paddle":
        raise NotImplementedError(f"{qualified_name}: grad_clip={grad_clip!r} of type {kind} "
                                  "has no spec clip (known: paddle.nn.ClipGradByGlobalNorm, "
                                  "ClipGradByNorm, ClipGradByValue)")
    if kind.endswith("ByGlobalNorm"):
        return ClipByGlobalNorm(max_norm=float(grad_clip.clip_norm), per_group=True)
    if kind.endswith("ByNorm"):
        return ClipByNorm(max_norm=float(grad_clip.clip_norm))
    return ClipByValue(max=float(grad_clip.max), min=float(grad_clip.min))


def _lr(qualified_name: str, learning_rate):
    """Paddle's ``learning_rate``: a float, or a schedule (Paddle takes an LRScheduler;
    here its spec, ``uo.schedules.preset('paddle.optimizer.lr.<Name>', ...)``)."""
    if isinstance(learning_rate, Schedule):
        return learning_rate
    if _is_paddle(learning_rate, "LRScheduler"):
        raise TypeError(f"{qualified_name}: learning_rate={learning_rate!r} is a Paddle "
                        "LRScheduler; give its spec, uo.schedules.preset("
                        f"'paddle.optimizer.lr.{type(learning_rate).__name__}', <its "
                        "arguments>)")
    return require_float(qualified_name, "learning_rate", learning_rate)


def _no_decay_callable(qualified_name: str, argument: str, value, receives: str) -> None:
    if value is not None:
        raise NotImplementedError(
            f"{qualified_name}: {argument}={value!r} is a Python callable (Paddle calls it "
            f"with {receives}), which the preset cannot turn into a name rule; give the "
            "parameters it leaves undecayed as a group, uo.build(spec, params, groups=["
            "uo.Group(match=('*.bias', '*norm*'), exclude_from=('weight_decay',))]) "
            "(shell patterns or a callable on the parameter name), or as name parts in "
            "the spec, spec.replace(no_decay_names=('bias', 'norm'))")


@native_preset("paddle.optimizer.SGD")
def sgd(learning_rate=0.001, weight_decay=None, grad_clip=None, multi_precision=False,
        name=None):
    q = "paddle.optimizer.SGD"
    return SGD(lr=_lr(q, learning_rate), grad_clip=_grad_clip(q, grad_clip),
               weight_decay=_l2_coefficient(q, weight_decay))


@native_preset("paddle.optimizer.Momentum")
def momentum(learning_rate=0.001, momentum=0.9, use_nesterov=False, weight_decay=None,
             grad_clip=None, multi_precision=False, rescale_grad=1.0, use_multi_tensor=False,
             name=None):
    q = "paddle.optimizer.Momentum"
    if rescale_grad != 1.0:
        raise unsupported(q, "rescale_grad", rescale_grad,
                          "the CPU kernel ignores it (paddle.md §2) and no spec knob scales "
                          "the gradient; scale the loss instead")
    return SGD(lr=_lr(q, learning_rate), momentum=momentum,
               grad_clip=_grad_clip(q, grad_clip),
               nesterov=use_nesterov, weight_decay=_l2_coefficient(q, weight_decay),
               momentum_init="zeros")


@native_preset("paddle.optimizer.Adam")
def adam(learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, weight_decay=None,
         grad_clip=None, lazy_mode=False, multi_precision=False, use_multi_tensor=False,
         amsgrad=False, name=None):
    q = "paddle.optimizer.Adam"
    # lazy_mode only changes sparse (SelectedRows) gradients; dense ones are identical.
    return Adam(lr=_lr(q, learning_rate), betas=(beta1, beta2),
                grad_clip=_grad_clip(q, grad_clip),
                eps=epsilon, weight_decay=_l2_coefficient(q, weight_decay), amsgrad=amsgrad,
                eps_placement="outside", bias_correction=True)


@native_preset("paddle.optimizer.AdamW")
def adamw(learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, weight_decay=0.01,
          use_lowprecision_moment=False, lr_ratio=None, apply_decay_param_fun=None,
          grad_clip=None, lazy_mode=False, multi_precision=False, amsgrad=False, name=None):
    q = "paddle.optimizer.AdamW"
    if use_lowprecision_moment:
        raise unsupported(q, "use_lowprecision_moment", use_lowprecision_moment,
                          "low-precision moments only exist for fp16/bf16 parameters, which "
                          "no Paddle CPU kernel takes")
    if lr_ratio is not None:
        raise unsupported(q, "lr_ratio", lr_ratio,
                          "Paddle raises NotImplementedError for it on CPU")
    _no_decay_callable(q, "apply_decay_param_fun", apply_decay_param_fun,
                       "the parameter's name; it returns True for the decayed ones")
    return AdamW(lr=_lr(q, learning_rate), betas=(beta1, beta2),
                 grad_clip=_grad_clip(q, grad_clip),
                 eps=epsilon, weight_decay=weight_decay, amsgrad=amsgrad,
                 eps_placement="outside", bias_correction=True, decay_form="before_update")


@native_preset("paddle.optimizer.Adadelta")
def adadelta(learning_rate=0.001, epsilon=1e-6, rho=0.95, weight_decay=None, grad_clip=None,
             name=None):
    q = "paddle.optimizer.Adadelta"
    return Adadelta(lr=_lr(q, learning_rate), rho=rho, eps=epsilon,
                    grad_clip=_grad_clip(q, grad_clip),
                    weight_decay=_l2_coefficient(q, weight_decay))


@native_preset("paddle.optimizer.Adagrad")
def adagrad(learning_rate, epsilon=1e-6, weight_decay=None, grad_clip=None, name=None,
            initial_accumulator_value=0.0):
    q = "paddle.optimizer.Adagrad"
    return Adagrad(lr=_lr(q, learning_rate), eps=epsilon,
                   grad_clip=_grad_clip(q, grad_clip),
                   initial_accumulator_value=initial_accumulator_value,
                   weight_decay=_l2_coefficient(q, weight_decay))


@native_preset("paddle.optimizer.Adamax")
def adamax(learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, weight_decay=None,
           grad_clip=None, name=None):
    q = "paddle.optimizer.Adamax"
    return Adamax(lr=_lr(q, learning_rate), betas=(beta1, beta2),
                  grad_clip=_grad_clip(q, grad_clip),
                  eps=epsilon, weight_decay=_l2_coefficient(q, weight_decay),
                  eps_placement="on_decayed_norm")


@native_preset("paddle.optimizer.NAdam")
def nadam(learning_rate=0.002, beta1=0.9, beta2=0.999, epsilon=1e-8, momentum_decay=0.004,
          weight_decay=None, grad_clip=None, name=None):
    q = "paddle.optimizer.NAdam"
    return NAdam(lr=_lr(q, learning_rate), betas=(beta1, beta2),
                 grad_clip=_grad_clip(q, grad_clip),
                 eps=epsilon, momentum_decay=momentum_decay,
                 weight_decay=_l2_coefficient(q, weight_decay))


@native_preset("paddle.optimizer.RAdam")
def radam(learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8, weight_decay=None,
          grad_clip=None, name=None):
    q = "paddle.optimizer.RAdam"
    return RAdam(lr=_lr(q, learning_rate), betas=(beta1, beta2),
                 grad_clip=_grad_clip(q, grad_clip),
                 eps=epsilon, weight_decay=_l2_coefficient(q, weight_decay))


@native_preset("paddle.optimizer.RMSProp")
def rmsprop(learning_rate, rho=0.95, epsilon=1e-6, momentum=0.0, centered=False,
            weight_decay=None, grad_clip=None, name=None):
    q = "paddle.optimizer.RMSProp"
    return RMSprop(lr=_lr(q, learning_rate), alpha=rho, eps=epsilon,
                   grad_clip=_grad_clip(q, grad_clip),
                   momentum=momentum, centered=centered,
                   weight_decay=_l2_coefficient(q, weight_decay), eps_placement="inside",
                   lr_placement="inside")


@native_preset("paddle.optimizer.Rprop")
def rprop(learning_rate=0.001, learning_rate_range=(1e-5, 50), etas=(0.5, 1.2), grad_clip=None,
          multi_precision=False, name=None):
    q = "paddle.optimizer.Rprop"
    lr = require_float(q, "learning_rate", learning_rate)
    spec = Rprop(lr=lr, etas=etas, step_sizes=learning_rate_range,
                 grad_clip=_grad_clip(q, grad_clip))
    low, high = spec.step_sizes
    if not low <= lr <= high:   # Paddle's own constructor check
        raise ValueError(f"{q}: learning_rate must lie in learning_rate_range "
                         f"{learning_rate_range!r}, got {lr!r}")
    return spec


refuse("paddle.optimizer.ASGD", "Paddle's ASGD is SAG (stochastic average gradient, a "
                                "table of the last batch_num gradients), which is not a "
                                "registered algorithm")


# -- the seed algorithms ---------------------------------------------------------------

@native_preset("paddle.optimizer.Lamb")
def lamb(learning_rate=0.001, lamb_weight_decay=0.01, beta1=0.9, beta2=0.999, epsilon=1e-6,
         grad_clip=None, exclude_from_weight_decay_fn=None, multi_precision=False,
         always_adapt=False, name=None):
    # The paper's Algorithm 2 (paddle.md §2): bias-corrected moments, no clamp, and no
    # trust ratio where the decay is 0 unless always_adapt.
    q = "paddle.optimizer.Lamb"
    # A decay of 0 drops the trust ratio too (unless always_adapt), in Paddle and the spec.
    _no_decay_callable(q, "exclude_from_weight_decay_fn", exclude_from_weight_decay_fn,
                       "the parameter tensor")
    return Lamb(lr=_lr(q, learning_rate), betas=(beta1, beta2),
                grad_clip=_grad_clip(q, grad_clip),
                eps=epsilon, weight_decay=lamb_weight_decay, bias_correction="moments",
                always_adapt=always_adapt)


@native_preset("paddle.incubate.optimizer.LarsMomentumOptimizer")
def lars_momentum(learning_rate, momentum, lars_coeff=0.001, lars_weight_decay=0.0005,
                  regularization=None, grad_clip=None, name=None,
                  exclude_from_weight_decay=None, epsilon=0, multi_precision=False,
                  rescale_grad=1.0):
    # paddle.md §2 (cpu/lars_momentum_kernel.cc): lr inside the velocity, no trust ratio
    # where the decay is 0 or a norm is 0.
    q = "paddle.incubate.optimizer.LarsMomentumOptimizer"
    if regularization is not None:
        raise unsupported(q, "regularization", regularization,
                          "a coupled regularizer inside the LARS gradient norm has no knob")
    if rescale_grad != 1.0:
        raise unsupported(q, "rescale_grad", rescale_grad,
                          "no spec knob scales the gradient; scale the loss instead")
    names = () if exclude_from_weight_decay is None else exclude_from_weight_decay
    return LARS(lr=_lr(q, learning_rate), momentum=momentum,
                grad_clip=_grad_clip(q, grad_clip),
                trust_coefficient=lars_coeff, weight_decay=lars_weight_decay, eps=epsilon,
                lr_placement="inside", momentum_init="zeros", always_adapt=False,
                zero_norm_rule="one_if_norm_zero", no_decay_names=names)


def _dgc(q, learning_rate, momentum, rampup_begin_step, rampup_step, sparsity, use_nesterov,
         num_trainers, regularization, local_clip, dense_clip):
    if isinstance(sparsity, list):
        sparsity = tuple(sparsity)
    return DGCMomentum(lr=require_float(q, "learning_rate", learning_rate), momentum=momentum,
                       rampup_begin_step=rampup_begin_step, rampup_step=rampup_step,
                       sparsity=sparsity, use_nesterov=use_nesterov,
                       local_grad_clip_norm=local_clip, num_trainers=num_trainers,
                       dense_clip_norm=dense_clip, weight_decay=_l2_coefficient(q, regularization),
                       min_numel=16384)


def _clip_norm(q: str, grad_clip):
    """``ClipGradByNorm(c)`` -> c (the only clip DGC takes; Paddle raises TypeError else)."""
    if grad_clip is None:
        return None
    if type(grad_clip).__name__ not in ("ClipGradByNorm", "GradientClipByNorm"):
        raise TypeError(f"{q}: grad_clip must be ClipGradByNorm, got {grad_clip!r}")
    return float(grad_clip.clip_norm)


@native_preset("paddle.distributed.fleet.DGCMomentumOptimizer")
def dgc_momentum(learning_rate, momentum, rampup_begin_step, rampup_step=1, sparsity=[0.999],
                 use_nesterov=False, num_trainers=None, regularization=None, grad_clip=None,
                 name=None):
    # paddle.md §9: grad_clip=ClipGradByNorm(c) clips the compressed parameters locally
    # with c * num_trainers**-0.5 and the others with c on the averaged gradient.
    q = "paddle.distributed.fleet.DGCMomentumOptimizer"
    clip = _clip_norm(q, grad_clip)
    return _dgc(q, learning_rate, momentum, rampup_begin_step, rampup_step, sparsity,
                use_nesterov, num_trainers, regularization, clip, clip)


@native_preset("paddle.fluid.optimizer.DGCMomentumOptimizer")
def fluid_dgc_momentum(learning_rate, momentum, rampup_begin_step, rampup_step=1,
                       sparsity=[0.999], use_nesterov=False, local_grad_clip_norm=None,
                       num_trainers=None, regularization=None, grad_clip=None, name=None):
    # The seed document's (Paddle 1.x) signature: the local clip norm is its own argument.
    q = "paddle.fluid.optimizer.DGCMomentumOptimizer"
    return _dgc(q, learning_rate, momentum, rampup_begin_step, rampup_step, sparsity,
                use_nesterov, num_trainers, regularization, local_grad_clip_norm,
                _clip_norm(q, grad_clip))
