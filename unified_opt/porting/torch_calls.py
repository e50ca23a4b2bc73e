"""Finding the framework calls of a torch script for :mod:`.mapper`: one libcst pass over
the module with qualified names (through the script's imports), recording what each call
maps to (:mod:`.api_map`) or why it is not mapped, keyed by the original nodes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .api_map import (
    CLASSES,
    CLIPS,
    INSPECTIONS,
    KEYWORDS,
    METHODS,
    NO_ARGUMENTS,
    SCHEDULER_MODULES,
    SCHEDULERS,
    WRITTEN_HYPERPARAMETERS,
    class_for,
    is_torch_nn_class,
    other_library_optimizer,
)
from .ported import Rewrite

#: torch's schedulers that cycle the momentum (or Adam's beta1) unless told
#: ``cycle_momentum=False``
MOMENTUM_CYCLING = ("OneCycleLR", "CyclicLR")

#: torch's loss scalers, which step the optimizer themselves
SCALERS = ("torch.cuda.amp.GradScaler", "torch.amp.GradScaler",
           "torch.amp.grad_scaler.GradScaler", "torch.cuda.amp.grad_scaler.GradScaler")


def code_of(node) -> str:
    """The source text of a libcst node."""
    import libcst as cst

    return cst.Module([]).code_for_node(node)


@dataclass
class Optimizer:
    call: Any
    name: str                       # the preset's qualified name
    line: int
    statement: Any
    target: str | None
    clip: str | None = None         # the max_norm code a MindSpore port moves inside


@dataclass
class Plan:
    """What the collecting pass decided, keyed by the original nodes' ids."""

    to: str
    optimizers: list[Optimizer] = field(default_factory=list)
    optimizer_names: set[str] = field(default_factory=set)
    schedulers: dict[int, str] = field(default_factory=dict)       # call -> uo name
    clips: list[tuple[Any, str, int, Any]] = field(default_factory=list)  # call, kind, line, stmt
    methods: dict[int, str] = field(default_factory=dict)          # call -> method
    references: dict[int, str] = field(default_factory=dict)       # Name/Attribute -> code
    state: dict[int, str] = field(default_factory=dict)            # call -> "save" | "load"
    signatures: dict[int, str] = field(default_factory=dict)       # inspect.signature(class)
    #: MindSpore clip -> (the optimizer variable stepped after it, parameters by keyword)
    clip_checks: dict[int, tuple[str, bool]] = field(default_factory=dict)
    #: the original nodes the rewrite replaces whole (for the imports left unused)
    scheduler_calls: list = field(default_factory=list)
    signature_calls: list = field(default_factory=list)
    reference_nodes: list = field(default_factory=list)
    state_calls: list = field(default_factory=list)          # (call, "save" | "load")
    marks: list[tuple[int, str, Any]] = field(default_factory=list)
    #: (call, line, statement) of each scheduler writing momentum or betas into its
    #: optimizer's param_groups (OneCycleLR's and CyclicLR's cycle_momentum): Paddle's
    #: native classes read them once, when built
    cycling: list[tuple[Any, int, Any]] = field(default_factory=list)
    #: id(optimizer construction) -> the line of a scheduler cycling its momentum
    cycled: dict[int, int] = field(default_factory=dict)
    #: optimizer variable -> a hyperparameter other than the lr that the script writes
    #: into its param_groups (a hand-written weight-decay schedule): the same on Paddle
    written: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    rewrites: list[Rewrite] = field(default_factory=list)
    imports: list[str] = field(default_factory=list)

    def mark(self, line: int, message: str, statement: Any) -> None:
        self.marks.append((line, " ".join(message.split()), statement))


class Resolved:
    """A metadata mapping whose values libcst may compute on first read."""

    def __init__(self, mapping):
        self.mapping = mapping

    def get(self, node, default=None):
        value = self.mapping.get(node, default)
        return value() if callable(value) else value

    def __getitem__(self, node):
        return self.get(node)


def _state_refusal(variable: str, to: str, how: str) -> str:
    """Why a use of a torch optimizer's state that the port does not map is marked
    (``how``: "save", "load" or "read"): on ``to`` the optimizer ``uo.build`` makes keeps
    its state in unified-opt's portable form (``state_dict()``: format, metadata, tensors
    of ``to``) or ``to``'s own, not torch's ``{"state", "param_groups"}``."""
    head = {"save": f"torch.save of {variable}.state_dict() inside another object: on {to} "
                    f"it is unified-opt's portable form holding {to} tensors, which "
                    "torch.load(weights_only=True) refuses",
            "load": f"{variable}.load_state_dict(...) of something other than torch.load(f) "
                    "(a checkpoint's entry): a torch state dict, which the optimizer built "
                    f"on {to} does not take (it takes what its own state_dict() gives)",
            "read": f"{variable}.state: torch's per-parameter state; the optimizer built on "
                    f"{to} keeps its state in {to}'s form, not in .state",
            "entry": f"{variable}.state_dict()'s 'state' entry: torch's per-parameter state "
                     f"by index; the optimizer built on {to} gives unified-opt's portable "
                     "form (format, metadata, tensors), which has no 'state'"}[how]
    return (f"{head}; save and load the optimizer's state with uo.save_state({variable}, "
            f"path) / uo.load_state({variable}, path) (a file every framework reads)")


# -- the collecting pass ----------------------------------------------------------------

def collector(plan: Plan, qualified, positions):
    import libcst as cst
    from libcst.metadata import QualifiedNameSource

    from ..presets._registry import refusal, registry
    from .finder import native_kind

    def names_of(node) -> list:
        return sorted(qualified.get(node, set()), key=lambda q: q.name)

    def _groups_of(node) -> str | None:
        """The optimizer variable of ``<name>.param_groups`` (None: not that)."""
        if isinstance(node, cst.Attribute) and node.attr.value == "param_groups" and \
                isinstance(node.value, cst.Name):
            return node.value.value
        return None

    def _state_dict_of(node) -> str | None:
        """The variable of ``<name>.state_dict()`` (None: not that call)."""
        if isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and \
                node.func.attr.value == "state_dict" and isinstance(node.func.value, cst.Name):
            return node.func.value.value
        return None

    def _string_key(subscript) -> str | None:
        """The key of ``x["key"]`` (None: another subscript)."""
        index = subscript.slice[0].slice if len(subscript.slice) == 1 else None
        if isinstance(index, cst.Index) and isinstance(index.value, cst.SimpleString):
            return index.value.evaluated_value
        return None

    def _state_dict_holders(node) -> set[str]:
        """The optimizers whose ``.state_dict()`` is called anywhere inside ``node``."""
        found: set[str] = set()

        class StateDicts(cst.CSTVisitor):
            def visit_Call(self, call):
                if (holder := _state_dict_of(call)) in plan.optimizer_names:
                    found.add(holder)

        node.visit(StateDicts())
        return found

    def _other_libraries(found) -> list[str]:
        """The qualified names in ``found`` imported from a library other than torch
        and unified_opt (and not a scheduler the port maps)."""
        return [q.name for q in found if q.source is QualifiedNameSource.IMPORT
                and not q.name.startswith(("torch.", "builtins.", "unified_opt"))
                and q.name not in SCHEDULERS]

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
            self.group_variables: dict[str, str] = {}   # loop variable -> optimizer
            # variable -> the imported class of another library it was built from
            # (accelerator = Accelerator(...)): its methods are that library's calls
            self.library_objects: dict[str, str] = {}
            # variable -> the optimizer whose state_dict() it holds (sd = opt.state_dict())
            self.state_dicts: dict[str, str] = {}
            # (id(function or class around it), variable) -> the dict bound to it
            # (checkpoint = {...} or dict(...)) and the values written into it since
            # (checkpoint["optimizer"] = ...): what torch.save(checkpoint, f) saves
            self.dicts: dict[tuple, list] = {}

        def line(self, node) -> int:
            return positions[node].start.line

        def statement(self):
            return self.statements[-1] if self.statements else None

        def scope(self) -> int | None:
            """The innermost function or class around the node (None: module level)."""
            return next((id(s) for s in reversed(self.statements)
                         if isinstance(s, (cst.FunctionDef, cst.ClassDef))), None)

        def visit_SimpleStatementLine(self, node):
            self.statements.append(node)
            if len(node.body) == 1 and isinstance(node.body[0], cst.Assign):
                assign = node.body[0]
                if len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name):
                    self.assigned[id(assign.value)] = assign.targets[0].target.value
                    value, key = assign.value, (self.scope(), assign.targets[0].target.value)
                    if isinstance(value, cst.Dict) or isinstance(value, cst.Call) and any(
                            q.name == "builtins.dict" for q in names_of(value.func)):
                        self.dicts[key] = [value]
                    else:
                        self.dicts.pop(key, None)
                    if (holder := _state_dict_of(assign.value)) is not None:
                        self.state_dicts[assign.targets[0].target.value] = holder
                    if isinstance(assign.value, cst.Call):
                        library = _other_libraries(names_of(assign.value.func))
                        if library:
                            self.library_objects[assign.targets[0].target.value] = \
                                library[0]

        def leave_SimpleStatementLine(self, node):
            self.statements.pop()

        def on_visit(self, node) -> bool:
            # a class's bases, a loop's iterable: marked on the compound statement
            if isinstance(node, cst.BaseCompoundStatement):
                self.statements.append(node)
            return super().on_visit(node)

        def on_leave(self, original_node) -> None:
            super().on_leave(original_node)
            if isinstance(original_node, cst.BaseCompoundStatement):
                self.statements.pop()

        def visit_For(self, node):
            # for g in opt.param_groups: ... g["weight_decay"] = ...
            if isinstance(node.target, cst.Name) and _groups_of(node.iter) is not None:
                self.group_variables[node.target.value] = _groups_of(node.iter)

        def visit_Assign(self, node):
            for target in node.targets:
                self._group_write(target.target)
                if isinstance(target.target, cst.Subscript) and isinstance(
                        target.target.value, cst.Name):     # checkpoint["optimizer"] = ...
                    self.dicts.get((self.scope(), target.target.value.value), []).append(
                        node.value)

        def visit_AugAssign(self, node):
            self._group_write(node.target)

        def _group_write(self, target) -> None:
            """Record ``g[key] = ...`` / ``opt.param_groups[i][key] = ...`` of a
            hyperparameter other than the lr."""
            if not isinstance(target, cst.Subscript):
                return
            key = _string_key(target)
            if key not in WRITTEN_HYPERPARAMETERS:
                return
            owner = target.value
            optimizer = None
            if isinstance(owner, cst.Name):
                optimizer = self.group_variables.get(owner.value)
            elif isinstance(owner, cst.Subscript):
                optimizer = _groups_of(owner.value)
            if optimizer is not None:
                plan.written.setdefault(optimizer, key)

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
                    plan.state_calls.append((node, "load"))
                else:         # a checkpoint's entry: checkpoint["optimizer"]
                    plan.mark(line, _state_refusal(func.value.value, plan.to, "load"),
                              self.statement())
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
                if SCHEDULERS[name] in MOMENTUM_CYCLING and not any(
                        a.keyword is not None and a.keyword.value == "cycle_momentum"
                        and isinstance(a.value, cst.Name) and a.value.value == "False"
                        for a in node.args):
                    plan.cycling.append((node, line, statement))
                plan.scheduler_calls.append(node.func)
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
                        plan.signature_calls.append(node)
                        plan.imports += ["import unified_opt as uo", "import unified_opt.porting"]
                        return True
                return False
            if name == "torch.save" and node.args:
                saved = node.args[0].value
                if _state_dict_of(saved) in plan.optimizer_names:
                    plan.state[id(node)] = "save"
                    plan.state_calls.append((node, "save"))
                else:         # {"optimizer": opt.state_dict(), ...}, inline or by name
                    saved = self.dicts.get((self.scope(), saved.value), [saved]) \
                        if isinstance(saved, cst.Name) else [saved]
                    for holder in sorted(set().union(*map(_state_dict_holders, saved))):
                        plan.mark(line, _state_refusal(holder, plan.to, "save"),
                                  self.statement())
                return True
            if other_library_optimizer(name):
                plan.mark(line, f"{name}: an optimizer of another library, which the port "
                          "does not map; build the spec it computes with uo.build (a "
                          "uo.<Spec>, or a torch.optim class the port maps)", statement)
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
            plan.optimizers.append(Optimizer(node, kind[1], line, statement, target))
            if target is not None:
                plan.optimizer_names.add(target)
            return True

        def _hands_optimizer(self, node, found, line: int) -> None:
            """A function of another library handed an optimizer is marked."""
            imported = _other_libraries(found)
            func = node.func
            if not imported and isinstance(func, cst.Attribute) and isinstance(
                    func.value, cst.Name) and func.value.value in self.library_objects:
                # accelerator.prepare(model, optimizer, ...): a wrapper of torch's API
                imported = [f"{self.library_objects[func.value.value]}(...)."
                            f"{func.attr.value}"]
            if not imported:
                return
            # an argument, or an element of a tuple or list argument (transformers'
            # Trainer(..., optimizers=(optimizer, scheduler)))
            handed = [e.value for a in node.args for e in (
                a.value.elements if isinstance(a.value, (cst.Tuple, cst.List)) else [a])]
            for value in handed:
                if isinstance(value, cst.Name) and value.value in plan.optimizer_names:
                    plan.mark(line, f"{imported[0]} is handed the optimizer "
                              f"{value.value}: a call of another library, which the port "
                              "does not map (it may drive torch's optimizer API: a "
                              "scheduler of its own, a wrapper); use uo.lr_scheduler for a "
                              "scheduler, or check it needs only param_groups",
                              self.statement())
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

        def visit_Subscript(self, node):
            # opt.state_dict()["state"], or sd["param_groups"] after sd = opt.state_dict()
            key, value = _string_key(node), node.value
            optimizer = (self.state_dicts.get(value.value) if isinstance(value, cst.Name)
                         else _state_dict_of(value))
            if optimizer not in plan.optimizer_names or key not in ("state", "param_groups"):
                return
            if key == "state":
                reason = _state_refusal(optimizer, plan.to, "entry")
            else:
                reason = (f"{optimizer}.state_dict()'s 'param_groups' entry: the optimizer "
                          f"built on {plan.to} gives unified-opt's portable form (format, "
                          "metadata, tensors) from state_dict(), which has no "
                          f"'param_groups'; read {optimizer}.param_groups (the live "
                          "groups: a write there changes the optimizer, where torch's "
                          "state_dict() copy did not)")
            plan.mark(self.line(node), reason, self.statement())

        def visit_Attribute(self, node):
            if node.attr.value == "state" and isinstance(node.value, cst.Name) and \
                    node.value.value in plan.optimizer_names:
                plan.mark(self.line(node), _state_refusal(node.value.value, plan.to, "read"),
                          self.statement())
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
                    plan.reference_nodes.append(node)
                    plan.imports.append(f"import {mapped.split('.')[0]}")
                    return False
                if (self.type_tests or self.containers) and is_torch_nn_class(name):
                    plan.mark(self.line(node), f"{name}: no {plan.to} class for it in the "
                              f"port's table ({', '.join(sorted(CLASSES))})", self.statement())
                    return False
                if name.startswith(SCHEDULER_MODULES) and name not in SCHEDULERS and \
                        not self.inspecting and not self.type_tests:
                    plan.mark(self.line(node), f"{name}: a scheduler class named without "
                              "being called (a base class of the script's own scheduler, an "
                              "alias): torch's scheduler classes drive torch's optimizers; "
                              "derive from uo.lr_scheduler.LRScheduler", self.statement())
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
