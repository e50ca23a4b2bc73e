"""torch's optimizer surface on the Paddle optimizers ``uo.build`` returns
(:mod:`unified_opt.param_groups`): ``param_groups``, ``defaults`` and
``step(closure=None)`` beside Paddle's own ``clear_grad``, ``set_lr``, ``get_lr`` and
``set_state_dict``.

Paddle's lr and the groups' lrs are kept in step. ``set_lr`` or an ``LRScheduler``
(Paddle's own, or the one ``uo.build`` made for a scheduled spec lr) changes Paddle's
lr, and each group then follows it (its factor applied); a write into a group's
``"lr"`` is used at the next step and, where the first group has no factor of its own,
becomes Paddle's lr too (``set_lr``), so ``get_lr()`` reports it. Both at once are
refused (:meth:`unified_opt.param_groups.GroupSurface.lrs`).

A native class (``paddle.optimizer.AdamW``, ...) runs at Paddle's one lr times each
group's factor: a write into the groups is taken where one Paddle lr gives every group
its written value exactly, and is refused otherwise (naming ``path="own"``, whose step
takes each group's lr as written), as is any other hyperparameter written there.

``state_dict()`` returns the portable form (:mod:`unified_opt.porting.state_dict`: the
same on every framework, ``paddle.save``/``paddle.load`` round-trip it), and
``set_state_dict`` / ``load_state_dict`` take it (written on any framework) or Paddle's
own form (accumulator names -> tensors, ``LR_Scheduler``, ``master_weights``: what
``paddle.optimizer.Optimizer.state_dict(opt)`` returns), which goes to Paddle's own load.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from paddle.optimizer.lr import LRScheduler

from unified_opt.param_groups import GroupSurface
from unified_opt.porting.state_dict import load_either, state_dict_of

#: the entries of Paddle's own form that are no tensor
PADDLE_ENTRIES = ("LR_Scheduler", "master_weights")


def attach(optimizer, spec, plans, params, native: str | None) -> GroupSurface:
    """Give ``optimizer`` its :class:`~unified_opt.param_groups.GroupSurface`
    (``native``: the native class's qualified name, None on the own path)."""
    surface = GroupSurface(type(optimizer).__name__, plans, params,
                           float(optimizer.get_lr()), native=native,
                           on_write=lambda g, key, value: _carry(optimizer, g, key, value))
    surface.native_lr = lambda: float(optimizer.get_lr())
    optimizer.__dict__["_uo_surface"] = surface
    optimizer.__dict__["param_groups"] = surface.groups
    optimizer.__dict__["defaults"] = surface.defaults(spec)
    _attach_state_dict(optimizer)
    _attach_set_lr(optimizer, surface.owner)
    return surface


def _attach_set_lr(optimizer, owner: str) -> None:
    """``set_lr`` that refuses a value no step can run with (a negative, NaN or infinite
    lr, a bool) at once, naming it, as a write into ``param_groups`` is refused: Paddle's
    own takes it, and the refusal came at the next step, naming a write never made."""
    cls = type(optimizer)

    def set_lr(value) -> None:
        """Paddle's ``set_lr(value)``, the value checked first."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"{owner}.set_lr: value must be a float, got {value!r}")
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{owner}.set_lr: value must be a finite lr >= 0, got {value!r}")
        cls.set_lr(optimizer, value)

    optimizer.__dict__["set_lr"] = set_lr


def _attach_state_dict(optimizer) -> None:
    """``state_dict`` in the portable form, ``set_state_dict`` and ``load_state_dict``
    taking it or Paddle's own form (see the module), as instance attributes."""
    cls, owner = type(optimizer), type(optimizer).__name__

    def state_dict() -> dict[str, Any]:
        """The portable form; Paddle's own: ``paddle.optimizer.Optimizer.state_dict(opt)``."""
        return state_dict_of(optimizer, owner)

    def loader(method: str):
        def load(state_dict, *, transform=None, model=None) -> None:
            """The portable form (from any framework), or Paddle's own form."""
            load_either(optimizer, state_dict, owner=owner, method=method,
                        own_form=paddle_form, own_name="Paddle's own form (accumulator "
                        "names -> tensors; what paddle.optimizer.Optimizer.state_dict "
                        "returns)", load_own=lambda own: _load_own(optimizer, cls, own, method),
                        transform=transform, model=model)
        return load

    optimizer.__dict__["state_dict"] = state_dict
    optimizer.__dict__["set_state_dict"] = loader("set_state_dict")
    optimizer.__dict__["load_state_dict"] = loader("load_state_dict")


def _load_own(optimizer, cls, own: Mapping, method: str = "set_state_dict") -> None:
    """Paddle's own form loaded: the steps a native class counts (``_uo_steps``) no
    longer describe the state; unknown (None) from here on. A native class that holds
    its accumulators already (it has stepped) needs the dict to hold each of them, by
    name and shape, and nothing else, checked before anything is written: Paddle's
    loader asserts on an unknown key and writes the accumulators it reaches before one
    that is missing. (The own path's load checks its entries itself.)"""
    native = optimizer._uo_surface.native is not None
    held = {key: value for key, value in cls.state_dict(optimizer).items()
            if key not in PADDLE_ENTRIES} if native else {}
    if held:
        given = {key for key in own if key not in PADDLE_ENTRIES}
        missing, extra = sorted(set(held) - given), sorted(given - set(held))
        if missing or extra:
            raise ValueError(f"{type(optimizer).__name__}.{method}: Paddle's own form "
                             f"must hold this optimizer's accumulators; missing {missing}, "
                             f"not the optimizer's {extra}")
        for key, value in held.items():
            shape = tuple(getattr(own[key], "shape", ()))
            if shape != tuple(value.shape):
                raise ValueError(f"{type(optimizer).__name__}.{method}: {key!r} has "
                                 f"shape {shape}, the optimizer's {tuple(value.shape)}")
    cls.set_state_dict(optimizer, own)
    if optimizer.__dict__.get("_uo_steps") is not None:
        optimizer._uo_steps = None


def paddle_form(state_dict: Mapping) -> bool:
    """Whether ``state_dict`` has the shape of Paddle's own form: string keys, and no
    entry a dict or a string but ``LR_Scheduler`` and ``master_weights`` (dicts). Its
    entries are checked by Paddle's load (the own path's names each one that does not
    fit)."""
    return all(isinstance(key, str) and (isinstance(value, dict) if key in PADDLE_ENTRIES
                                         else not isinstance(value, (Mapping, str)))
               for key, value in state_dict.items())


def _carry(optimizer, g: int, key: str, value) -> None:
    """A write of the first group's lr becomes Paddle's lr at once (``set_lr``) where
    the group has no factor of its own and the lr is no LRScheduler, so ``get_lr()``
    reports it before the next step."""
    surface: GroupSurface = optimizer._uo_surface
    first = surface.plans[0]
    if key != "lr" or g != 0 or first.lr_scale != 1.0 or first.fixed_lr is not None \
            or isinstance(optimizer._learning_rate, LRScheduler):
        return
    optimizer.set_lr(float(value))
    surface.follow_native(float(value))
    surface.mark_carried(0, float(value))       # Paddle's lr and the group agree: no clash


def step_lrs(optimizer) -> list[float]:
    """Each group's lr for the step about to run (checked, before anything changes);
    a written lr made Paddle's own lr where it can be (see the module)."""
    surface: GroupSurface = optimizer._uo_surface
    surface.check_groups()
    paddle_lr = float(optimizer.get_lr())
    lrs = surface.lrs(paddle_lr)
    if all(plan.lr(paddle_lr) == lr for plan, lr in zip(surface.plans, lrs)):
        return lrs                               # the groups follow Paddle's lr
    scheduled = isinstance(optimizer._learning_rate, LRScheduler)
    base = None if scheduled else _one_paddle_lr(surface, lrs)
    if base is None:
        if surface.native is not None:
            why = ("Paddle's lr is an LRScheduler, which sets it" if scheduled else
                   f"no one lr of {surface.native} gives them (Paddle's one lr times each "
                   f"group's factor {[plan.lr_scale for plan in surface.plans]})")
            raise ValueError(
                f"{surface.owner}: param_groups hold lrs {lrs}, but {why}; build the own "
                "path, whose step takes each group's lr as written: uo.build(spec, params, "
                "path='own')")
        return lrs
    optimizer.set_lr(base)
    surface.lrs(base)              # Paddle's lr now agrees with the groups
    return lrs


def _one_paddle_lr(surface: GroupSurface, lrs: list[float]) -> float | None:
    """The Paddle lr that gives every group its lr (the first group's, where its plan
    has no factor of its own), None where there is none."""
    first = surface.plans[0]
    if first.lr_scale != 1.0 or first.fixed_lr is not None:
        return None
    base = lrs[0]
    if all(plan.lr(base) == lr for plan, lr in zip(surface.plans, lrs)):
        return base
    return None
