"""``unified-opt port SCRIPT --to paddle|mindspore`` for a torch script: keep the user's
code, map only the framework calls of :mod:`.api_map`.

Read with libcst (comments and formatting kept) and its scope analysis: a name is read
by the binding it has where it stands, so a function's parameter is never read as the
module-level name it shadows. Nothing is evaluated while porting: every argument stays
the expression the script wrote and is read at run time (values a configurator
overrides with ``exec(open(...).read())`` included).

What the port cannot map is left as written, marked in place by a ``# unified-opt port:
not ported: <why>`` comment above its statement, and listed (:attr:`.ported.Ported.
refusals`); every such reason is found in one run:

* a ``torch.optim`` class without a preset, or whose preset refuses it; a scheduler the
  table has no ``uo.lr_scheduler`` name for; a class named without a direct call (an
  alias, ``functools.partial``) or called through ``from torch.optim import *``; ``*args``
  to an optimizer;
* a call of another library's function that is handed an optimizer (a scheduler from
  another library drives torch's optimizer API; the port does not know what it calls);
* torch's ``GradScaler`` (use the spec's ``loss_scale``);
* a ``torch.nn`` class in a type test that the target has no class for in the table;
* on MindSpore, a clip the optimizer cannot take as its ``grad_clip`` exactly (not right
  before the step of the script's one optimizer, another norm, ``max_norm`` not known
  where the optimizer is built).

Where a statement runs only on torch (``optimizer.step()`` on MindSpore, which keeps no
gradients on parameters), a note says what the target's training step does instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .api_map import (
    CLASSES,
    CLIP_NORM_ARGUMENTS,
    CLIPS,
    INSPECTIONS,
    KEYWORDS,
    METHODS,
    NO_ARGUMENTS,
    SCHEDULER_MODULES,
    SCHEDULERS,
    class_for,
    is_torch_nn_class,
)
from .ported import Ported, Rewrite

MARK = "# unified-opt port: not ported: "
#: torch's loss scalers, which step the optimizer themselves
SCALERS = ("torch.cuda.amp.GradScaler", "torch.amp.GradScaler",
           "torch.amp.grad_scaler.GradScaler", "torch.cuda.amp.grad_scaler.GradScaler")


@dataclass
class _Optimizer:
    call: Any
    name: str                       # the preset's qualified name
    line: int
    statement: Any
    target: str | None
    clip: str | None = None         # the max_norm code a MindSpore port moves inside


@dataclass
class _Plan:
    """What the collecting pass decided, keyed by the original nodes' ids."""

    to: str
    optimizers: list[_Optimizer] = field(default_factory=list)
    optimizer_names: set[str] = field(default_factory=set)
    schedulers: dict[int, str] = field(default_factory=dict)       # call -> uo name
    clips: list[tuple[Any, str, int, Any]] = field(default_factory=list)  # call, kind, line, stmt
    methods: dict[int, str] = field(default_factory=dict)          # call -> method
    references: dict[int, str] = field(default_factory=dict)       # Name/Attribute -> code
    state: dict[int, str] = field(default_factory=dict)            # call -> "save" | "load"
    signatures: dict[int, str] = field(default_factory=dict)       # inspect.signature(class)
    #: MindSpore clip -> (the optimizer variable stepped after it, parameters by keyword)
    clip_checks: dict[int, tuple[str, bool]] = field(default_factory=dict)
    marks: list[tuple[int, str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    rewrites: list[Rewrite] = field(default_factory=list)
    imports: list[str] = field(default_factory=list)

    def mark(self, line: int, message: str, statement: Any) -> None:
        self.marks.append((line, " ".join(message.split()), statement))


def port_torch(source: str, to: str, *, filename: str = "<script>") -> Ported:
    """Map ``source``'s (a torch script's) optimizer, scheduler, clip, parameter-selection
    and optimizer-state calls to ``to`` ("paddle" or "mindspore"), keeping everything else
    as written (module docstring). ValueError for source that does not parse."""
    import libcst as cst
    from libcst.metadata import (
        MetadataWrapper,
        PositionProvider,
        QualifiedNameProvider,
        ScopeProvider,
    )

    try:
        wrapper = MetadataWrapper(cst.parse_module(source))
    except cst.ParserSyntaxError as error:
        raise ValueError(f"port: {filename} is not valid Python: {error}") from None
    qualified = _Resolved(wrapper.resolve(QualifiedNameProvider))
    positions = _Resolved(wrapper.resolve(PositionProvider))
    scopes = _Resolved(wrapper.resolve(ScopeProvider))
    plan = _Plan(to)
    collector = _collector(plan, qualified, positions)
    wrapper.module.visit(collector)
    _plan_clips(plan, wrapper.module, scopes, qualified)
    if to == "mindspore":
        for line, variable in collector.step_lines:
            plan.notes.append(
                f"line {line}: {variable}.step() steps with the gradients torch keeps on the "
                "parameters; MindSpore keeps none: its training step computes them "
                "(mindspore.value_and_grad) and calls the optimizer on them, "
                f"{variable}(grads), ported with the model's forward and backward")
    module = wrapper.module.visit(_rewriter(plan, wrapper.module, positions))
    module = _insert_imports(module, list(dict.fromkeys(plan.imports)))
    refusals = sorted((line, message) for line, message, _ in plan.marks)
    ported = Ported(module.code, sorted(plan.rewrites, key=lambda r: r.line), plan.notes,
                    refusals)
    if not plan.optimizers and not refusals and not plan.rewrites:
        ported.nothing_found = (
            f"{filename}: no optimizer construction found: the port reads direct calls of "
            "torch, Paddle and MindSpore optimizer classes (torch.optim.AdamW(...), "
            "paddle.optimizer.Adam(...), mindspore.nn.Adam(...)) through the script's "
            "imports")
    return ported


class _Resolved:
    """A metadata mapping whose values libcst may compute on first read."""

    def __init__(self, mapping):
        self.mapping = mapping

    def get(self, node, default=None):
        value = self.mapping.get(node, default)
        return value() if callable(value) else value

    def __getitem__(self, node):
        return self.get(node)


# -- the collecting pass ----------------------------------------------------------------

def _collector(plan: _Plan, qualified, positions):
    import libcst as cst
    from libcst.metadata import QualifiedNameSource

    from ..presets._registry import refusal, registry
    from .finder import native_kind

    def names_of(node) -> list:
        return sorted(qualified.get(node, set()), key=lambda q: q.name)

    class Collector(cst.CSTVisitor):
        def __init__(self):
            self.statements: list = []
            self.assigned: dict[int, str] = {}          # id(value) -> the variable
            self.calls: set[int] = set()                # id(func) of every call
            self.inspecting = 0                        # inside isinstance(...) & co.
            self.type_tests = 0                         # inside isinstance / issubclass
            self.containers = 0                         # inside a tuple or list literal
            self.star_modules: list[str] = []
            self.step_lines: list[tuple[int, str]] = []

        def line(self, node) -> int:
            return positions[node].start.line

        def statement(self):
            return self.statements[-1] if self.statements else None

        def visit_SimpleStatementLine(self, node):
            self.statements.append(node)
            if len(node.body) == 1 and isinstance(node.body[0], cst.Assign):
                assign = node.body[0]
                if len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name):
                    self.assigned[id(assign.value)] = assign.targets[0].target.value

        def leave_SimpleStatementLine(self, node):
            self.statements.pop()

        def visit_Import(self, node):
            return False

        def visit_ImportFrom(self, node):
            if isinstance(node.names, cst.ImportStar) and node.module is not None:
                self.star_modules.append(cst.Module([]).code_for_node(node.module))
            return False

        def visit_Annotation(self, node):
            return False

        def visit_Call(self, node):
            self.calls.add(id(node.func))
            found = names_of(node.func)
            full = {q.name for q in found}
            if full & set(INSPECTIONS):
                self.inspecting += 1
            if full & {"builtins.isinstance", "builtins.issubclass"}:
                self.type_tests += 1
            line = self.line(node)
            for q in found:
                if self._call(node, q.name, line):
                    return
            func = node.func
            if isinstance(func, cst.Attribute) and func.attr.value == "step" and isinstance(
                    func.value, cst.Name) and func.value.value in plan.optimizer_names:
                self.step_lines.append((line, func.value.value))
            if isinstance(func, cst.Attribute) and func.attr.value in METHODS and not any(
                    q.source is QualifiedNameSource.IMPORT for q in found):
                renamed = KEYWORDS.get((func.attr.value, plan.to), {})
                if METHODS[func.attr.value][plan.to] is not None or any(
                        a.keyword is not None and a.keyword.value in renamed
                        for a in node.args):
                    if (func.attr.value, plan.to) in NO_ARGUMENTS and node.args:
                        plan.mark(line, f".{func.attr.value}(...) with arguments: "
                                  f"{plan.to} has no form of it that takes them",
                                  self.statement())
                    else:
                        plan.methods[id(node)] = func.attr.value
            if isinstance(func, cst.Attribute) and func.attr.value == "load_state_dict" and \
                    len(node.args) == 1 and isinstance(func.value, cst.Name) and \
                    func.value.value in plan.optimizer_names:
                inner = node.args[0].value
                if isinstance(inner, cst.Call) and any(
                        q.name == "torch.load" for q in names_of(inner.func)):
                    plan.state[id(node)] = "load"
            if not found and isinstance(func, cst.Name):
                for module in self.star_modules:
                    if module.startswith("torch.optim") and native_kind(
                            f"{module}.{func.value}", resolve=False):
                        plan.mark(line, f"{func.value} comes from 'from {module} import *', "
                                  "which the port does not follow; import it by name",
                                  self.statement())
            self._hands_optimizer(node, found, line)

        def _call(self, node, name: str, line: int) -> bool:
            """Record a call of the qualified ``name``; True when it is one the tables
            know (or refuse)."""
            statement = self.statement()
            if name in SCHEDULERS:
                plan.schedulers[id(node)] = SCHEDULERS[name]
                return True
            if name.startswith(SCHEDULER_MODULES):
                plan.mark(line, f"{name}: no scheduler of that name in uo.lr_scheduler",
                          statement)
                return True
            if name in CLIPS:
                plan.clips.append((node, CLIPS[name][0], line, statement))
                return True
            if name in SCALERS:
                plan.mark(line, f"{name}: torch's loss scaler steps the optimizer itself; "
                          "give the spec a loss_scale (uo.preset(..., ).replace(loss_scale="
                          "...)) and step the optimizer", statement)
                return True
            if name == "inspect.signature" and len(node.args) == 1:
                for q in names_of(node.args[0].value):
                    kind = native_kind(q.name) if q.name.startswith("torch.optim.") else None
                    if kind is not None and kind[1] in registry().names():
                        plan.signatures[id(node)] = kind[1]
                        plan.imports += ["import unified_opt as uo", "import unified_opt.porting"]
                        return True
                return False
            if name == "torch.save" and node.args and isinstance(
                    node.args[0].value, cst.Call):
                inner = node.args[0].value.func
                if isinstance(inner, cst.Attribute) and inner.attr.value == "state_dict" \
                        and isinstance(inner.value, cst.Name) and \
                        inner.value.value in plan.optimizer_names:
                    plan.state[id(node)] = "save"
                return True
            if not name.startswith("torch.optim."):
                return False
            kind = native_kind(name)
            if kind is None or kind[0] != "optimizer":
                plan.mark(line, f"{name}: not an optimizer or scheduler the port maps",
                          statement)
                return True
            if kind[1] not in registry().names():
                plan.mark(line, f"{kind[1]}: {refusal(kind[1])}", statement)
                return True
            if any(arg.star == "*" for arg in node.args):
                plan.mark(line, f"{kind[1]}: *args cannot be matched to its arguments; "
                          "pass them by keyword", statement)
                return True
            target = self.assigned.get(id(node))
            plan.optimizers.append(_Optimizer(node, kind[1], line, statement, target))
            if target is not None:
                plan.optimizer_names.add(target)
            return True

        def _hands_optimizer(self, node, found, line: int) -> None:
            """A function of another library handed an optimizer is marked."""
            imported = [q.name for q in found if q.source is QualifiedNameSource.IMPORT
                        and not q.name.startswith(("torch.", "builtins.", "unified_opt"))
                        and q.name not in SCHEDULERS]
            if not imported:
                return
            for arg in node.args:
                if isinstance(arg.value, cst.Name) and arg.value.value in plan.optimizer_names:
                    plan.mark(line, f"{imported[0]} is handed the optimizer "
                              f"{arg.value.value}: a call of another library, which the port "
                              "does not map (a scheduler of its own drives torch's optimizer "
                              "API); use uo.lr_scheduler, or check it needs only "
                              "param_groups", self.statement())
                    return

        def leave_Call(self, node):
            full = {q.name for q in names_of(node.func)}
            if full & set(INSPECTIONS):
                self.inspecting -= 1
            if full & {"builtins.isinstance", "builtins.issubclass"}:
                self.type_tests -= 1

        def visit_Tuple(self, node):
            self.containers += 1

        def leave_Tuple(self, node):
            self.containers -= 1

        def visit_List(self, node):
            self.containers += 1

        def leave_List(self, node):
            self.containers -= 1

        def visit_Attribute(self, node):
            return self._reference(node)

        def visit_Name(self, node):
            return self._reference(node)

        def _reference(self, node) -> bool:
            if id(node) in self.calls:
                return True
            for q in names_of(node):
                name = q.name
                mapped = class_for(name, plan.to)
                # a module type a script tests parameters by: in a type test or a tuple or
                # list of types; a base class or a layer built is the model's code
                if mapped is not None and (self.type_tests or self.containers):
                    plan.references[id(node)] = mapped
                    plan.imports.append(f"import {mapped.split('.')[0]}")
                    return False
                if self.type_tests and is_torch_nn_class(name):
                    plan.mark(self.line(node), f"{name}: no {plan.to} class for it in the "
                              f"port's table ({', '.join(sorted(CLASSES))})", self.statement())
                    return False
                if name.startswith("torch.optim.") and not self.inspecting and native_kind(
                        name, resolve=False) is not None:
                    plan.mark(self.line(node), f"{name}: named here without being called "
                              "(an alias, functools.partial, a base class): the port maps "
                              "only a direct call of the class; call it directly",
                              self.statement())
                    return False
            return True

    collector = Collector()
    return collector


# -- clips on MindSpore -----------------------------------------------------------------

def _plan_clips(plan: _Plan, module, scopes, qualified) -> None:
    """Paddle: each clip calls uo's of the same signature. MindSpore keeps no gradient on
    parameters: a norm clip becomes the grad_clip of the script's one optimizer, where
    that is exact (module docstring); else it is marked."""
    import libcst as cst

    for call, kind, line, statement in plan.clips:
        if plan.to != "mindspore":
            continue
        try:
            args = _clip_arguments(call)
            if kind != "norm":
                raise ValueError("MindSpore keeps no gradient on parameters and the specs "
                                 "clip by value only at the optimizer's own path; clip the "
                                 "gradients (mindspore.ops.clip_by_value) before calling the "
                                 "optimizer")
            if statement is None or not (isinstance(statement.body[-1], cst.Expr)
                                         and statement.body[-1].value is call):
                raise ValueError("its result is used: only a clip on a statement of its own "
                                 "moves into the optimizer")
            if len(plan.optimizers) != 1:
                raise ValueError(f"the script builds {len(plan.optimizers)} optimizers: the "
                                 "clip moves into the script's one optimizer")
            norm_type = args.get("norm_type")
            if norm_type is not None and _code(norm_type) not in ("2", "2.0"):
                raise ValueError(f"norm_type={_code(norm_type)}: the spec clips by the 2-norm")
            error = args.get("error_if_nonfinite")
            if error is not None and _code(error) != "False":
                raise ValueError("error_if_nonfinite raises where the spec's clip goes on")
            stepped = _next_step(module, statement)
            if stepped is None:
                raise ValueError("the next statement is not the optimizer's .step(): only a "
                                 "clip right before the step moves into the optimizer")
            optimizer = plan.optimizers[0]
            max_norm = args["max_norm"]
            _check_same_value(max_norm, scopes, qualified, optimizer.call)
        except ValueError as error:
            plan.mark(line, f"clip_grad_{kind}_: {error}", statement)
            continue
        optimizer.clip = _code(max_norm)
        plan.clip_checks[id(call)] = (stepped, "parameters" in [
            a.keyword.value for a in call.args if a.keyword is not None])
        plan.imports += ["import unified_opt as uo", "import unified_opt.porting"]
        plan.notes.append(
            f"line {line}: the clip is the optimizer's grad_clip now (line {optimizer.line}: "
            "MindSpore keeps no gradient on parameters; it clips inside its step, dividing by "
            "the norm + 1e-6 as torch); the statement left checks it clips these parameters")


def _clip_arguments(call) -> dict:
    out, index = {}, 0
    for arg in call.args:
        if arg.star:
            raise ValueError("* arguments cannot be matched to its arguments")
        key = arg.keyword.value if arg.keyword is not None else CLIP_NORM_ARGUMENTS[index]
        index += arg.keyword is None
        out[key] = arg.value
    if "parameters" not in out or "max_norm" not in out:
        raise ValueError("no parameters or max_norm argument")
    return out


def _next_step(module, statement) -> str | None:
    """The optimizer variable ``V`` when the statement after ``statement`` in its block is
    ``V.step()``."""
    import libcst as cst

    class Finder(cst.CSTVisitor):
        found: str | None = None

        def _block(self, body) -> None:
            for first, second in zip(body, body[1:]):
                if first is statement and isinstance(second, cst.SimpleStatementLine) and \
                        len(second.body) == 1 and isinstance(second.body[0], cst.Expr):
                    call = second.body[0].value
                    if isinstance(call, cst.Call) and not call.args and isinstance(
                            call.func, cst.Attribute) and call.func.attr.value == "step" \
                            and isinstance(call.func.value, cst.Name):
                        Finder.found = call.func.value.value

        def visit_IndentedBlock(self, node):
            self._block(list(node.body))

        def visit_Module(self, node):
            self._block(list(node.body))

    Finder.found = None
    module.visit(Finder())
    return Finder.found


def _check_same_value(node, scopes, qualified, build_call) -> None:
    """ValueError unless ``node`` (the clip's max_norm) means the same where the optimizer
    is built: a number, or a name bound only at module level and not rebound (a function
    parameter, a local) where the optimizer is built."""
    import libcst as cst

    if isinstance(node, (cst.Integer, cst.Float)):
        return
    if not isinstance(node, cst.Name):
        raise ValueError(f"max_norm={_code(node)} is not a number or a module-level name, "
                         "so it is not known where the optimizer is built")
    here, there = scopes.get(node), scopes.get(build_call)
    if here is None or there is None:
        raise ValueError(f"max_norm={node.value}: its scope is not known")
    bound_here = {id(a.node) for a in here[node.value]}
    bound_there = {id(a.node) for a in there[node.value]}
    module_level = all(type(a.scope).__name__ == "GlobalScope" for a in here[node.value])
    if not bound_here or bound_here != bound_there or not module_level:
        raise ValueError(f"max_norm={node.value} is bound otherwise where the optimizer is "
                         "built (a function's parameter or local), so the optimizer cannot "
                         "clip with it")


def _code(node) -> str:
    import libcst as cst

    return cst.Module([]).code_for_node(node)


# -- the rewriting pass -----------------------------------------------------------------

def _why(plan: _Plan, key: int) -> str:
    if key in plan.schedulers:
        return ("uo.lr_scheduler has torch's scheduler of that name, its arguments and "
                "numbers, driving the optimizer through param_groups")
    if key in plan.clip_checks:
        return "the optimizer clips inside its step (its grad_clip): this checks it clips these"
    if key in plan.state:
        return "the optimizer's state in one safetensors file, readable on every framework"
    if key in plan.signatures:
        return "torch's signature of the class as its preset reads it, without torch"
    if key in plan.methods:
        return f"{plan.to}'s spelling of torch's {plan.methods[key]}()"
    return f"uo's clip of torch's signature, on {plan.to}'s parameters"


def _rewriter(plan: _Plan, module, positions):
    import libcst as cst

    from ..presets._registry import signature

    def args_code(args, rename: dict | None = None) -> str:
        parts = []
        for arg in args:
            value = _code(arg.value)
            if arg.star:
                parts.append(f"{arg.star}{value}")
            elif arg.keyword is not None:
                key = (rename or {}).get(arg.keyword.value, arg.keyword.value)
                parts.append(f"{key}={value}")
            else:
                parts.append(value)
        return ", ".join(parts)

    def optimizer_code(o: _Optimizer, call) -> str:
        positional = [p for p in signature(o.name).parameters.values()
                      if p.kind is p.POSITIONAL_OR_KEYWORD]
        params, keywords, index = None, [], 0
        for arg in call.args:
            value = _code(arg.value)
            if arg.star == "**":
                keywords.append(f"**{value}")
            elif arg.keyword is not None and arg.keyword.value == "params":
                params = value
            elif arg.keyword is not None:
                keywords.append(f"{arg.keyword.value}={value}")
            elif params is None and index == 0:
                params, index = value, 1
            else:
                keywords.append(f"{positional[index - 1].name}={value}")
                index += 1
        spec = f"uo.preset({o.name!r}{''.join(', ' + k for k in keywords)})"
        if o.clip is not None:
            spec += f".replace(grad_clip=uo.ClipByGlobalNorm(max_norm={o.clip}, eps=1e-6))"
        return f"uo.build({spec}, {params})"

    optimizers = {id(o.call): o for o in plan.optimizers}
    marked: dict[int, list[str]] = {}
    for _, message, statement in plan.marks:
        if statement is not None:
            marked.setdefault(id(statement), []).append(MARK + message)
    positionless = [message for _, message, statement in plan.marks if statement is None]
    if positionless:
        plan.notes += [f"not ported (no statement to mark): {m}" for m in positionless]
    clips = {id(call): kind for call, kind, _, _ in plan.clips}

    class Rewriter(cst.CSTTransformer):
        def leave_Call(self, original, updated):
            key = id(original)
            code = None
            if key in optimizers:
                o = optimizers[key]
                code = optimizer_code(o, updated)
                plan.rewrites.append(Rewrite(o.line, _code(original), code,
                                             f"{o.name}'s preset keeps torch's conventions; "
                                             "uo.build builds it on the parameters' framework"))
                plan.imports.append("import unified_opt as uo")
            elif key in plan.schedulers:
                code = f"uo.lr_scheduler.{plan.schedulers[key]}({args_code(updated.args)})"
                plan.imports.append("import unified_opt as uo")
            elif key in clips and plan.to == "paddle":
                name = "clip_grad_norm_" if clips[key] == "norm" else "clip_grad_value_"
                code = f"uo.{name}({args_code(updated.args)})"
                plan.imports.append("import unified_opt as uo")
            elif key in plan.signatures:
                code = f"uo.porting.torch_signature({plan.signatures[key]!r})"
            elif key in plan.clip_checks:
                variable, _ = plan.clip_checks[key]
                args = _clip_arguments(updated)
                code = (f"uo.porting.check_clip_in_step({variable}, "
                        f"{_code(args['parameters'])}, {_code(args['max_norm'])})")
            elif plan.state.get(key) == "save":
                variable = updated.args[0].value.func.value.value
                rest = args_code(updated.args[1:])
                code = f"uo.save_state({variable}, {rest})"
                plan.imports.append("import unified_opt as uo")
            elif plan.state.get(key) == "load":
                variable = updated.func.value.value
                code = f"uo.load_state({variable}, {args_code(updated.args[0].value.args)})"
                plan.imports.append("import unified_opt as uo")
            elif key in plan.methods:
                method = plan.methods[key]
                args = args_code(updated.args, KEYWORDS.get((method, plan.to)))
                template = METHODS[method][plan.to] or f"{{receiver}}.{method}({{args}})"
                code = template.format(
                    receiver=_code(updated.func.value), args=args,
                    comma_args=f", {args}" if args else "",
                    args_first=f"{args}, " if args else "")
                if "uo.porting" in code:
                    plan.imports += ["import unified_opt as uo", "import unified_opt.porting"]
            if code is None:
                return updated
            if key not in optimizers:
                plan.rewrites.append(Rewrite(positions[original].start.line,
                                             _code(original), code, _why(plan, key)))
            return cst.parse_expression(code)

        def leave_Name(self, original, updated):
            return self._reference(original, updated)

        def leave_Attribute(self, original, updated):
            return self._reference(original, updated)

        def _reference(self, original, updated):
            code = plan.references.get(id(original))
            if code is None:
                return updated
            plan.rewrites.append(Rewrite(positions[original].start.line, _code(original),
                                         code, f"{plan.to}'s class of that module type"))
            return cst.parse_expression(code)

        def visit_SimpleStatementLine(self, node):
            self.rewrites_before = len(plan.rewrites)

        def leave_SimpleStatementLine(self, original, updated):
            if id(original) in marked:
                # a statement not ported stays as written, inner calls included
                del plan.rewrites[self.rewrites_before:]
                updated = original
                comments = [cst.EmptyLine(comment=cst.Comment(text))
                            for text in dict.fromkeys(marked[id(original)])]
                updated = updated.with_changes(leading_lines=[*updated.leading_lines,
                                                              *comments])
            return updated

    return Rewriter()


def _insert_imports(module, imports: list[str]):
    """``imports`` not in the script yet, after its last top-level import."""
    import libcst as cst

    present = f"\n{module.code}"
    new = [cst.parse_statement(line + "\n") for line in imports
           if f"\n{line}\n" not in present]
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
