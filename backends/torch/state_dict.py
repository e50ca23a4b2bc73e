"""``state_dict()`` / ``load_state_dict()`` in the portable form
(:mod:`unified_opt.porting.state_dict`) on the torch optimizers ``uo.build`` returns: the
own :class:`.optimizer.SpecOptimizer` (its methods) and the native classes (instance
attributes, :func:`attach`).

``load_state_dict`` also takes torch's own form (a dict of exactly ``"state"`` and
``"param_groups"``, what ``torch.optim.Optimizer.state_dict(opt)`` returns): that goes to
torch's own load, with the class's hooks (the own path's checks, a native class's
``check_loaded`` and ``lay_out_loaded``). torch's own ``state_dict`` shares memory with
the live state and is what ``torch.distributed.checkpoint`` needs: call it through the
class, ``torch.optim.Optimizer.state_dict(opt)``.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

import torch

from unified_opt.porting.state_dict import load_either, state_dict_of

#: the keys of torch's own form
TORCH_KEYS = frozenset({"state", "param_groups"})


def torch_form(state_dict: Mapping) -> bool:
    """Whether ``state_dict`` has exactly the keys of torch's own form."""
    return set(state_dict) == TORCH_KEYS


def portable_state_dict(optimizer) -> dict[str, Any]:
    """``optimizer``'s state in the portable form (tensors: copies, on the CPU)."""
    return state_dict_of(optimizer, type(optimizer).__name__)


def load(optimizer, state_dict, load_own: Callable[[Mapping], Any], *, transform=None,
         model=None) -> None:
    """The portable form, loaded with ``uo.load_state``'s checks; torch's own form,
    handed to ``load_own`` (torch's load of the class, its hooks included)."""
    load_either(optimizer, state_dict, owner=type(optimizer).__name__,
                method="load_state_dict", own_form=torch_form,
                own_name="torch's own form (keys ['param_groups', 'state'])",
                load_own=load_own, transform=transform, model=model)


def attach(optimizer: torch.optim.Optimizer) -> None:
    """A native class built by ``uo.build``: ``state_dict`` and ``load_state_dict`` in
    the portable form, as instance attributes (the class's own stay reachable through
    the class)."""
    cls = type(optimizer)

    def state_dict() -> dict[str, Any]:
        """The portable form (:mod:`unified_opt.porting.state_dict`); torch's own:
        ``torch.optim.Optimizer.state_dict(opt)``."""
        return portable_state_dict(optimizer)

    def load_state_dict(state_dict, *, transform=None, model=None) -> None:
        """The portable form (from any framework), or torch's own form."""
        load(optimizer, state_dict, lambda own: cls.load_state_dict(optimizer, own),
             transform=transform, model=model)

    optimizer.state_dict = state_dict
    optimizer.load_state_dict = load_state_dict
