"""MindSpore's memory-saving optimizers as descriptors: ``mindspore.nn.AdaFactor``
(MindSpore 2.10) and MindFormers' ``Came`` (a preset only: MindFormers does not install
beside MindSpore 2.10, so no build makes it)."""

from __future__ import annotations

from unified_opt import _validation as v
from unified_opt.algorithms import CAME, Adafactor
from unified_opt.native import Lowering, when
from unified_opt.presets._registry import unsupported
from unified_opt.schedules import Schedule

from .descriptor import (
    FLOAT32_ATTRIBUTES,
    NOT_MAXIMIZE,
    MindSporeClass,
    loss_scale_unused,
    relative_step_lr,
)


def nn_adafactor(learning_rate=None, eps=(1e-30, 1e-3), clip_threshold=1.0, decay_rate=0.8,
                 beta1=0.9, weight_decay=0.0, scale_parameter=True, relative_step=True,
                 warmup_init=False, compression=False, loss_scale=1.0):
    # The Hugging Face form (mindspore/nn/optim/ada_factor.py): eps added, first moment
    # after the lr scaling, decay with the scaled lr on every parameter.
    q = "mindspore.nn.AdaFactor"
    loss_scale_unused(q, loss_scale)
    lr = relative_step_lr(q, learning_rate, relative_step, warmup_init, schedule=(
        "nn.AdaFactor given a per-step lr skips its relative step and parameter scaling, "
        "which this preset does not follow; build uo.Adafactor(lr=<the schedule>, ...) "
        "with the fields you mean"))
    if compression:
        raise unsupported(q, "compression", compression,
                          "float16 running averages are not a spec knob")
    v.check_range(q, "decay_rate", decay_rate, low=0.0, high=1.0, low_open=True,
                  high_open=True)
    v.check_range(q, "weight_decay", weight_decay, low=0.0, high=1.0, high_open=True)
    return Adafactor(lr=lr, eps=eps, eps_mode="add", clip_threshold=clip_threshold,
                     decay_rate=decay_rate, beta2=None,
                     beta1=None if beta1 is None or beta1 == 0 else beta1,
                     weight_decay=weight_decay, decay_lr="scaled", relative_step=relative_step,
                     warmup_init=warmup_init, scale_parameter=scale_parameter)


def mindformers_came(learning_rate=None, eps=(1e-30, 1e-3, 1e-16), clip_threshold=1.0,
                     decay_rate=0.8, beta1=0.9, beta3=0.99, weight_decay=0.0,
                     scale_parameter=False, relative_step=False, warmup_init=False,
                     compression=False, loss_scale=1):
    # The documented algorithm: MindFormers' CPU fused path crashes, and its
    # relative_step and beta1=0 never move the parameters (measured on its source with
    # MindSpore 2.10); the spec does what the documentation says.
    q = "mindformers.core.Came"
    if compression:
        raise ValueError(f"{q}: Currently, came only supports compression equals False, got "
                         f"compression={compression!r}")
    if isinstance(loss_scale, bool) or not isinstance(loss_scale, int):
        raise TypeError(f"{q}: loss_scale must be an int, got {loss_scale!r}")
    loss_scale_unused(q, loss_scale)
    for name, value in (("decay_rate", decay_rate), ("beta1", beta1), ("beta3", beta3),
                        ("weight_decay", weight_decay)):
        # MindFormers' check_value_type(..., [float]): an int is a TypeError there
        v.check_range(q, name, v.check_float(q, name, value), low=0.0, high=1.0)
    eps = v.check_sequence(q, "eps", eps, 3)
    return CAME(lr=relative_step_lr(q, learning_rate, relative_step, warmup_init),
                betas=(beta1, None, beta3), eps=(eps[0], eps[2]), eps_scale=eps[1],
                decay_rate=decay_rate, clip_threshold=clip_threshold,
                weight_decay=weight_decay, scale_parameter=scale_parameter,
                relative_step=relative_step, warmup_init=warmup_init)


CLASSES = (
    MindSporeClass(
        name="mindspore.nn.AdaFactor", from_native=nn_adafactor,
        lowerings=(Lowering(
            "adafactor",
            (when("eps_mode='add' (nn.AdaFactor adds eps[0] to g^2)",
                  lambda s: s.eps_mode == "add"),
             when("eps[0] given (nn.AdaFactor takes a float, not the dtype's machine eps)",
                  lambda s: s.eps[0] is not None),
             when("beta2=None with 0 < decay_rate < 1 (nn.AdaFactor's beta2 is "
                  "1 - t^-decay_rate)",
                  lambda s: s.beta2 is None and 0.0 < s.decay_rate < 1.0),
             when("decay_lr='scaled' (nn.AdaFactor decays by weight_decay * the scaled lr)",
                  lambda s: s.decay_lr == "scaled"),
             when("weight_decay < 1 (the constructor's range)", lambda s: s.weight_decay < 1.0),
             when("lr=1e-2 with relative_step (1e-6 with warmup_init): nn.AdaFactor's fixed "
                  "caps; any constant lr without relative_step",
                  lambda s: not s.relative_step or s.lr == (1e-6 if s.warmup_init else 1e-2)),
             when("a constant lr (nn.AdaFactor skips the relative step and parameter scaling "
                  "for a per-step lr list)", lambda s: not isinstance(s.lr, Schedule)),
             NOT_MAXIMIZE),
            lambda s: {"learning_rate": None if s.relative_step else float(s.lr),
                       "eps": tuple(float(e) for e in s.eps),
                       "clip_threshold": float(s.clip_threshold),
                       "decay_rate": float(s.decay_rate),
                       "beta1": 0.0 if s.beta1 is None else float(s.beta1),
                       "weight_decay": float(s.weight_decay),
                       "scale_parameter": s.scale_parameter,
                       "relative_step": s.relative_step, "warmup_init": s.warmup_init},
            "the fused CPU kernel FusedAdaFactor; it keeps the row and column moments "
            "without the reduced axis (read back in the spec's keepdims shapes); "
            + FLOAT32_ATTRIBUTES),),
        state={"exp_avg": "exp_avg", "exp_avg_sq_row": "exp_avg_sq_row",
               "exp_avg_sq_col": "exp_avg_sq_col", "exp_avg_sq": "exp_avg_sq"},
        flat_only="nn.AdaFactor fails on group lrs and ignores group decay",
        scalar_decay=True),
    MindSporeClass(
        name="mindformers.core.Came", from_native=mindformers_came,
        example=lambda: {"learning_rate": 0.01},   # its defaults raise
        not_lowered="MindFormers does not install beside MindSpore 2.10, and its CPU fused "
                    "path crashes; the MindSpore backend runs the spec's own CAME update"),
)
