"""Weight decay chosen by parameter name, shared by every spec that decays."""

from __future__ import annotations

import dataclasses

from .. import _validation as v


def check_decay(spec, owner: str) -> dict:
    return {"weight_decay": v.check_range(owner, "weight_decay", spec.weight_decay, low=0.0),
            "no_decay_names": v.check_names(owner, "no_decay_names", spec.no_decay_names)}


def decay_for_parameter(spec, name: str | None):
    """``spec`` with ``weight_decay=0`` when ``name`` contains one of
    ``spec.no_decay_names`` (MindSpore ``nn`` optimizers: ``("beta", "gamma")``)."""
    if not spec.no_decay_names or spec.weight_decay == 0.0:
        return spec
    if name is None:
        raise ValueError(f"{type(spec).__name__}: no_decay_names={spec.no_decay_names!r} "
                         "needs parameter names; pass a module or (name, parameter) pairs")
    if any(part in name for part in spec.no_decay_names):
        return dataclasses.replace(spec, weight_decay=0.0, no_decay_names=())
    return spec
