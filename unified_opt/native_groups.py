"""``add_param_group`` on a native class after ``uo.build`` (torch's and Paddle's):
what the two backends share.

The group dict is read by :func:`unified_opt.param_groups.added_group`, which extends
the build's record (so ``uo.save_state`` writes the new parameters' state and their
group as ``uo.Group`` rules). A native class is exact only under its row's conditions,
checked by ``uo.build`` over the parameters it was given; :func:`check_still_exact`
checks them again over every parameter, the added ones included, as ``uo.build`` would
have, and :func:`kept_on_failure` puts the record back where a later check or the
framework refuses the group, so a refused group changes nothing.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Sequence

from .backend import Backend, BuildRecord, _storage_around
from .native import holds


@contextlib.contextmanager
def kept_on_failure(record: BuildRecord) -> Iterator[None]:
    """The record's parameters, names, plans and group-dict indices put back where the
    body raises (``added_group`` extended them before the native class took the group)."""
    kept = (record.params, record.names, record.plans, record.dict_groups)
    try:
        yield
    except BaseException:
        record.params, record.names, record.plans, record.dict_groups = kept
        raise


def one_plan(plans: Sequence, caller: str):
    """The one plan of an added group's parameters: a native class takes one set of
    hyperparameters per group, so parameters the spec's own name rules (``no_decay_names``)
    give different ones are refused (a ValueError: add them as one group each)."""
    plan = plans[0]
    key = (plan.spec, plan.lr_scale, plan.fixed_lr)
    if any((other.spec, other.lr_scale, other.fixed_lr) != key for other in plans[1:]):
        raise ValueError(f"{caller}: the spec's name rules give these parameters different "
                         "hyperparameters; add them as one group each")
    return plan


def check_still_exact(backend: Backend, record: BuildRecord, caller: str) -> None:
    """Refuse (ValueError) a group under which the native class the build chose no longer
    computes the spec exactly: its row's conditions and the backend's conditions on what
    lies around it (every group's hyperparameters, zero-size and sharded parameters,
    Paddle's groups and clip, the parameters' dtypes), judged over the record's
    parameters and plans (the added ones included) as ``uo.build`` judges them. The
    message names what is unmet and ``path='own'``, which takes any group."""
    decision = record.decision
    named: list[tuple[Any, Any]] = list(zip(record.names, record.params))
    context = backend.context(record.spec, named, list(record.plans or ()), {})
    cls, lowering = decision.native_class, decision.lowering
    assert cls is not None and lowering is not None     # a native decision has both
    around = [*backend.around(cls, lowering, record.spec, context), *_storage_around(context)]
    unmet = lowering.unmet(record.spec) + [c.text for c in around
                                           if not holds(c, record.spec)]
    if unmet:
        raise ValueError(f"{caller}: with this group {decision.native} no longer computes "
                         f"the spec exactly: it needs {'; '.join(unmet)}; build the own path, "
                         "which takes any group: uo.build(spec, params, path='own')")
