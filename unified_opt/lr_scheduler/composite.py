"""``SequentialLR`` and ``ChainedScheduler``: schedulers made of other uo schedulers on
the same optimizer. Each takes its members over (their own ``step()`` then raises) and
steps the optimizer with the matching ``uo.schedules`` preset per group (``Sequential``:
each member restarted at its milestone; ``Product``: the factors of chainable members),
built from the members' own arguments, so the preset's refusals apply: a member that
rewrites the optimizer's lr when made (OneCycleLR, CyclicLR), a nested sequence, a
MultiplicativeLR after a milestone, and, in a chain, a member that sets the lr rather
than multiplying it.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Any, Sequence

from .. import _validation as v
from .base import LRScheduler, checked_groups, lr_of, preset_for


def _members(owner: str, optimizer: Any, schedulers: Any) -> list[LRScheduler]:
    from .plateau import ReduceLROnPlateau

    if isinstance(schedulers, (str, bytes)) or not isinstance(schedulers, Sequence):
        raise TypeError(f"{owner}: schedulers must be a list of uo.lr_scheduler schedulers, "
                        f"got {schedulers!r}")
    if len(schedulers) < 1:
        raise ValueError(f"{owner} expects at least one scheduler, but got no scheduler")
    for i, scheduler in enumerate(schedulers):
        if isinstance(scheduler, ReduceLROnPlateau):
            raise ValueError(f"{owner} does not support ReduceLROnPlateau (it needs the "
                             f"metric in step), but got one at index {i}")
        if not isinstance(scheduler, LRScheduler):
            raise TypeError(f"{owner}: schedulers[{i}] must be a uo.lr_scheduler scheduler, "
                            f"got {scheduler!r} of type {type(scheduler).__name__}")
        if scheduler.optimizer is not optimizer:
            raise ValueError(f"{owner} expects all schedulers to belong to the same "
                             f"optimizer, but schedulers[{i}] ({type(scheduler).__name__}) "
                             "has another one")
        if scheduler._owner is not None:
            raise ValueError(f"{owner}: schedulers[{i}] already belongs to a "
                             f"{type(scheduler._owner).__name__}")
    return list(schedulers)


class _Composite(LRScheduler):
    recursive = False

    def _take(self, members: list[LRScheduler]) -> None:
        self._schedulers = members
        for member in members:
            member._owner = self

    def state_dict(self) -> dict[str, Any]:
        """The scheduler's state and its members' (``"_schedulers"``), as plain data.

        Returns:
            A dict of plain data.
        """
        return {**super().state_dict(),
                "_schedulers": [m.state_dict() for m in self._schedulers]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores what :meth:`state_dict` returned, members included.

        Args:
            state_dict: A dict from :meth:`state_dict`.

        Raises:
            TypeError: A value of the wrong type.
            ValueError: Other keys, or another number of members or groups.
        """
        owner = type(self).__name__
        if not isinstance(state_dict, dict) or "_schedulers" not in state_dict:
            raise ValueError(f"{owner}.load_state_dict: state_dict must be a dict from "
                             f"{owner}.state_dict(), got {state_dict!r}")
        members = state_dict["_schedulers"]
        if not isinstance(members, list) or len(members) != len(self._schedulers):
            raise ValueError(f"{owner}.load_state_dict: state_dict['_schedulers'] must hold "
                             f"{len(self._schedulers)} member states, got {members!r}")
        own = {k: x for k, x in state_dict.items() if k != "_schedulers"}
        for member, state in zip(self._schedulers, members):
            owner_of = member._owner
            member._owner = None
            try:
                member.load_state_dict(state)
            finally:
                member._owner = owner_of
        super().load_state_dict(own)      # the chain's lrs: this scheduler's


class SequentialLR(_Composite):
    """Schedulers one after another (torch ``SequentialLR``): ``schedulers[i]`` runs from
    ``milestones[i-1]``, restarted at its own step 0 there.

    Args:
        optimizer: The optimizer all the schedulers step.
        schedulers: uo schedulers made on ``optimizer`` (they belong to this one then).
        milestones: ``len(schedulers) - 1`` steps at which the next one starts.
        last_epoch: -1 (resuming is ``load_state_dict``).

    Raises:
        ValueError: Wrong milestones, members on another optimizer, or members the
            sequence cannot hold (see the module docstring).

    Example:
        >>> warm = uo.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=5)
        >>> cos = uo.lr_scheduler.CosineAnnealingLR(opt, T_max=95)
        >>> sched = uo.lr_scheduler.SequentialLR(opt, [warm, cos], milestones=[5])
    """

    preset = "SequentialLR"

    def __init__(self, optimizer: Any, schedulers: list[LRScheduler], milestones: list[int],
                 last_epoch: int = -1) -> None:
        owner = type(self).__name__
        groups = checked_groups(owner, optimizer)
        members = _members(owner, optimizer, schedulers)
        if isinstance(milestones, (str, bytes)) or not isinstance(milestones, Sequence):
            raise TypeError(f"{owner}: milestones must be a list of ints, got {milestones!r}")
        if len(milestones) != len(members) - 1:
            raise ValueError(f"{owner} expects number of schedulers provided to be one more "
                             f"than the number of milestone points, but got {len(members)} "
                             f"schedulers and {len(milestones)} milestones")
        if v.check_int(owner, "last_epoch", last_epoch, low=-1) != -1:
            raise NotImplementedError(f"{owner}: last_epoch={last_epoch!r}: resume with "
                                      "load_state_dict (torch restarts the first scheduler "
                                      "here, which no schedule describes)")
        self._milestones = list(milestones)
        self._members_kwargs = [[(type(m).preset, m._kwargs[g]) for m in members]
                                for g in range(len(groups))]
        # builds the schedules (every check) before anything changes
        super().__init__(optimizer, last_epoch)
        self._take(members)
        self._rewrite()

    def _group_kwargs(self, count):
        return [{"schedulers": self._members_kwargs[g], "milestones": self._milestones}
                for g in range(count)]

    def _base_lrs(self, groups, last_epoch):
        # torch resets every group to initial_lr before the first member's first step
        return [g.get("initial_lr", lr_of(g)) for g in groups]

    def _rewrite(self) -> None:
        from .base import chain_of

        groups = self.optimizer.param_groups
        lrs = [s(self.last_epoch) for s in self.schedules]
        self._write(groups, chain_of(self.optimizer), lrs, self.last_epoch)

    def step(self, epoch: int | None = None) -> None:
        """Advances one step: the member whose span holds the new step writes the lr.

        Args:
            epoch: Must be None (torch's SequentialLR takes no epoch).
        """
        if epoch is not None:
            raise TypeError(f"SequentialLR.step() takes no epoch, got {epoch!r}")
        super().step()
        index = bisect_right(self._milestones, self.last_epoch)
        member = self._schedulers[index]
        start = self._milestones[index - 1] if index else 0
        member.last_epoch = self.last_epoch - start
        member._last_lr = list(self._last_lr)


class ChainedScheduler(_Composite):
    """Chainable schedulers stepped together (torch ``ChainedScheduler``): the lr is
    ``initial_lr`` times the product of their factors.

    Args:
        schedulers: uo schedulers on one optimizer (StepLR, MultiStepLR, ConstantLR,
            LinearLR, ExponentialLR, PolynomialLR, MultiplicativeLR; one scheduler of any
            kind), all at the same step.
        optimizer: None, or the schedulers' optimizer.

    Raises:
        ValueError: Members on another optimizer, at different steps, or that set the lr
            rather than multiply it.

    Example:
        >>> a = uo.lr_scheduler.ConstantLR(opt, factor=0.1, total_iters=2)
        >>> b = uo.lr_scheduler.ExponentialLR(opt, gamma=0.9)
        >>> sched = uo.lr_scheduler.ChainedScheduler([a, b])
    """

    preset = "ChainedScheduler"

    def __init__(self, schedulers: Sequence[LRScheduler], optimizer: Any = None) -> None:
        owner = type(self).__name__
        if (not isinstance(schedulers, (str, bytes)) and isinstance(schedulers, Sequence)
                and schedulers and optimizer is None):
            optimizer = getattr(schedulers[0], "optimizer", None)
        checked_groups(owner, optimizer)
        members = _members(owner, optimizer, schedulers)
        steps = sorted({m.last_epoch for m in members})
        if len(steps) > 1:
            raise ValueError(f"{owner}: the schedulers are at different steps {steps}; "
                             "chain schedulers made together")
        self._chained = members
        self._single = len(members) == 1
        # torch's chain goes on from the current lr when its members multiply it
        self.recursive = all(m.recursive for m in members)
        super().__init__(optimizer, -1)
        self._take(members)
        self.last_epoch = steps[0]

    def _group_kwargs(self, count):
        if self._single:
            return list(self._chained[0]._kwargs)
        return [{"schedulers": [(type(m).preset, m._kwargs[g]) for m in self._chained]}
                for g in range(count)]

    def _base_lrs(self, groups, last_epoch):
        return list(self._chained[0].base_lrs)

    def _schedule(self, base_lr, kwargs):
        if self._single:
            return self._chained[0]._schedule(base_lr, kwargs)
        return preset_for(type(self).__name__, "ChainedScheduler", base_lr=base_lr, **kwargs)

    def _initial_step(self, groups, chain):
        # torch's ChainedScheduler takes no step when made: its members did
        chain.written = [lr_of(g) for g in groups]
        self._last_lr = list(chain.written)

    def _after_write(self, groups):
        if self._single:
            member = self._chained[0]
            member.last_epoch = self.last_epoch
            member._after_write(groups)

    def step(self, epoch: int | None = None) -> None:
        """Steps every member: the lr is ``initial_lr`` times their factors' product.

        Args:
            epoch: Must be None.
        """
        if epoch is not None:
            raise TypeError(f"ChainedScheduler.step() takes no epoch, got {epoch!r}")
        super().step()
        for member in self._schedulers:
            member.last_epoch = self.last_epoch
            member._last_lr = list(self._last_lr)
