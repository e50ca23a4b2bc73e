"""Reading a training script for :mod:`.script`: where its optimizers, schedulers and
gradient clips are constructed, called and stepped (a libcst visitor over the module
with qualified names), and which native classes those are.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..backend import BACKENDS


def framework_of(qualified_name: str) -> str | None:
    root = qualified_name.split(".")[0]
    return {"mindformers": "mindspore"}.get(root, root) if root in (
        *BACKENDS, "mindformers") else None


#: gradient clips a torch loop calls before ``optimizer.step()``, as the spec's clip
#: (``unified_opt.clipping``: torch's clip_grad_norm_ divides by the norm + 1e-6)
CLIPS = {"torch.nn.utils.clip_grad_norm_": "norm",
         "torch.nn.utils.clip_grad.clip_grad_norm_": "norm",
         "torch.nn.utils.clip_grad_value_": "value",
         "torch.nn.utils.clip_grad.clip_grad_value_": "value"}


@dataclass
class Site:
    """Where a variable is called or stepped: the line, the statement the call ends
    (None where it is inside an expression or followed on its line), the innermost loop,
    branch or function around it (its id; None: module level), and how."""

    line: int
    statement: Any
    scope: int | None
    kind: str                   # "step": ``variable.step()``; "call": ``variable(...)``


@dataclass
class Construction:
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


#: a Paddle optimizer's methods that torch's optimizers lack (a script ported to torch
#: has them rewritten or marked: framework_calls.py's ``torch_method``)
PADDLE_METHODS = ("clear_grad", "clear_gradients", "get_lr", "set_lr", "minimize",
                  "set_state_dict")
#: the "method" of ``paddle.save(opt.state_dict(), f)`` among an optimizer's Paddle
#: calls: torch's and MindSpore's optimizers have a state_dict, paddle.save does not hold
#: their tensors
SAVED_STATE_DICT = "state_dict saved by paddle.save"
#: a MindSpore optimizer's attributes other frameworks' optimizers lack: its lr Parameter
#: (``ops.assign(opt.learning_rate, ...)`` changes the lr at run time, the migration
#: guide's way) and its weight decay
MINDSPORE_ATTRIBUTES = ("learning_rate", "weight_decay", "get_lr", "parameters")
#: MindSpore's functions that save or load a Cell's Parameters, an optimizer's among them
#: (its moments, lr and step): recorded among the optimizer's reads under the name
MINDSPORE_CHECKPOINTS = {"mindspore.save_checkpoint": "save_checkpoint",
                         "mindspore.train.serialization.save_checkpoint": "save_checkpoint",
                         "mindspore.load_param_into_net": "load_param_into_net",
                         "mindspore.train.serialization.load_param_into_net":
                             "load_param_into_net"}

#: schedulers constructed on the optimizer (``CosineAnnealingLR(optimizer, ...)``), whose
#: first argument is the optimizer; the others are the optimizer's ``learning_rate``
OPTIMIZER_SCHEDULERS = ("torch.optim.lr_scheduler.",
                        "mindspore.experimental.optim.lr_scheduler.")
#: such schedulers whose ``base_lr`` is their own argument (the lower bound they cycle
#: from, overwriting the optimizer's lr), not the optimizer's lr: the presets read it so
OWN_BASE_LR = ("torch.optim.lr_scheduler.CyclicLR",
               "mindspore.experimental.optim.lr_scheduler.CyclicLR")


def native_kind(qualified_name: str, resolve: bool = True) -> tuple[str, str] | None:
    """("optimizer" | "scheduler", preset name) for a native class or function with a
    preset (or a refused one), else None. ``resolve``: also a real module path
    (``torch.optim.adamw.AdamW``), which imports the framework to resolve it."""
    from ..presets._registry import descriptor_name, registry
    from ..schedules._preset_registry import REGISTRY as SCHEDULES

    def known(name):
        if name in registry().names() or name in registry().names(True):
            return "optimizer", name
        if name in SCHEDULES.names() or name in SCHEDULES.names(True):
            return "scheduler", name
        return None

    found = known(qualified_name)
    if found is None and resolve and qualified_name.startswith(OPTIMIZER_MODULES):
        found = known(descriptor_name(qualified_name))
    return found


def make_finder():
    import libcst as cst
    from libcst.metadata import PositionProvider, QualifiedNameProvider

    class Finder(cst.CSTVisitor):
        METADATA_DEPENDENCIES = (PositionProvider, QualifiedNameProvider)

        def __init__(self):
            self.found: list[Construction] = []
            self.assigned: dict[int, tuple[Any, str]] = {}   # id(call) -> (statement, var)
            self.step_calls: dict[str, list[int]] = {}      # var -> lines of var.step()
            # var -> (line, call, method) of its Paddle-only methods (PADDLE_METHODS)
            self.paddle_calls: dict[str, list[tuple[int, Any, str]]] = {}
            self.statements: dict[int, Any] = {}   # id(expression statement's call) -> it
            self.functions: list[str] = []          # the function being read
            #: function -> the variables each of its ``return a, b`` statements returns
            self.returns: dict[str, list[list[str | None]]] = {}
            #: variable -> (function, position) for ``a, b = function(...)``
            self.unpacked: dict[str, list[tuple[str, int]]] = {}
            self.clips: list[tuple[str, Any, int]] = []     # (clip function, call, line)
            self.call_statements: dict[int, Any] = {}   # id(call) -> its simple statement
            self.current: list = []
            #: (line, message, statement) of each optimizer or scheduler class the script
            #: names in a way the port does not follow (an alias, functools.partial, a
            #: star import): refused, so that what it builds is not silently left as is
            self.unfollowed: list[tuple[int, str, Any]] = []
            #: var -> (line, attribute, statement) of its MindSpore-only attributes read
            #: (MINDSPORE_ATTRIBUTES)
            self.mindspore_reads: dict[str, list[tuple[int, str, Any]]] = {}
            self.star_imports: list[tuple[str, int]] = []    # (module, line)
            self.called: set[int] = set()       # id(func) of the constructions found
            self.type_tests = 0                 # inside isinstance(...) / issubclass(...)
            #: variable -> where ``variable.step(...)`` or ``variable(...)`` is called
            #: (a MindSpore optimizer steps when called)
            self.sites: dict[str, list[Site]] = {}
            #: the loops, branches and functions around the node being read: what
            #: decides how often a statement runs
            self.scopes: list = []

        def visit_FunctionDef(self, node):
            self.functions.append(node.name.value)
            self.scopes.append(node)

        def leave_FunctionDef(self, node):
            self.functions.pop()
            self.scopes.pop()

        #: a statement in a loop, a branch or a handler runs as often as that does
        SCOPES = (cst.For, cst.While, cst.If, cst.Else, cst.ExceptHandler)

        def on_visit(self, node) -> bool:
            if isinstance(node, self.SCOPES):
                self.scopes.append(node)
            return super().on_visit(node)

        def on_leave(self, original_node) -> None:
            super().on_leave(original_node)
            if isinstance(original_node, self.SCOPES):
                self.scopes.pop()

        def _site(self, variable: str, node, line: int, kind: str) -> None:
            """Record a call of ``variable`` (or its ``.step()``), with the statement it
            ends, where it is the last one on its line (a statement can follow it)."""
            statement = self.current[-1] if self.current else None
            if statement is not None:
                last = statement.body[-1]
                if not (isinstance(last, cst.Expr) and last.value is node):
                    statement = None
            scope = id(self.scopes[-1]) if self.scopes else None
            self.sites.setdefault(variable, []).append(Site(line, statement, scope, kind))

        def visit_Return(self, node):
            if self.functions and isinstance(node.value, cst.Tuple):
                names = [e.value.value if isinstance(e.value, cst.Name) else None
                         for e in node.value.elements]
                self.returns.setdefault(self.functions[-1], []).append(names)

        def leave_SimpleStatementLine(self, node):
            self.current.pop()

        def visit_SimpleStatementLine(self, node):
            self.current.append(node)
            if len(node.body) == 1 and isinstance(node.body[0], cst.Assign):
                assign = node.body[0]
                if len(assign.targets) == 1 and isinstance(assign.targets[0].target,
                                                           cst.Name):
                    self.assigned[id(assign.value)] = (node, assign.targets[0].target.value)
                target = assign.targets[0].target if len(assign.targets) == 1 else None
                if isinstance(target, cst.Tuple) and isinstance(assign.value, cst.Call) and \
                        isinstance(assign.value.func, cst.Name):
                    for position, element in enumerate(target.elements):
                        if isinstance(element.value, cst.Name):
                            self.unpacked.setdefault(element.value.value, []).append(
                                (assign.value.func.value, position))
            if len(node.body) == 1 and isinstance(node.body[0], cst.Expr) and isinstance(
                    node.body[0].value, cst.Call):
                self.statements[id(node.body[0].value)] = node

        def visit_Call(self, node):
            line = self.get_metadata(PositionProvider, node).start.line
            if self.current:
                self.call_statements[id(node)] = self.current[-1]
            func = node.func
            if isinstance(func, cst.Attribute) and func.attr.value == "step" and isinstance(
                    func.value, cst.Name):
                self.step_calls.setdefault(func.value.value, []).append(line)
                self._site(func.value.value, node, line, "step")
            if isinstance(func, cst.Attribute) and func.attr.value in PADDLE_METHODS and \
                    isinstance(func.value, cst.Name):
                self.paddle_calls.setdefault(func.value.value, []).append(
                    (line, node, func.attr.value))
            if isinstance(func, cst.Attribute) and func.attr.value == "step" and node.args \
                    and isinstance(node.args[0].value, cst.Name):
                # torch.amp's scaler.step(optimizer) steps the optimizer
                self._site(node.args[0].value.value, node, line, "step")
            elif isinstance(func, cst.Name):
                self._site(func.value, node, line, "call")
            qualified_names = self.get_metadata(QualifiedNameProvider, node.func, set())
            saved = node.args[0].value if node.args else None
            for q in qualified_names:
                if q.name in MINDSPORE_CHECKPOINTS and isinstance(saved, cst.Name):
                    self.mindspore_reads.setdefault(saved.value, []).append(
                        (line, MINDSPORE_CHECKPOINTS[q.name], self.call_statements.get(
                            id(node))))
            if "paddle.save" in {q.name for q in qualified_names} and isinstance(
                    saved, cst.Call) and isinstance(saved.func, cst.Attribute) and \
                    saved.func.attr.value == "state_dict" and isinstance(
                        saved.func.value, cst.Name):
                # paddle.save(opt.state_dict(), f): marked on a target without paddle
                self.paddle_calls.setdefault(saved.func.value.value, []).append(
                    (line, saved, SAVED_STATE_DICT))
            if {q.name for q in qualified_names} & {"builtins.isinstance",
                                                     "builtins.issubclass"}:
                self.type_tests += 1
            for qualified in qualified_names:
                if qualified.name in CLIPS:
                    self.clips.append((qualified.name, node, line))
                    break
                framework = framework_of(qualified.name)
                kind = native_kind(qualified.name) if framework else None
                if kind is not None:
                    statement, target = self.assigned.get(id(node), (None, None))
                    self.found.append(Construction(kind[0], kind[1], framework, node, line,
                                                    statement, target))
                    self.called.add(id(node.func))
                    break
            if not qualified_names and isinstance(func, cst.Name):
                self._star_imported(func.value, line)

        def leave_Call(self, node):
            names = {q.name for q in self.get_metadata(QualifiedNameProvider, node.func, set())}
            if names & {"builtins.isinstance", "builtins.issubclass"}:
                self.type_tests -= 1

        def visit_ImportFrom(self, node):
            if isinstance(node.names, cst.ImportStar) and node.module is not None \
                    and not node.relative:
                module = cst.Module([]).code_for_node(node.module)
                line = self.get_metadata(PositionProvider, node).start.line
                self.star_imports.append((module, line))
            return False        # the imported names are not uses of the classes

        def visit_Annotation(self, node):
            return False        # a type annotation builds nothing

        def visit_Attribute(self, node):
            if isinstance(node.value, cst.Name) and node.attr.value in MINDSPORE_ATTRIBUTES:
                line = self.get_metadata(PositionProvider, node).start.line
                self.mindspore_reads.setdefault(node.value.value, []).append(
                    (line, node.attr.value, self.current[-1] if self.current else None))
            return self._reference(node)

        def visit_Name(self, node):
            return self._reference(node)

        def _reference(self, node) -> bool:
            """An optimizer or scheduler class named without being called (``OptCls =
            torch.optim.AdamW``, ``functools.partial(torch.optim.AdamW, ...)``, a base
            class) is refused: what it builds is not read. isinstance tests pass."""
            if id(node) in self.called or self.type_tests:
                return True
            for qualified in self.get_metadata(QualifiedNameProvider, node, set()):
                # not resolved through imports: every module on the way would import
                kind = native_kind(qualified.name, resolve=False) if framework_of(
                    qualified.name) else None
                if kind is not None:
                    self._unfollowed(node, f"{qualified.name}: named here without being "
                                     "called (an alias, functools.partial, a base class): the "
                                     "port reads only a direct call of the class, so what "
                                     "this builds is not ported; call the class directly")
                    return False
            return True

        def _star_imported(self, name: str, line: int) -> None:
            for module, import_line in self.star_imports:
                kind = native_kind(f"{module}.{name}", resolve=False)
                if kind is not None:
                    self.unfollowed.append((line, f"{kind[1]}: {name} comes from 'from "
                                            f"{module} import *' (line {import_line}), "
                                            "which the port does not follow; import it by "
                                            f"name (from {module} import {name})",
                                            self.current[-1] if self.current else None))
                    return

        def _unfollowed(self, node, message: str) -> None:
            line = self.get_metadata(PositionProvider, node).start.line
            self.unfollowed.append((line, message, self.current[-1] if self.current else None))

    return Finder()
