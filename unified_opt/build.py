"""``uo.build``, ``uo.explain``, ``uo.backends``: the entry points into the backends.

The core never imports a framework at import time: the backend is inferred from the
parameters' types by the name of the module that defines them, and loaded by name
(:func:`unified_opt.backend.load`) when a call needs it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable, Mapping, Sequence

from ._validation import check_choice
from .backend import (
    BACKENDS,
    PATHS,
    Context,
    Decision,
    check_parameters,
    installed,
    load,
    load_installed,
    record_of,
    remember,
)
from .groups import Group, plan_parameters
from .param_groups import (
    carry_extras,
    flatten_group_dicts,
    group_dict_extras,
    is_group_dicts,
    plans_of_group_dicts,
)
from .parameters import framework_of, named_parameters
from .porting.names import mindspore_filter_onto
from .schedules.plateau import ReduceOnPlateau
from .spec import Spec, check_momentum_cycling
from .speed import check_prefer


def backends() -> list[str]:
    """Backends whose framework is installed (found without importing it).

    Args:
        None.

    Returns:
        list[str]: the installed of ``"torch"``, ``"paddle"`` and ``"mindspore"``, in that
        order (a framework counts when its package can be found; nothing is imported).

    Example:
        >>> import unified_opt as uo
        >>> set(uo.backends()) <= {"torch", "paddle", "mindspore"}
        True
    """
    return installed()


def build(spec: Spec, params: Any, backend: str | None = None,
          groups: Sequence[Group] | None = None, *, path: str = "auto",
          options: Mapping[str, Any] | None = None, prefer: str = "speed") -> Any:
    """The framework's own optimizer computing ``spec`` over ``params``, or the spec's
    own update inside an optimizer class of that framework where no class is exact (or
    where the own update is measured faster: ``prefer``).

    ``params`` may also be group dicts, torch's and Paddle's form:
    ``[{"params": [...], "lr": 0.1, "weight_decay": 0.0}, ...]`` of any framework's
    parameters (:func:`unified_opt.param_groups.plans_of_group_dicts` says which keys a
    group may hold).

    ``groups``: a list of :class:`unified_opt.Group` (name rules setting per-parameter lr
    factors, weight decay and clipping exclusions), lowered to the framework's own
    parameter groups.

    Whatever is returned has torch's surface beside its framework's own:
    ``param_groups`` (written values read at the next step), ``defaults`` and
    ``step(closure=None)`` (:mod:`unified_opt.param_groups`).

    ``path``: "auto" (native where exact, else own), "native" (error if no native class
    is exact) or "own" (always the spec's own update). ``options``: implementation
    flags passed to the native class (e.g. ``{"foreach": True}``), checked against
    that class's signature.

    ``prefer`` (``path="auto"``), where both a native class and the own update are
    exact: "speed" (the default) takes the own update where the measured speed table
    (:mod:`unified_opt.speed`) says it is at least 1.5x faster than the class for this
    framework, device, algorithm and size, else the class; "native" always takes the
    class. ``uo.explain(optimizer)`` names the choice, the alternative and the ratio.

    Args:
        spec: the algorithm and its hyperparameters (``uo.AdamW(lr=1e-3)``, a preset).
        params: a module (a torch ``nn.Module``, a Paddle ``nn.Layer``, a MindSpore
            ``nn.Cell``: its named, trainable parameters), an iterable of ``(name,
            parameter)`` pairs or of parameters, a mapping name -> parameter, or group
            dicts. Names are what ``groups`` and ``no_decay_names`` match.
        backend: ``"torch"``, ``"paddle"`` or ``"mindspore"``; None (the default) infers
            it from the parameters' classes. Given, it must agree with them.
        groups: ``uo.Group`` name rules, or None.
        path: ``"auto"``, ``"native"`` or ``"own"`` (above).
        options: the native class's implementation flags, or None.
        prefer: ``"speed"`` or ``"native"`` (above).

    Returns:
        The optimizer, driven the framework's usual way: torch, a
        ``torch.optim.Optimizer``; Paddle, a ``paddle.optimizer.Optimizer``; MindSpore, a
        ``mindspore.nn.Optimizer`` Cell (or a ``mindspore.experimental.optim`` optimizer)
        called with the gradients. A scheduled lr comes with its native scheduler:
        :func:`native_scheduler`.

    Raises:
        TypeError: ``spec`` is not a spec, ``options`` not a mapping, or ``params`` not
            one of the forms above.
        ValueError: an unknown ``path``, ``backend`` or ``prefer``; empty ``params``;
            parameters of another framework than ``backend``; repeated names; both
            group dicts and ``groups``; a name rule matching no parameter; ``path=
            "native"`` where no native class computes the spec exactly; a spec or
            option the backend cannot honour (the message says which).

    Example:
        >>> import torch
        >>> import unified_opt as uo
        >>> model = torch.nn.Linear(4, 2)
        >>> opt = uo.build(uo.AdamW(lr=1e-3, weight_decay=0.01), model)
        >>> type(opt).__name__
        'AdamW'
    """
    if not isinstance(spec, Spec):
        raise TypeError(f"build: spec must be a unified_opt spec, got {spec!r}")
    check_choice("build", "path", path, PATHS)
    if backend is not None:
        check_choice("build", "backend", backend, BACKENDS)
    check_prefer(prefer, "build")
    if options is not None and not isinstance(options, Mapping):
        raise TypeError(f"build: options must be a mapping, got {options!r}")
    check_momentum_cycling(spec, "build")
    group_dicts = is_group_dicts(params)
    if group_dicts:
        if groups is not None:
            raise ValueError("build: give parameter groups as group dicts in params or as "
                             "uo.Group rules in groups=, not both")
        members = [named_parameters(items) for items in flatten_group_dicts(params, "build")]
        named = [pair for group in members for pair in group]
    else:
        named = named_parameters(params)
    if not named:
        raise ValueError("build: params is empty")
    inferred = check_parameters(named, "build")
    if backend is not None and backend != inferred:
        raise ValueError(f"build: backend={backend!r} but the parameters are {inferred} "
                         "objects")
    names = [n for n, _ in named if n is not None]
    if len(set(names)) != len(names):
        raise ValueError(f"build: parameter names must be unique, got {names}")
    adapter = load_installed(inferred)
    # name rules see the framework's own name of an unnamed parameter where it has one
    rule_names = [n if n is not None else adapter.parameter_name(p) for n, p in named]
    spec = mindspore_filter_onto(spec, params, rule_names, inferred, "build")
    if group_dicts:
        sizes = [len(group) for group in members]
        starts = [sum(sizes[:g]) for g in range(len(sizes))]
        plans = plans_of_group_dicts(spec, params, [rule_names[a:a + n]
                                                    for a, n in zip(starts, sizes)])
    else:
        plans = plan_parameters(spec, rule_names, groups, "build")
    optimizer, record = adapter.build(spec, named, path=path, options=dict(options or {}),
                                      plans=plans, prefer=prefer)
    record.groups = tuple(groups or ())
    if group_dicts:
        record.dict_groups = tuple(range(len(params)))
        carry_extras(getattr(optimizer, "param_groups", None) or [], [p for _, p in named],
                     plans, group_dict_extras(spec, params))
    remember(optimizer, record)
    return optimizer


def optimizer_factory(spec: Spec, **build_kwargs: Any) -> Callable[..., Any]:
    """A callable ``(params, **defaults) -> uo.build(spec, params, **build_kwargs)`` for
    wrappers that build the optimizer themselves from an optimizer class, e.g. torch's
    ``ZeroRedundancyOptimizer(model.parameters(), optimizer_class=uo.optimizer_factory(
    spec))``. ``params`` may be parameter groups as dicts holding nothing but
    ``"params"`` (what such wrappers pass); hyperparameters belong in the spec (and group
    rules in ``groups=``), so group keys or ``defaults`` are refused, naming them.

    Args:
        spec: the spec every optimizer the callable makes computes.
        **build_kwargs: passed to :func:`build` (``backend``, ``groups``, ``path``,
            ``options``, ``prefer``).

    Returns:
        Callable: ``make(params, **defaults)``, building with :func:`build`; it raises
        ValueError for ``defaults`` or group keys other than ``"params"``.

    Raises:
        TypeError: ``spec`` is not a spec.

    Example:
        >>> import unified_opt as uo
        >>> make = uo.optimizer_factory(uo.AdamW(lr=1e-3))
        >>> make.__qualname__
        'optimizer_factory(adamw)'
    """
    if not isinstance(spec, Spec):
        raise TypeError(f"optimizer_factory: spec must be a unified_opt spec, got {spec!r}")

    def make(params: Any, **defaults: Any) -> Any:
        if defaults:
            raise ValueError(f"optimizer_factory: {sorted(defaults)} given to the optimizer "
                             f"class: set them in the spec ({spec.name})")
        params = list(params)
        if params and all(isinstance(p, Mapping) for p in params):
            extra = sorted({k for group in params for k in group} - {"params"})
            if extra:
                raise ValueError(f"optimizer_factory: parameter groups with {extra}: set "
                                 "them in the spec, or as uo.Group rules in groups=")
            params = [p for group in params for p in group["params"]]
        _refuse_per_share_pre_step(spec, params)
        return build(spec, params, **build_kwargs)

    make.__qualname__ = f"optimizer_factory({spec.name})"
    return make


def _refuse_per_share_pre_step(spec: Spec, params: list) -> None:
    """A wrapper that builds one optimizer per rank over that rank's share of the
    parameters (ZeroRedundancyOptimizer) would decide a global-norm clip or a non-finite
    skip on the share: each rank another norm, or one rank skipping alone."""
    from .clipping import ClipByGlobalNorm

    spans = []
    if isinstance(spec.grad_clip, ClipByGlobalNorm):
        spans.append("grad_clip=ClipByGlobalNorm")
    if spec.skip_nonfinite:
        spans.append("skip_nonfinite=True")
    named = named_parameters(params, "optimizer_factory") if spans else []
    framework = framework_of(named[0][1]) if named else None
    if framework is None:
        return
    world = load_installed(framework).world_size()
    if world > 1:
        raise ValueError(f"optimizer_factory: {' and '.join(spans)} span every parameter, "
                         f"but on {world} ranks a wrapper that builds the optimizer (e.g. "
                         "ZeroRedundancyOptimizer) gives each rank a share of them: each "
                         "rank would clip by, or skip on, its share alone; refused (clip "
                         "before optimizer.step(), e.g. torch.nn.utils.clip_grad_norm_ over "
                         "model.parameters())")


def exchange_stats(optimizer: Any) -> dict[str, int]:
    """``{"steps", "bytes_sent", "dense_bytes"}`` of a data-parallel optimizer's exchange
    on the calling rank: the optimizer steps, the bytes this rank put into the
    collectives (indices, values, counts and padding), and the bytes of the same
    gradients as dense tensors (what a dense all-reduce would carry from this rank).

    Args:
        optimizer: an optimizer made by :func:`build` for a data-parallel spec
            (``uo.DGCMomentum``) inside an initialized process group.

    Returns:
        dict[str, int]: ``{"steps": ..., "bytes_sent": ..., "dense_bytes": ...}``.

    Raises:
        ValueError: ``optimizer`` was not made by :func:`build`, or exchanges no
            gradients (not data-parallel, or built outside a process group).

    Example:
        >>> import unified_opt as uo
        >>> stats = uo.exchange_stats(opt)  # doctest: +SKIP
        >>> stats["bytes_sent"] / stats["dense_bytes"]  # doctest: +SKIP
        0.0021
    """
    record_of(optimizer)
    exchange = getattr(optimizer, "exchange", None)
    if exchange is None:
        raise ValueError(f"exchange_stats: this {record_of(optimizer).spec.name} optimizer "
                         "exchanges no gradients (a data-parallel spec built in an "
                         "initialized process group does)")
    return dict(exchange.stats)


def native_scheduler(optimizer: Any) -> Any:
    """The native scheduler ``build`` made for a scheduled lr, to step the framework's
    usual way (torch and paddle: ``scheduler.step()`` after ``optimizer.step()``);
    ``None`` for a constant lr and on MindSpore (its optimizers step the lr themselves).

    Args:
        optimizer: an optimizer made by :func:`build` (or ``uo.resume``).

    Returns:
        The scheduler (``torch.optim.lr_scheduler.LRScheduler``, ``paddle.optimizer.lr.
        LRScheduler``), or None.

    Raises:
        ValueError: ``optimizer`` was not made by :func:`build`.

    Example:
        >>> import torch
        >>> import unified_opt as uo
        >>> spec = uo.SGD(lr=uo.schedules.Step(lr=0.1, step_size=10))
        >>> opt = uo.build(spec, torch.nn.Linear(2, 1))
        >>> scheduler = uo.native_scheduler(opt)   # scheduler.step() after opt.step()
        >>> scheduler.get_last_lr()
        [0.1]
    """
    return record_of(optimizer).lr_scheduler


def skipped_steps(optimizer: Any) -> list[bool]:
    """Whether each step call of an optimizer made by ``build`` was skipped by the spec's
    ``skip_nonfinite`` (non-finite unscaled gradients): one bool per call for a spec with
    ``skip_nonfinite=True`` (with a dynamic loss scale, read the last entry after each
    step to lower the scale). Optimizers that cannot skip may leave it empty.

    Args:
        optimizer: an optimizer made by :func:`build`.

    Returns:
        list[bool]: one entry per step call, True where the step was skipped.

    Raises:
        ValueError: ``optimizer`` was not made by :func:`build`.

    Example:
        >>> import unified_opt as uo
        >>> spec = uo.SGD(lr=0.1, loss_scale=1024.0, skip_nonfinite=True)
        >>> uo.skipped_steps(opt)  # doctest: +SKIP
        [False, False, True]
    """
    return record_of(optimizer).skipped


@dataclass(frozen=True)
class BuiltDecision(Decision):
    """The decision of an optimizer ``build`` made (``uo.explain(optimizer)``), with how
    the build lowered its parameter groups and its pre-step (clipping, loss scale,
    skipping, centralisation): ``built``, the lines its text adds."""

    built: tuple[str, ...] = ()

    def __str__(self) -> str:
        return "\n".join([Decision.__str__(self), *self.built])


#: names listed per group before "... and N more"
_LISTED = 6


def _names_text(names: list[str]) -> str:
    shown = ", ".join(names[:_LISTED])
    return shown + (f", ... and {len(names) - _LISTED} more" if len(names) > _LISTED else "")


def _rule_text(rule: Group) -> str:
    match = rule.match if isinstance(rule.match, str) or callable(rule.match) \
        else list(rule.match)
    parts = [f"match={match!r}"]
    for key in ("lr", "lr_scale", "weight_decay"):
        if getattr(rule, key) is not None:
            parts.append(f"{key}={getattr(rule, key)!r}")
    if rule.exclude_from:
        parts.append(f"exclude_from={list(rule.exclude_from)!r}")
    return f"uo.Group({', '.join(parts)})"


def _pre_step_how(record: Any, optimizer: Any) -> str:
    """Where the pre-step runs, read from the built object."""
    decision = record.decision
    if decision.path == "own":
        return "run in the own step before the update (unified_opt.pre_step)"
    if decision.backend == "torch" and getattr(optimizer, "_optimizer_step_pre_hooks", None):
        return f"run by a step pre-hook on {decision.native}, before its step"
    if decision.backend == "paddle" and getattr(optimizer, "_grad_clip", None) is not None:
        clip = type(optimizer._grad_clip)
        return f"run by Paddle's own grad_clip ({clip.__module__}.{clip.__qualname__})"
    return f"run around {decision.native}'s step"


def _count(n: int, what: str = "parameter") -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


def _group_dict_lines(record: Any, names: list[str], plans: list) -> list[str]:
    """What the group dicts given to the build or to ``add_param_group`` set, one line
    each: their parameters and the values that differ from the spec's."""
    if not record.dict_groups:
        return []
    lines = [f"  group dicts: {_count(len(record.dict_groups), 'group')}"]
    for g in record.dict_groups:
        members = [(n, plan) for n, plan in zip(names, plans) if plan.group == g]
        if not members:
            continue
        plan = members[0][1]
        base = record.spec.for_parameter(plan.name)
        values = [f"lr={plan.fixed_lr!r}"] if plan.fixed_lr is not None else []
        if plan.lr_scale != 1.0:
            values.append(f"lr factor {plan.lr_scale!r}")
        values += [f"{f.name}={getattr(plan.spec, f.name)!r}" for f in fields(plan.spec)
                   if f.name != "no_decay_names"
                   and getattr(plan.spec, f.name) != getattr(base, f.name)]
        lines.append(f"    group {g}: {_count(len(members))} "
                     f"({_names_text([n for n, _ in members])}); "
                     + (", ".join(values) or "the spec's own values"))
    return lines


def built_lines(record: Any, optimizer: Any) -> tuple[str, ...]:
    """What a build made of its groups and pre-step, one line each (see
    :class:`BuiltDecision`)."""
    spec, plans = record.spec, record.plans or []
    names = [n if n is not None else f"params[{i}]" for i, n in enumerate(record.names)]
    dict_lines = _group_dict_lines(record, names, plans)
    if record.groups:
        native_groups = getattr(optimizer, "param_groups", None)      # torch
        if not isinstance(native_groups, list):
            native_groups = getattr(optimizer, "_param_groups", None)  # Paddle
        lowered = (f", lowered to {_count(len(native_groups), 'param group')} of the "
                   "optimizer" if isinstance(native_groups, list) and native_groups
                   and isinstance(native_groups[0], dict) else "")
        lines = [f"  groups: {_count(len(record.groups), 'rule')} over "
                 f"{_count(len(names))}{lowered}"]
        for index, rule in enumerate(record.groups):
            members = [n for n, plan in zip(names, plans) if plan.group == index]
            lines.append(f"    {_rule_text(rule)}: {_count(len(members))}"
                         + (f" ({_names_text(members)})" if members else ", matches none"))
        rest = [n for n, plan in zip(names, plans) if plan.group is None]
        lines.append(f"    the spec's own values: {_count(len(rest))}"
                     + (f" ({_names_text(rest)})" if rest else ""))
    elif dict_lines:
        lines = []
    else:
        lines = [f"  groups: none (all {_count(len(names))} run the spec's own values)"]
    lines += dict_lines
    steps = []
    if spec.grad_clip is not None:
        left = sum(1 for plan in plans if not plan.clipped)
        steps.append(f"grad_clip={spec.grad_clip!r} over {_count(len(names) - left)}"
                     + (f" ({left} excluded by a group)" if left else ""))
    if spec.loss_scale != 1.0:
        steps.append(f"loss_scale={spec.loss_scale!r} (gradients unscaled first)")
    if spec.skip_nonfinite:
        steps.append("skip_nonfinite=True")
    if spec.grad_centralization:
        steps.append("grad_centralization=True")
    if steps:
        lines.append(f"  pre-step: {'; '.join(steps)}; {_pre_step_how(record, optimizer)}")
    else:
        lines.append("  pre-step: none (no clipping, loss scale, skipping or centralisation)")
    return tuple(lines)


def explain(spec: Any, backend: str | None = None, prefer: str | None = None) -> Decision:
    """Which path ``build`` takes for ``spec`` on ``backend`` and why, under ``prefer``
    (None: "speed", as ``build``; a spec has no parameters, so the speed table is read
    for the CPU and its largest size class, and the decision says so). Also accepts an
    optimizer made by ``build`` (then ``backend`` and ``prefer`` are not needed, and the
    decision is the one the build made with its parameters: groups, dtypes, device,
    size, zero-size ones).

    Args:
        spec: a spec, or an optimizer made by :func:`build`.
        backend: for a spec: ``"torch"``, ``"paddle"`` or ``"mindspore"`` (the
            framework need not be installed). For an optimizer: None.
        prefer: for a spec: ``"speed"`` or ``"native"`` (None: ``"speed"``). For an
            optimizer: None.

    Returns:
        Decision: the path (``"native"`` and the class, or ``"own"``), the reason, the
        alternative and the measured times where both were exact, and the native
        classes rejected with what each needs; ``str()`` is the text ``unified-opt
        explain`` prints.

    Raises:
        TypeError: no ``backend`` for a spec, or ``prefer`` for an optimizer.
        ValueError: an unknown ``backend`` or ``prefer``, or an object that is neither
            a spec nor an optimizer made by :func:`build`.

    Example:
        >>> import unified_opt as uo
        >>> decision = uo.explain(uo.preset("mindspore.nn.AdamWeightDecay"),
        ...                       backend="torch")
        >>> decision.path
        'own'
    """
    if not isinstance(spec, Spec):
        if prefer is not None:
            raise TypeError("explain: prefer is for a spec; an optimizer's decision was "
                            f"made by its build (prefer={record_of(spec).decision.prefer!r})")
        # a built optimizer: its text also says how its groups and pre-step were lowered
        record = record_of(spec)
        values = {f.name: getattr(record.decision, f.name) for f in fields(Decision)}
        return BuiltDecision(**values, built=built_lines(record, spec))
    if backend is None:
        raise TypeError(f"explain: backend is required for a spec (one of {BACKENDS})")
    check_choice("explain", "backend", backend, BACKENDS)
    prefer = check_prefer("speed" if prefer is None else prefer, "explain")
    return load(backend).decide(spec, "auto", Context(), prefer)


def plateau_scheduler(optimizer: Any, rule: ReduceOnPlateau, *,
                      monitor: str | None = None) -> Any:
    """The framework's own plateau scheduler computing ``rule``
    (:class:`unified_opt.schedules.ReduceOnPlateau`) for an optimizer made by
    ``uo.build``; it refuses a rule that scheduler does not compute exactly.

    torch: ``torch.optim.lr_scheduler.ReduceLROnPlateau`` (``sched.step(metric)``).
    Paddle: ``paddle.optimizer.lr.ReduceOnPlateau``, installed as the optimizer's lr
    (``sched.step(metric)``). MindSpore: ``experimental.optim.lr_scheduler.
    ReduceLROnPlateau`` for ``experimental.optim`` optimizers, else the
    ``mindspore.train.ReduceLROnPlateau`` callback for ``Model.train`` (``monitor``:
    the metric it watches).

    Args:
        optimizer: an optimizer made by :func:`build`.
        rule: the plateau rule (factor, patience, threshold, cooldown, min lr).
        monitor: MindSpore's callback only: the name of the metric it watches.

    Returns:
        The framework's plateau scheduler (or MindSpore's callback), stepped with the
        metric the framework's usual way.

    Raises:
        TypeError: ``rule`` is not a ``uo.schedules.ReduceOnPlateau``.
        ValueError: ``optimizer`` was not made by :func:`build`, or the framework's
            scheduler does not compute ``rule`` exactly (the message says what).

    Example:
        >>> import torch
        >>> import unified_opt as uo
        >>> opt = uo.build(uo.SGD(lr=0.1), torch.nn.Linear(2, 1))
        >>> rule = uo.schedules.ReduceOnPlateau(initial_lr=0.1, factor=0.5, patience=2)
        >>> type(uo.plateau_scheduler(opt, rule)).__name__
        'ReduceLROnPlateau'
    """
    if not isinstance(rule, ReduceOnPlateau):
        raise TypeError(f"plateau_scheduler: rule must be a uo.schedules.ReduceOnPlateau, "
                        f"got {rule!r}")
    record = record_of(optimizer)
    return load(record.decision.backend).plateau_scheduler(optimizer, rule, record, monitor)
