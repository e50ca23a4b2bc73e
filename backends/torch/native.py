"""Building torch.optim classes from a lowering row, and reading their state."""

from __future__ import annotations

import importlib
import inspect

import torch


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


def native_optimizer(row, params, param_specs, lr, options):
    """``row.native`` over ``params``; one param group per distinct per-parameter
    hyperparameter set (e.g. weight_decay 0 for names in ``no_decay_names``)."""
    cls = native_class(row.native)
    groups: list[dict] = []
    for p, spec in zip(params, param_specs):
        arguments = row.arguments(spec)
        for group in groups:
            if group["arguments"] == arguments:
                group["params"].append(p)
                break
        else:
            groups.append({"arguments": arguments, "params": [p]})
    check_options(cls, options, groups[0]["arguments"])
    # Arguments every group shares go to the constructor, only the differing ones into
    # the groups: some classes read constructor arguments where a group value should
    # win (torch Adagrad seeds every state sum from its initial_accumulator_value).
    shared = {k: v for k, v in groups[0]["arguments"].items()
              if all(g["arguments"].get(k) == v for g in groups)}
    if len(groups) == 1:
        return cls(params, lr=lr, **shared, **options)
    return cls([{"params": g["params"],
                 **{k: v for k, v in g["arguments"].items() if k not in shared}}
                for g in groups], lr=lr, **shared, **options)


def native_state(row, optimizer, p) -> dict:
    state = optimizer.state.get(p, {})
    return {ours: state[theirs] for ours, theirs in row.state.items()
            if isinstance(state.get(theirs), torch.Tensor)}
