"""Who steps the schedule in a ported script (:mod:`.script`'s helpers).

MindSpore optimizers step their lr at each of their own steps; torch's and Paddle's
schedulers step when the script calls ``scheduler.step()``. Where a port moves the
stepping from one to the other, it must keep how often the schedule advances: to
MindSpore, the script's ``scheduler.step()`` must run once per optimizer step (it is
removed); from MindSpore, a ``.step()`` of the new scheduler is added after each
optimizer step. ``reader`` is :mod:`.script`'s reader of the script (its finder holds
the step and call sites), ``o`` one of its optimizers read.
"""

from __future__ import annotations

import ast
import functools
from collections import Counter


def aliases(reader, variable: str | None, function: str | None) -> list[str]:
    """``variable`` (assigned in ``function``) and the variables a helper returning it
    (``return optimizer, scheduler``) unpacks it into."""
    if variable is None:
        return []
    out = [variable]
    for name, positions in reader.finder.unpacked.items():
        for called, position in positions:
            returned = reader.finder.returns.get(called, [])
            if called == function and any(len(r) > position and r[position] == variable
                                          for r in returned):
                out.append(name)
    return list(dict.fromkeys(out))


def scheduler_steps(reader, variable: str | None, function: str | None
                    ) -> dict[str, list[int]]:
    """The ``.step()`` lines of every variable holding a scheduler: its own, and those a
    helper returning it (``return optimizer, scheduler``) unpacks into."""
    return {name: reader.finder.step_calls[name] for name in aliases(reader, variable, function)
            if reader.finder.step_calls.get(name)}


def plan_schedule_steps(reader, optimizers, to: str,
                         module) -> list:
    """The optimizers whose schedule steps as often after the port: to MindSpore, the
    script's ``scheduler.step()`` must run once per optimizer step (it is removed); from
    MindSpore, a ``.step()`` of the new scheduler is added after each optimizer step
    (:attr:`.script._Optimizer.steps_after`). The others are refused (left as written, marked)."""
    kept = []
    for o in optimizers:
        try:
            if o.construction.framework != to and to == "mindspore":
                _check_stepped_per_optimizer_step(reader, o, module)
            elif o.construction.framework == "mindspore" != to:
                o.steps_after = _steps_after(reader, o, to, module)
        except ValueError as error:
            reader.refuse(o.construction, str(error))
            continue
        kept.append(o)
    return kept


def _optimizer_sites(reader, o, module) -> list[tuple[str, object]]:
    """``(variable, site)`` of each step or call of the optimizer's variables."""
    c = o.construction
    return [(name, site) for name in aliases(reader, c.target, function_of(module, c.line))
            for site in reader.finder.sites.get(name, [])]


def _lines(sites) -> str:
    lines = sorted({site.line for site in sites})
    return ("line " if len(lines) == 1 else "lines ") + ", ".join(map(str, lines))


def _check_stepped_per_optimizer_step(reader, o, module) -> None:
    """ValueError unless each ``scheduler.step()`` of the script is in the loop or branch
    of an ``optimizer.step()``, as many of them: then removing it and letting MindSpore
    step the lr at each optimizer step gives the same schedule. A scheduler stepped once
    per epoch, outside the batch loop, would advance every batch instead."""
    stepped = [site for s in o.schedulers
               for name in aliases(reader, s.target, function_of(module, s.line))
               for site in reader.finder.sites.get(name, []) if site.kind == "step"]
    if not stepped:
        return
    optimizer_steps = [site for _, site in _optimizer_sites(reader, o, module)]
    if Counter(x.scope for x in stepped) == Counter(x.scope for x in optimizer_steps):
        return
    found = (f"the optimizer's step ({_lines(optimizer_steps)})" if optimizer_steps else
             "no step of the optimizer found beside it")
    raise ValueError(f"its scheduler steps ({_lines(stepped)}) in another loop or branch "
                     f"than {found}: MindSpore steps the lr at every optimizer step, so a "
                     "scheduler stepped once per epoch (or under a condition) would follow "
                     "another schedule there; step it with the optimizer, or give the "
                     "schedule per optimizer step (uo.schedules.PerEpoch) by hand")


def _steps_after(reader, o, to: str, module) -> list[tuple[object, str]]:
    """``(site, code)``: ``scheduler.step()`` after each statement stepping the MindSpore
    optimizer (``optimizer(grads)``, ``optimizer.step()``), for a schedule it took as
    its ``learning_rate``. ValueError where no such statement is found (the optimizer is
    run by ``nn.TrainOneStepCell``, ``ms.Model``, a Cell's ``construct``) or one is
    inside an expression (``F.depend(loss, optimizer(grads))``)."""
    c = o.construction
    lr_style = [s for s in o.schedulers if s not in reader.torch_schedulers(c)]
    if not lr_style:
        return []
    sites = _optimizer_sites(reader, o, module)
    inside = [site for _, site in sites if site.statement is None]
    if not sites or inside:
        where = (f"the call on {_lines(inside)} is inside an expression" if inside else
                 f"no statement calling {c.target or 'it'}(...) or .step() was found (an "
                 "optimizer run by nn.TrainOneStepCell, ms.Model or a Cell)")
        raise ValueError(f"its schedule (line {lr_style[0].line}) steps inside the MindSpore "
                         f"optimizer; the {to} scheduler uo.native_scheduler gives must be "
                         f"stepped after each optimizer step, and {where}: port the training "
                         "step by hand, with uo.native_scheduler(optimizer).step() after each "
                         "optimizer step")
    variable, home = lr_style[0].target, function_of(module, c.line)
    out = []
    for name, site in sites:
        # the scheduler's variable moves after the optimizer: in scope where it is
        local = variable is not None and name == c.target and \
            function_of(module, site.line) == home
        out.append((site, f"{variable}.step()" if local else
                    f"uo.native_scheduler({name}).step()"))
    return out


def function_of(module, line: int) -> str | None:
    """The innermost function defined around ``line``."""
    found = None
    for first, last, name in _functions(module.code):
        if first <= line <= last and (found is None or first > found[0]):
            found = (first, name)
    return found[1] if found else None


@functools.lru_cache(maxsize=4)
def _functions(code: str) -> tuple[tuple[int, int, str], ...]:
    """``(first line, last line, name)`` of each function in ``code``, parsed once per
    script (every construction and step site asks)."""
    return tuple((node.lineno, node.end_lineno or node.lineno, node.name)
                 for node in ast.walk(ast.parse(code))
                 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)))
