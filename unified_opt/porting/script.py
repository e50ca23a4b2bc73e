"""``unified-opt port SCRIPT --to FRAMEWORK``: the entry point (:func:`port_source`).

A torch script goes to :mod:`.mapper`, which keeps the script's code and maps only the
framework calls (:mod:`.api_map`). A Paddle or MindSpore script's optimizer and
lr-scheduler constructions are read here, statically (through ``libcst``, which keeps
comments and formatting):

* every call of a native optimizer class with a preset (``paddle.optimizer.AdamW(...)``,
  ``nn.Adam`` from ``from mindspore import nn``, the real module path): the class's preset
  turns its arguments into the spec;
* its lr schedule: a Paddle ``LRScheduler`` / MindSpore ``LearningRateSchedule`` given as
  the optimizer's ``learning_rate`` (inline or through a variable), or a scheduler of
  MindSpore's ``experimental.optim`` constructed on the optimizer's variable: the
  scheduler's preset gives the spec's lr.

Argument values must be literals (numbers, strings, tuples, ``True``/``None``) or names
bound once to literals (:mod:`.groups_reading`); the parameter argument stays the
expression it is (``model.parameters()`` becomes MindSpore's ``model.trainable_params()``
and back). Parameter groups as a list of dicts are read where their membership is static
(a test of the name over ``named_parameters()``, or ``model.<submodule>.parameters()``)
and become ``uo.Group`` rules. Anything else -- a value computed at run time, a class whose
preset refuses the arguments, a class named without a direct call -- is left as written,
marked by a ``# unified-opt port: not ported: <why>`` comment and listed
(:attr:`Ported.refusals`); the rest of the file is rewritten all the same. A script with
no optimizer construction at all says so (:attr:`Ported.nothing_found`).

What it writes, for each optimizer: the target framework's native class with the
argument values that make it compute the spec exactly (``uo.explain``'s decision), when
there is one, the lr is constant and the bare call carries the whole spec (read back
through the class's own preset); else ``uo.build(<spec>, <parameters>)``, the spec
written out as ``uo`` constructor calls (:mod:`.spec_code`). A scheduler variable becomes
``uo.native_scheduler(optimizer)`` (``None`` on MindSpore, whose optimizers step their lr
themselves: the script's ``scheduler.step()`` lines are listed to remove, and each must
run once per optimizer step, else the optimizer is refused). From MindSpore, whose
scripts never step a schedule, ``scheduler.step()`` is added after each statement stepping
the optimizer (:mod:`.stepping`; refused where there is none). Imports the new code needs
are added after the script's own; nothing else changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..backend import BACKENDS
from ..groups import NAME_RULES
from ..spec import Spec
from .finder import (
    OPTIMIZER_SCHEDULERS,
    OWN_BASE_LR,
    Construction,
    make_finder,
)
from .framework_calls import mindspore_method, mindspore_read, paddle_clip, torch_method
from .groups_reading import (
    _Groups,
    _literal_code,
    _name_uses,
    _read_groups,
    decay_selector,
    script_constants,
    target_patterns,
)
from .ported import Ported, Rewrite, insert_imports, nothing_found
from .spec_code import _value_code, spec_code
from .stepping import function_of, plan_schedule_steps, scheduler_steps

__all__ = ["Ported", "Rewrite", "port_source", "spec_code"]

#: the parameter argument: keyword, and position among the positional arguments
PARAMS = {"torch": ("params", 0), "paddle": ("parameters", 1), "mindspore": ("params", 0)}
#: the method giving a module's trainable parameters
PARAMETERS_METHOD = {"torch": "parameters", "paddle": "parameters",
                     "mindspore": "trainable_params"}


# -- reading the script (groups and constants: .groups_reading) ------------------------

class _Reader:
    """Turns the found constructions into specs, collecting refusals."""

    def __init__(self, module, finder, constants):
        self.module, self.finder, self.constants = module, finder, constants
        self.refusals: list[tuple[int, str]] = []
        self.by_variable = {c.target: c for c in finder.found if c.target}
        #: id(a schedule's call) -> the constructions of the schedules it wraps
        #: (Paddle's LinearWarmup(learning_rate=<a scheduler>)), innermost last
        self.wrapped: dict[int, list[Construction]] = {}

    def code(self, node) -> str:
        return self.module.code_for_node(node).strip()

    def refuse(self, construction: Construction, message: str) -> None:
        self.refusals.append((construction.line, f"{construction.name}: {message}"))

    def arguments(self, c: Construction, leading: list[str], signature) -> dict:
        """keyword -> argument node; positional ones named by ``leading`` (the arguments
        the preset lacks: parameters, optimizer) and then the preset's signature (less
        ``base_lr`` where it stands for the optimizer's lr)."""
        names = [n for n in signature.parameters
                 if n != "base_lr" or c.name in OWN_BASE_LR]
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

    def literal(self, c: Construction, keyword: str, node) -> Any:
        text = self.code(node)
        try:
            return _literal_code(text, self.constants)
        except (ValueError, SyntaxError):
            raise ValueError(f"{keyword}={text} is not a literal or a module-level "
                             "constant: its value is only known at run time") from None

    def schedule(self, c: Construction, base_lr: float | None):
        from ..schedules import preset as schedule_preset
        from ..schedules._preset_registry import REGISTRY

        if c.name in REGISTRY.names(True):
            raise ValueError(REGISTRY.refusal(c.name))
        signature = REGISTRY.signature(c.name)
        torch_style = c.name.startswith(OPTIMIZER_SCHEDULERS)
        nodes = self.arguments(c, ["optimizer"] if torch_style else [], signature)
        nodes.pop("optimizer", None)
        kwargs = {}
        for k, v in nodes.items():
            inner = self.scheduler_of(v) if k == "learning_rate" and not torch_style \
                else None
            if inner is None or inner is c:
                kwargs[k] = self.literal(c, k, v)
                continue
            # a schedule around another (LinearWarmup(learning_rate=cosine)): read in
            kwargs[k] = self.schedule(inner, None)
            self._wrapped_only_here(inner, c)
            self.wrapped[id(c.call)] = [inner, *self.wrapped.get(id(inner.call), [])]
        # the optimizer's lr is the base of a scheduler that scales it; CyclicLR's
        # base_lr is its own argument and OneCycleLR takes none
        if "base_lr" in signature.parameters and c.name not in OWN_BASE_LR:
            kwargs["base_lr"] = base_lr
        return schedule_preset(c.name, **kwargs)

    def _wrapped_only_here(self, inner: Construction, outer: Construction) -> None:
        """Refuse a wrapped schedule's variable that the script reads anywhere but in
        ``outer``'s call: its construction is removed with the outer's (the spec's lr
        holds both), and a step() or a read of it would have nothing left to act on."""
        if inner.target is None:
            return
        if _name_uses(self.module, inner.target) != 1:      # the outer's argument only
            raise ValueError(f"the wrapped schedule {inner.target} (line {inner.line}) is "
                             f"used elsewhere too; {outer.name} steps it: use it only as "
                             "its learning_rate")

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

    def torch_schedulers(self, optimizer: Construction) -> list[Construction]:
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
    construction: Construction
    spec: Spec
    params: Any                              # the parameter argument's node
    schedulers: list[Construction]          # the constructions its schedule came from
    groups: _Groups | None = None            # parameter groups read from dicts
    rules: list = field(default_factory=list)    # [(patterns, uo.Group keywords)]
    clips: list = field(default_factory=list)    # the clip calls folded into the spec
    #: ``(site, code)``: the scheduler steps added after the optimizer's own steps
    steps_after: list = field(default_factory=list)
    #: ``(statement, note)``: statements read into the spec, removed with the optimizer
    read_in: list = field(default_factory=list)


def _parameters_keyword(name: str, default: str) -> str:
    """The keyword of a Paddle class's parameter list: ``parameter_list`` for the
    old-style ones (``LarsMomentumOptimizer``, fleet's ``DGCMomentumOptimizer``)."""
    from ..backend import load

    for cls in load("paddle").classes:
        if cls.name == name:
            return getattr(cls, "parameters_keyword", default)
    return default


def _read_optimizer(reader: _Reader, c: Construction) -> _Optimizer:
    import libcst as cst

    from ..presets._registry import preset, registry, signature
    from .live import with_schedule

    if c.name in registry().names(True):
        raise ValueError(registry().refusal(c.name))
    keyword, position = PARAMS[c.framework]
    if c.framework == "paddle":
        keyword = _parameters_keyword(c.name, keyword)
    sig = signature(c.name)
    leading = [n for n in list(sig.parameters)[:position]] + [keyword]
    nodes = reader.arguments(c, leading, sig)
    params = nodes.pop(keyword, None)
    if params is None:
        raise ValueError(f"no parameter argument ({keyword}=...)")
    groups = None
    listed = isinstance(params, (cst.List, cst.Tuple)) and any(
        isinstance(e.value, cst.Dict) for e in params.elements)
    named = isinstance(params, cst.Name) and any(
        var == params.value and isinstance(stmt.body[0].value, (cst.List, cst.Tuple))
        and any(isinstance(e.value, cst.Dict) for e in stmt.body[0].value.elements)
        for stmt, var in reader.finder.assigned.values())
    if listed or named:
        try:
            groups = _read_groups(reader, params, c)
        except (ValueError, SyntaxError) as error:
            raise ValueError(f"parameter groups as a list of dicts: {error}; build with "
                             "uo.build(spec, model, groups=[uo.Group(match=..., ...)])") \
                from None
    lr_keyword = next((n for n in ("lr", "learning_rate") if n in sig.parameters), None)
    schedulers, kwargs, no_decay, read_in, clip = [], {}, (), [], None
    for name, node in nodes.items():
        if name == "apply_decay_param_fun" and groups is None and reader.code(node) != "None":
            no_decay, statement, variable = decay_selector(reader, node, params)
            read_in.append((statement, f"line {c.line}: apply_decay_param_fun's list "
                            f"{variable} is the spec's no_decay_names={no_decay!r} now; "
                            "its construction is removed"))
            continue
        if name == "grad_clip" and c.framework == "paddle":
            kwargs[name] = None
            clip = paddle_clip(reader, c, node)
            continue
        scheduler = reader.scheduler_of(node) if name == lr_keyword else None
        if scheduler is not None:
            try:
                kwargs[name] = reader.schedule(scheduler, None)
            except (ValueError, TypeError, NotImplementedError) as error:
                raise SchedulerRefused(scheduler, str(error)) from None
            schedulers += [scheduler, *reader.wrapped.get(id(scheduler.call), [])]
        else:
            kwargs[name] = reader.literal(c, name, node)
    if groups is not None:          # the group of the rest holds the spec's own values
        kwargs.update(groups.defaults)
    spec = preset(c.name, **kwargs)
    if no_decay:
        spec = spec.replace(no_decay_names=no_decay)
    if clip is not None:
        spec = spec.replace(grad_clip=clip)
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
    rules = []
    if groups is not None:
        rules = _rules(groups, spec, kwargs.get(lr_keyword), reader,
                       attached[0] if attached else None)
    return _Optimizer(c, spec, params, schedulers, groups, rules, read_in=read_in)


def _rules(groups: _Groups, spec: Spec, base_lr, reader: _Reader,
           scheduler: Construction | None) -> list:
    """``[(patterns, uo.Group keywords)]`` of the groups: an lr is absolute with a
    constant spec lr, a factor of the base lr under a ``scheduler`` that scales it
    (checked as ``uo.from_native`` checks it: the scheduler's schedule from the group's
    own lr must be that factor times the spec's at every step; with an absolute
    ``eta_min`` it is not)."""
    from ..schedules import Cyclic, OneCycle
    from .live import check_multiple

    out = []
    for patterns, keys in groups.rules:
        changes = {}
        if "weight_decay" in keys:
            changes["weight_decay"] = float(keys["weight_decay"])
        if "lr" in keys:
            if isinstance(spec.lr, (int, float)):
                changes["lr"] = float(keys["lr"])
            elif isinstance(spec.lr, (OneCycle, Cyclic)) or not isinstance(
                    base_lr, (int, float)) or base_lr == 0 or scheduler is None:
                raise ValueError(f"a group's lr={keys['lr']!r} under "
                                 f"{type(spec.lr).__name__}, which sets absolute lrs: no "
                                 "uo.Group gives it (build one optimizer per group)")
            else:
                changes["lr_scale"] = float(keys["lr"]) / float(base_lr)
                own = reader.schedule(scheduler, float(keys["lr"]))
                check_multiple(own, spec.lr, changes["lr_scale"],
                               f"the group of {list(patterns)} (lr={keys['lr']!r})",
                               scheduler.name, caller=None)
        if changes:
            out.append((patterns, changes))
    return out


# -- writing the target's code ----------------------------------------------------------

def _params_code(reader: _Reader, node, source: str, to: str, *, named: bool = False) -> str:
    """The parameter argument for ``to``: ``model.parameters()`` as ``to``'s method, or
    ``model`` itself where the spec has name rules (``named``): a build matches them
    against parameter names, which a module gives and a parameter list may not."""
    import libcst as cst

    if (isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and not node.args
            and node.func.attr.value == PARAMETERS_METHOD[source]):
        module = reader.code(node.func.value)
        return module if named else f"{module}.{PARAMETERS_METHOD[to]}()"
    return reader.code(node)


def _groups_code(o: _Optimizer, to: str) -> tuple[str, str, list[str]]:
    """(the parameter argument, ``groups=[...]`` or "", notes) of parameter groups."""
    g, notes = o.groups, []
    if g.kind == "names":
        params = g.root
    elif to == "mindspore":
        params = "[" + ", ".join(f"*{g.root}.{path}.trainable_params()" if path else
                                 f"*{g.root}.trainable_params()" for path in g.paths) + "]"
    else:
        params = "[" + ", ".join(f"*{g.root}.{path}.named_parameters(prefix={path!r})"
                                 if path else f"*{g.root}.named_parameters()"
                                 for path in g.paths) + "]"
    rules = []
    for patterns, changes in o.rules:
        patterns, changed = target_patterns(tuple(patterns), to) if g.kind == "names" \
            else (tuple(patterns), False)
        if changed:
            notes.append(f"line {o.construction.line}: the group of {list(patterns)} takes "
                         "MindSpore's names too (a norm's bias is beta, its weight gamma): "
                         "check them against your model's")
        keywords = "".join(f", {k}={v!r}" for k, v in changes.items())
        rules.append(f"uo.Group(match={patterns!r}{keywords})")
    return params, f", groups=[{', '.join(rules)}]" if rules else "", notes


def _names_in(nodes) -> set[str]:
    """The variable names read anywhere in ``nodes`` (libcst nodes)."""
    import libcst as cst

    found: set[str] = set()

    class Names(cst.CSTVisitor):
        def visit_Name(self, node):
            found.add(node.value)

    for node in nodes:
        node.visit(Names())
    return found


def _emit(o: _Optimizer, reader: _Reader, to: str) -> tuple[str, str, str]:
    """(the new call, why, the import it needs)."""
    from ..build import explain

    decision = explain(o.spec, backend=to)
    why = " ".join(line.strip() for line in str(decision).splitlines()[:2])
    if o.groups is not None:
        params, groups, _ = _groups_code(o, to)
        return (f"uo.build({spec_code(o.spec)}, {params}{groups})", why,
                "import unified_opt as uo")
    params = _params_code(reader, o.params, o.construction.framework, to)
    named = _params_code(reader, o.params, o.construction.framework, to, named=any(
        getattr(o.spec, rule, ()) for rule in NAME_RULES))
    if decision.path == "native" and isinstance(o.spec.lr, (int, float)):
        kwargs = decision.native_class.native_call(decision.lowering, o.spec)
        try:
            arguments = [f"{k}={_value_code(v)}" for k, v in kwargs.items()]
        except ValueError:     # an argument that is an object (a clip, a function)
            arguments = None
        missed = _not_carried(decision, o.spec, kwargs)
        if missed:
            why += (f"; written as uo.build, which lowers them around the class: the bare "
                    f"{decision.native}(...) call would not carry {', '.join(missed)}")
        elif arguments is not None:
            head = f"{PARAMS[to][0]}={params}" if to == "paddle" else params
            return (f"{decision.native}({', '.join([head, *arguments])})", why,
                    f"import {decision.native.rpartition('.')[0]}")
    return f"uo.build({spec_code(o.spec)}, {named})", why, "import unified_opt as uo"


def _not_carried(decision, spec: Spec, kwargs: dict) -> list[str]:
    """What a bare call of the decision's native class with ``kwargs`` would leave out
    of ``spec`` (as ``field=value``): the parts ``uo.build`` lowers around the class --
    the gradient pre-step (a loss scale, a clip, ...) and the name rules (MindSpore's
    not decaying ``*beta*``/``*gamma*``) -- where the class's own reading of the call
    differs. A MindSpore ``nn`` class skips decay for such names unasked, so the call
    may also add a rule the spec lacks; that is listed too."""
    from ..spec import PRE_STEP_DEFAULTS

    try:
        back = decision.native_class.from_native(**kwargs)
        if decision.lowering.read_back is not None:
            back = decision.lowering.read_back(back)
    except (TypeError, ValueError, NotImplementedError) as error:
        return [f"its own reading ({error})"]
    defaults = {**PRE_STEP_DEFAULTS, **{rule: () for rule in NAME_RULES}}
    return [f"{name}={getattr(spec, name, default)!r} (the bare call's: "
            f"{getattr(back, name, default)!r})" for name, default in defaults.items()
            if getattr(spec, name, default) != getattr(back, name, default)]


def port_source(source: str, to: str, *, filename: str = "<script>") -> Ported:
    """Rewrite ``source``'s optimizer and scheduler constructions for framework ``to``
    (module docstring). A construction that cannot be read is left as it is, marked by a
    comment saying why, and listed in :attr:`Ported.refusals`; the rest of the file is
    rewritten all the same. ValueError for a bad ``to`` or source."""
    import libcst as cst
    from libcst.metadata import MetadataWrapper

    if to not in BACKENDS:
        raise ValueError(f"port: to must be one of {list(BACKENDS)}, got {to!r}")
    try:
        wrapper = MetadataWrapper(cst.parse_module(source))
    except cst.ParserSyntaxError as error:
        raise ValueError(f"port: {filename} is not valid Python: {error}") from None
    finder = make_finder()
    wrapper.visit(finder)
    if to != "torch" and not any(c.framework != "torch" for c in finder.found):
        # a torch script: the user's code is kept, only framework calls are mapped
        from .mapper import port_torch

        return port_torch(source, to, filename=filename)
    constants = script_constants(wrapper.module)
    reader = _Reader(wrapper.module, finder, constants)
    reader.refusals += [(line, message) for line, message, _ in finder.unfollowed]
    optimizers = []
    refused_calls: set[int] = set()
    for c in finder.found:
        if c.kind == "optimizer":
            try:
                optimizers.append(_read_optimizer(reader, c))
            except SchedulerRefused as error:
                reader.refuse(error.construction, str(error))
                reader.refuse(c, f"its scheduler (line {error.construction.line}) cannot "
                              "be read")
                refused_calls |= {id(c.call), id(error.construction.call)}
            except (ValueError, TypeError, NotImplementedError) as error:
                reader.refuse(c, str(error))
                refused_calls.add(id(c.call))
    used = {id(s.call) for o in optimizers for s in o.schedulers}
    # the schedulers of an optimizer refused above are left with it, unported
    for c in finder.found:
        if c.kind == "optimizer" and id(c.call) in refused_calls:
            for s in reader.torch_schedulers(c):
                used.add(id(s.call))
                refused_calls.add(id(s.call))
            # a Paddle or MindSpore schedule given as its learning_rate by variable, and
            # the schedules that one is made of (LinearWarmup(learning_rate=cosine))
            handed, pending = set(), _names_in(c.call.args)
            while pending - handed:
                handed |= pending
                for s in finder.found:
                    if s.kind != "scheduler" or s.target not in handed:
                        continue
                    pending = pending | _names_in(s.call.args)
                    # with one it wraps given inline (learning_rate=CosineAnnealingDecay(...))
                    for t in [s, *(reader.scheduler_of(a.value) for a in s.call.args)]:
                        if t is None or id(t.call) in used or id(t.call) in refused_calls:
                            continue
                        reader.refuse(t, f"it schedules the optimizer of line {c.line}, "
                                      "which is not ported")
                        used.add(id(t.call))
                        refused_calls.add(id(t.call))
    for c in finder.found:
        if c.kind == "scheduler" and id(c.call) not in used and id(c.call) not in refused_calls:
            reader.refuse(c, "it schedules no optimizer constructed in this script (a "
                          "torch-style scheduler takes the optimizer's variable; a Paddle "
                          "or MindSpore one is the optimizer's learning_rate)")
            refused_calls.add(id(c.call))
    optimizers = plan_schedule_steps(reader, optimizers, to, wrapper.module)
    ported = _rewrite(wrapper.module, reader, optimizers, to)
    if not any(c.kind == "optimizer" for c in finder.found) and not ported.refusals:
        ported.nothing_found = nothing_found(filename)
    return ported


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
        moved = [s for s in o.schedulers if s not in reader.torch_schedulers(c)
                 and s.target is not None]
        if moved and c.statement is None:
            reader.refusals.append((c.line, f"{c.name}: its schedule (line {moved[0].line}) "
                                    "moves after it, so it must be assigned to a variable on "
                                    "a line of its own"))
            continue
        code, why, needed = _emit(o, reader, to)
        calls[id(c.call)] = code
        imports.append(needed)
        rewrites.append(Rewrite(c.line, reader.code(c.call), code, why, o.spec))
        if o.groups is not None:
            notes += _groups_code(o, to)[2]
            if o.groups.statement is not None:
                remove.add(id(o.groups.statement))
                notes.append(f"line {c.line}: the group list {o.groups.variable} became "
                             "uo.Group rules; its construction is removed")
            elif o.groups.variable is not None:
                notes.append(f"line {c.line}: the group list {o.groups.variable} is read "
                             f"elsewhere too: its construction stays as written ({c.framework} "
                             "code)")
        if c.framework == "paddle" and to != "paddle" and c.target is not None:
            for line, call, method in reader.finder.paddle_calls.get(c.target, []):
                new, why = (torch_method if to == "torch" else mindspore_method)(
                    c.target, call, method)
                if new is None:
                    reader.refusals.append((line, why))
                    continue
                calls[id(call)] = new
                rewrites.append(Rewrite(line, reader.code(call), new, why))
        if c.framework == "mindspore" and to != "mindspore" and c.target is not None:
            for line, attribute, _ in reader.finder.mindspore_reads.get(c.target, []):
                if attribute == "parameters":     # autograd's: ported with the model's
                    notes.append(f"line {line}: {mindspore_read(c.target, attribute, to)}")
                else:
                    reader.refusals.append((line, mindspore_read(c.target, attribute, to)))
            # the training step's autograd is ported by hand with the model's (a note,
            # as Paddle's optimizer.step() into MindSpore)
            notes += [f"line {site.line}: {c.target}(grads): a MindSpore optimizer is called "
                      f"on the gradients; {to}'s reads them from the parameters: compute "
                      "them with loss.backward() (ported with the model's forward and "
                      f"backward), then call {c.target}.step()"
                      for site in reader.finder.sites.get(c.target, [])
                      if site.kind == "call"]
        for site, code in o.steps_after:
            after.setdefault(id(site.statement), []).append(code)
            notes.append(f"line {site.line}: {code} added after the optimizer's step: "
                         f"MindSpore stepped the lr inside the optimizer, {to}'s scheduler "
                         "steps when told")
        for statement, note in o.read_in:
            remove.add(id(statement))
            notes.append(note)
        for line, statement, clip in o.clips:
            remove.add(id(statement))
            notes.append(f"line {line}: the clip is the spec's grad_clip={clip!r} now: the "
                         f"optimizer of line {c.line} clips inside step(), before the "
                         "update; the call is removed")
        wrapped = {id(w.call) for s in o.schedulers for w in reader.wrapped.get(id(s.call), [])}
        for s in o.schedulers:
            if id(s.call) in wrapped:      # part of the schedule around it
                if s.target is not None:
                    remove.add(id(s.statement))
                    notes.append(f"line {s.line}: {s.target}, the schedule wrapped by "
                                 "another, is part of the spec's lr now (line "
                                 f"{c.line}); its construction is removed")
                continue
            new = f"uo.native_scheduler({c.target})"
            reason = ("the schedule is the spec's lr now (line "
                      f"{c.line}); uo.native_scheduler gives the scheduler uo.build made")
            if s in reader.torch_schedulers(c):
                calls[id(s.call)] = new
                rewrites.append(Rewrite(s.line, reader.code(s.call), new, reason))
            elif s.target is not None:
                remove.add(id(s.statement))
                after.setdefault(id(c.statement), []).append(f"{s.target} = {new}")
                rewrites.append(Rewrite(s.line, reader.code(s.call), f"{s.target} = {new} "
                                        f"(after line {c.line})", reason))
            elif to != "mindspore" and not o.steps_after:
                notes.append(f"line {c.line}: the schedule given inline is inside the "
                             f"optimizer now; step uo.native_scheduler(optimizer) after each "
                             "optimizer step")
            if to == "mindspore":
                steps = scheduler_steps(reader, s.target, function_of(module, s.line))
                for variable, lines in sorted(steps.items(), key=lambda kv: kv[1][0]):
                    where = "line" + ("s" if len(lines) > 1 else "")
                    notes.append(f"{where} {', '.join(map(str, lines))}: {variable}.step() "
                                 "-- remove: MindSpore optimizers step their lr themselves "
                                 "(uo.native_scheduler gives None there)")
            imports.append("import unified_opt as uo")
    # what could not be read stays as written, marked where it stands
    marks: dict[int, list[str]] = {}
    for line, message in reader.refusals:
        statement = _statement_at(reader, line)
        if statement is not None:
            marks.setdefault(id(statement), []).append(
                f"# unified-opt port: not ported: {' '.join(message.split())}")

    class Rewriter(cst.CSTTransformer):
        def leave_Call(self, original, updated):
            code = calls.get(id(original))
            return cst.parse_expression(code) if code is not None else updated

        def leave_SimpleStatementLine(self, original, updated):
            if id(original) in remove:
                return cst.RemoveFromParent()
            if id(original) in marks:
                comments = [cst.EmptyLine(comment=cst.Comment(text))
                            for text in marks[id(original)]]
                updated = updated.with_changes(
                    leading_lines=[*updated.leading_lines, *comments])
            extra = after.get(id(original))
            if extra:
                return cst.FlattenSentinel([updated, *(cst.parse_statement(x + "\n")
                                                       for x in extra)])
            return updated

    rewritten = insert_imports(module.visit(Rewriter()), list(dict.fromkeys(imports)))
    return Ported(rewritten.code, rewrites, notes, sorted(reader.refusals))


def _statement_at(reader: _Reader, line: int):
    """The simple statement holding the construction or call on ``line``."""
    for c in reader.finder.found:
        if c.line == line and c.statement is not None:
            return c.statement
    for _, call, clip_line in reader.finder.clips:
        if clip_line == line:
            return reader.finder.statements.get(id(call))
    for c in reader.finder.found:
        if c.line == line:
            return reader.finder.call_statements.get(id(c.call))
    for unfollowed_line, _, statement in reader.finder.unfollowed:
        if unfollowed_line == line:
            return statement
    for reads in reader.finder.mindspore_reads.values():   # opt.learning_rate
        for read_line, _, statement in reads:
            if read_line == line:
                return statement
    for calls in reader.finder.paddle_calls.values():      # set_lr, minimize, ...
        for call_line, call, _ in calls:
            if call_line == line:
                return reader.finder.call_statements.get(id(call))
    return None
