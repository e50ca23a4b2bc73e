"""The Paddle lowering table (imports no framework)."""

from __future__ import annotations

from unified_opt.clipping import ClipByGlobalNorm, ClipByNorm
from unified_opt.lowering import CONSTANT_HYPERPARAMETERS, NativeLowering, decide, when
from unified_opt.schedules import Schedule

OWN_CLASS = "unified_opt.backends.paddle.SpecOptimizer (a paddle.optimizer.Optimizer)"

_NOT_MAXIMIZE = when("maximize=False (Paddle optimizers have no maximize flag)",
                     lambda s: not s.maximize)

_ADAM_FORM = (
    when("eps_placement='outside' (Paddle's eps*sqrt(1-beta2^t) in the denominator is eps "
         "outside the bias-corrected sqrt)", lambda s: s.eps_placement == "outside"),
    when("bias_correction=True (Paddle always corrects both moments)",
         lambda s: s.bias_correction),
    when("nesterov=False (Paddle Adam has no TF-style Nesterov numerator)",
         lambda s: not s.nesterov),
    _NOT_MAXIMIZE,
)


def _coupled_decay(s):
    # None, not L2Decay(0.0): a zero L2 term still adds 0*p, which is NaN where p is inf.
    return float(s.weight_decay) if s.weight_decay != 0.0 else None


def _adam_arguments(s, weight_decay):
    return {"beta1": float(s.betas[0]), "beta2": float(s.betas[1]), "epsilon": float(s.eps),
            "weight_decay": weight_decay, "amsgrad": s.amsgrad}


# Measured on paddle 3.3.1 (tests/test_backend_paddle.py checks it): the float32 kernels
# form 1-beta from float32(beta); 1-0.999 becomes 0.00099998713.
_ADAM_NOTE = ("its float32 kernel forms 1-beta from float32(beta): with beta2=0.999 "
              "exp_avg_sq runs 1.3e-5 relative low (parameters measured within the float32 "
              "noise floor)")

_ADAM_STATE = {"exp_avg": "moment1", "exp_avg_sq": "moment2",
               "max_exp_avg_sq": "moment2_max"}

_L2_ONLY = when("decoupled_weight_decay=False (Paddle adds weight_decay to the gradient as "
                "L2; it has no decoupled form of this class)",
                lambda s: not s.decoupled_weight_decay)
_CONSTANT_LR = when("a constant lr (paddle.optimizer.Rprop takes no LRScheduler: its "
                    "constructor compares the lr with learning_rate_range)",
                    lambda s: not isinstance(s.lr, Schedule))

# Kernels that take their hyperparameters as float32 attributes (paddle.md §1): what the
# conformance floor's float32-hyperparameter reference covers.
_FLOAT32_ATTRIBUTES = "its kernel holds the hyperparameters in float32"


def _betas(s):
    return {"beta1": float(s.betas[0]), "beta2": float(s.betas[1]), "epsilon": float(s.eps)}


TABLE = (
    NativeLowering(
        "sgd", "paddle.optimizer.SGD",
        (when("momentum=0 (paddle.optimizer.SGD keeps no momentum buffer)",
              lambda s: s.momentum == 0.0),
         _NOT_MAXIMIZE),
        lambda s: {"weight_decay": _coupled_decay(s)}),
    NativeLowering(
        "sgd", "paddle.optimizer.Momentum",
        (when("momentum>0", lambda s: s.momentum > 0.0),
         when("dampening=0 (Paddle's buffer v = mu*v + g has no dampening; it starts at 0, "
              "which matches either first-step rule only without dampening)",
              lambda s: s.dampening == 0.0),
         when("lr_placement='outside' (Paddle keeps the lr out of the velocity)",
              lambda s: s.lr_placement == "outside"),
         _NOT_MAXIMIZE),
        lambda s: {"momentum": float(s.momentum), "use_nesterov": s.nesterov,
                   "weight_decay": _coupled_decay(s)},
        {"momentum_buffer": "velocity"}),
    NativeLowering(
        "adam", "paddle.optimizer.Adam", _ADAM_FORM,
        lambda s: _adam_arguments(s, _coupled_decay(s)), _ADAM_STATE, _ADAM_NOTE),
    NativeLowering(
        "adamw", "paddle.optimizer.AdamW",
        _ADAM_FORM + (
            when("decay_form='before_update' (Paddle multiplies p by 1 - lr*wd first)",
                 lambda s: s.decay_form == "before_update"),
            when("decay_times_lr=True (Paddle scales the decay by the lr)",
                 lambda s: s.decay_times_lr)),
        lambda s: _adam_arguments(s, float(s.weight_decay)), _ADAM_STATE,
        "no_decay_names become apply_decay_param_fun; " + _ADAM_NOTE),

    NativeLowering(
        "nadam", "paddle.optimizer.NAdam", (_L2_ONLY, _NOT_MAXIMIZE),
        lambda s: {**_betas(s), "momentum_decay": float(s.momentum_decay),
                   "weight_decay": _coupled_decay(s)},
        {"exp_avg": "moment1", "exp_avg_sq": "moment2", "mu_product": "mu_product"},
        "Paddle keeps mu_product parameter-shaped, every element the spec's 0-d value; "
        + _FLOAT32_ATTRIBUTES),
    NativeLowering(
        "radam", "paddle.optimizer.RAdam",
        (when("rectify_threshold=5 (Paddle rectifies when rho_t > 5)",
              lambda s: s.rectify_threshold == 5.0),
         _L2_ONLY, _NOT_MAXIMIZE),
        lambda s: {**_betas(s), "weight_decay": _coupled_decay(s)},
        {"exp_avg": "moment1", "exp_avg_sq": "moment2"}, _FLOAT32_ATTRIBUTES),
    NativeLowering(
        "adamax", "paddle.optimizer.Adamax",
        (when("eps_placement='on_decayed_norm' (Paddle takes max(|g|, beta2*u + eps))",
              lambda s: s.eps_placement == "on_decayed_norm"),
         _NOT_MAXIMIZE),
        lambda s: {**_betas(s), "weight_decay": _coupled_decay(s)},
        {"exp_avg": "moment", "exp_inf": "inf_norm"}, _FLOAT32_ATTRIBUTES),
    NativeLowering(
        "adagrad", "paddle.optimizer.Adagrad",
        (when("lr_decay=0 (paddle.optimizer.Adagrad has no lr_decay)",
              lambda s: s.lr_decay == 0.0),
         _NOT_MAXIMIZE),
        lambda s: {"epsilon": float(s.eps),
                   "initial_accumulator_value": float(s.initial_accumulator_value),
                   "weight_decay": _coupled_decay(s)},
        {"sum": "moment"}),
    NativeLowering(
        "adadelta", "paddle.optimizer.Adadelta", (_NOT_MAXIMIZE,),
        lambda s: {"rho": float(s.rho), "epsilon": float(s.eps),
                   "weight_decay": _coupled_decay(s)},
        {"square_avg": "_avg_squared_grad", "acc_delta": "_avg_squared_update"},
        _FLOAT32_ATTRIBUTES),
    NativeLowering(
        "rmsprop", "paddle.optimizer.RMSProp",
        (when("eps_placement='inside' (Paddle divides by sqrt(mean_square + eps))",
              lambda s: s.eps_placement == "inside"),
         when("lr_placement='inside' or momentum=0 (Paddle puts the lr into the momentum "
              "buffer)", lambda s: s.lr_placement == "inside" or s.momentum == 0.0),
         when("initial_square_avg=0 (Paddle starts mean_square at 0)",
              lambda s: s.initial_square_avg == 0.0),
         _NOT_MAXIMIZE),
        lambda s: {"rho": float(s.alpha), "epsilon": float(s.eps),
                   "momentum": float(s.momentum), "centered": s.centered,
                   "weight_decay": _coupled_decay(s)},
        {"square_avg": "mean_square", "momentum_buffer": "momentum", "grad_avg": "mean_grad"},
        _FLOAT32_ATTRIBUTES),
    NativeLowering(
        "rprop", "paddle.optimizer.Rprop",
        (when("weight_decay=0 (paddle.optimizer.Rprop has no weight decay)",
              lambda s: s.weight_decay == 0.0),
         _NOT_MAXIMIZE, _CONSTANT_LR,
         when("0 < step_sizes[0] <= lr <= step_sizes[1] (Paddle's constructor requires the "
              "lr inside learning_rate_range, with a positive minimum)",
              lambda s: not isinstance(s.lr, Schedule) and
              0.0 < s.step_sizes[0] <= s.lr <= s.step_sizes[1])),
        lambda s: {"learning_rate_range": tuple(float(x) for x in s.step_sizes),
                   "etas": tuple(float(x) for x in s.etas)},
        {"prev": "prevs", "step_size": "learning_rates"},
        "step_sizes become learning_rate_range"),

    # -- the seed algorithms (paddle.md §2); torch, MindSpore and Paddle's GPU-only
    # DGCMomentumOptimizer give no native row for adafactor, came, adam_offload, dgc
    NativeLowering(
        "lamb", "paddle.optimizer.Lamb",
        (when("bias_correction='moments' (Paddle's kernel divides m and v by 1-beta^t)",
              lambda s: s.bias_correction == "moments"),
         when("weight_norm_clamp=None (Paddle does not clamp ||p|| in the trust ratio)",
              lambda s: s.weight_norm_clamp is None),
         when("trust_eps=0 (Paddle's trust ratio is ||p||/||r||, no eps)",
              lambda s: s.trust_eps == 0.0)),
        lambda s: {"lamb_weight_decay": float(s.weight_decay), **_betas(s),
                   "always_adapt": s.always_adapt},
        {"exp_avg": "moment1", "exp_avg_sq": "moment2"},
        "no_decay_names become exclude_from_weight_decay_fn, which drops the decay and, "
        "unless always_adapt, the trust ratio as the spec does; " + _FLOAT32_ATTRIBUTES),
    NativeLowering(
        "lars", "paddle.incubate.optimizer.LarsMomentumOptimizer",
        (when("lr_placement='inside' (Paddle's velocity is mu*v + local_lr*(g + wd*p))",
              lambda s: s.lr_placement == "inside"),
         when("dampening=0 (Paddle's velocity starts at 0 and has no dampening)",
              lambda s: s.dampening == 0.0),
         when("nesterov=False (LarsMomentumOptimizer has no Nesterov form)",
              lambda s: not s.nesterov),
         when("zero_norm_rule='one_if_norm_zero' (Paddle uses the plain lr, decay kept, when "
              "||p|| or ||g|| is 0)", lambda s: s.zero_norm_rule == "one_if_norm_zero"),
         when("clip=False (Paddle does not clip the local lr)", lambda s: not s.clip),
         when("exclude_1d=False (Paddle treats 1-D parameters like the others)",
              lambda s: not s.exclude_1d),
         when("always_adapt=False, or every parameter decays (Paddle applies the trust ratio "
              "only where lars_weight_decay > 0)",
              lambda s: not s.always_adapt or (s.weight_decay > 0.0 and not s.no_decay_names))),
        lambda s: {"momentum": float(s.momentum), "lars_coeff": float(s.trust_coefficient),
                   "lars_weight_decay": float(s.weight_decay), "epsilon": float(s.eps)},
        {"momentum_buffer": "velocity"},
        "no_decay_names and exclude_names (the same without always_adapt: no decay, no "
        "ratio) become exclude_from_weight_decay, the excluded parameters' Paddle names; "
        + _FLOAT32_ATTRIBUTES),
)


def _native_pre_step(s) -> bool:
    clip = s.grad_clip
    return (s.loss_scale == 1.0 and not s.skip_nonfinite and not s.grad_centralization
            and (not isinstance(clip, (ClipByGlobalNorm, ClipByNorm)) or clip.eps == 0.0))


#: What Paddle's optimizers run around their update themselves: ``grad_clip`` (clip,
#: then the coupled regularizer, as the spec); the rest of the pre-step is the own path's.
NATIVE_PRE_STEP = when(
    "loss_scale=1, skip_nonfinite=False, grad_centralization=False and a grad_clip with "
    "eps=0 (Paddle's optimizers run only paddle.nn.ClipGradByGlobalNorm/ByNorm/ByValue, "
    "whose norms have no eps)", _native_pre_step)


def _layout_condition(row, spec, plans, dtypes):
    from .layout import name_free_plans, paddle_layout

    if row.unmet(spec) or not (_native_pre_step(spec) and CONSTANT_HYPERPARAMETERS.holds(spec)):
        return when("parameter groups", lambda s: True)   # refused already
    layout = paddle_layout(row, spec, name_free_plans(spec) if plans is None else plans,
                           dtypes)
    if isinstance(layout, str):
        return when(layout, lambda s: False)
    return when("parameter groups Paddle computes", lambda s: True)


def decide_for(spec, path: str = "auto", plans=None, dtypes=()):
    """The lowering of ``spec`` on Paddle; with ``plans`` (one per parameter, from
    ``uo.build``'s groups) and the parameters' ``dtypes`` it also checks that Paddle's
    parameter groups and ``grad_clip`` compute them (:mod:`.layout`)."""
    return decide("paddle", TABLE, spec, path, OWN_CLASS,
                  extra=lambda row: (NATIVE_PRE_STEP, CONSTANT_HYPERPARAMETERS,
                                     _layout_condition(row, spec, plans, dtypes)))
