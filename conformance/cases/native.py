"""A framework's own optimizer built by hand, as a conformance case runs it.

A :class:`Native` is what a user of that framework writes: the qualified name of an
optimizer class and its keyword arguments, optionally an lr scheduler (stepped the
framework's usual way: a torch or ``mindspore.experimental`` scheduler is built on the
optimizer and stepped after each optimizer step; a Paddle ``LRScheduler`` is built
first, passed as ``learning_rate`` and stepped after each step), and functions called
on the parameter list before each step (``torch.nn.utils.clip_grad_norm_``). A case
holding one (``Case(native=...)``) runs that optimizer instead of ``uo.build`` and is
compared with the oracle of its spec like any other run: the spec is the claim.

Everything travels to the worker as JSON, so what is not plain data is written as a
marker, resolved in the worker once the parameters exist:

* ``{"$params": [names]}``: the parameter objects called ``names`` (for group dicts);
* ``{"$names": [names]}``: the framework's own names of those parameters (Paddle's
  ``exclude_from_weight_decay``);
* ``{"$match": [names]}``: a predicate true for those parameters, given a parameter
  object or the framework's name of one (Paddle's ``apply_decay_param_fun``,
  ``exclude_from_weight_decay_fn``);
* ``{"$call": [qualified, kwargs]}``: ``qualified(**kwargs)`` (a Paddle clip or nested
  scheduler, a MindSpore lr list or inner optimizer);
* ``{"$scheduler": [qualified, kwargs]}``: ``qualified(optimizer, **kwargs)`` (the members
  of torch's ``SequentialLR`` and ``ChainedScheduler``);
* ``{"$function": name}``: a registered example function
  (:data:`unified_opt.schedules.examples.FUNCTIONS`: a ``LambdaLR`` factor, a
  ``scale_fn``);
* ``{"$schedule": schedule.to_dict()}``: a :mod:`unified_opt.schedules` schedule, a callable
  of the step (Paddle's ``LambdaDecay(lr_lambda=...)``);
* ``{"$tuple": [...]}``: a tuple (JSON has lists only, and some constructors take tuples
  only: MindSpore's ``nn.Rprop(etas=...)``). A Python tuple in the arguments is written so
  when the :class:`Native` is made.

This module imports no framework: the drivers resolve the markers
(:func:`decode`) with the framework's parameters.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from unified_opt.backend import BACKENDS
from unified_opt.native import import_native

#: the markers :func:`decode` resolves
MARKERS = ("$params", "$names", "$match", "$call", "$scheduler", "$function", "$schedule",
           "$tuple")


@dataclass(frozen=True)
class Native:
    """A native optimizer built by hand (see the module docstring).

    ``params``: the optimizer's parameter argument (its first one), None for every
    parameter in the case's order, else JSON with ``$params`` markers (group dicts,
    MindSpore's ``order_params``; ``nn.LARS``'s inner optimizer as a ``$call``).
    ``lr_param``: the parameter whose group's lr is the spec's lr (None: the first).
    ``fixed_lr``: the lr to report where the class reports none it
    runs with (a relative step's fixed cap: ``nn.AdaFactor``, ``torch_optimizer``'s
    ``Adafactor``). ``framework``: the backend whose worker runs it (by default the
    first part of ``optimizer``: ``"torch"`` for ``torch.optim.SGD``; a peer library
    such as ``pytorch_optimizer.Lion`` names it)."""

    optimizer: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    params: Any = None
    scheduler: str | None = None
    scheduler_kwargs: Mapping[str, Any] = field(default_factory=dict)
    before_step: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    lr_param: str | None = None
    fixed_lr: float | None = None
    framework: str = ""

    def __post_init__(self) -> None:
        owner = f"Native({self.optimizer!r})"
        if not isinstance(self.optimizer, str) or "." not in self.optimizer:
            raise ValueError(f"Native: optimizer must be a qualified class name such as "
                             f"'torch.optim.SGD', got {self.optimizer!r}")
        framework = self.framework or self.optimizer.split(".")[0]
        if framework not in BACKENDS:
            raise ValueError(f"{owner}: framework must be one of {BACKENDS} (name it for a "
                             f"class outside the frameworks), got {framework!r}")
        object.__setattr__(self, "framework", framework)
        if not isinstance(self.kwargs, Mapping) or not isinstance(self.scheduler_kwargs,
                                                                  Mapping):
            raise TypeError(f"{owner}: kwargs and scheduler_kwargs must be mappings")
        # one form: tuples as $tuple markers, as they come back from JSON
        object.__setattr__(self, "kwargs", _plain(self.kwargs))
        object.__setattr__(self, "params", _plain(self.params))
        object.__setattr__(self, "scheduler_kwargs", _plain(self.scheduler_kwargs))
        if self.scheduler is not None and (not isinstance(self.scheduler, str)
                                           or "." not in self.scheduler):
            raise ValueError(f"{owner}: scheduler must be None or a qualified class name, "
                             f"got {self.scheduler!r}")
        if self.scheduler is None and self.scheduler_kwargs:
            raise ValueError(f"{owner}: scheduler_kwargs without a scheduler")
        if self.scheduler is not None and framework == "paddle" \
                and "learning_rate" in self.kwargs:
            raise ValueError(f"{owner}: a Paddle scheduler is passed as learning_rate; "
                             "give no learning_rate in kwargs")
        before = tuple(tuple(item) for item in self.before_step)
        if not all(len(item) == 2 and isinstance(item[0], str) and isinstance(item[1], Mapping)
                   for item in before):
            raise TypeError(f"{owner}: before_step must be (qualified function, kwargs) "
                            f"pairs, got {self.before_step!r}")
        before = tuple((f, _plain(kw)) for f, kw in before)
        object.__setattr__(self, "before_step", before)
        if self.fixed_lr is not None and not isinstance(self.fixed_lr, (int, float)):
            raise TypeError(f"{owner}: fixed_lr must be None or a float, got {self.fixed_lr!r}")
        try:
            json.dumps(self.to_dict(), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{owner}: arguments must be JSON data with markers "
                            f"{MARKERS}: {exc}") from None
        for value in (self.kwargs, self.params, self.scheduler_kwargs,
                      *(kw for _, kw in before)):
            _check_markers(owner, value)

    def names(self) -> set[str]:
        """The parameter names the markers refer to."""
        out: set[str] = set()
        for value in (self.kwargs, self.params, self.scheduler_kwargs,
                      *(kw for _, kw in self.before_step)):
            _collect_names(value, out)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer, "kwargs": self.kwargs,
                "params": self.params, "scheduler": self.scheduler,
                "scheduler_kwargs": self.scheduler_kwargs,
                "before_step": [[f, kw] for f, kw in self.before_step],
                "lr_param": self.lr_param, "fixed_lr": self.fixed_lr,
                "framework": self.framework}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Native":
        return cls(optimizer=data["optimizer"], kwargs=data.get("kwargs", {}),
                   params=data.get("params"), scheduler=data.get("scheduler"),
                   scheduler_kwargs=data.get("scheduler_kwargs", {}),
                   before_step=tuple((f, kw) for f, kw in data.get("before_step", ())),
                   lr_param=data.get("lr_param"), fixed_lr=data.get("fixed_lr"),
                   framework=data.get("framework", ""))


def _plain(value: Any) -> Any:
    """JSON's form of ``value``: tuples as ``$tuple`` markers, recursively."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return {"$tuple": [_plain(v) for v in value]}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _marker(value: Any) -> str | None:
    if isinstance(value, Mapping) and len(value) == 1:
        key = next(iter(value))
        if isinstance(key, str) and key.startswith("$"):
            return key
    return None


def _check_markers(owner: str, value: Any) -> None:
    key = _marker(value)
    if key is not None:
        if key not in MARKERS:
            raise ValueError(f"{owner}: unknown marker {key!r}; markers: {MARKERS}")
        arg = value[key]
        if key in ("$params", "$names", "$match"):
            if not isinstance(arg, (list, tuple)) or not all(isinstance(n, str) for n in arg):
                raise TypeError(f"{owner}: {key} takes a list of parameter names, got {arg!r}")
        elif key in ("$call", "$scheduler"):
            if not (isinstance(arg, (list, tuple)) and len(arg) == 2 and isinstance(arg[0], str)
                    and isinstance(arg[1], Mapping)):
                raise TypeError(f"{owner}: {key} takes [qualified name, kwargs], got {arg!r}")
            _check_markers(owner, arg[1])
        elif key == "$function":
            from unified_opt.schedules.examples import FUNCTIONS

            if arg not in FUNCTIONS:
                raise ValueError(f"{owner}: unknown function {arg!r}; registered: "
                                 f"{sorted(FUNCTIONS)}")
        elif key == "$schedule":
            from unified_opt.schedules import schedule_from_dict

            schedule_from_dict(arg)
        elif key == "$tuple":
            if not isinstance(arg, list):
                raise TypeError(f"{owner}: $tuple takes a list, got {arg!r}")
            _check_markers(owner, arg)
        return
    if isinstance(value, Mapping):
        for item in value.values():
            _check_markers(owner, item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _check_markers(owner, item)


def _collect_names(value: Any, out: set[str]) -> None:
    key = _marker(value)
    if key in ("$params", "$names", "$match"):
        out.update(value[key])
    elif key in ("$call", "$scheduler"):
        _collect_names(value[key][1], out)
    elif key == "$tuple":
        _collect_names(value[key], out)
    elif isinstance(value, Mapping):
        for item in value.values():
            _collect_names(item, out)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _collect_names(item, out)


def decode(value: Any, params: Mapping[str, Any], name_of: Callable[[Any], str | None],
           optimizer: Any = None) -> Any:
    """``value`` with its markers resolved: ``params`` maps case names to the parameter
    objects, ``name_of(parameter)`` gives the framework's name of one, ``optimizer`` is
    the optimizer a ``$scheduler`` member is built on."""
    def again(v):
        return decode(v, params, name_of, optimizer)

    key = _marker(value)
    if key == "$params":
        return [params[n] for n in value[key]]
    if key == "$names":
        return [name_of(params[n]) for n in value[key]]
    if key == "$match":
        chosen = [params[n] for n in value[key]]
        names = {name_of(p) for p in chosen} - {None}

        def matches(item) -> bool:
            if isinstance(item, str):
                return item in names
            return any(item is p for p in chosen)
        return matches
    if key == "$call":
        qualified, kwargs = value[key]
        return import_native(qualified)(**again(kwargs))
    if key == "$scheduler":
        if optimizer is None:
            raise ValueError("Native: a $scheduler marker needs the optimizer (it belongs "
                             "in scheduler_kwargs)")
        qualified, kwargs = value[key]
        return import_native(qualified)(optimizer, **again(kwargs))
    if key == "$function":
        from unified_opt.schedules.examples import FUNCTIONS

        return FUNCTIONS[value[key]]
    if key == "$schedule":
        from unified_opt.schedules import schedule_from_dict

        return schedule_from_dict(value[key])
    if key == "$tuple":
        return tuple(again(v) for v in value[key])
    if isinstance(value, Mapping):
        return {k: again(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [again(v) for v in value]
    return value
