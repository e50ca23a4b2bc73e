"""``unified-opt port SCRIPT --to FRAMEWORK``: rewrite a training script's optimizer and
lr-scheduler constructions into another framework.

What it reads, statically (through ``libcst``, which keeps comments and formatting):

* every call of a native optimizer class with a preset (``torch.optim.AdamW(...)``,
  ``optim.AdamW``, ``from torch.optim import AdamW``, the real module path
  ``torch.optim.adamw.AdamW``; Paddle and MindSpore classes alike): the class's preset
  turns its arguments into the spec;
* its lr schedule: a torch-style scheduler constructed on the optimizer's variable
  (``CosineAnnealingLR(optimizer, T_max=100)``, MindSpore's ``experimental.optim``
  schedulers), or a Paddle ``LRScheduler`` / MindSpore ``LearningRateSchedule`` given as
  the optimizer's ``learning_rate`` (inline or through a variable): the scheduler's preset
  gives the spec's lr.

Argument values must be literals (numbers, strings, tuples, ``True``/``None``) or names
bound once, at module level, to literals; the parameter argument stays the expression it
is (``model.parameters()`` becomes MindSpore's ``model.trainable_params()`` and back).
Anything else -- a value computed at run time, parameter groups as a list of dicts, two
schedulers on one optimizer, a class whose preset refuses the arguments -- is refused
with its line number, and nothing is written.

What it writes, for each optimizer: the target framework's native class with the
argument values that make it compute the spec exactly (``uo.explain``'s decision), when
there is one and the lr is constant; else ``uo.build(<spec>, <parameters>)``, the spec
written out as ``uo`` constructor calls. A scheduler variable becomes
``uo.lr_scheduler(optimizer)`` (``None`` on MindSpore, whose optimizers step their lr
themselves: the script's ``scheduler.step()`` lines are listed to remove). Imports the
new code needs are added after the script's own; nothing else changes.
"""

from __future__ import annotations

import ast
import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..backend import BACKENDS
from ..spec import Spec

#: the parameter argument: keyword, and position among the positional arguments
PARAMS = {"torch": ("params", 0), "paddle": ("parameters", 1), "mindspore": ("params", 0)}
#: the method giving a module's trainable parameters
PARAMETERS_METHOD = {"torch": "parameters", "paddle": "parameters",
                     "mindspore": "trainable_params"}


@dataclass
class Rewrite:
    """One rewritten construction: its line in the script, the code before and after,
    and why (``uo.explain``)."""

    line: int
    original: str
    replacement: str
    reasons: str
    spec: Spec | None = None      # what an optimizer's construction computes


@dataclass
class Ported:
    """The rewritten script, what changed, and what is left to the user."""

    source: str
    rewrites: list[Rewrite]
    notes: list[str] = field(default_factory=list)


class PortRefused(ValueError):
    """Constructions that cannot be read statically: ``(line, message)`` each."""

    def __init__(self, refusals: list[tuple[int, str]]):
        self.refusals = refusals
        super().__init__("; ".join(f"line {line}: {message}" for line, message in refusals))


def framework_of(qualified_name: str) -> str | None:
    root = qualified_name.split(".")[0]
    return {"mindformers": "mindspore"}.get(root, root) if root in (
        *BACKENDS, "mindformers") else None


# -- writing a spec as code -------------------------------------------------------------

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


# -- reading the script -----------------------------------------------------------------

def _literal_code(code: str, constants: dict[str, Any]) -> Any:
    """The value of an argument's code: a literal, or a module-level literal's name."""
    tree = ast.parse(code, mode="eval").body
    if isinstance(tree, ast.Name) and tree.id in constants:
        return constants[tree.id]
    return ast.literal_eval(tree)


def _module_constants(module) -> dict[str, Any]:
    """Names assigned exactly once at module level, to a literal."""
    import libcst as cst

    seen: dict[str, list] = {}
    for statement in module.body:
        if not isinstance(statement, cst.SimpleStatementLine):
            continue
        for small in statement.body:
            if isinstance(small, cst.Assign) and len(small.targets) == 1 and isinstance(
                    small.targets[0].target, cst.Name):
                seen.setdefault(small.targets[0].target.value, []).append(small.value)
    constants = {}
    for name, values in seen.items():
        if len(values) == 1:
            try:
                constants[name] = ast.literal_eval(module.code_for_node(values[0]))
            except (ValueError, SyntaxError):
                pass
    return constants


@dataclass
class _Construction:
    kind: str                   # "optimizer" or "scheduler"
    name: str                   # the preset's qualified name
    framework: str
    call: Any                   # the libcst Call
    line: int
    statement: Any = None       # the statement assigning it to a variable, if one does
    target: str | None = None   # that variable


#: where the frameworks' optimizer classes live under their real module paths
#: (``torch.optim.adamw.AdamW``): only such names are imported to be resolved
OPTIMIZER_MODULES = ("torch.optim.", "paddle.optimizer.", "paddle.incubate.",
                     "mindspore.nn.optim.", "mindspore.experimental.optim.", "mindformers.")


def _kind(qualified_name: str) -> tuple[str, str] | None:
    """("optimizer" | "scheduler", preset name) for a native class or function with a
    preset (or a refused one), else None."""
    from ..presets._registry import descriptor_name, registry
    from ..schedules._preset_registry import REGISTRY as SCHEDULES

    def known(name):
        if name in registry().names() or name in registry().names(True):
            return "optimizer", name
        if name in SCHEDULES.names() or name in SCHEDULES.names(True):
            return "scheduler", name
        return None

    found = known(qualified_name)
    if found is None and qualified_name.startswith(OPTIMIZER_MODULES):
        found = known(descriptor_name(qualified_name))
    return found


def _finder():
    import libcst as cst
    from libcst.metadata import PositionProvider, QualifiedNameProvider

    class Finder(cst.CSTVisitor):
        METADATA_DEPENDENCIES = (PositionProvider, QualifiedNameProvider)

        def __init__(self):
            self.found: list[_Construction] = []
            self.assigned: dict[int, tuple[Any, str]] = {}   # id(call) -> (statement, var)
            self.step_calls: dict[str, list[int]] = {}      # var -> lines of var.step()

        def visit_SimpleStatementLine(self, node):
            if len(node.body) == 1 and isinstance(node.body[0], cst.Assign):
                assign = node.body[0]
                if len(assign.targets) == 1 and isinstance(assign.targets[0].target,
                                                           cst.Name):
                    self.assigned[id(assign.value)] = (node, assign.targets[0].target.value)

        def visit_Call(self, node):
            line = self.get_metadata(PositionProvider, node).start.line
            func = node.func
            if isinstance(func, cst.Attribute) and func.attr.value == "step" and isinstance(
                    func.value, cst.Name):
                self.step_calls.setdefault(func.value.value, []).append(line)
            for qualified in self.get_metadata(QualifiedNameProvider, node.func, set()):
                framework = framework_of(qualified.name)
                kind = _kind(qualified.name) if framework else None
                if kind is not None:
                    statement, target = self.assigned.get(id(node), (None, None))
                    self.found.append(_Construction(kind[0], kind[1], framework, node, line,
                                                    statement, target))
                    break

    return Finder()


class _Reader:
    """Turns the found constructions into specs, collecting refusals."""

    def __init__(self, module, finder, constants):
        self.module, self.finder, self.constants = module, finder, constants
        self.refusals: list[tuple[int, str]] = []
        self.by_variable = {c.target: c for c in finder.found if c.target}

    def code(self, node) -> str:
        return self.module.code_for_node(node).strip()

    def refuse(self, construction: _Construction, message: str) -> None:
        self.refusals.append((construction.line, f"{construction.name}: {message}"))

    def arguments(self, c: _Construction, leading: list[str], signature) -> dict:
        """keyword -> argument node; positional ones named by ``leading`` (the arguments
        the preset lacks: parameters, optimizer) and then the preset's signature."""
        names = [n for n in signature.parameters if n != "base_lr"]
        positional = list(leading)
        for n in names:
            if n not in positional:
                positional.append(n)
        out, index = {}, 0
        for arg in c.call.args:
            if arg.star:
                raise ValueError(f"*{'*' if arg.star == '**' else ''} arguments "
                                 f"({self.code(arg)}) cannot be read statically")
            if arg.keyword is None:
                if index >= len(positional):
                    raise ValueError(f"too many positional arguments ({self.code(arg)})")
                out[positional[index]] = arg.value
                index += 1
            else:
                out[arg.keyword.value] = arg.value
        return out

    def literal(self, c: _Construction, keyword: str, node) -> Any:
        text = self.code(node)
        try:
            return _literal_code(text, self.constants)
        except (ValueError, SyntaxError):
            raise ValueError(f"{keyword}={text} is not a literal or a module-level "
                             "constant: its value is only known at run time") from None

    def schedule(self, c: _Construction, base_lr: float | None):
        from ..schedules import preset as schedule_preset
        from ..schedules._preset_registry import REGISTRY

        if c.name in REGISTRY.names(True):
            raise ValueError(REGISTRY.refusal(c.name))
        signature = REGISTRY.signature(c.name)
        torch_style = "base_lr" in signature.parameters
        nodes = self.arguments(c, ["optimizer"] if torch_style else [], signature)
        nodes.pop("optimizer", None)
        kwargs = {k: self.literal(c, k, v) for k, v in nodes.items()}
        if torch_style:
            kwargs["base_lr"] = base_lr
        return schedule_preset(c.name, **kwargs)

    def scheduler_of(self, lr_node):
        """The lr-style scheduler construction an optimizer's lr argument names."""
        import libcst as cst

        for c in self.finder.found:
            if c.kind == "scheduler" and c.call is lr_node:
                return c
        if isinstance(lr_node, cst.Name):
            c = self.by_variable.get(lr_node.value)
            if c is not None and c.kind == "scheduler":
                return c
        return None

    def torch_schedulers(self, optimizer: _Construction) -> list[_Construction]:
        import libcst as cst

        out = []
        for c in self.finder.found:
            if c.kind != "scheduler" or optimizer.target is None:
                continue
            first = c.call.args[0].value if c.call.args and c.call.args[0].keyword is None \
                else next((a.value for a in c.call.args
                           if a.keyword and a.keyword.value == "optimizer"), None)
            if isinstance(first, cst.Name) and first.value == optimizer.target:
                out.append(c)
        return out


class SchedulerRefused(ValueError):
    """An optimizer's scheduler cannot be read: refused on the scheduler's line."""

    def __init__(self, construction, message: str):
        super().__init__(message)
        self.construction = construction


@dataclass
class _Optimizer:
    construction: _Construction
    spec: Spec
    params: Any                              # the parameter argument's node
    schedulers: list[_Construction]          # the constructions its schedule came from


def _read_optimizer(reader: _Reader, c: _Construction) -> _Optimizer:
    import libcst as cst

    from ..presets._registry import preset, registry, signature
    from .live import with_schedule

    if c.name in registry().names(True):
        raise ValueError(registry().refusal(c.name))
    keyword, position = PARAMS[c.framework]
    sig = signature(c.name)
    leading = [n for n in list(sig.parameters)[:position]] + [keyword]
    nodes = reader.arguments(c, leading, sig)
    params = nodes.pop(keyword, None)
    if params is None:
        raise ValueError(f"no parameter argument ({keyword}=...)")
    if isinstance(params, (cst.List, cst.Tuple)) and any(
            isinstance(e.value, cst.Dict) for e in params.elements):
        raise ValueError("parameter groups as a list of dicts: which parameters each "
                         "group holds is only known at run time; build with uo.build(spec, "
                         "model, groups=[uo.Group(match=..., ...)])")
    lr_keyword = next((n for n in ("lr", "learning_rate") if n in sig.parameters), None)
    schedulers, kwargs = [], {}
    for name, node in nodes.items():
        scheduler = reader.scheduler_of(node) if name == lr_keyword else None
        if scheduler is not None:
            try:
                kwargs[name] = reader.schedule(scheduler, None)
            except (ValueError, TypeError, NotImplementedError) as error:
                raise SchedulerRefused(scheduler, str(error)) from None
            schedulers.append(scheduler)
        else:
            kwargs[name] = reader.literal(c, name, node)
    spec = preset(c.name, **kwargs)
    attached = reader.torch_schedulers(c)
    if len(attached) > 1:
        lines = ", ".join(str(s.line) for s in attached)
        raise ValueError(f"{len(attached)} schedulers (lines {lines}) step this optimizer; "
                         "port one (or a SequentialLR/ChainedScheduler of them)")
    if attached:
        if schedulers or not isinstance(spec.lr, (int, float)):
            raise ValueError(f"a scheduler (line {attached[0].line}) on an optimizer whose "
                             "lr is a schedule already")
        try:
            schedule = reader.schedule(attached[0], float(spec.lr))
        except (ValueError, TypeError, NotImplementedError) as error:
            raise SchedulerRefused(attached[0], str(error)) from None
        spec = with_schedule(spec, schedule)
        schedulers = attached
    return _Optimizer(c, spec, params, schedulers)


# -- writing the target's code ----------------------------------------------------------

def _params_code(reader: _Reader, node, source: str, to: str) -> str:
    import libcst as cst

    if (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and not node.args
            and node.func.attr.value == PARAMETERS_METHOD[source]):
        return f"{reader.code(node.func.value)}.{PARAMETERS_METHOD[to]}()"
    return reader.code(node)


def _emit(o: _Optimizer, reader: _Reader, to: str) -> tuple[str, str, str]:
    """(the new call, why, the import it needs)."""
    from ..build import explain

    decision = explain(o.spec, backend=to)
    params = _params_code(reader, o.params, o.construction.framework, to)
    why = " ".join(line.strip() for line in str(decision).splitlines()[:2])
    if decision.path == "native" and isinstance(o.spec.lr, (int, float)):
        kwargs = decision.native_class.native_call(decision.lowering, o.spec)
        try:
            arguments = [f"{k}={_value_code(v)}" for k, v in kwargs.items()]
        except ValueError:     # an argument that is an object (a clip, a function)
            arguments = None
        if arguments is not None:
            head = f"{PARAMS[to][0]}={params}" if to == "paddle" else params
            return (f"{decision.native}({', '.join([head, *arguments])})", why,
                    f"import {decision.native.rpartition('.')[0]}")
    return f"uo.build({spec_code(o.spec)}, {params})", why, "import unified_opt as uo"


def _insert_imports(module, imports: list[str]):
    import libcst as cst

    present = module.code
    new = [cst.parse_statement(line + "\n") for line in imports
           if f"\n{line}\n" not in f"\n{present}"]
    if not new:
        return module
    body = list(module.body)
    last = max((i for i, s in enumerate(body) if isinstance(s, cst.SimpleStatementLine)
                and any(isinstance(x, (cst.Import, cst.ImportFrom)) for x in s.body)),
               default=None)
    if last is None:
        docstring = bool(body) and isinstance(body[0], cst.SimpleStatementLine) and \
            isinstance(body[0].body[0], cst.Expr) and isinstance(
                body[0].body[0].value, (cst.SimpleString, cst.ConcatenatedString))
        last = 0 if docstring else -1
    return module.with_changes(body=body[:last + 1] + new + body[last + 1:])


def port_source(source: str, to: str, *, filename: str = "<script>") -> Ported:
    """Rewrite ``source``'s optimizer and scheduler constructions for framework ``to``
    (module docstring). Raises :class:`PortRefused` listing every construction it
    cannot read (nothing is rewritten then), ValueError for a bad ``to`` or source."""
    import libcst as cst
    from libcst.metadata import MetadataWrapper

    if to not in BACKENDS:
        raise ValueError(f"port: to must be one of {list(BACKENDS)}, got {to!r}")
    try:
        wrapper = MetadataWrapper(cst.parse_module(source))
    except cst.ParserSyntaxError as error:
        raise ValueError(f"port: {filename} is not valid Python: {error}") from None
    finder = _finder()
    wrapper.visit(finder)
    reader = _Reader(wrapper.module, finder, _module_constants(wrapper.module))
    optimizers = []
    for c in finder.found:
        if c.kind == "optimizer":
            try:
                optimizers.append(_read_optimizer(reader, c))
            except SchedulerRefused as error:
                reader.refuse(error.construction, str(error))
                reader.refuse(c, f"its scheduler (line {error.construction.line}) cannot "
                              "be read")
            except (ValueError, TypeError, NotImplementedError) as error:
                reader.refuse(c, str(error))
    used = {id(s.call) for o in optimizers for s in o.schedulers}
    # the schedulers of an optimizer refused above are refused with it
    used |= {id(s.call) for c in finder.found if c.kind == "optimizer"
             and c.line in {line for line, _ in reader.refusals}
             for s in reader.torch_schedulers(c)}
    refused_lines = {line for line, _ in reader.refusals}
    for c in finder.found:
        if c.kind == "scheduler" and id(c.call) not in used and c.line not in refused_lines:
            reader.refuse(c, "it schedules no optimizer constructed in this script (a "
                          "torch-style scheduler takes the optimizer's variable; a Paddle "
                          "or MindSpore one is the optimizer's learning_rate)")
    if reader.refusals:
        raise PortRefused(sorted(reader.refusals))
    return _rewrite(wrapper.module, reader, optimizers, to)


def _rewrite(module, reader: _Reader, optimizers: list[_Optimizer], to: str) -> Ported:
    import libcst as cst

    calls: dict[int, str] = {}
    remove: set[int] = set()
    after: dict[int, list[str]] = {}
    rewrites, notes, imports = [], [], []
    for o in optimizers:
        c = o.construction
        if c.framework == to:
            notes.append(f"line {c.line}: {c.name} is a {to} class already: left as it is")
            continue
        code, why, needed = _emit(o, reader, to)
        calls[id(c.call)] = code
        imports.append(needed)
        rewrites.append(Rewrite(c.line, reader.code(c.call), code, why, o.spec))
        for s in o.schedulers:
            new = f"uo.lr_scheduler({c.target})"
            reason = ("the schedule is the spec's lr now (line "
                      f"{c.line}); uo.lr_scheduler gives the scheduler uo.build made")
            if s in reader.torch_schedulers(c):
                calls[id(s.call)] = new
                rewrites.append(Rewrite(s.line, reader.code(s.call), new, reason))
            elif s.target is not None:
                if c.statement is None:
                    raise PortRefused([(c.line, f"{c.name}: its schedule (line {s.line}) "
                                        "moves after it, so it must be assigned to a "
                                        "variable on a line of its own")])
                remove.add(id(s.statement))
                after.setdefault(id(c.statement), []).append(f"{s.target} = {new}")
                rewrites.append(Rewrite(s.line, reader.code(s.call), f"{s.target} = {new} "
                                        f"(after line {c.line})", reason))
            elif to != "mindspore":
                notes.append(f"line {c.line}: the schedule given inline is inside the "
                             f"optimizer now; step uo.lr_scheduler(optimizer) after each "
                             "optimizer step")
            steps = reader.finder.step_calls.get(s.target or "", [])
            if to == "mindspore" and steps:
                where = "line" + ("s" if len(steps) > 1 else "")
                notes.append(f"{where} {', '.join(map(str, steps))}: {s.target}.step() -- "
                             "remove: MindSpore optimizers step their lr themselves "
                             f"(uo.lr_scheduler gives None there)")
            imports.append("import unified_opt as uo")

    class Rewriter(cst.CSTTransformer):
        def leave_Call(self, original, updated):
            code = calls.get(id(original))
            return cst.parse_expression(code) if code is not None else updated

        def leave_SimpleStatementLine(self, original, updated):
            if id(original) in remove:
                return cst.RemoveFromParent()
            extra = after.get(id(original))
            if extra:
                return cst.FlattenSentinel([updated, *(cst.parse_statement(x + "\n")
                                                       for x in extra)])
            return updated

    rewritten = _insert_imports(module.visit(Rewriter()), list(dict.fromkeys(imports)))
    return Ported(rewritten.code, rewrites, notes)
