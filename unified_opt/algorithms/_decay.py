"""Weight decay chosen by parameter name, shared by every spec that decays."""

from __future__ import annotations

import dataclasses

from .. import _validation as v


def check_decay(spec, owner: str) -> dict:
    """``weight_decay`` is a float >= 0 or a Schedule (dynamic weight decay, MindSpore's
    Cell form: step t decays by ``schedule(t)``)."""
    from ..schedules import Schedule

    decay = spec.weight_decay
    if not isinstance(decay, Schedule):
        decay = v.check_range(owner, "weight_decay", decay, low=0.0)
    return {"weight_decay": decay,
            "no_decay_names": v.check_names(owner, "no_decay_names", spec.no_decay_names)}


def decay_for_parameter(spec, name: str | None):
    """``spec`` with ``weight_decay=0`` when ``name`` matches one of the shell-style
    patterns ``spec.no_decay_names`` (MindSpore ``nn`` optimizers: ``("*beta*",
    "*gamma*")``)."""
    from ..groups import name_matches

    if not spec.no_decay_names or spec.weight_decay == 0.0:
        return spec
    if name is None:
        raise ValueError(f"{type(spec).__name__}: no_decay_names={spec.no_decay_names!r} "
                         "needs parameter names; pass a module or (name, parameter) pairs")
    if name_matches(name, spec.no_decay_names):
        return dataclasses.replace(spec, weight_decay=0.0, no_decay_names=())
    return spec


def l2_gradient(spec, param, grad):
    """The gradient the update sees: negated with ``maximize``, plus the coupled L2 term
    ``weight_decay * param`` (torch's ``weight_decay`` for every non-W optimizer)."""
    g = -grad if spec.maximize else grad
    if spec.weight_decay != 0.0:
        g = g + param * spec.weight_decay
    return g


def decayed(param, delta):
    """``param * (1 - delta)``: decoupled decay in torch's form (``param.mul_(1 - lr * wd)``,
    ``_foreach_mul_``). The factor ``1 - delta`` is rounded once to the parameter's dtype
    (a Python float is a weak scalar under NEP 50, see
    :func:`unified_opt.reference.weak_python_scalars`), so the float32 reference carries
    the same per-step rounding of the factor as the frameworks: in float32,
    ``float32(1 - 1e-4)`` is 1.7e-8 relative away from ``1 - 1e-4``, a bias of the same
    sign at every step that after 200 steps is more than the float32 noise of the form
    ``param - param * delta`` (which rounds the product, not the factor). The two forms
    agree in exact arithmetic."""
    return param * (1.0 - delta)


def apply_weight_decay(spec, param, grad, lr: float):
    """``(param, gradient)`` after weight decay: decoupled ``param * (1 - lr * wd)`` when
    ``spec.decoupled_weight_decay`` (torch's NAdamW/RAdamW forms), else L2 in the gradient."""
    if not spec.decoupled_weight_decay:
        return param, l2_gradient(spec, param, grad)
    if spec.weight_decay != 0.0:
        param = decayed(param, lr * spec.weight_decay)
    return param, (-grad if spec.maximize else grad)


def canonical_adapt(spec):
    """``always_adapt`` (the trust ratio also where the decay is 0) does not act when
    every parameter decays: a constant decay above 0 and no name rule sparing any."""
    if isinstance(spec.weight_decay, (int, float)) and spec.weight_decay > 0.0 and \
            not spec.no_decay_names and not getattr(spec, "exclude_names", ()):
        return spec.with_defaults(("always_adapt",))
    return spec
