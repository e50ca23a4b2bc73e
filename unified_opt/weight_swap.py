"""``train()`` and ``eval()`` of the optimizers ``uo.build`` makes.

A schedule-free spec (:attr:`unified_opt.spec.Spec.swaps_weights`) trains at one point
and is evaluated at another: while training the parameters hold the training point
:math:`y` (where the gradient is taken); ``opt.eval()`` moves each of them to the point to
evaluate at (:meth:`~unified_opt.spec.Spec.evaluation_point`) and ``opt.train()`` back
(:meth:`~unified_opt.spec.Spec.training_point`), as ``schedulefree``'s optimizers do:
call ``opt.eval()`` before evaluating or saving the model, ``opt.train()`` before
training again. Both are idempotent (a second ``eval()`` moves nothing).

The optimizers start in train mode (``schedulefree``'s start in eval mode and refuse a
step until ``train()``; here a script that never calls either trains as it would with
any other optimizer). A step in eval mode is refused (a RuntimeError, before anything
changes): it would take the gradient at the wrong point. A parameter that has no state
yet (no step taken) holds the same value at both points and is not moved. For specs
that do not swap, both calls change nothing and steps run in either mode.

Each backend's own optimizer keeps a :class:`WeightSwap` and gives it, per parameter, the
parameter's spec, its value and state in the framework's tensors with that framework's
ops binding, and a function writing the new value (:class:`Moved`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable


@dataclass(frozen=True)
class Moved:
    """One parameter to move: its spec, value, state (empty: none yet), the ops binding
    the values are computed with, and the function that writes the new value."""

    spec: Any
    value: Any
    state: dict
    ops: Any
    write: Callable[[Any], None]


class WeightSwap:
    """The mode of one optimizer (see the module)."""

    def __init__(self, owner: str):
        self.owner = owner
        self.training = True

    def train(self, parameters: Iterable[Moved]) -> None:
        """Move every parameter to its training point (nothing when training already)."""
        if not self.training:
            self._move(parameters, "training_point")
            self.training = True

    def eval(self, parameters: Iterable[Moved]) -> None:
        """Move every parameter to the point to evaluate at (nothing in eval mode)."""
        if self.training:
            self._move(parameters, "evaluation_point")
            self.training = False

    def check_step(self, specs: Iterable[Any]) -> None:
        """Refuse a step in eval mode when a spec swaps weights."""
        if not self.training and any(spec.swaps_weights for spec in specs):
            raise RuntimeError(f"{self.owner}: the optimizer is in eval mode (opt.eval() "
                               "moved the parameters to the point to evaluate at); call "
                               "opt.train() before the next step")

    @staticmethod
    def _move(parameters: Iterable[Moved], method: str) -> None:
        # every new value first, then the writes: a failure leaves every parameter as it was
        moves = [(p.write, getattr(p.spec, method)(p.value, p.state, p.ops))
                 for p in parameters if p.spec.swaps_weights and p.state]
        for write, value in moves:
            write(value)
