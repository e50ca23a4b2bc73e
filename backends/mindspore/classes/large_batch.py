"""MindSpore's large-batch optimizers as descriptors: ``mindspore.nn.Lamb`` and
``mindspore.nn.LARS`` (MindSpore 2.10). Neither has a CPU kernel: the rows follow the
documented formula (and the GPU kernels), and build only on GPU or Ascend."""

from __future__ import annotations

from unified_opt.algorithms import LARS, SGD, Lamb
from unified_opt.native import Lowering, when
from unified_opt.presets._registry import unsupported
from unified_opt.spec import Spec

from .descriptor import (
    NN_NO_DECAY,
    POSITIVE_BETAS,
    MindSporeClass,
    nn_adam_arguments,
    nn_decay,
    nn_lr,
)


def nn_lamb(learning_rate, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.0):
    # The documented formula (and the GPU kernel): the trust ratio on every parameter,
    # also those the beta/gamma filter keeps from decaying. MindSpore 2.10 has no CPU
    # kernel for it.
    q = "mindspore.nn.Lamb"
    return Lamb(lr=nn_lr(q, "learning_rate", learning_rate), betas=(beta1, beta2),
                eps=eps, bias_correction="moments", always_adapt=True,
                **nn_decay(q, weight_decay))

#: mindspore.nn.LARS's default lars_filter: no LARS (and no decay) for names containing
#: "LayerNorm" or "bias"
LARS_EXCLUDED = ("*LayerNorm*", "*bias*")


def nn_lars(optimizer, epsilon=1e-05, coefficient=0.001, use_clip=False, lars_filter=None):
    """``optimizer`` is the wrapped ``nn`` optimizer as a spec: ``uo.preset(
    "mindspore.nn.Momentum", ...)`` or ``uo.preset("mindspore.nn.SGD", ...)``.
    ``lars_filter=None`` is MindSpore's default filter (names without ``LayerNorm`` and
    ``bias``); a callable cannot be serialised: give ``exclude_names`` instead."""
    q = "mindspore.nn.LARS"
    if not isinstance(optimizer, SGD):
        kind = optimizer.name if isinstance(optimizer, Spec) else type(optimizer).__name__
        raise unsupported(q, "optimizer", kind,
                          "LARS wraps a momentum optimizer here: pass the spec of the inner "
                          "optimizer, uo.preset('mindspore.nn.Momentum', ...) or "
                          "uo.preset('mindspore.nn.SGD', ...)")
    if optimizer.loss_scale != 1.0:
        raise unsupported(q, "optimizer", f"a spec with loss_scale={optimizer.loss_scale!r}",
                          "LARS folds the loss scale into its trust ratio (the inner "
                          "optimizer's reciprocal scale is reset to 1)")
    if lars_filter is not None:
        raise unsupported(q, "lars_filter", lars_filter,
                          "a callable cannot be part of a serialisable spec; give the names "
                          "it leaves out as uo.preset('mindspore.nn.LARS', ...).replace("
                          "exclude_names=(...))")
    # LARSUpdate on the gradient, then the inner optimizer with its decay switched off
    # (mindspore/nn/optim/lars.py): excluded names get neither ratio nor decay.
    return LARS(lr=optimizer.lr, momentum=optimizer.momentum, dampening=optimizer.dampening,
                nesterov=optimizer.nesterov, lr_placement=optimizer.lr_placement,
                momentum_init=optimizer.momentum_init, weight_decay=optimizer.weight_decay,
                no_decay_names=optimizer.no_decay_names, trust_coefficient=coefficient,
                eps=epsilon, clip=use_clip, always_adapt=True, zero_norm_rule="none",
                exclude_names=LARS_EXCLUDED)


def nn_momentum_example():
    """The wrapped optimizer of nn.LARS's example: nn.Momentum(learning_rate=0.01,
    momentum=0.9)."""
    from .nn import nn_momentum

    return nn_momentum(learning_rate=0.01, momentum=0.9)


def _lars_arguments(s):
    """nn.LARS's arguments: the wrapped nn.Momentum as its spec (the preset's form), the
    LARS coefficients; ``exclude_names`` becomes its ``lars_filter`` at build time."""
    from .nn import nn_momentum

    inner = nn_momentum(learning_rate=s.lr, momentum=s.momentum,
                        weight_decay=s.weight_decay)
    return {"optimizer": inner, "epsilon": float(s.eps),
            "coefficient": float(s.trust_coefficient), "use_clip": s.clip}


_UNMEASURED = ("GPU", "Ascend")

CLASSES = (
    MindSporeClass(
        name="mindspore.nn.Lamb", from_native=nn_lamb,
        lowerings=(Lowering(
            "lamb",
            (when("bias_correction='moments' (nn.Lamb corrects both moments)",
                  lambda s: s.bias_correction == "moments"),
             when("always_adapt=True (nn.Lamb applies the trust ratio to every parameter)",
                  lambda s: s.always_adapt),
             when("weight_norm_clamp=None and trust_eps=0 (nn.Lamb's ratio is ||p||/||r||)",
                  lambda s: s.weight_norm_clamp is None and s.trust_eps == 0.0),
             POSITIVE_BETAS),
            nn_adam_arguments),),
        state={"exp_avg": "moments1", "exp_avg_sq": "moments2"},
        devices=_UNMEASURED, no_cpu_kernel=True),
    MindSporeClass(
        name="mindspore.nn.LARS", from_native=nn_lars, lr_keyword="",
        example=lambda: {"optimizer": nn_momentum_example()},
        lowerings=(Lowering(
            "lars",
            (when("lr_placement='outside' and momentum_init='zeros' and dampening=0 (LARS "
                  "wraps nn.Momentum here)", lambda s: s.lr_placement == "outside" and
                  s.momentum_init == "zeros" and s.dampening == 0.0 and not s.nesterov),
             when("always_adapt=True and zero_norm_rule='none' (LARSUpdate scales every "
                  "gradient by the raw ratio)",
                  lambda s: s.always_adapt and s.zero_norm_rule == "none"),
             when("exclude_1d=False", lambda s: not s.exclude_1d),
             when("no_decay_names=('*beta*', '*gamma*') or weight_decay=0 (the wrapped "
                  "nn.Momentum, given a flat list, spares exactly those names; LARS "
                  "applies its decay flags)",
                  lambda s: s.weight_decay == 0.0 or s.no_decay_names == NN_NO_DECAY)),
            _lars_arguments),),
        state={"momentum_buffer": "moments"},
        flat_only="LARS wraps one nn.Momentum", devices=_UNMEASURED, no_cpu_kernel=True,
        wraps_optimizer=True),
)
