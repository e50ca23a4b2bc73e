"""Adam's moments, bias correction and eps placement, written once for every spec of the
Adam family (:mod:`.adam`, :mod:`.adamw`, :mod:`.adam_offload`); the math is in
:mod:`unified_opt.algorithms.adam`'s docstring."""

from __future__ import annotations

import math

from .. import _validation as v
from ._decay import check_decay

EPS_PLACEMENTS = ("outside", "eps_hat", "inside")


def check_adam_fields(spec, owner: str) -> dict:
    """Checks shared by Adam and AdamW."""
    return {"betas": v.check_betas(owner, "betas", spec.betas),
            "eps": v.check_range(owner, "eps", spec.eps, low=0.0, low_open=True),
            "amsgrad": v.check_bool(owner, "amsgrad", spec.amsgrad),
            "maximize": v.check_bool(owner, "maximize", spec.maximize),
            "eps_placement": v.check_choice(owner, "eps_placement", spec.eps_placement,
                                            EPS_PLACEMENTS),
            "bias_correction": v.check_bool(owner, "bias_correction", spec.bias_correction),
            "nesterov": v.check_bool(owner, "nesterov", spec.nesterov),
            **check_decay(spec, owner)}


def adam_state_names(spec) -> tuple[str, ...]:
    return ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if spec.amsgrad else ())


def adam_moments(spec, g, state, step, ops):
    """New moments and the pieces of the step: ``(state, step_size, numerator, denom)``
    with ``param -= step_size * numerator / denom``."""
    beta1, beta2 = spec.betas
    exp_avg = state["exp_avg"] + (g - state["exp_avg"]) * (1.0 - beta1)
    exp_avg_sq = state["exp_avg_sq"] * beta2 + g * g * (1.0 - beta2)
    new_state = {"exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}
    second = exp_avg_sq
    if spec.amsgrad:
        second = ops.maximum(state["max_exp_avg_sq"], exp_avg_sq)
        new_state["max_exp_avg_sq"] = second
    if spec.bias_correction:
        bc1, bc2 = 1.0 - ops.power(beta1, step), 1.0 - ops.power(beta2, step)
    else:
        bc1 = bc2 = 1.0
    numerator = exp_avg * beta1 + g * (1.0 - beta1) if spec.nesterov else exp_avg
    if spec.eps_placement == "outside":
        step_size, denom = 1.0 / bc1, ops.sqrt(second) / math.sqrt(bc2) + spec.eps
    elif spec.eps_placement == "eps_hat":
        step_size, denom = math.sqrt(bc2) / bc1, ops.sqrt(second) + spec.eps
    else:
        step_size, denom = 1.0 / bc1, ops.sqrt(second / bc2 + spec.eps)
    return new_state, step_size, numerator, denom


def adam_alternatives(spec) -> list:
    """Variants that other frameworks' Adams compute, for the failure explainer; an eps
    placement that is the spec's own canonical one (without bias correction, eps-hat is
    "outside": :func:`canonical_adam`) is no variant."""
    out = []
    for placement in EPS_PLACEMENTS:
        if placement != spec.eps_placement and \
                spec.replace(eps_placement=placement).canonical() != spec.canonical():
            out.append((f"eps_placement={placement!r}", spec.replace(eps_placement=placement)))
    out.append((f"bias_correction={not spec.bias_correction}",
                spec.replace(bias_correction=not spec.bias_correction)))
    out.append((f"amsgrad={not spec.amsgrad}", spec.replace(amsgrad=not spec.amsgrad)))
    out.append((f"nesterov={not spec.nesterov}", spec.replace(nesterov=not spec.nesterov)))
    return out


def canonical_adam(spec):
    """Without bias correction, eps outside the corrected sqrt and eps-hat are one
    placement (both add eps to sqrt(v)): the canonical form writes it "outside"."""
    if not spec.bias_correction and spec.eps_placement == "eps_hat":
        return spec.replace(eps_placement="outside")
    return spec
