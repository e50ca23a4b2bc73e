"""The optimizer a momentum-cycling scheduler is made on, followed through a script's
names (:func:`plan_cycled`): on Paddle it is built with ``path='own'``, since Paddle's
native classes read momentum and betas once, when built, and OneCycleLR and CyclicLR
write them into ``param_groups`` at every step."""

from __future__ import annotations

from typing import Any

import libcst as cst

from .torch_calls import Plan
from .torch_calls import code_of as _code


def plan_cycled(plan: Plan, module) -> None:
    """Paddle's native classes read momentum and betas once, when built: the optimizer a
    momentum-cycling scheduler (OneCycleLR, CyclicLR) is made on is built with
    path='own' (:attr:`.torch_calls.Plan.cycled`). The scheduler's optimizer argument is
    followed to the constructions it may hold through the script's names: a variable
    assigned in the scheduler's function (or at module level), an attribute
    (``self.optimizer``) to what is assigned to it anywhere, a helper's parameter to the
    arguments where the helper is called, a call of a helper or method to what it
    returns. A scheduler whose optimizer leads to no construction is marked."""
    if plan.to != "paddle" or not plan.cycling:
        return
    functions: dict[str, list] = {}     # name -> the functions (and methods) of that name
    returned: dict[int, list] = {}      # id(function) -> the values it returns
    values: dict[tuple, list] = {}      # (id(function) | None, name) -> values assigned
    attributes: dict[str, list] = {}    # "self.optimizer" -> (value, id(function) | None)
    calls: list = []                    # (call, id(the function around it) | None)
    by_id: dict[int, Any] = {}

    class Bindings(cst.CSTVisitor):
        def __init__(self):
            self.around: list = [None]          # the functions around the node read

        def where(self):
            return id(self.around[-1]) if self.around[-1] is not None else None

        def visit_FunctionDef(self, node):
            functions.setdefault(node.name.value, []).append(node)
            by_id[id(node)] = node
            self.around.append(node)

        def leave_FunctionDef(self, node):
            self.around.pop()

        def visit_Return(self, node):
            if node.value is not None and self.around[-1] is not None:
                returned.setdefault(self.where(), []).append(node.value)

        def visit_Assign(self, node):
            for target in node.targets:
                if isinstance(target.target, cst.Name):
                    values.setdefault((self.where(), target.target.value), []).append(
                        node.value)
                elif isinstance(target.target, cst.Attribute) and isinstance(
                        target.target.value, cst.Name):
                    attributes.setdefault(_code(target.target), []).append(
                        (node.value, self.where()))

        def visit_AnnAssign(self, node):
            if node.value is not None and isinstance(node.target, cst.Name):
                values.setdefault((self.where(), node.target.value), []).append(node.value)

        def visit_Call(self, node):
            calls.append((node, self.where()))

    module.visit(Bindings())
    constructions = {id(o.call) for o in plan.optimizers}

    def called(func) -> str | None:
        """The function a call names: ``helper(...)``, ``obj.method(...)``."""
        return func.value if isinstance(func, cst.Name) else \
            func.attr.value if isinstance(func, cst.Attribute) else None

    def made(node, where, seen: set) -> set[int]:
        """The optimizer constructions ``node``, read in function ``where``, may be."""
        if node is None or (id(node), where) in seen:
            return set()
        seen.add((id(node), where))
        if isinstance(node, cst.Call):
            if id(node) in constructions:
                return {id(node)}
            return {m for f in functions.get(called(node.func), [])
                    for r in returned.get(id(f), []) for m in made(r, id(f), seen)}
        if isinstance(node, cst.Attribute) and isinstance(node.value, cst.Name):
            return {m for value, there in attributes.get(_code(node), [])
                    for m in made(value, there, seen)}
        if not isinstance(node, cst.Name):
            return set()
        bound = values.get((where, node.value), [])
        found = {m for value in bound for m in made(value, where, seen)}
        function = by_id.get(where)
        params = [p.name.value for p in (*function.params.posonly_params,
                                         *function.params.params)] if function else []
        keywords = [p.name.value for p in function.params.kwonly_params] if function else []
        if node.value in params or node.value in keywords:
            # a helper's parameter: the arguments where the helper is called
            for call, caller in calls:
                if called(call.func) != function.name.value:
                    continue
                # obj.method(...): the first argument is the method's second parameter
                shift = isinstance(call.func, cst.Attribute) and params[:1] in (["self"],
                                                                                ["cls"])
                index = params.index(node.value) - shift if node.value in params else -1
                positional = [a for a in call.args if a.keyword is None and not a.star]
                argument = next((a.value for a in call.args if a.keyword is not None
                                 and a.keyword.value == node.value),
                                positional[index].value if 0 <= index < len(positional)
                                else None)
                found |= made(argument, caller, seen)
        elif not bound and where is not None:       # a module-level name read in a function
            found |= {m for value in values.get((None, node.value), [])
                      for m in made(value, None, seen)}
        return found

    for call, line, statement in plan.cycling:
        optimizer = next((a.value for a in call.args if a.keyword is not None
                          and a.keyword.value == "optimizer"),
                         call.args[0].value if call.args and call.args[0].keyword is None
                         else None)
        home = next(where for c, where in calls if c is call)
        found = made(optimizer, home, set())
        for construction in found:
            plan.cycled.setdefault(construction, line)
        if not found:
            name = plan.schedulers[id(call)]
            code = _code(optimizer) if optimizer is not None else "(none given)"
            plan.mark(line, f"{name}: it cycles the momentum (or Adam's beta1) of its "
                      f"optimizer {code}, writing it into param_groups at every step, which "
                      "Paddle's native classes read only when built, and the port cannot "
                      f"follow {code} to the optimizer's construction in this script (a "
                      "variable, an attribute, a helper's parameter or return value) to "
                      "build it with path='own'; build that optimizer with uo.build(..., "
                      f"path='own') and this scheduler with uo.lr_scheduler.{name}, or pass "
                      "cycle_momentum=False", statement)
