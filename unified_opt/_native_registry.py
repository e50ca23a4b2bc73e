"""A registry of native names (optimizer classes, schedulers) -> functions of their
native keyword arguments, shared by the optimizer presets and the schedule presets.

A registered function has the native constructor's signature (with its defaults;
required native arguments have none). Calling through the registry checks the keywords
against that signature first, so a wrong name or a missing argument is a ``TypeError``
naming the native call, before anything is built. A refused name raises
``NotImplementedError`` saying what is missing.
"""

from __future__ import annotations

import difflib
import inspect
from typing import Any, Callable


def did_you_mean(name: str, names: list[str]) -> str:
    """``"; did you mean 'x' or 'y'?"`` for the ``names`` closest to ``name`` (case
    ignored), or ``""``."""
    lowered: dict[str, str] = {}
    for candidate in names:
        lowered.setdefault(candidate.lower(), candidate)
    close = [lowered[m] for m in difflib.get_close_matches(name.lower(), list(lowered), 3,
                                                           cutoff=0.5)]
    if not close:
        return ""
    return "; did you mean " + " or ".join(repr(c) for c in close) + "?"


class NativeRegistry:
    def __init__(self, what: str, listing: str):
        self.what = what                      # "preset", "schedule preset"
        self.listing = listing                # the call that lists the names
        self._functions: dict[str, Callable[..., Any]] = {}
        self._refused: dict[str, str] = {}

    def register(self, qualified_name: str):
        """Decorator: ``fn(**native_kwargs)`` answers for ``qualified_name``."""
        def deco(fn):
            self._functions[qualified_name] = fn
            fn.qualified_name = qualified_name
            return fn
        return deco

    def refuse(self, qualified_name: str, why: str) -> None:
        self._refused[qualified_name] = why

    def names(self, refused: bool = False) -> list[str]:
        return sorted(self._refused if refused else self._functions)

    def refusal(self, qualified_name: str) -> str:
        """Why ``qualified_name`` is refused (KeyError for a name that is not)."""
        return self._refused[qualified_name]

    def signature(self, qualified_name: str) -> inspect.Signature:
        return inspect.signature(self._functions[qualified_name])

    def checked(self, qualified_name: str, native_kwargs: dict) -> Callable[..., Any]:
        """The function for ``qualified_name`` once ``native_kwargs`` fit its signature."""
        if not isinstance(qualified_name, str):
            raise TypeError(f"{self.what}: qualified_name must be a str, got "
                            f"{qualified_name!r}")
        if qualified_name in self._refused:
            raise NotImplementedError(f"{self.what} {qualified_name!r} is refused: "
                                      f"{self._refused[qualified_name]}")
        if qualified_name not in self._functions:
            raise ValueError(f"{self.what}: no {self.what} for {qualified_name!r}"
                             + did_you_mean(qualified_name, self.names() + self.names(True))
                             + f" ({self.what}s: {len(self.names())}; list them with "
                             f"{self.listing})")
        fn = self._functions[qualified_name]
        params = inspect.signature(fn).parameters
        unknown = sorted(set(native_kwargs) - set(params))
        if unknown:
            raise TypeError(f"{qualified_name} got unexpected keyword argument(s) {unknown}; "
                            f"valid: {list(params)}")
        missing = [n for n, p in params.items()
                   if p.default is inspect.Parameter.empty and n not in native_kwargs]
        if missing:
            raise TypeError(f"{qualified_name} is missing required argument(s) {missing}")
        return fn
