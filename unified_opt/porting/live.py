"""``uo.from_native(optimizer, lr_scheduler=None)``: a live native optimizer (and its
scheduler) that a script already built, read into a spec and ``uo.Group`` rules.

Framework-neutral: the framework comes from the object's class (the module that defines
it or a base class), and that backend's reader, ``unified_opt.backends.<framework>
.reading``, reads it. Every reader does the same four things:

1. **The class.** The optimizer's exact class is found among the backend's descriptors
   (:mod:`unified_opt.native`), by identity with the class the descriptor names, so the
   real module path (``torch.optim.adamw.AdamW``) is the descriptor's
   ``torch.optim.AdamW``. A subclass of a native class is refused by name (its step may
   differ), a refused class raises as ``uo.preset`` does (NotImplementedError), and an
   object that is not an optimizer of the framework is a TypeError.
2. **The constructor values.** They are read from the live object (torch ``defaults``
   and ``param_groups``; Paddle's attributes; MindSpore's ``init_args``, Parameters and
   ``defaults``), and the descriptor's preset is called with them as native keyword
   arguments: the spec is exactly ``uo.preset(name, **arguments)`` (with a scheduler
   read, ``.replace(lr=schedule)`` where the preset takes only a number).
3. **The parameter groups** become ``uo.Group`` rules over parameter names (an empty
   list where every parameter runs the spec's own values), so ``uo.build(spec, params,
   groups=groups)`` rebuilds the optimizer on any backend. Names: ``names=`` (a module,
   or ``(name, parameter)`` pairs) where the optimizer holds its parameters unnamed
   (torch, MindSpore experimental); otherwise the framework's own ``p.name``
   (``names=`` overrides them). A group differing in a value that a ``uo.Group`` cannot
   carry (betas, eps, momentum, ... per group) is a ValueError naming the group, the
   value and the reason.
4. **The scheduler** (torch: ``lr_scheduler=``; Paddle: the optimizer's
   ``learning_rate`` LRScheduler; MindSpore: the ``learning_rate`` Cell or per-step
   list) becomes the schedule ``uo.schedules.preset`` gives for the same arguments,
   and its position is reported (:attr:`NativeReading.position`, also
   :func:`schedule_position`). torch also takes several schedulers stepped together
   (a list, read as torch's ``ChainedScheduler`` composes them), a ``uo.schedules``
   schedule that a loop of the script's own follows (a hand-set lr), or a
   ``uo.lr_scheduler`` scheduler.
5. **The live lr is checked.** Every group's lr the next step will use (torch: the
   group's ``lr``; Paddle: ``get_lr()``, the scheduler's current lr; MindSpore: the lr
   Parameter or schedule Cell at ``global_step``) must be the read schedule at its
   position times the group's ``lr_scale`` (:func:`.live_lr.check_live_lr`, which states the
   tolerance): a scheduler left out (one of two attached to the optimizer), a loop
   writing ``param_group['lr']`` by hand, or a reading that is off is a ValueError
   naming the group, both values and the remedy, never a silently wrong schedule.

Nothing is guessed: a value the reader cannot read exactly is an error saying what it
is. In particular a Python lr function (torch ``LambdaLR`` / ``MultiplicativeLR``,
Paddle ``LambdaDecay`` / ``MultiplicativeDecay``) is a ValueError naming it, unless
``sample_steps=N`` asks for it to be tabulated: the schedule is then a
``uo.schedules.Piecewise`` holding the lr of steps ``0 .. N-1`` (the values the
scheduler gives there, computed by calling the function as the scheduler does), and
its last value after them, which the function need not give (the reading's notes say
so).

State the optimizer already holds (moments, step counts) is not read here: that is
``uo.save_state``. An optimizer that has stepped is read all the same (its constructor
values do not change when it steps).
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from .. import _validation as v
from ..backend import load, record_of
from ..build import explain, framework_of, named_parameters
from ..groups import Group, escaped
from ..native import NativeClass, import_native
from ..presets import preset
from ..schedules import Piecewise, Schedule
from ..spec import Spec

CALLER = "from_native"
#: the top-level modules whose classes each backend reads (MindFormers' Came is MindSpore)
ROOTS = {"torch": "torch", "paddle": "paddle", "mindspore": "mindspore",
         "mindformers": "mindspore"}


@dataclass(frozen=True)
class NativeReading:
    """What :func:`read_native` read.

    ``spec`` and ``groups``: what :func:`from_native` returns. ``native_class``: the
    descriptor's qualified name (``"torch.optim.AdamW"``); ``arguments``: the native
    keyword arguments the preset was called with (a scheduler read replaces the lr);
    ``scheduler``: the qualified name of the scheduler read (None: a constant lr);
    ``position``: the 0-based optimizer step the next ``optimizer.step()`` runs on
    the schedule (torch and Paddle: the scheduler's ``last_epoch``; MindSpore: the
    optimizer's ``global_step``), None without a schedule: a state file stores it, and
    a resumed run continues the schedule from there; ``notes``: what the reading
    decided that a user should know (a tabulated lr function, ...)."""

    spec: Spec
    groups: list[Group]
    native_class: str
    arguments: dict
    scheduler: str | None = None
    position: int | None = None
    notes: tuple[str, ...] = ()


def from_native(optimizer: Any, lr_scheduler: Any = None, *, names: Any = None,
                sample_steps: int | None = None,
                constant_lr: bool = False) -> tuple[Spec, list[Group]]:
    """``(spec, groups)`` computing what the live ``optimizer`` (and ``lr_scheduler``)
    computes; see the module docstring and :func:`read_native`. ``uo.build(spec, ...)``
    on the same framework may make the own implementation instead of the class read,
    where it is measured faster (``prefer="speed"``); the reading's last note says which
    class a build makes and why (``prefer="native"`` keeps the class). Every group's
    live lr is checked against the schedule read at its position
    (:func:`.live_lr.check_live_lr`): a scheduler left out, or an lr a loop writes by hand, is
    an error, never a silently wrong schedule.

    Args:
        optimizer: a torch, Paddle or MindSpore optimizer object a script built.
        lr_scheduler: its scheduler, or None (Paddle and MindSpore ``nn`` optimizers
            hold theirs). On torch also: a list of schedulers stepped together, read as
            ``ChainedScheduler`` composes them; a ``uo.schedules`` schedule that a loop
            writing ``param_group['lr']`` follows (e.g.
            ``uo.schedules.WarmupCosineToMin(lr=6e-4, min_lr=6e-5, warmup_steps=2000,
            decay_steps=600000)``; its position: the optimizer's step count); or a
            ``uo.lr_scheduler`` scheduler.
        names: a module or ``(name, parameter)`` pairs naming its parameters (group
            rules are written over these names), or None. Rules read over one
            framework's names are renamed onto another framework's model by
            ``uo.porting.map_rules`` (``uo.resume`` does it by itself).
        sample_steps: how many steps of a scheduler without a closed form to sample, or
            None.
        constant_lr: True: read a scheduler's traces in the groups, or a torch lr set by
            hand (no group at the constructor's lr), as the current lr, constant (else
            refused).

    Returns:
        tuple[Spec, list[Group]]: the spec and the group rules, for
        ``uo.build(spec, params, groups=groups)`` on any backend.

    Raises:
        TypeError: ``optimizer`` is no optimizer of a known framework.
        ValueError: a class or configuration no spec computes exactly, a scheduler
            that cannot be read, a live lr that is not the schedule's at its position,
            or an lr a scheduler or a loop changes with no schedule given (each says
            what and why).

    Example:
        >>> import torch
        >>> import unified_opt as uo
        >>> model = torch.nn.Linear(4, 2)
        >>> spec, groups = uo.from_native(torch.optim.AdamW(model.parameters(), lr=1e-3))
        >>> spec == uo.preset("torch.optim.AdamW", lr=1e-3), groups
        (True, [])
    """
    reading = read_native(optimizer, lr_scheduler, names=names, sample_steps=sample_steps,
                          constant_lr=constant_lr)
    return reading.spec, reading.groups


#: keys a torch-style scheduler writes into the param groups it drives (LRScheduler's
#: ``initial_lr``; OneCycleLR's and CyclicLR's lr and momentum bounds)
SCHEDULER_TRACES = ("initial_lr", "max_lr", "min_lr", "base_momentum", "max_momentum")


def scheduler_traces(optimizer: Any) -> list[str]:
    """The :data:`SCHEDULER_TRACES` keys ``optimizer``'s param groups hold (a torch or
    MindSpore experimental optimizer a scheduler was attached to)."""
    groups = getattr(optimizer, "param_groups", None)
    if not isinstance(groups, (list, tuple)):
        return []
    return [k for k in SCHEDULER_TRACES
            if any(isinstance(g, dict) and k in g for g in groups)]


def read_native(optimizer: Any, lr_scheduler: Any = None, *, names: Any = None,
                sample_steps: int | None = None, constant_lr: bool = False) -> NativeReading:
    """The full reading of a live optimizer (:class:`NativeReading`).

    ``lr_scheduler``: a torch ``lr_scheduler`` (or MindSpore experimental scheduler) over
    ``optimizer``; Paddle and MindSpore ``nn`` optimizers hold their schedule as their
    ``learning_rate`` and take none here. ``names``: a module or ``(name, parameter)``
    pairs naming the optimizer's parameters. ``sample_steps``: tabulate a Python lr
    function over this many steps (see the module docstring).

    ``lr_scheduler`` on a torch optimizer may also be a list or tuple of schedulers over
    it, all stepped together (read as ``torch.optim.lr_scheduler.ChainedScheduler``
    composes them), a ``uo.schedules.Schedule`` (the lr of group 0 at each 0-based
    optimizer step, for an lr a loop of the script writes by hand; its position is the
    optimizer's step count; other groups run at their lr's ratio to group 0's), or a
    ``uo.lr_scheduler`` scheduler (its ``schedules``, one per group, and ``last_epoch``).

    An optimizer whose param groups carry a scheduler's traces (``initial_lr``,
    ``max_lr``, ``base_momentum``, ...) is driven by a scheduler: read without it, its
    lr (and momentum) would be frozen at today's values, so it is a ValueError naming
    the keys, unless ``constant_lr=True`` says the constant lr is meant. So is a torch
    optimizer none of whose groups runs at the constructor's lr (``defaults["lr"]``)
    without a scheduler: a loop wrote the lr by hand (nanoGPT's ``param_group['lr'] =
    get_lr(it)``), and read as a constant its schedule would be lost. A loop whose lr
    happens to equal the constructor's at the moment of reading cannot be told from a
    constant lr by the object (nothing records the writes): pass its schedule. Paddle's
    and MindSpore's optimizers keep no constructor lr to compare with (``set_lr`` and an
    assignment to ``learning_rate`` overwrite the only copy), so there an lr a loop sets
    by hand reads as the constant it holds now: pass the schedule the loop follows.

    With a schedule read, every group's live lr is checked against it
    (:func:`.live_lr.check_live_lr`)."""
    if sample_steps is not None:
        sample_steps = v.check_int(CALLER, "sample_steps", sample_steps, low=1)
    constant_lr = v.check_bool(CALLER, "constant_lr", constant_lr)
    reader = _reader(optimizer)
    _not_built_here(optimizer)
    if lr_scheduler is None and not constant_lr:
        traces = scheduler_traces(optimizer)
        if traces:
            raise ValueError(f"{CALLER}: the optimizer's param groups hold {traces}, which a "
                             "scheduler writes: a scheduler drives its lr, and read without "
                             "it the schedule would be frozen at its current values; pass "
                             "lr_scheduler=<the scheduler> (several: a list), or "
                             "constant_lr=True to read the current lr as a constant")
        if optimizer_framework(optimizer) == "torch":
            _refuse_a_hand_set_lr(optimizer)
    reading = reader.read(optimizer, lr_scheduler, names=names, sample_steps=sample_steps)
    # which class building the spec back makes, and why (prefer="speed" may replace it)
    note = build_note(reading.spec, optimizer_framework(optimizer))
    return dataclasses.replace(reading, notes=(*reading.notes, note))


def _refuse_a_hand_set_lr(optimizer: Any) -> None:
    """A torch optimizer none of whose groups runs at ``defaults["lr"]``, with no
    scheduler: its lr was written by hand (see :func:`read_native`)."""
    defaults, groups = getattr(optimizer, "defaults", None), getattr(optimizer,
                                                                     "param_groups", None)
    if not isinstance(defaults, dict) or not isinstance(groups, list):
        return                        # no optimizer: the reader says what it is
    constructor = defaults.get("lr")
    lrs = [g.get("lr") for g in groups if isinstance(g, dict)]
    if constructor is None or any(_same_number(lr, constructor) for lr in lrs):
        return
    raise ValueError(f"{CALLER}: no param group runs at the constructor's lr {constructor!r} "
                     f"(their lrs: {lrs}) and no scheduler is given: a loop of the script "
                     "writes param_group['lr'] (a hand-written warmup or decay), and read "
                     "as a constant its schedule would be lost; pass the schedule it "
                     "follows (lr_scheduler=uo.schedules.LinearWarmup(after=uo.schedules"
                     ".Cosine(...), warmup_steps=...), the lr of each 0-based optimizer "
                     "step), the scheduler(s) driving it, or constant_lr=True where these "
                     "lrs are constant (given per group at construction)")


def _same_number(a: Any, b: Any) -> bool:
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return False


def schedule_position(optimizer: Any, lr_scheduler: Any = None) -> int | None:
    """The 0-based optimizer step at which the live schedule stands (the step the next
    ``optimizer.step()`` runs), None where the lr is constant: the accessor a state file
    calls (:attr:`NativeReading.position`)."""
    return _reader(optimizer).position(optimizer, lr_scheduler)


def _not_built_here(optimizer: Any) -> None:
    """An optimizer ``uo.build`` made runs parts of its spec around the native class
    (step hooks, a schedule function, parameter groups), which its attributes do not
    show: it is refused, pointing to the spec it was built from."""
    try:
        record_of(optimizer)
    except ValueError:
        return
    raise ValueError(f"{CALLER}: optimizer {type(optimizer).__qualname__} was built by "
                     "uo.build, which runs parts of its spec around the class (step hooks, "
                     "the schedule); its spec is unified_opt.backend.record_of(optimizer)"
                     ".spec")


def _reader(optimizer: Any):
    framework = optimizer_framework(optimizer)
    return importlib.import_module(f"unified_opt.backends.{framework}.reading")


def optimizer_framework(optimizer: Any) -> str:
    """The backend reading ``optimizer`` (from its class's module or a base class's)."""
    if isinstance(optimizer, type):
        raise TypeError(f"{CALLER}: optimizer must be an optimizer object, got the class "
                        f"{optimizer.__module__}.{optimizer.__qualname__} (build it first)")
    for klass in type(optimizer).__mro__:
        module = klass.__module__ or ""
        if module.startswith("unified_opt.backends."):
            return module.split(".")[2]
        root = module.split(".")[0]
        if root in ROOTS:
            return ROOTS[root]
    raise TypeError(f"{CALLER}: optimizer must be a torch, Paddle or MindSpore optimizer "
                    f"object, got {optimizer!r} of type {type(optimizer).__qualname__}")


# -- helpers the backend readers share --------------------------------------------------

def qualified(klass: type) -> str:
    return f"{klass.__module__}.{klass.__qualname__}"


def descriptor_of(framework: str, optimizer: Any, base: type | tuple) -> NativeClass:
    """The descriptor of ``optimizer``'s exact class among ``framework``'s (see the
    module docstring); ``base``: the framework's optimizer base class (or classes)."""
    klass = type(optimizer)
    if not isinstance(optimizer, base):
        bases = " or ".join(qualified(b) for b in (base if isinstance(base, tuple)
                                                    else (base,)))
        raise TypeError(f"{CALLER}: optimizer must be a {bases}, got {optimizer!r} of type "
                        f"{qualified(klass)}")
    known = native_classes(framework)
    if klass in known:
        cls = known[klass]
        if cls.refused:
            raise NotImplementedError(f"{CALLER}: optimizer {qualified(klass)} "
                                      f"({cls.name}) has no preset: {cls.refused}")
        return cls
    parents = [known[k].name for k in klass.__mro__[1:] if k in known]
    if parents:
        raise ValueError(f"{CALLER}: optimizer of type {qualified(klass)} is a subclass of "
                         f"{parents[0]}, not that class: its step may differ from "
                         f"{parents[0]}'s, so it is not read as it (read the native class, "
                         "or describe the subclass's update as a spec)")
    raise ValueError(f"{CALLER}: optimizer of type {qualified(klass)} has no preset (the "
                     f"{framework} presets: uo.presets())")


_CLASSES: dict[str, dict[type, NativeClass]] = {}


def native_classes(framework: str) -> dict[type, NativeClass]:
    """``framework``'s native classes that import here, by class (refused ones too)."""
    if framework not in _CLASSES:
        found: dict[type, NativeClass] = {}
        for cls in load(framework).classes:
            try:
                klass = import_native(cls.name)
            except (ImportError, AttributeError):   # not in this version (paddle.fluid)
                continue
            found.setdefault(klass, cls)
        _CLASSES[framework] = found
    return _CLASSES[framework]


def call_preset(cls: NativeClass, arguments: dict) -> Spec:
    """``uo.preset(cls.name, **arguments)``."""
    return preset(cls.name, **arguments)


def parameter_names(names: Any, caller: str = CALLER) -> dict[int, str] | None:
    """``names=`` as ``id(parameter) -> name`` (None when not given)."""
    if names is None:
        return None
    pairs = named_parameters(names, caller)
    if framework_of(names) is None and any(n is None for n, _ in pairs):
        raise TypeError(f"{caller}: names must be a module or (name, parameter) pairs, got "
                        f"{type(names).__name__} holding unnamed parameters")
    return {id(p): n for n, p in pairs}


def name_of(p: Any, given: dict[int, str] | None, own: Callable[[Any], str | None],
            where: str) -> str:
    """The name of parameter ``p``: from ``names=``, else the framework's own."""
    if given is not None:
        if id(p) not in given:
            raise ValueError(f"{CALLER}: names does not name a parameter of {where} "
                             f"(shape {tuple(getattr(p, 'shape', ()))}); pass the module "
                             "whose parameters the optimizer holds")
        return given[id(p)]
    name = own(p)
    if not name:
        raise ValueError(f"{CALLER}: the parameters of {where} have no names; pass "
                         "names=<module> or names=[(name, parameter), ...]")
    return name


def rule(names: Sequence[str], **changes: Any) -> Group:
    """A ``uo.Group`` over exactly ``names`` setting ``changes``."""
    return Group(match=tuple(escaped(n) for n in names), **changes)


def scale_of(value: float, base: float, what: str) -> float:
    """The factor ``value / base`` of a group lr over the spec's (ValueError where the
    spec's lr is 0 and the group's is not: no factor gives it)."""
    if base == 0.0:
        if value == 0.0:
            return 1.0
        raise ValueError(f"{CALLER}: {what} lr {value!r} is no multiple of the lr 0 of the "
                         "first group: no uo.Group lr_scale gives it")
    return value / base


#: steps over which a group's schedule is checked to be a multiple of group 0's
CHECK_STEPS = 2000


def checked_steps(schedule: Schedule) -> int:
    """How many steps of ``schedule`` a comparison checks: all of a schedule with a
    ``total_steps`` (and the step after), else the first :data:`CHECK_STEPS`."""
    total = getattr(schedule, "total_steps", None)
    return min(CHECK_STEPS, total + 1) if isinstance(total, int) else CHECK_STEPS


def check_multiple(own: Schedule, schedule: Schedule, scale: float, where: str, name: str,
                   caller: str | None = CALLER) -> None:
    """ValueError where ``own`` (a group's schedule, from its own base lr) is not
    ``scale`` times ``schedule`` (the first group's) at every step checked: then no
    ``uo.Group`` lr_scale gives it (e.g. ``CosineAnnealingLR``'s absolute ``eta_min``,
    which a scale would scale too). Shared by ``from_native`` and ``unified-opt port``
    (``caller`` prefixes the message; None: no prefix)."""
    for t in range(checked_steps(schedule)):
        if not math.isclose(own(t), scale * schedule(t), rel_tol=1e-12, abs_tol=0.0):
            prefix = f"{caller}: " if caller else ""
            raise ValueError(f"{prefix}{name} gives {where} the lr {own(t)!r} at step {t}, "
                             f"not {scale!r} x the first group's {schedule(t)!r}: no "
                             "uo.Group lr_scale gives it (build one optimizer per group)")


def not_a_rule(where: str, key: str, value: Any, reference: Any) -> ValueError:
    return ValueError(f"{CALLER}: {where} sets {key}={value!r}, the spec's is {reference!r}: "
                      "a uo.Group sets only lr, lr_scale, weight_decay and exclusions, so a "
                      f"per-group {key} cannot be expressed as a rule (build one optimizer "
                      "per such group)")


def lambda_refused(scheduler: str, argument: str, fn: Any) -> ValueError:
    return ValueError(f"{CALLER}: {scheduler}'s {argument}={fn!r} is a Python function of "
                      "the step, which no schedule spec reads exactly; pass sample_steps=N "
                      "to tabulate it over the first N steps (uo.schedules.Piecewise), or "
                      "give the schedule as a spec (uo.schedules.Lambda(fn=..., lr=...))")


def sampled(lrs: list[float], scheduler: str) -> tuple[Piecewise, str]:
    """The table of ``lrs`` (step 0 on) as a Piecewise schedule, with its note."""
    schedule = Piecewise(boundaries=list(range(1, len(lrs))), values=list(lrs))
    note = (f"{scheduler}'s Python lr function was tabulated over steps 0..{len(lrs) - 1} "
            f"(sample_steps={len(lrs)}); after them the schedule holds {lrs[-1]!r}, which "
            "the function need not give")
    return schedule, note


def shortest_float32(values) -> list[float]:
    """float32 ``values`` as the shortest decimals that round to them: where a framework
    keeps only a float32 copy of a constructor value (the kernel computes with that
    float32), the Python float a user would have written for it."""
    import numpy as np

    array = np.asarray(values, dtype=np.float32).reshape(-1)
    return [float(np.format_float_positional(x, unique=True, trim="-")) for x in array]


def with_schedule(spec: Spec, schedule: Schedule | None) -> Spec:
    return spec if schedule is None else spec.replace(lr=schedule)


def build_note(spec: Any, backend: str) -> str:
    """What ``uo.build(spec, params)`` makes on ``backend`` and why, in one line (the
    porting tools' message: the spec alone, so the table's large class; the build
    decides by the parameters' size)."""
    decision = explain(spec, backend)
    if decision.path == "native":
        made = f"native {decision.native}"
    else:
        made = "the own implementation"
    return f"uo.build(spec, params) on {backend} builds {made}: {decision.reason}"
