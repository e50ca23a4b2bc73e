"""Writing a spec as ``uo`` constructor calls (``unified-opt port``'s output for a Paddle
or MindSpore script): code that evaluates to an equal spec, built by the same
constructors rather than by evaluating text."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..spec import Spec


def _value_code(value: Any) -> str:
    return _literal(value)[0]


def _literal(value: Any) -> tuple[str, Any]:
    """``value`` as code, and what that code evaluates to, built by the same constructor
    calls instead of evaluating text: the class the code names, with the fields it
    writes. ValueError where the code would not give ``value`` back (an object without a
    literal, a class ``uo`` does not export under its name, a non-finite float)."""
    import math

    import unified_opt

    from ..clipping import Clip
    from ..schedules import Schedule

    if isinstance(value, (Spec, Clip, Schedule)):
        namespace, prefix = ((unified_opt.schedules, "uo.schedules.")
                             if isinstance(value, Schedule) else (unified_opt, "uo."))
        name = type(value).__name__
        constructor = getattr(namespace, name, None)
        if constructor is not type(value):
            raise ValueError(f"{prefix}{name} is not {type(value).__qualname__}")
        arguments, built = [], {}
        for f in dataclasses.fields(value):
            if not f.init:
                continue
            v = getattr(value, f.name)
            default = (f.default if f.default is not dataclasses.MISSING else
                       f.default_factory() if f.default_factory is not dataclasses.MISSING
                       else dataclasses.MISSING)
            if default is dataclasses.MISSING or v != default:
                code, built[f.name] = _literal(v)
                arguments.append(f"{f.name}={code}")
        return f"{prefix}{name}({', '.join(arguments)})", constructor(**built)
    if isinstance(value, (tuple, list)):
        parts = [_literal(v) for v in value]
        inner = ", ".join(code for code, _ in parts)
        if isinstance(value, list):
            return f"[{inner}]", [v for _, v in parts]
        return (f"({inner},)" if len(value) == 1 else f"({inner})"), tuple(v for _, v in parts)
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"no literal for {value!r}")          # repr gives a bare name
    if value is None or isinstance(value, (bool, int, float, str)):
        return repr(value), value
    raise ValueError(f"no literal for {value!r}")


def spec_code(spec: Spec) -> str:
    """``spec`` as ``uo`` constructor calls (``uo.AdamW(lr=..., weight_decay=0.01)``)
    that evaluate to an equal spec; else ``uo.spec_from_dict({...})`` (its dict as a
    Python literal: JSON's true/false/null are not Python)."""
    try:
        code, rebuilt = _literal(spec)
        if rebuilt == spec:
            return code
    except (ValueError, TypeError):
        pass
    return f"uo.spec_from_dict({spec.to_dict()!r})"
