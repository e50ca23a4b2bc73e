"""Parameters as ``uo.build`` and the porting functions take them: which framework an
object comes from, and ``(name, parameter)`` pairs of a module, a mapping, pairs or bare
parameters. The core never imports a framework here: the framework is read from the
name of the module defining the object's class."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from .backend import framework_of

__all__ = ["framework_of", "named_parameters"]


def named_parameters(params: Any, caller: str = "build") -> list[tuple[str | None, Any]]:
    """``params`` as (name or None, parameter) pairs: a module's named parameters (a
    MindSpore Cell's trainable ones), a mapping, pairs, or bare parameters."""
    if framework_of(params) is not None:
        if hasattr(params, "named_parameters"):      # torch Module, paddle Layer
            return list(params.named_parameters())
        if hasattr(params, "parameters_and_names"):  # mindspore Cell: its trainable ones
            # (the others, e.g. BatchNorm moving statistics, are not the optimizer's)
            return [(n, p) for n, p in params.parameters_and_names() if p.requires_grad]
        return [(None, params)]                      # a single parameter
    if isinstance(params, Mapping):
        return list(params.items())
    if isinstance(params, (str, bytes)) or not isinstance(params, Iterable):
        raise TypeError(f"{caller}: params must be a module, an iterable of parameters or of "
                        f"(name, parameter) pairs, got {type(params).__name__}")
    out = []
    for item in params:
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str):
            out.append(item)
        else:
            out.append((None, item))
    return out
