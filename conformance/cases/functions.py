"""The JSON encoding of a spec whose schedules hold named Python callables.

A case travels to its worker as JSON, and a Python callable (torch ``LambdaLR``'s
``lr_lambda``, ``MultiplicativeLR``'s, Paddle's ``LambdaDecay``, a ``CyclicLR``
``scale_fn``) cannot be serialised. The callables the cases use are registered by name
(:data:`unified_opt.schedules.examples.FUNCTIONS`); :func:`encode_spec` writes
``{"function": name}`` in their place and :func:`decode_spec` resolves the name again in
the worker. Any other callable is
refused with the schedule's own error.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Mapping

import unified_opt as uo
from unified_opt.schedules import Constant, Schedule, schedule_from_dict
from unified_opt.schedules.examples import FUNCTIONS

#: spec fields that may hold a schedule (``unified_opt.spec.SCHEDULABLE``)
_SCHEDULABLE = ("lr", "weight_decay")


def _name_of(fn: Callable) -> str:
    for name, registered in FUNCTIONS.items():
        if registered is fn:
            return name
    raise TypeError(f"conformance case: the callable {fn!r} is not a registered example "
                    f"function (unified_opt.schedules.examples: {sorted(FUNCTIONS)}); a case "
                    "must travel to its worker as JSON")


def _encode(value: Any) -> Any:
    if isinstance(value, Schedule):
        from dataclasses import fields

        return {"schedule": value.name, **{f.name: _encode(getattr(value, f.name))
                                           for f in fields(value)}}
    if isinstance(value, (list, tuple)):
        return [_encode(item) for item in value]
    if callable(value):
        return {"function": _name_of(value)}
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, Mapping) and "function" in value:
        if value["function"] not in FUNCTIONS:
            raise ValueError(f"conformance case: unknown function {value['function']!r}; "
                             f"registered: {sorted(FUNCTIONS)}")
        return FUNCTIONS[value["function"]]
    if isinstance(value, Mapping):
        return schedule_from_dict({key: _decode(item) for key, item in value.items()})
    if isinstance(value, list):
        return [_decode(item) for item in value]
    return value


def encode_spec(spec: uo.Spec) -> dict[str, Any]:
    """``spec.to_dict()``, with registered callables inside its schedules written by name."""
    try:
        return spec.to_dict()
    except TypeError:   # a callable inside a schedule
        pass
    placeholders = {key: Constant(lr=0.0) for key in _SCHEDULABLE
                    if isinstance(getattr(spec, key, None), Schedule)}
    data = spec.replace(**placeholders).to_dict()
    for key in placeholders:
        data["hyperparameters"][key] = _encode(getattr(spec, key))
    return data


def decode_spec(data: Mapping[str, Any]) -> uo.Spec:
    """Inverse of :func:`encode_spec`."""
    hyper = dict(data["hyperparameters"])
    for key in _SCHEDULABLE:
        if isinstance(hyper.get(key), Mapping):
            hyper[key] = _decode(hyper[key])
    return uo.spec_from_dict({**data, "hyperparameters": hyper})


def _callables(value: Any) -> Iterator[Callable]:
    if isinstance(value, Schedule):
        from dataclasses import fields

        for f in fields(value):
            yield from _callables(getattr(value, f.name))
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _callables(item)
    elif callable(value):
        yield value


@contextlib.contextmanager
def named_for_this_process(spec: uo.Spec) -> Iterator[None]:
    """The callables inside ``spec``'s schedules registered by name while the block runs
    (``uo.conformance.check``: its cases run in this process and never travel, so the
    user's own ``LambdaLR`` function is as good as a registered one there); a check's
    report names each as ``"<check>qualname"``. Removed afterwards."""
    added = []
    for key in _SCHEDULABLE:
        for fn in _callables(getattr(spec, key, None)):
            if any(registered is fn for registered in FUNCTIONS.values()):
                continue
            name = f"<check>{getattr(fn, '__qualname__', type(fn).__name__)}"
            while name in FUNCTIONS:
                name += "'"
            FUNCTIONS[name] = fn
            added.append(name)
    try:
        yield
    finally:
        for name in added:
            FUNCTIONS.pop(name, None)
