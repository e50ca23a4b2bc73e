"""Reading a Paddle or MindSpore script's parameter groups and constants statically
(:mod:`.script`): module-level literals, and group dicts whose membership is a test of the
parameter's name or a submodule's ``parameters()``, as ``uo.Group`` rules."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any


def _literal_code(code: str, constants: dict[str, Any]) -> Any:
    """The value of an argument's code: a literal, or a module-level literal's name."""
    tree = ast.parse(code, mode="eval").body
    if isinstance(tree, ast.Name) and tree.id in constants:
        return constants[tree.id]
    return ast.literal_eval(tree)


# Calls that can rebind any module-level name behind the parser's back (nanoGPT's
# ``exec(open("configurator.py").read())``, ``globals().update(...)``): a file that makes
# one has no constants
_DYNAMIC_BINDERS = frozenset({"exec", "globals", "vars", "locals", "setattr", "__import__"})


def _bound_names(node: ast.AST) -> list[str]:
    """The names a binding target binds (a tuple's, a starred one's too)."""
    return [n.id for n in ast.walk(node) if isinstance(n, ast.Name)]


def script_constants(module) -> dict[str, Any]:
    """Names the file binds exactly once, by a plain ``name = <literal>`` (anywhere: a
    function's local list of no-decay names too), with their values. A name bound any
    other way as well (``+=``, a tuple target, a loop or ``with`` target, ``global`` in a
    function, an import, an argument, ``:=``) is none of them, and a file that calls
    ``exec``, ``globals``, ``vars``, ``locals`` or ``setattr`` has none: the value a
    ported spec would bake in may not be the one the script runs with."""
    tree = ast.parse(module.code)
    bindings: dict[str, list] = {}

    def bind(names, value=None):
        for name in names:
            bindings.setdefault(name, []).append(value)

    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and (
                node.func.id in _DYNAMIC_BINDERS):
            return {}
        if isinstance(node, ast.Assign):
            for target in node.targets:
                simple = isinstance(target, ast.Name) and len(node.targets) == 1
                bind(_bound_names(target), node.value if simple else None)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor,
                               ast.comprehension, ast.NamedExpr)):
            bind(_bound_names(node.target))
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            bind(_bound_names(node.optional_vars))
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            bind(node.names)
        elif isinstance(node, ast.arg):
            bind([node.arg])
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bind([(a.asname or a.name).split(".")[0] for a in node.names])
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bind([node.name])
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bind([node.name])
        elif isinstance(node, ast.Delete):
            bind([n for t in node.targets for n in _bound_names(t)])
    constants = {}
    for name, values in bindings.items():
        if len(values) == 1 and values[0] is not None:
            try:
                constants[name] = ast.literal_eval(values[0])
            except (ValueError, SyntaxError, TypeError):
                pass
    return constants


def _name_uses(module, name: str) -> int:
    """How often ``name`` is read in the file."""
    return sum(1 for node in ast.walk(ast.parse(module.code))
               if isinstance(node, ast.Name) and node.id == name
               and isinstance(node.ctx, ast.Load))


@dataclass
class _Groups:
    """Parameter groups read from a list of dicts: the parameter argument's root (the
    model variable), how members are chosen (``"names"``: conditions on
    ``named_parameters()`` names; ``"modules"``: ``model.<path>.parameters()``), the
    rules (patterns, group keys) in order, the default group's keys (the spec's values)
    and the module paths (``"modules"``)."""

    kind: str
    root: str
    rules: list
    defaults: dict
    paths: list
    statement: Any = None        # the statement binding the list, removed with it
    variable: str | None = None


def _condition(node: ast.expr, name: str, constants: dict) -> tuple[bool, tuple[str, ...]]:
    """``(negated, patterns)`` of a comprehension's condition on the parameter's name
    ``name``: ``any(nd in n for nd in NO_DECAY)``, ``"bias" in n``, ``n.endswith(...)``,
    ``n.startswith(...)``, ``n == "..."``, each possibly negated."""
    from ..groups import escaped

    def strings(value_node) -> list[str]:
        if isinstance(value_node, ast.Name) and value_node.id in constants:
            value = constants[value_node.id]
        else:
            value = ast.literal_eval(value_node)
        value = [value] if isinstance(value, str) else list(value)
        if not value or not all(isinstance(v, str) for v in value):
            raise ValueError("not a list of strings")
        return value

    def is_name(x) -> bool:
        return isinstance(x, ast.Name) and x.id == name

    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        negated, patterns = _condition(node.operand, name, constants)
        return not negated, patterns
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        op, left, right = node.ops[0], node.left, node.comparators[0]
        if isinstance(op, (ast.In, ast.NotIn)) and is_name(right):
            return (isinstance(op, ast.NotIn),
                    tuple(f"*{escaped(v)}*" for v in strings(left)))
        if isinstance(op, (ast.Eq, ast.NotEq)) and (is_name(left) or is_name(right)):
            value = right if is_name(left) else left
            return isinstance(op, ast.NotEq), tuple(escaped(v) for v in strings(value))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and is_name(
            node.func.value) and node.func.attr in ("endswith", "startswith") and \
            len(node.args) == 1 and not node.keywords:
        values = strings(node.args[0])
        if node.func.attr == "endswith":
            return False, tuple(f"*{escaped(v)}" for v in values)
        return False, tuple(f"{escaped(v)}*" for v in values)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
            node.func.id == "any" and len(node.args) == 1 and isinstance(
                node.args[0], ast.GeneratorExp):
        inner = node.args[0]
        generator = inner.generators[0]
        if len(inner.generators) == 1 and not generator.ifs and isinstance(
                generator.target, ast.Name) and isinstance(inner.elt, ast.Compare) and \
                len(inner.elt.ops) == 1 and isinstance(inner.elt.ops[0], ast.In) and \
                isinstance(inner.elt.left, ast.Name) and \
                inner.elt.left.id == generator.target.id and is_name(
                    inner.elt.comparators[0]):
            return False, tuple(f"*{escaped(v)}*" for v in strings(generator.iter))
    raise ValueError(f"the condition {ast.unparse(node)!r} is not a test of the name "
                     "that reads as name patterns ('x' in n, any(x in n for x in NAMES), "
                     "n.endswith(...), n.startswith(...), n == ...)")


def _members(node: ast.expr, constants: dict) -> tuple:
    """A group's ``params``: ``("names", root, negated, patterns)`` for a comprehension
    over ``root.named_parameters()`` (``patterns`` None: no condition), or
    ``("modules", root, path)`` for ``root.path.parameters()``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
            node.func.id == "list" and len(node.args) == 1 and not node.keywords:
        node = node.args[0]
    if isinstance(node, (ast.ListComp, ast.GeneratorExp)) and len(node.generators) == 1:
        generator = node.generators[0]
        target, source = generator.target, generator.iter
        if isinstance(target, ast.Tuple) and len(target.elts) == 2 and all(
                isinstance(e, ast.Name) for e in target.elts) and isinstance(
                    node.elt, ast.Name) and node.elt.id == target.elts[1].id and \
                isinstance(source, ast.Call) and isinstance(source.func, ast.Attribute) \
                and source.func.attr == "named_parameters" and not source.args:
            root = ast.unparse(source.func.value)
            if not generator.ifs:
                return "names", root, False, None
            if len(generator.ifs) > 1:
                raise ValueError("more than one 'if' in the comprehension")
            return ("names", root, *_condition(generator.ifs[0], target.elts[0].id,
                                               constants))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
            node.func.attr == "parameters" and not node.args and not node.keywords:
        root, _, path = ast.unparse(node.func.value).partition(".")
        if root.isidentifier():
            return "modules", root, path
    raise ValueError(f"its 'params' {ast.unparse(node)!r} is neither [p for n, p in "
                     "model.named_parameters() if <a test of n>] nor "
                     "model.<submodule>.parameters()")


def decay_selector(reader, node, params) -> tuple[tuple[str, ...], Any, str]:
    """``(no-decay patterns, the statement binding the decay list, its variable)`` of Paddle's
    ``apply_decay_param_fun=lambda x: x in DECAY`` where ``DECAY = [p.name for n, p in
    model.named_parameters() if not any(nd in n for nd in NO_DECAY)]`` (PaddleNLP's
    form; any negated test :func:`_condition` reads) and the parameters are
    ``model.parameters()``: Paddle calls the function with each parameter's ``name``,
    which the list holds for the parameters whose structured name passes the test. The
    list is read nowhere else (its ``p.name`` has no meaning on the target), so its
    statement goes with the optimizer's."""
    code = reader.code(node)
    tree = ast.parse(code, mode="eval").body
    if not (isinstance(tree, ast.Lambda) and len(tree.args.args) == 1
            and isinstance(tree.body, ast.Compare) and len(tree.body.ops) == 1
            and isinstance(tree.body.ops[0], ast.In)
            and isinstance(tree.body.left, ast.Name)
            and tree.body.left.id == tree.args.args[0].arg
            and isinstance(tree.body.comparators[0], ast.Name)):
        raise ValueError(f"apply_decay_param_fun={code} is not 'lambda x: x in DECAY' "
                         "with DECAY a list of the decayed parameters' names")
    variable = tree.body.comparators[0].id
    bound = [stmt for stmt, var in reader.finder.assigned.values() if var == variable]
    if len(bound) != 1 or _name_uses(reader.module, variable) != 1:
        raise ValueError(f"apply_decay_param_fun's list {variable} is bound or read more "
                         "than once: only one bound once and read only there is read")
    comprehension = ast.parse(reader.code(bound[0].body[0].value), mode="eval").body
    generator = comprehension.generators[0] if isinstance(comprehension, ast.ListComp) \
        and len(comprehension.generators) == 1 else None
    if generator is None or not (
            isinstance(generator.target, ast.Tuple) and len(generator.target.elts) == 2
            and all(isinstance(e, ast.Name) for e in generator.target.elts)
            and isinstance(comprehension.elt, ast.Attribute)
            and comprehension.elt.attr == "name"
            and isinstance(comprehension.elt.value, ast.Name)
            and comprehension.elt.value.id == generator.target.elts[1].id
            and isinstance(generator.iter, ast.Call)
            and isinstance(generator.iter.func, ast.Attribute)
            and generator.iter.func.attr == "named_parameters"
            and not generator.iter.args and len(generator.ifs) == 1):
        raise ValueError(f"apply_decay_param_fun's list {variable} is not [p.name for n, p "
                         "in model.named_parameters() if <a test of n>]")
    negated, patterns = _condition(generator.ifs[0], generator.target.elts[0].id,
                                   reader.constants)
    if not negated:
        raise ValueError(f"{variable} holds the parameters whose names match "
                         f"{list(patterns)}: the others go undecayed, which a name rule "
                         "cannot say (it names the undecayed ones); write the test as "
                         "not any(...)")
    root = ast.unparse(generator.iter.func.value)
    if reader.code(params) != f"{root}.parameters()":
        raise ValueError(f"{variable} names {root}'s parameters, the optimizer is given "
                         f"{reader.code(params)}")
    return patterns, bound[0], variable


def _read_groups(reader, node, c) -> _Groups:
    """The parameter groups of a list of dicts (inline or through a variable bound once)."""
    import libcst as cst

    statement = variable = None
    if isinstance(node, cst.Name):
        variable = node.value
        bound = [stmt for stmt, var in reader.finder.assigned.values() if var == variable]
        if len(bound) != 1:
            raise ValueError(f"its parameters {variable} are bound {len(bound)} times")
        statement = bound[0]
        node = statement.body[0].value
        if _name_uses(reader.module, variable) != 1:
            statement = None     # read elsewhere too: it stays (a note says so)
    tree = ast.parse(reader.code(node), mode="eval").body
    if not isinstance(tree, (ast.List, ast.Tuple)) or not all(
            isinstance(e, ast.Dict) for e in tree.elts):
        raise ValueError("its parameters are not a list of group dicts")
    if c.framework != "torch":
        raise ValueError(f"{c.framework} parameter group dicts are not read (torch's are)")
    groups = []
    for index, entry in enumerate(tree.elts):
        keys = {}
        members = None
        for key_node, value_node in zip(entry.keys, entry.values):
            if key_node is None or not isinstance(key_node, ast.Constant):
                raise ValueError(f"group {index} has a key that is not a string")
            key = key_node.value
            if key == "params":
                members = _members(value_node, reader.constants)
                continue
            if key not in ("weight_decay", "lr"):
                raise ValueError(f"group {index} sets {key!r}: a uo.Group sets only lr and "
                                 "weight_decay (build one optimizer per such group)")
            try:
                keys[key] = _literal_code(ast.unparse(value_node), reader.constants)
            except (ValueError, SyntaxError):
                raise ValueError(f"group {index}'s {key}={ast.unparse(value_node)} is not a "
                                 "literal or a constant") from None
        if members is None:
            raise ValueError(f"group {index} has no 'params'")
        groups.append((members, keys))
    kinds = {m[0] for m, _ in groups}
    roots = {m[1] for m, _ in groups}
    if len(kinds) != 1 or len(roots) != 1:
        raise ValueError("its groups take parameters in different ways (one model's "
                         "named_parameters() with name tests, or its submodules' "
                         "parameters())")
    kind, root = kinds.pop(), roots.pop()
    if kind == "modules":
        paths = [m[2] for m, _ in groups]
        if len(set(paths)) != len(paths) or (len(paths) > 1 and "" in paths):
            raise ValueError("its groups' submodules overlap")
        from ..groups import escaped

        rules = [((f"{escaped(m[2])}.*",), keys) for m, keys in groups if keys]
        return _Groups(kind, root, rules, {}, paths, statement, variable)
    defaults = [(m, keys) for m, keys in groups if m[2] or m[3] is None]
    positive = [(m, keys) for m, keys in groups if not m[2] and m[3] is not None]
    if len(defaults) != 1:
        raise ValueError("which parameters no group's condition takes is not known "
                         "statically: one group must take the rest (not any(...), or no "
                         "condition)" if not defaults else "two groups take the rest")
    (default, default_keys), = defaults
    union = {p for m, _ in positive for p in m[3]}
    if default[3] is None and positive or default[3] is not None and set(default[3]) != union:
        raise ValueError("the groups' conditions do not split the parameters: the group "
                         f"of the rest excludes {sorted(default[3] or [])}, the others take "
                         f"{sorted(union)}")
    rules = [(m[3], keys) for m, keys in positive]
    return _Groups(kind, root, rules, default_keys, [], statement, variable)


#: torch's parameter names that MindSpore's norm layers call otherwise (their bias is
#: beta, their weight gamma)
_NORM_WORDS = ("norm", "ln")


def target_patterns(patterns: tuple[str, ...], to: str) -> tuple[tuple[str, ...], bool]:
    """``patterns`` over torch's names as patterns over ``to``'s (MindSpore: a ``bias``
    pattern also takes the norms' ``beta``, a norm's ``weight`` is its ``gamma``), and
    whether that changed them."""
    if to != "mindspore":
        return patterns, False
    out = list(patterns)
    for p in patterns:
        if "bias" in p:
            out.append(p.replace("bias", "beta"))
        if "weight" in p and any(w in p.lower() for w in _NORM_WORDS):
            out.append(p.replace("weight", "gamma"))
    out = tuple(dict.fromkeys(out))
    return out, out != tuple(patterns)
