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
* a call of another library's function, or of a method of an object built from another
  library's class (``accelerator.prepare(model, optimizer)``), that is handed an
  optimizer (a scheduler or a wrapper from another library drives torch's optimizer API;
  the port does not know what it calls);
* torch's ``GradScaler`` (use the spec's ``loss_scale``);
* on Paddle, a scheduler cycling the momentum (``OneCycleLR``, ``CyclicLR``) whose
  optimizer argument is not followed to its construction (:func:`.cycled.plan_cycled`): that
  optimizer needs ``path='own'``;
* a ``torch.nn`` class in a type test that the target has no class for in the table;
* on MindSpore, a clip the optimizer cannot take as its ``grad_clip`` exactly (not right
  before the step of the script's one optimizer, another norm, ``max_norm`` not known
  where the optimizer is built).

Where a statement runs only on torch (``optimizer.step()`` on MindSpore, which keeps no
gradients on parameters), a note says what the target's training step does instead.
"""

from __future__ import annotations

from .api_map import (
    CLIP_NORM_ARGUMENTS,
    KEYWORDS,
    METHODS,
    STATE_NEEDS_OWN,
)
from .cycled import plan_cycled
from .ported import Ported, Rewrite, insert_imports, nothing_found
from .torch_calls import Optimizer, Plan, Resolved
from .torch_calls import code_of as _code
from .torch_calls import collector as collector_of

MARK = "# unified-opt port: not ported: "


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
    qualified = Resolved(wrapper.resolve(QualifiedNameProvider))
    positions = Resolved(wrapper.resolve(PositionProvider))
    scopes = Resolved(wrapper.resolve(ScopeProvider))
    plan = Plan(to)
    plan.optimizer_names |= _optimizer_like(wrapper.module)
    collector = collector_of(plan, qualified, positions)
    wrapper.module.visit(collector)
    _plan_clips(plan, wrapper.module, scopes, qualified)
    plan_cycled(plan, wrapper.module)
    if to == "mindspore":
        for line, variable in collector.step_lines:
            plan.notes.append(
                f"line {line}: {variable}.step() steps with the gradients torch keeps on the "
                "parameters; MindSpore keeps none: its training step computes them "
                "(mindspore.value_and_grad) and calls the optimizer on them, "
                f"{variable}(grads), ported with the model's forward and backward")
    dropped = _unused_imports(plan, scopes, positions)
    module = wrapper.module.visit(_rewriter(plan, wrapper.module, positions, dropped))
    module = insert_imports(module, list(dict.fromkeys(plan.imports)))
    refusals = sorted((line, message) for line, message, _ in plan.marks)
    ported = Ported(module.code, sorted(plan.rewrites, key=lambda r: r.line), plan.notes,
                    refusals)
    if not plan.optimizers and not refusals and not plan.rewrites:
        ported.nothing_found = nothing_found(filename)
    return ported


def _state_targets(plan: Plan) -> set[str]:
    """The optimizer variables whose state the script saves or loads (``torch.save(
    opt.state_dict(), f)``, ``opt.load_state_dict(torch.load(f))``)."""
    import libcst as cst

    out = set()
    for node, kind in plan.state_calls:
        holder = (node.args[0].value.func if kind == "save" else node.func).value
        if isinstance(holder, cst.Name):
            out.add(holder.value)
    return out


def _optimizer_like(module) -> set[str]:
    """Variables the script treats as optimizers (reads ``.param_groups`` of, calls
    ``.zero_grad()`` on), wherever they were built: a helper's return value, a method's."""
    import libcst as cst

    found: set[str] = set()
    zeroed: set[str] = set()
    modules: set[str] = set()

    class Uses(cst.CSTVisitor):
        def visit_Attribute(self, node):
            if not isinstance(node.value, cst.Name):
                return
            if node.attr.value == "param_groups":
                found.add(node.value.value)
            elif node.attr.value == "zero_grad":
                zeroed.add(node.value.value)
            elif node.attr.value in MODULE_ATTRIBUTES:
                modules.add(node.value.value)

    module.visit(Uses())
    # a torch Module has zero_grad too (model.zero_grad(set_to_none=True))
    return found | (zeroed - modules)


#: what a script reads of a torch Module and never of an optimizer
MODULE_ATTRIBUTES = ("parameters", "named_parameters", "modules", "named_modules",
                     "children", "named_children", "train", "eval", "forward")


# -- imports every use of which was mapped ------------------------------------------------

#: the modules whose imports the port drops once nothing reads them (the target may not
#: have them installed)
DROPPABLE = ("torch", "transformers")


def _names_in(node) -> set[int]:
    import libcst as cst

    found: set[int] = set()

    class Names(cst.CSTVisitor):
        def visit_Name(self, name):
            found.add(id(name))

    node.visit(Names())
    return found


def _unused_imports(plan: Plan, scopes, positions) -> dict[int, set[str]]:
    """``{id(import statement): names it binds that only mapped code read}``: a torch or
    transformers import whose every reference sits in code the port replaced (a mapped
    call's function, a mapped class, a whole replaced call) is no longer needed, and the
    target may not have the module. Listed in the notes."""
    import libcst as cst

    replaced: set[int] = set()
    for o in plan.optimizers:
        replaced |= _names_in(o.call.func)
    for call, _, _, _ in plan.clips:
        replaced |= _names_in(call.func)
    for node in [*plan.scheduler_calls, *plan.signature_calls, *plan.reference_nodes]:
        replaced |= _names_in(node)
    for node, kind in plan.state_calls:
        replaced |= _names_in(node.func) | (_names_in(node.args[0].value) if kind == "save"
                                           else _names_in(node.args[0].value.func))
    for _, _, statement in plan.marks:
        if statement is not None:             # left as written
            replaced -= _names_in(statement)
    out: dict[int, set[str]] = {}
    seen: set[int] = set()
    for scope in {id(v): v for v in scopes.mapping.values() if v is not None}.values():
        for assignment in getattr(scope, "assignments", []):
            node = assignment.node
            if id(assignment) in seen or not isinstance(node, (cst.Import, cst.ImportFrom)):
                continue
            seen.add(id(assignment))
            module = (cst.Module([]).code_for_node(node.module) if isinstance(
                node, cst.ImportFrom) and node.module is not None else "")
            names = [cst.Module([]).code_for_node(a.name) for a in node.names] \
                if isinstance(node, cst.Import) else [module]
            if not any(n.split(".")[0] in DROPPABLE for n in names):
                continue
            references = list(assignment.references)
            if references and all(id(r.node) in replaced for r in references):
                out.setdefault(id(node), set()).add(assignment.name)
                plan.notes.append(f"line {positions[node].start.line}: the import of "
                                  f"{assignment.name} is removed: every use of it was mapped")
    return out


def _drop_names(dropped: dict[int, set[str]], original, updated):
    """``updated`` (an import statement) without the names :func:`_unused_imports` found
    for it, removed once it binds nothing."""
    import libcst as cst

    names = dropped.get(id(original))
    if not names or isinstance(updated.names, cst.ImportStar):
        return updated

    def bound(alias) -> str:
        if alias.asname is not None:
            return cst.Module([]).code_for_node(alias.asname.name)
        return cst.Module([]).code_for_node(alias.name).split(".")[0]

    kept = [a for a in updated.names if bound(a) not in names]
    if not kept:
        return cst.RemoveFromParent()
    kept[-1] = kept[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return updated.with_changes(names=kept)


# -- clips on MindSpore -----------------------------------------------------------------

def _plan_clips(plan: Plan, module, scopes, qualified) -> None:
    """Paddle: each clip calls uo's of the same signature. MindSpore keeps no gradient on
    parameters: a norm clip becomes the grad_clip of the script's one optimizer, where
    that is exact (module docstring); else it is marked."""
    import libcst as cst

    for call, kind, line, statement in plan.clips:
        if plan.to != "mindspore":
            # uo.clip_grad_norm_ takes torch's signature but clips by the 2-norm only
            try:
                if kind == "norm":
                    _check_norm_type(_clip_arguments(call))
            except ValueError as error:
                plan.mark(line, f"clip_grad_{kind}_: {error}", statement)
            continue
        try:
            args = _clip_arguments(call)
            if kind != "norm":
                raise ValueError("MindSpore keeps no gradient on parameters and the specs "
                                 "clip by value only at the optimizer's own path; clip the "
                                 "gradients (mindspore.ops.clip_by_value) before calling the "
                                 "optimizer")
            if not isinstance(statement, cst.SimpleStatementLine) or not (
                    isinstance(statement.body[-1], cst.Expr)
                                         and statement.body[-1].value is call):
                raise ValueError("its result is used: only a clip on a statement of its own "
                                 "moves into the optimizer")
            if len(plan.optimizers) != 1:
                raise ValueError(f"the script builds {len(plan.optimizers)} optimizers: the "
                                 "clip moves into the script's one optimizer")
            _check_norm_type(args)
            error = args.get("error_if_nonfinite")
            if error is not None and _code(error) != "False":
                raise ValueError("error_if_nonfinite raises where the spec's clip goes on")
            stepped = _next_step(module, statement)
            if stepped is None and _last_of_an_if(module, statement):
                raise ValueError("it runs under an if: moved into the optimizer, the clip "
                                 "would run at every step; write it unconditionally right "
                                 "before the step where the condition holds")
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


def _check_norm_type(args: dict) -> None:
    norm_type = args.get("norm_type")
    if norm_type is not None and _code(norm_type) not in ("2", "2.0", "2.", "float(2)"):
        raise ValueError(f"norm_type={_code(norm_type)}: the spec's clip (ClipByGlobalNorm, "
                         "uo.clip_grad_norm_) takes the 2-norm only")


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


def _dotted(node) -> bool:
    """Whether ``node`` is a name or a chain of attributes of one (``self.optimizer``)."""
    import libcst as cst

    while isinstance(node, cst.Attribute):
        node = node.value
    return isinstance(node, cst.Name)


def _next_step(module, statement) -> str | None:
    """The optimizer ``V`` (a variable, or an attribute as minGPT's ``self.optimizer``)
    when the statement after ``statement`` in its block is ``V.step()``."""
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
                            and _dotted(call.func.value):
                        Finder.found = cst.Module([]).code_for_node(call.func.value)

        def visit_IndentedBlock(self, node):
            self._block(list(node.body))

        def visit_Module(self, node):
            self._block(list(node.body))

    Finder.found = None
    module.visit(Finder())
    return Finder.found


def _last_of_an_if(module, statement) -> bool:
    """Whether ``statement`` ends the body of an ``if`` (nanoGPT's ``if grad_clip != 0.0:``
    around its clip)."""
    import libcst as cst

    class Finder(cst.CSTVisitor):
        found = False

        def visit_If(self, node):
            body = list(node.body.body) if isinstance(node.body, cst.IndentedBlock) else []
            if body and body[-1] is statement:
                Finder.found = True

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


# -- the rewriting pass -----------------------------------------------------------------

def _why(plan: Plan, key: int) -> str:
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


def _rewriter(plan: Plan, module, positions, dropped: dict[int, set[str]]):
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

    def optimizer_code(o: Optimizer, call) -> str:
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
        if o.name in STATE_NEEDS_OWN.get(plan.to, ()) and o.target in _state_targets(plan):
            plan.notes.append(f"line {o.line}: path='own': the script saves or loads the "
                              f"state of {o.target}, which {plan.to}'s native class keeps in "
                              "a form no state file maps")
            return f"uo.build({spec}, {params}, path='own')"
        if id(o.call) in plan.cycled:
            # Paddle's native classes read momentum and betas once, when built: a
            # scheduler cycling them needs the spec's own update, which reads
            # param_groups at every step
            plan.notes.append(f"line {o.line}: path='own': a scheduler of "
                              f"{o.target or 'this optimizer'} (line "
                              f"{plan.cycled[id(o.call)]}) cycles its momentum "
                              "(cycle_momentum), which Paddle's native classes read only "
                              "when built")
            return f"uo.build({spec}, {params}, path='own')"
        if plan.to == "paddle" and o.target in plan.written:
            plan.notes.append(f"line {o.line}: path='own': the script writes "
                              f"{plan.written[o.target]!r} into {o.target}.param_groups, "
                              "which Paddle's native classes read only when built")
            return f"uo.build({spec}, {params}, path='own')"
        return f"uo.build({spec}, {params})"

    optimizers = {id(o.call): o for o in plan.optimizers}
    marked: dict[int, list[str]] = {}
    for _, message, statement in plan.marks:
        if statement is not None:
            marked.setdefault(id(statement), []).append(MARK + message)
    positionless = [message for _, message, statement in plan.marks if statement is None]
    if positionless:
        plan.notes += [f"not ported (no statement to mark): {m}" for m in positionless]
    # a marked clip stays as written (its statement carries the reason)
    clips = {id(call): kind for call, kind, _, statement in plan.clips
             if id(statement) not in marked}

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

        def leave_Import(self, original, updated):
            return _drop_names(dropped, original, updated)

        def leave_ImportFrom(self, original, updated):
            return _drop_names(dropped, original, updated)

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

        def on_leave(self, original_node, updated_node):
            updated = super().on_leave(original_node, updated_node)
            if isinstance(original_node, cst.BaseCompoundStatement) and \
                    id(original_node) in marked:
                comments = [cst.EmptyLine(comment=cst.Comment(text))
                            for text in dict.fromkeys(marked[id(original_node)])]
                updated = updated.with_changes(leading_lines=[*updated.leading_lines,
                                                              *comments])
            return updated

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
