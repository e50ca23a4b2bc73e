"""A safe reader for the values and specs written on a command line.

``parse_value(text)`` reads one value; ``parse_spec(text)`` reads one optimizer spec.
The text is parsed with :mod:`ast` and walked node by node; nothing is ever evaluated
by Python (no ``eval``, no attribute lookup on live objects). What an expression may
hold:

* Python literals: ``True``/``False``/``None`` (and JSON's ``true``/``false``/``null``),
  numbers (``0.1``, ``1e-3``, ``-5``, ``inf``, ``nan``), strings, tuples, lists, and
  dicts of these;
* calls, with keyword arguments (and positional ones where natural), of

  - the algorithm specs, by registry name in any case or by class name:
    ``adamw(lr=1e-3)``, ``AdamW(1e-3)`` (the one positional argument is ``lr``),
    ``adam_offload(...)``, ``AdamOffload(...)``;
  - the schedules of :mod:`unified_opt.schedules` (keyword arguments only):
    ``Cosine(lr=0.1, T_max=100)``,
    ``LinearWarmup(after=Cosine(lr=0.1, T_max=90), warmup_steps=10)``;
  - the clips ``ClipByGlobalNorm(max_norm=1.0)`` (or ``ClipByGlobalNorm(1.0)``),
    ``ClipByNorm(...)``, ``ClipByValue(max, min)``;
  - a framework's own optimizer or scheduler by its qualified name, read through its
    preset with the native argument names, positions and defaults
    (``torch.optim.Adam(lr=1e-3)``, ``mindspore.nn.AdamWeightDecay(learning_rate=1e-3)``,
    ``torch.optim.lr_scheduler.CosineAnnealingLR(base_lr=0.1, T_max=100)``; the names of
    ``uo.presets()`` and ``uo.schedules.presets()``);
  - the same written as Python code: ``uo.AdamW(...)``, ``uo.schedules.Cosine(...)``,
    ``uo.get("adamw", lr=1e-3)``, ``uo.preset("torch.optim.Adam", lr=1e-3)``,
    ``uo.schedules.preset(...)`` (``unified_opt.`` as well as ``uo.``).

Anything else (other names, attribute access, operators, subscripts, lambdas,
comprehensions, f-strings, ``**`` unpacking, ...) is a ``ValueError`` naming the part
refused. Errors raised by a constructor (a value out of range, an unknown keyword) come
out unchanged: they name the argument and the value.
"""

from __future__ import annotations

import ast
import dataclasses
import math
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ._native_registry import did_you_mean

if TYPE_CHECKING:
    from .spec import Spec

__all__ = ["names", "parse_spec", "parse_value"]

#: the longest text read (a command-line value, not a program)
MAX_LENGTH = 10_000

#: bare names that are values
CONSTANTS: dict[str, Any] = {"True": True, "False": False, "None": None,
                             "true": True, "false": False, "null": None,
                             "inf": math.inf, "nan": math.nan}

_BARE_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PREFIXES = {"uo.": "top", "unified_opt.": "top",
             "uo.schedules.": "schedules", "unified_opt.schedules.": "schedules"}
_ALLOWED = ("allowed: literals (numbers, strings, True/False/None, tuples, lists) and calls "
            "of algorithms (adamw(...)), schedules (Cosine(...)), clips "
            "(ClipByGlobalNorm(...)) and native classes (torch.optim.Adam(...))")
#: what a refused node is, in words
_KINDS = {ast.Lambda: "a lambda", ast.Subscript: "a subscript", ast.Slice: "a slice",
          ast.ListComp: "a comprehension", ast.SetComp: "a comprehension",
          ast.DictComp: "a comprehension", ast.GeneratorExp: "a comprehension",
          ast.BinOp: "an operator", ast.BoolOp: "an operator", ast.Compare: "a comparison",
          ast.UnaryOp: "an operator", ast.IfExp: "a conditional expression",
          ast.Set: "a set", ast.JoinedStr: "an f-string", ast.FormattedValue: "an f-string",
          ast.NamedExpr: "an assignment expression", ast.Starred: "* unpacking",
          ast.Await: "await", ast.Yield: "yield", ast.YieldFrom: "yield"}


@dataclasses.dataclass(frozen=True)
class _Constructor:
    display: str                      # the name in messages: "AdamW", "torch.optim.Adam"
    kind: str                         # "algorithm", "schedule", "clip", "preset", ...
    fn: Callable[..., Any]            # called with keyword arguments only
    positional: Callable[[], tuple]   # the names positional arguments bind to, in order

    @property
    def makes_spec(self) -> bool:
        return self.kind in ("algorithm", "preset")

    def __call__(self, args: list, kwargs: dict) -> Any:
        names = self.positional()
        if len(args) > len(names):
            if not names:
                fields = ""
                if dataclasses.is_dataclass(self.fn):
                    fields = f" ({', '.join(f.name + '=' for f in dataclasses.fields(self.fn))})"
                raise TypeError(f"{self.display}() takes keyword arguments only{fields}, got "
                                f"{len(args)} positional")
            raise TypeError(f"{self.display}() takes at most {len(names)} positional "
                            f"argument(s) ({', '.join(names)}), got {len(args)}")
        merged = dict(zip(names, args))
        for key, value in kwargs.items():
            if key in merged:
                raise TypeError(f"{self.display}() got multiple values for argument {key!r}")
            merged[key] = value
        return self.fn(**merged)


class _Table:
    """Every name an expression may call, made at the first use."""

    def __init__(self) -> None:
        import unified_opt as uo
        from unified_opt import clipping, schedules
        from unified_opt.spec import algorithms, spec_class

        self.short: dict[str, _Constructor] = {}       # lower-case key -> constructor
        self.canonical: set[str] = set()               # class names as written: "AdamW"
        self.groups: dict[str, set[str]] = {"top": set(), "schedules": set()}

        def add(keys, constructor, group):
            for key in {k.lower() for k in keys}:
                known = self.short.get(key)
                if known is not None and known.fn is not constructor.fn:
                    raise RuntimeError(f"expression name {key!r} means both "
                                       f"{known.display} and {constructor.display}")
                self.short[key] = constructor
                self.groups[group].add(key)

        for name in algorithms():
            cls = spec_class(name)
            self.canonical.add(cls.__name__)
            add((name, cls.__name__), _Constructor(cls.__name__, "algorithm", cls,
                                                   lambda: ("lr",)), "top")
        for attr in schedules.__all__:
            cls = getattr(schedules, attr)
            if (isinstance(cls, type) and issubclass(cls, schedules.Schedule)
                    and cls.name in schedules.schedules()):
                self.canonical.add(cls.__name__)
                add((cls.name, cls.__name__),
                    _Constructor(cls.__name__, "schedule", cls, lambda: ()), "schedules")
        for cls, positional in ((clipping.ClipByGlobalNorm, ("max_norm",)),
                                (clipping.ClipByNorm, ("max_norm",)),
                                (clipping.ClipByValue, ("max", "min"))):
            self.canonical.add(cls.__name__)
            add((cls.__name__,), _Constructor(cls.__name__, "clip", cls,
                                              lambda p=positional: p), "top")
        self.api = {
            "top": {"get": _Constructor("uo.get", "algorithm", uo.get, lambda: ("name",)),
                    "preset": _Constructor("uo.preset", "preset", uo.preset,
                                           lambda: ("qualified_name",))},
            "schedules": {"preset": _Constructor("uo.schedules.preset",
                                                 "schedule preset", schedules.preset,
                                                 lambda: ("qualified_name",))}}

        from unified_opt.presets import _registry as optimizer_presets
        from unified_opt.schedules import _preset_registry as schedule_presets

        self.qualified: dict[str, _Constructor] = {}
        for registry, build, kind in (
                (optimizer_presets.registry(), uo.preset, "preset"),
                (schedule_presets.REGISTRY, schedules.preset, "schedule preset")):
            for refused in (False, True):
                for name in registry.names(refused):
                    self.qualified[name] = _Constructor(
                        name, kind, _bound(build, name),
                        (lambda: ()) if refused else _positional_of(registry, name))

    def resolve(self, dotted: str) -> _Constructor | None:
        if dotted in self.qualified:
            return self.qualified[dotted]
        for prefix, group in _PREFIXES.items():
            if dotted.startswith(prefix):
                rest = dotted[len(prefix):]
                if "." in rest:
                    continue
                if rest in self.api[group]:
                    return self.api[group][rest]
                if rest.lower() in self.groups[group]:
                    return self.short[rest.lower()]
                return None
        if "." not in dotted:
            return self.short.get(dotted.lower())
        return None

    def suggestion(self, dotted: str) -> str:
        if "." in dotted:
            return did_you_mean(dotted, list(self.qualified))
        return did_you_mean(dotted, sorted(self.canonical | set(self.short)))


def _bound(build: Callable[..., Any], name: str) -> Callable[..., Any]:
    return lambda **kwargs: build(name, **kwargs)


def _positional_of(registry, name: str) -> Callable[[], tuple]:
    def positional() -> tuple:
        return tuple(p.name for p in registry.signature(name).parameters.values()
                     if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))
    return positional


_TABLE: _Table | None = None


def _table() -> _Table:
    global _TABLE
    if _TABLE is None:
        _TABLE = _Table()
    return _TABLE


def names() -> dict[str, list[str]]:
    """The names an expression may call, by kind (``"algorithm"``, ``"schedule"``,
    ``"clip"``, ``"preset"``, ``"schedule preset"``)."""
    table = _table()
    out: dict[str, list[str]] = {}
    for constructor in list(table.short.values()) + list(table.qualified.values()):
        out.setdefault(constructor.kind, [])
        if constructor.display not in out[constructor.kind]:
            out[constructor.kind].append(constructor.display)
    return {kind: sorted(found) for kind, found in out.items()}


# -- reading ------------------------------------------------------------------------------

def _parse(text: str, caller: str) -> ast.expr:
    if not isinstance(text, str):
        raise TypeError(f"{caller}: text must be a str, got {text!r} of type "
                        f"{type(text).__name__}")
    if len(text) > MAX_LENGTH:
        raise ValueError(f"{caller}: text is {len(text)} characters long, more than "
                         f"{MAX_LENGTH}")
    try:
        return ast.parse(text.strip(), mode="eval").body
    except SyntaxError as error:
        where = f" at column {error.offset}" if error.offset else ""
        raise ValueError(f"{caller}: cannot read {_short(text)}: {error.msg}{where}") from None
    except (ValueError, RecursionError, MemoryError) as error:
        raise ValueError(f"{caller}: cannot read {_short(text)}: {error}") from None


class _Reader:
    def __init__(self, text: str, caller: str):
        self.text = text
        self.caller = caller
        self.table = _table()

    def refuse(self, what: str, node: ast.AST | None = None, hint: str = "") -> ValueError:
        """``what`` (with ``node``'s source when given) is not allowed."""
        segment = ast.get_source_segment(self.text.strip(), node) if node is not None else None
        part = f" {_short(segment)}" if segment and segment != self.text.strip() else ""
        return ValueError(f"{self.caller}: {what}{part} is not allowed in {_short(self.text)}"
                          f"{hint or '; ' + _ALLOWED}")

    def value(self, node: ast.AST) -> Any:
        try:
            return self._value(node)
        except RecursionError:
            raise ValueError(f"{self.caller}: {_short(self.text)} is nested too deeply") from None

    def _value(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Constant):
            if node.value is None or type(node.value) in (bool, int, float, str):
                return node.value
            return self._refuse_constant(node)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            operand = self._value(node.operand)
            if isinstance(operand, (int, float)) and not isinstance(operand, bool):
                return -operand if isinstance(node.op, ast.USub) else operand
            raise self.refuse("a sign before a value that is not a number", node)
        if isinstance(node, ast.Tuple):
            return tuple(self._value(item) for item in node.elts)
        if isinstance(node, ast.List):
            return [self._value(item) for item in node.elts]
        if isinstance(node, ast.Dict):
            out = {}
            for key, item in zip(node.keys, node.values):
                if key is None:
                    raise self.refuse("** unpacking", item)
                key_value = self._value(key)
                if not isinstance(key_value, (str, int, float, bool, type(None))):
                    raise self.refuse("a dict key that is not a string or number", key)
                out[key_value] = self._value(item)
            return out
        if isinstance(node, ast.Name):
            if node.id in CONSTANTS:
                return CONSTANTS[node.id]
            return self._refuse_name(node)
        if isinstance(node, ast.Attribute):
            return self._refuse_name(node)
        if isinstance(node, ast.Call):
            return self.call(node)
        raise self.refuse(_KINDS.get(type(node), f"the syntax {type(node).__name__}"), node)

    def _refuse_constant(self, node: ast.Constant):
        kind = {bytes: "a bytes literal", complex: "a complex number"}.get(
            type(node.value), "the constant")
        raise self.refuse(kind, node)

    def _refuse_name(self, node: ast.AST):
        dotted = _dotted(node)
        if dotted is None:
            raise self.refuse("attribute access", node)
        constructor = self.table.resolve(dotted)
        if constructor is not None:
            raise self.refuse(f"{constructor.display} without a call", None,
                              f"; it is a constructor: call it, e.g. {dotted}(...)")
        if "." in dotted:
            raise self.refuse(f"attribute access {dotted!r}", None,
                              self.table.suggestion(dotted) + "; " + _ALLOWED)
        raise self.refuse(f"the name {dotted!r}", None,
                          self.table.suggestion(dotted)
                          + f"; for a string, quote it ('{dotted}'); " + _ALLOWED)

    def _refuse_builtin(self, node: ast.Call) -> None:
        """A Python builtin (``float('nan')``, ``tuple([...])``) is no spec's near
        miss: say what to write instead of suggesting a spec by its spelling."""
        import builtins

        if not isinstance(node.func, ast.Name) or not hasattr(builtins, node.func.id) or \
                self.table.resolve(node.func.id) is not None:
            return
        name = node.func.id
        argument = node.args[0] if len(node.args) == 1 and not node.keywords else None
        if name == "float" and isinstance(argument, ast.Constant) and isinstance(
                argument.value, str):
            word = argument.value.strip().lower().lstrip("+")
            sign = "-" if word.startswith("-") else ""
            word = {"infinity": "inf"}.get(word.lstrip("-"), word.lstrip("-"))
            if word in ("nan", "inf"):
                raise self.refuse(f"calling the Python builtin {name!r}", node,
                                  f"; write {sign}{word} as a bare word (e.g. "
                                  f"eps={sign}{word}); " + _ALLOWED)
        raise self.refuse(f"calling the Python builtin {name!r}", node,
                          "; nothing is evaluated: write the value as a literal; "
                          + _ALLOWED)

    def constructor(self, func: ast.AST) -> _Constructor:
        dotted = _dotted(func)
        if dotted is None:
            raise self.refuse("calling something other than a name", func)
        constructor = self.table.resolve(dotted)
        if constructor is None:
            what = "the name" if "." not in dotted else "the qualified name"
            raise self.refuse(f"calling {what} {dotted!r}", None,
                              self.table.suggestion(dotted) + "; " + _ALLOWED)
        return constructor

    def arguments(self, node: ast.Call) -> tuple[list, dict]:
        args = []
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                raise self.refuse("* unpacking", arg)
            args.append(self._value(arg))
        kwargs: dict[str, Any] = {}
        for keyword in node.keywords:
            if keyword.arg is None:
                raise self.refuse("** unpacking", keyword.value)
            if keyword.arg in kwargs:
                raise TypeError(f"{self.caller}: keyword argument {keyword.arg!r} is given "
                                f"twice in {_short(self.text)}")
            kwargs[keyword.arg] = self._value(keyword.value)
        return args, kwargs

    def call(self, node: ast.Call) -> Any:
        self._refuse_builtin(node)
        constructor = self.constructor(node.func)
        args, kwargs = self.arguments(node)
        return constructor(args, kwargs)


def _short(text: str, limit: int = 120) -> str:
    """``repr(text)``, cut to about ``limit`` characters."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text)} chars)"


def _dotted(node: ast.AST) -> str | None:
    """``a.b.c`` for a chain of names, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def parse_value(text: str) -> Any:
    """The value written in ``text``: a Python literal, or a call of an allowed
    constructor (see the module's docstring); a bare word that is not a known name
    (``eps_hat``) is that word as a string, as on a command line. A constructor's
    name without a call (``ClipByGlobalNorm``) is refused."""
    caller = "parse_value"
    if isinstance(text, str) and _BARE_WORD.fullmatch(text.strip()):
        word = text.strip()
        if word in CONSTANTS:
            return CONSTANTS[word]
        if word not in _table().canonical:
            return word
    if isinstance(text, str) and not text.strip():
        return text
    node = _parse(text, caller)
    return _Reader(text, caller).value(node)


def parse_spec(text: str, /, **keywords: Any) -> Spec:
    """The optimizer spec written in ``text``.

    ``text`` is an algorithm (``"adamw"``, ``"AdamW(lr=1e-3, amsgrad=True)"``,
    ``"adamw(lr=Cosine(lr=0.1, T_max=100), grad_clip=ClipByGlobalNorm(max_norm=1.0))"``),
    a native class read through its preset (``"torch.optim.Adam"``,
    ``"mindspore.nn.AdamWeightDecay(learning_rate=1e-3)"``), or a spec's JSON
    (``spec.to_json()``). ``keywords`` are added to the call's keyword arguments
    (``parse_spec("adamw", lr=1e-3) == uo.AdamW(lr=1e-3)``); one given twice is a
    TypeError."""
    from unified_opt.spec import Spec, spec_from_dict

    caller = "parse_spec"
    node = _parse(text, caller)
    reader = _Reader(text, caller)
    if isinstance(node, ast.Dict):
        if keywords:
            raise TypeError(f"{caller}: keyword arguments {sorted(keywords)} cannot be "
                            "added to a spec given as JSON")
        return spec_from_dict(reader.value(node))
    if isinstance(node, ast.Call):
        func = node.func
    elif isinstance(node, (ast.Name, ast.Attribute)) and _dotted(node) is not None:
        func = node
    else:
        raise ValueError(f"{caller}: expected an optimizer spec (an algorithm such as "
                         f"adamw(lr=1e-3), or a native class such as "
                         f"torch.optim.Adam(lr=1e-3)), got {_short(text)}")
    dotted = _dotted(func)
    if dotted is not None and reader.table.resolve(dotted) is None:
        raise ValueError(_unknown_spec(caller, dotted, text))
    constructor = reader.constructor(func)
    if not constructor.makes_spec:
        raise ValueError(f"{caller}: {constructor.display} makes a {constructor.kind}, not "
                         f"an optimizer spec, in {_short(text)} (an optimizer is an algorithm "
                         "such as adamw(...) or a native class of uo.presets())")
    args, kwargs = reader.arguments(node) if isinstance(node, ast.Call) else ([], {})
    for key, value in keywords.items():
        if key in kwargs:
            raise TypeError(f"{caller}: keyword argument {key!r} is given twice: in "
                            f"{_short(text)} and as {key}={value!r}")
        kwargs[key] = value
    spec = constructor(args, kwargs)
    if not isinstance(spec, Spec):          # uo.get / uo.preset always give one
        raise TypeError(f"{caller}: {_short(text)} is not an optimizer spec")
    return spec


def _unknown_spec(caller: str, dotted: str, text: str) -> str:
    """The message for a spec whose name is neither an algorithm nor a native class."""
    import unified_opt as uo

    where = "" if text.strip() == dotted else f"in {_short(text)}; "
    if "." not in dotted:
        return (f"{caller}: unknown algorithm {dotted!r}{did_you_mean(dotted, uo.algorithms())}"
                f" ({where}uo.algorithms() lists them; a native class is named with its "
                "module, e.g. torch.optim.Adam)")
    return (f"{caller}: no preset for the native class {dotted!r}"
            f"{did_you_mean(dotted, uo.presets() + uo.presets(refused=True))} "
            f"({where}uo.presets() lists them)")
