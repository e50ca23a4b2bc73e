"""Building torch.optim classes from a lowering row, and reading their state."""

from __future__ import annotations

import importlib
import inspect

import torch

from .steps import partition


def native_class(qualified_name: str):
    module, _, name = qualified_name.rpartition(".")
    return getattr(importlib.import_module(module), name)


def check_options(cls, options: dict, hyperparameters: dict) -> None:
    accepted = set(inspect.signature(cls.__init__).parameters) - {"self", "params", "lr"}
    bad = sorted(set(options) - (accepted - set(hyperparameters)))
    if bad:
        raise ValueError(f"build: options {bad} are not implementation flags of "
                         f"{cls.__module__}.{cls.__name__}; allowed: "
                         f"{sorted(accepted - set(hyperparameters))}")


def native_optimizer(row, params, plans, lrs, options):
    """``row.native`` over ``params``, one param group per distinct (hyperparameters, lr)
    of the parameters' plans (e.g. weight_decay 0 for names in ``no_decay_names`` or a
    ``uo.Group``; a group's lr factor). Returns ``(optimizer, group_specs)``: the spec of
    each param group, whose ``at_step(t)`` gives the group's values at step ``t``."""
    cls = native_class(row.native)
    parts = partition([(row.arguments(plan.spec), lr) for plan, lr in zip(plans, lrs)])
    specs = [plans[indices[0]].spec for indices in parts]
    # the constructor takes step 0's values (a weight-decay schedule, cycled momentum)
    arguments = [dict(row.arguments(s.at_step(0)), lr=lrs[indices[0]])
                 for s, indices in zip(specs, parts)]
    check_options(cls, options, arguments[0])
    # Arguments every group shares go to the constructor, only the differing ones into
    # the groups: some classes read constructor arguments where a group value should
    # win (torch Adagrad seeds every state sum from its initial_accumulator_value).
    shared = {k: v for k, v in arguments[0].items()
              if all(a.get(k) == v for a in arguments)}
    if len(parts) == 1:
        return cls(list(params), **shared, **options), specs
    return cls([{"params": [params[i] for i in indices],
                 **{k: v for k, v in a.items() if k not in shared}}
                for indices, a in zip(parts, arguments)], **shared, **options), specs


def native_state(row, optimizer, p) -> dict:
    state = optimizer.state.get(p, {})
    return {ours: state[theirs] for ours, theirs in row.state.items()
            if isinstance(state.get(theirs), torch.Tensor)}
