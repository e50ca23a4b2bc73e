"""The base of the torch-style schedulers: :class:`LRScheduler`, and how several
schedulers on one optimizer compose.

A scheduler reads and writes only ``optimizer.param_groups`` (a list of dicts with
``"lr"``): any optimizer ``uo.build`` returns, on any backend, and torch's own. Each
group's lr is the closed-form schedule ``uo.schedules.preset(<torch name>, base_lr=...,
...)`` at the scheduler's step, where torch computes most of them recursively from the
current lr; the two agree within float rounding (``tests/test_lr_scheduler.py``).

Facts relied on (torch's ``torch/optim/lr_scheduler.py``):

* The constructor sets ``group.setdefault("initial_lr", group["lr"])`` (``last_epoch=-1``)
  or requires ``initial_lr`` (resuming, ``last_epoch >= 0``: a ``KeyError``), takes
  ``base_lrs`` from it and steps once, so ``group["lr"]`` is the lr of step 0.
* The chainable schedulers (StepLR, MultiStepLR, ConstantLR, LinearLR, ExponentialLR,
  PolynomialLR, MultiplicativeLR) multiply the current lr by a ratio each step, so
  several of them stepping one optimizer give ``initial_lr`` times the product of their
  factors. Here that product is computed from the closed forms
  (``uo.schedules.preset("torch.optim.lr_scheduler.ChainedScheduler", ...)``'s factors),
  each at its own scheduler's step. A scheduler that sets the lr outright (LambdaLR,
  CosineAnnealingLR, CosineAnnealingWarmRestarts, OneCycleLR, CyclicLR, SequentialLR)
  beside another on one optimizer has no such form: its ``step()`` raises.
* The recursive schedulers continue from whatever ``group["lr"]`` holds, so an lr
  written by hand between steps carries on in torch. A closed form cannot: ``step()``
  raises when a group's lr is not the one the schedulers last wrote.
"""

from __future__ import annotations

import numbers
import sys
import weakref
from typing import Any, ClassVar

from .. import _validation as v

TORCH_NS = "torch.optim.lr_scheduler"


def lr_of(group: dict) -> Any:
    """A group's lr as a number. MindSpore's ``experimental.optim`` classes keep each
    group's lr as a 0-d float32 Parameter, which their step reads: it is read as its
    value here, and written in place (:func:`write_lr`), so that the class (and a graph
    compiled over it) reads what a scheduler writes."""
    value = group["lr"]
    return float(value.asnumpy()) if _held_in_place(value) else value


def write_lr(group: dict, lr: float) -> None:
    """Write ``lr`` into ``group``: in place where the group holds it as a framework
    Parameter (rounded to its dtype, float32 on MindSpore), else as the number."""
    value = group["lr"]
    if _held_in_place(value):
        from ..backend import framework_of

        # the Parameter's framework is imported already (it made the value)
        root = framework_of(value)
        assert root is not None, type(value)      # a Parameter with asnumpy and set_data
        framework = sys.modules[root]
        if root == "mindspore":
            # an assignment into the Parameter's memory, as MindSpore's own schedulers
            # write it: the class's compiled step keeps reading that memory (set_data
            # would give the Parameter new memory, which the step does not see)
            framework.ops.assign(value, framework.Tensor(lr, value.dtype))
        else:
            value.set_data(framework.Tensor(lr, value.dtype))
    else:
        group["lr"] = lr


def held_as(group: dict, lr: float) -> float:
    """``lr`` as ``group`` would hold it once written (:func:`write_lr`): rounded to the
    dtype of an lr Parameter, else ``lr`` itself."""
    value = group["lr"]
    if _held_in_place(value):
        return float(value.asnumpy().dtype.type(lr))
    return lr


def _held_in_place(value: Any) -> bool:
    return hasattr(value, "asnumpy") and hasattr(value, "set_data") \
        and tuple(getattr(value, "shape", (None,))) == ()


def checked_groups(owner: str, optimizer: Any) -> list[dict]:
    """``optimizer.param_groups``, checked: a non-empty list of dicts holding an ``lr``
    that is a real number >= 0."""
    groups = getattr(optimizer, "param_groups", None)
    if groups is None:
        raise TypeError(f"{owner}: optimizer must have param_groups (a list of dicts with "
                        f"'lr'), as every optimizer uo.build returns; got {optimizer!r} of "
                        f"type {type(optimizer).__name__}")
    if not isinstance(groups, list) or not groups or not all(isinstance(g, dict)
                                                             for g in groups):
        raise TypeError(f"{owner}: optimizer.param_groups must be a non-empty list of "
                        f"dicts, got {groups!r}")
    for i, group in enumerate(groups):
        if "lr" not in group:
            raise ValueError(f"{owner}: optimizer.param_groups[{i}] has no 'lr' "
                             f"(keys: {sorted(group)})")
        v.check_range(owner, f"optimizer.param_groups[{i}]['lr']", lr_of(group), low=0.0)
    return groups


def refuse_scheduled_spec(owner: str, optimizer: Any) -> None:
    """An optimizer ``uo.build`` made for a spec whose lr is a schedule sets every step's
    lr itself (``uo.native_scheduler(opt)`` on torch and Paddle, its own step count on
    MindSpore): a second scheduler writing the lr would fight it."""
    from ..backend import record_of
    from ..schedules import Schedule

    try:
        spec = record_of(optimizer).spec
    except ValueError:            # not made by uo.build: torch's own optimizer, ...
        return
    if isinstance(spec.lr, Schedule):
        raise ValueError(f"{owner}: the optimizer's spec has the scheduled lr {spec.lr!r}, "
                         "which sets every step's lr already (uo.native_scheduler(opt) on "
                         "torch and Paddle); drive it with a scheduler only when its spec "
                         "lr is a constant")


def per_group(owner: str, name: str, value: Any, count: int) -> list:
    """``value`` for every group: a list or tuple must have one entry per group (torch's
    rule), anything else is repeated."""
    if isinstance(value, (list, tuple)):
        if len(value) != count:
            raise ValueError(f"{owner}: {name} must have the same length as "
                             f"optimizer.param_groups: {name} has {len(value)} values, "
                             f"param_groups has {count}")
        return list(value)
    return [value] * count


def preset_for(owner: str, name: str, **kwargs: Any):
    """``uo.schedules.preset`` of ``name`` (torch's, unless qualified), its errors naming
    ``owner``."""
    from ..schedules import preset

    qualified = name if "." in name else f"{TORCH_NS}.{name}"
    try:
        return preset(qualified, **kwargs)
    except (TypeError, ValueError, NotImplementedError) as exc:
        text = str(exc)
        if text.startswith(qualified + ": "):
            text = text[len(qualified) + 2:]
        raise type(exc)(f"{owner}: {text}") from exc


class NotComposable(ValueError):
    """Schedulers on one optimizer whose lrs no product of factors gives."""


class _Chain:
    """The schedulers stepping one optimizer's lrs, and the lrs they last wrote."""

    def __init__(self) -> None:
        self.members: list[weakref.ref] = []
        self.written: list[float] | None = None
        #: (the members (weak references) and base lrs, the per-group product they compose to)
        self.product: tuple[tuple, list] | None = None

    def live(self) -> list["LRScheduler"]:
        alive = [m() for m in self.members]
        return [m for m in alive if m is not None and m._owner is None]


#: id(optimizer) -> its chain. A live scheduler holds its optimizer, so an id is not
#: reused while any member is alive; entries whose members all died are dropped.
_CHAINS: dict[int, _Chain] = {}


def chain_of(optimizer: Any) -> _Chain:
    for key in [k for k, c in _CHAINS.items() if not any(m() is not None for m in c.members)]:
        del _CHAINS[key]
    return _CHAINS.setdefault(id(optimizer), _Chain())


class LRScheduler:
    """Base of the torch-style schedulers: torch's ``LRScheduler`` surface, driving any
    optimizer with ``param_groups`` (every optimizer ``uo.build`` returns, on every
    backend and path) from a ``uo.schedules`` schedule per group.

    Attributes:
        optimizer: The optimizer whose ``param_groups`` the scheduler writes.
        last_epoch: The scheduler's step count (0 after construction).
        base_lrs: Each group's ``initial_lr``.
        schedules: One ``uo.schedules`` schedule per group: the lr the scheduler gives
            at each step when it alone steps the optimizer (``from_native`` and
            ``port`` read it).

    Subclasses name the torch scheduler whose preset gives their schedules (``preset``)
    and give each group's native keyword arguments (``_group_kwargs``).
    """

    #: torch's class name, whose ``uo.schedules`` preset gives the schedules
    preset: str = ""
    #: True where torch computes from the current lr (recursive): the lr must be the one
    #: the schedulers last wrote (or, at construction, the group's initial_lr)
    recursive: bool = True
    #: the preset takes the optimizer's lr as ``base_lr``
    scales_lr: ClassVar[bool] = True

    def __init__(self, optimizer: Any, last_epoch: int = -1) -> None:
        owner = type(self).__name__
        groups = checked_groups(owner, optimizer)
        refuse_scheduled_spec(owner, optimizer)
        last_epoch = v.check_int(owner, "last_epoch", last_epoch, low=-1)
        if last_epoch >= 0:
            missing = [i for i, g in enumerate(groups) if "initial_lr" not in g]
            if missing:
                raise KeyError(f"{owner}: last_epoch={last_epoch} resumes a run, but "
                               f"optimizer.param_groups{missing} have no 'initial_lr' (load "
                               "the optimizer's state first, or start with last_epoch=-1)")
        base_lrs = self._base_lrs(groups, last_epoch)
        kwargs = self._group_kwargs(len(groups))
        schedules = [self._schedule(b, kw) for b, kw in zip(base_lrs, kwargs)]
        chain = chain_of(optimizer)
        if self.recursive and chain.live():
            self._check_untouched(groups, chain)
        if last_epoch == -1 and self.recursive and not chain.live():
            for i, group in enumerate(groups):
                if "initial_lr" in group and group["initial_lr"] != lr_of(group):
                    raise ValueError(
                        f"{owner}: optimizer.param_groups[{i}] has initial_lr="
                        f"{group['initial_lr']!r} but lr={lr_of(group)!r}: torch's {owner} "
                        "would go on from the lr, a uo scheduler computes from initial_lr; "
                        "set the lr to initial_lr, or delete initial_lr to start from the lr "
                        "(an optimizer uo.build made for a spec whose lr is a schedule has "
                        "its scheduler already: uo.native_scheduler(opt))")
        # every check passed: the state changes from here
        self.optimizer = optimizer
        self.base_lrs: list[float] = list(base_lrs)
        self.schedules = schedules
        self.last_epoch = last_epoch
        self._kwargs = kwargs
        self._owner: LRScheduler | None = None     # a SequentialLR / ChainedScheduler
        self._last_lr: list[float] = [float(lr_of(g)) for g in groups]
        self._prepare(groups)
        for group in groups:
            group.setdefault("initial_lr", lr_of(group))
        if chain.written is None or not chain.live():
            chain.written = [lr_of(g) for g in groups]
        chain.members.append(weakref.ref(self))
        self._initial_step(groups, chain)

    def _initial_step(self, groups: list[dict], chain: _Chain) -> None:
        """torch's first step; where the optimizer's schedulers do not compose (the
        members of a SequentialLR being made) nothing is written, and the next ``step()``
        of any of them raises unless a SequentialLR / ChainedScheduler took them."""
        members = chain.live()
        try:
            lrs = self._lrs(members, self.last_epoch + 1)
        except NotComposable:
            if len(members) == 1:
                raise
            self.last_epoch += 1
            return
        self._write(groups, chain, lrs, self.last_epoch + 1)

    # -- what subclasses define ---------------------------------------------------------

    def _group_kwargs(self, count: int) -> list[dict[str, Any]]:
        """Each group's native keyword arguments for the preset (without ``base_lr``)."""
        raise NotImplementedError(f"{type(self).__name__}: a scheduler class names its "
                                  "preset and its arguments (LRScheduler is abstract)")

    def _base_lrs(self, groups: list[dict], last_epoch: int) -> list[float]:
        return [g.get("initial_lr", lr_of(g)) for g in groups]

    def _schedule(self, base_lr: float, kwargs: dict[str, Any]):
        if self.scales_lr:
            return preset_for(type(self).__name__, self.preset, base_lr=base_lr, **kwargs)
        return preset_for(type(self).__name__, self.preset, **kwargs)

    def _prepare(self, groups: list[dict]) -> None:
        """Writes before the first step (CyclicLR's and OneCycleLR's group keys)."""

    def _after_write(self, groups: list[dict]) -> None:
        """Writes after each lr (the momentum cycling)."""

    # -- torch's surface ------------------------------------------------------------------

    def get_last_lr(self) -> list[float]:
        """The lrs the last step wrote, one per group.

        Returns:
            A new list of floats.
        """
        return list(self._last_lr)

    def step(self, epoch: int | None = None) -> None:
        """Advances one step and writes each group's lr (call after ``optimizer.step()``).

        Args:
            epoch: None (the next step), or the step to jump to (torch's deprecated form;
                an int >= 0).

        Raises:
            ValueError: A group's lr was changed outside the schedulers, or this
                scheduler shares the optimizer with one it cannot compose with.
            RuntimeError: The scheduler belongs to a SequentialLR or ChainedScheduler,
                which steps it.
        """
        owner = type(self).__name__
        if self._owner is not None:
            raise RuntimeError(f"{owner}: it is part of a {type(self._owner).__name__}; "
                               "step that one")
        if epoch is not None:
            epoch = v.check_int(owner, "epoch", epoch, low=0)
        groups = checked_groups(owner, self.optimizer)
        chain = chain_of(self.optimizer)
        self._check_untouched(groups, chain)
        t = epoch if epoch is not None else self.last_epoch + 1
        self._write(groups, chain, self._lrs(chain.live(), t), t)

    def _write(self, groups: list[dict], chain: _Chain, lrs: list[float], t: int) -> None:
        self.last_epoch = t
        for group, lr in zip(groups, lrs):
            write_lr(group, lr)
        self._after_write(groups)
        chain.written = [lr_of(g) for g in groups]     # as held (float32 on MindSpore)
        self._last_lr = list(lrs)

    def _lrs(self, members: list["LRScheduler"], t: int) -> list[float]:
        if members == [self] or not members:
            return [s(t) for s in self.schedules]
        others = [m for m in members if m is not self]
        product = self._product(members)
        counts = [t if m is self else m.last_epoch for m in members]
        if any(c < 0 for c in counts):
            raise ValueError(f"{type(self).__name__}: {others!r} on the same optimizer has "
                             "not taken its first step")
        out = []
        for schedule in product:      # lr * factor_0(t_0) * factor_1(t_1) * ... (Product)
            lr = schedule.lr
            for factor, count in zip(schedule.factors, counts):
                lr = lr * factor(count)
            out.append(lr)
        return out

    def _product(self, members: list["LRScheduler"]) -> list:
        """Per group, the ChainedScheduler preset of ``members``: its factors are theirs,
        and its refusals say which schedulers multiply the lr."""
        chain = chain_of(self.optimizer)
        key = (tuple(weakref.ref(m) for m in members), tuple(self.base_lrs))
        if chain.product is not None and chain.product[0] == key:
            return chain.product[1]
        names = ", ".join(type(m).__name__ for m in members)
        try:
            product = [preset_for(type(self).__name__, "ChainedScheduler", base_lr=base,
                                  schedulers=[(m.preset, m._kwargs[g]) for m in members])
                       for g, base in enumerate(self.base_lrs)]
        except (TypeError, ValueError, NotImplementedError) as exc:
            raise NotComposable(
                f"{type(self).__name__}: the optimizer is stepped by several schedulers "
                f"({names}), whose lrs compose only where each multiplies the lr (torch's "
                f"chainable schedulers): {exc}. Put schedulers that follow one another in a "
                "SequentialLR, or build one schedule (uo.schedules) as the spec's lr") from exc
        chain.product = (key, product)
        return product

    def _check_untouched(self, groups: list[dict], chain: _Chain) -> None:
        if not self.recursive or chain.written is None:
            return
        for i, (group, lr) in enumerate(zip(groups, chain.written)):
            if lr_of(group) != lr:
                raise ValueError(
                    f"{type(self).__name__}: optimizer.param_groups[{i}]['lr'] is "
                    f"{lr_of(group)!r}, but the scheduler set {lr!r}: it was changed outside "
                    "the scheduler (by hand, or by a ReduceLROnPlateau). torch's "
                    f"{type(self).__name__} goes on from the changed lr; a uo scheduler "
                    "computes its closed form. Write the lr in one place: a schedule "
                    "(uo.schedules) as the spec's lr, or the scheduler alone")

    # -- state -----------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The scheduler's state as plain data (no callables, no optimizer).

        Returns:
            ``{"last_epoch": int, "base_lrs": [float], "_last_lr": [float]}``, plus what a
            subclass keeps (ReduceLROnPlateau's counters; the members of a SequentialLR
            or ChainedScheduler under ``"_schedulers"``).
        """
        return {"last_epoch": self.last_epoch, "base_lrs": list(self.base_lrs),
                "_last_lr": list(self._last_lr)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores what :meth:`state_dict` returned. Load the optimizer's state too: the
        next step checks that each group's lr is the one restored here.

        Args:
            state_dict: A dict from :meth:`state_dict` of the same scheduler class.

        Raises:
            TypeError: ``state_dict`` is not a dict or holds a value of the wrong type.
            ValueError: It has other keys, or other lengths than the optimizer's groups.
        """
        owner = type(self).__name__
        loaded = self._checked_state(owner, state_dict, set(LRScheduler.state_dict(self)))
        self.last_epoch = loaded["last_epoch"]
        self.base_lrs = loaded["base_lrs"]
        self._last_lr = loaded["_last_lr"]
        self.schedules = [self._schedule(b, kw) for b, kw in zip(self.base_lrs, self._kwargs)]
        # as the groups hold them (float32 on MindSpore's experimental classes): a state
        # saved on another framework restores its lr there rounded to that dtype
        chain_of(self.optimizer).written = [
            held_as(group, lr) for group, lr in zip(self.optimizer.param_groups,
                                                    self._last_lr)]

    def _checked_state(self, owner: str, state: Any, keys: set[str]) -> dict[str, Any]:
        if not isinstance(state, dict):
            raise TypeError(f"{owner}.load_state_dict: state_dict must be a dict, got "
                            f"{state!r} of type {type(state).__name__}")
        if set(state) != keys:
            raise ValueError(f"{owner}.load_state_dict: state_dict has keys {sorted(state)}, "
                             f"expected {sorted(keys)} (what {owner}.state_dict() returns)")
        count = len(self.base_lrs)
        out: dict[str, Any] = {"last_epoch": v.check_int(
            owner, "state_dict['last_epoch']", state["last_epoch"], low=-1)}
        for key in ("base_lrs", "_last_lr"):
            values = state[key]
            if not isinstance(values, list) or len(values) != count:
                raise ValueError(f"{owner}.load_state_dict: state_dict[{key!r}] must be a "
                                 f"list of {count} lrs (one per group), got {values!r}")
            out[key] = [v.check_range(owner, f"state_dict[{key!r}][{i}]", x, low=0.0)
                        for i, x in enumerate(values)]
        return out

    def __repr__(self) -> str:
        return f"uo.lr_scheduler.{type(self).__name__}(last_epoch={self.last_epoch})"


def metric_value(owner: str, metrics: Any) -> float:
    """A metric as torch's ``float(metrics)`` reads it: a real number, or a one-element
    tensor of any framework (its ``__float__``)."""
    if isinstance(metrics, bool) or isinstance(metrics, (str, bytes)):
        raise TypeError(f"{owner}: metrics must be a real number or a one-element tensor, "
                        f"got {metrics!r} of type {type(metrics).__name__}")
    if isinstance(metrics, numbers.Real):
        return float(metrics)
    if not hasattr(metrics, "__float__"):
        raise TypeError(f"{owner}: metrics must be a real number or a one-element tensor, "
                        f"got {metrics!r} of type {type(metrics).__name__}")
    return float(metrics)
