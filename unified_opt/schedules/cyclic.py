r"""Annealing and cycling schedules: cosine, cosine with warm restarts, one-cycle, cyclic.

One-cycle and cyclic can also cycle the momentum (torch ``cycle_momentum``: SGD
``momentum`` or Adam ``beta1``, opposite to the lr). That is the ``cycle_momentum`` knob
here: ``schedule.momentum(t)`` gives the value a backend must set for step ``t``.
"""

from __future__ import annotations

import math

from .. import _validation as v
from .base import Schedule, check_callable, check_lr, schedule_dataclass


@schedule_dataclass
class Cosine(Schedule):
    r"""``lr(t) = eta_min + (lr - eta_min) (1 + cos(pi t' / T_max)) / 2``.

    ``periodic=True`` (torch ``CosineAnnealingLR``, Paddle ``CosineAnnealingDecay``):
    ``t' = t``, so past ``T_max`` the cosine rises again. ``periodic=False`` (MindSpore
    ``CosineDecayLR``, ``cosine_decay_lr``): ``t' = min(t, T_max)``, flat at ``eta_min``.
    """

    name = "cosine"
    lr: float
    T_max: int
    eta_min: float = 0.0
    periodic: bool = True

    def _check(self, owner):
        return {"lr": check_lr(owner, "lr", self.lr),
                "T_max": v.check_int(owner, "T_max", self.T_max, low=1),
                "eta_min": check_lr(owner, "eta_min", self.eta_min),
                "periodic": v.check_bool(owner, "periodic", self.periodic)}

    def value(self, step):
        t = step if self.periodic else min(step, self.T_max)
        cos = 1.0 + math.cos(math.pi * t / self.T_max)
        return self.eta_min + (self.lr - self.eta_min) * cos / 2.0


@schedule_dataclass
class CosineWarmRestarts(Schedule):
    r"""SGDR: a cosine from ``lr`` to ``eta_min`` over ``T_i`` steps, then a restart;
    ``T_0`` first, each next period ``T_mult`` times longer (torch/Paddle
    ``CosineAnnealingWarmRestarts``)."""

    name = "cosine_warm_restarts"
    lr: float
    T_0: int
    T_mult: int = 1
    eta_min: float = 0.0

    def _check(self, owner):
        return {"lr": check_lr(owner, "lr", self.lr),
                "T_0": v.check_int(owner, "T_0", self.T_0, low=1),
                "T_mult": v.check_int(owner, "T_mult", self.T_mult, low=1),
                "eta_min": check_lr(owner, "eta_min", self.eta_min)}

    def value(self, step):
        start, period = 0, self.T_0          # integers: no log() rounding at restarts
        while step >= start + period:
            start, period = start + period, period * self.T_mult
        cos = 1 + math.cos(math.pi * (step - start) / period)
        return self.eta_min + (self.lr - self.eta_min) * cos / 2


def _anneal(kind, start, end, pct):
    if kind == "cos":
        return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
    return (end - start) * pct + start


@schedule_dataclass
class OneCycle(Schedule):
    r"""One-cycle policy (torch/Paddle ``OneCycleLR``).

    Two phases: ``start_lr -> max_lr`` until step ``pct_start * total_steps - 1``, then
    ``max_lr -> end_lr`` until ``total_steps - 1``. ``three_phase``: ``start_lr -> max_lr
    -> start_lr`` (ends at ``2 pct_start total_steps - 2``) then ``-> end_lr``. Each phase
    anneals by ``anneal`` ("cos" or "linear") on the fraction of the phase done. Steps past
    ``total_steps`` raise, as the native classes do.

    ``cycle_momentum``: momentum goes ``max_momentum -> base_momentum -> max_momentum``
    (three-phase: and stays), opposite to the lr.
    """

    name = "one_cycle"
    max_lr: float
    total_steps: int
    start_lr: float
    end_lr: float
    pct_start: float = 0.3
    anneal: str = "cos"
    three_phase: bool = False
    cycle_momentum: bool = False
    base_momentum: float = 0.85
    max_momentum: float = 0.95

    def _check(self, owner):
        out = {"max_lr": check_lr(owner, "max_lr", self.max_lr),
               "total_steps": v.check_int(owner, "total_steps", self.total_steps, low=1),
               "start_lr": check_lr(owner, "start_lr", self.start_lr),
               "end_lr": check_lr(owner, "end_lr", self.end_lr),
               "pct_start": v.check_range(owner, "pct_start", self.pct_start, low=0.0,
                                          high=1.0),
               "anneal": v.check_choice(owner, "anneal", self.anneal, ("cos", "linear")),
               "three_phase": v.check_bool(owner, "three_phase", self.three_phase),
               "cycle_momentum": v.check_bool(owner, "cycle_momentum", self.cycle_momentum),
               "base_momentum": v.check_range(owner, "base_momentum", self.base_momentum,
                                              low=0.0),
               "max_momentum": v.check_range(owner, "max_momentum", self.max_momentum,
                                             low=0.0)}
        ends = _one_cycle_ends(out["pct_start"], out["total_steps"], out["three_phase"])
        starts = [0.0] + ends[:-1]
        if any(end == start for start, end in zip(starts, ends)):
            raise ValueError(f"{owner}: pct_start={out['pct_start']!r} with total_steps="
                             f"{out['total_steps']} gives a phase of length 0 (phase ends "
                             f"{ends}); the native classes divide by that length")
        return out

    def _phases(self):
        ends = _one_cycle_ends(self.pct_start, self.total_steps, self.three_phase)
        lo, hi, m_lo, m_hi = self.start_lr, self.max_lr, self.base_momentum, self.max_momentum
        if self.three_phase:
            return zip(ends, [(lo, hi), (hi, lo), (lo, self.end_lr)],
                       [(m_hi, m_lo), (m_lo, m_hi), (m_hi, m_hi)])
        return zip(ends, [(lo, hi), (hi, self.end_lr)], [(m_hi, m_lo), (m_lo, m_hi)])

    def _locate(self, step):
        """(pct, lr pair, momentum pair) of ``step``'s phase, as torch's ``get_lr``."""
        if step > self.total_steps:
            raise ValueError(f"{type(self).__name__}: step {step} is past total_steps="
                             f"{self.total_steps} (the native scheduler raises here too)")
        phases = list(self._phases())
        start = 0.0
        for i, (end, lrs, moms) in enumerate(phases):
            if step <= end or i == len(phases) - 1:
                return (step - start) / (end - start), lrs, moms
            start = end

    def value(self, step):
        pct, (a, b), _ = self._locate(step)
        return _anneal(self.anneal, a, b, pct)

    def momentum(self, step):
        if not self.cycle_momentum:
            return None
        pct, _, (a, b) = self._locate(step)
        return _anneal(self.anneal, a, b, pct)


def _one_cycle_ends(pct_start, total_steps, three_phase):
    if three_phase:
        return [float(pct_start * total_steps) - 1, float(2 * pct_start * total_steps) - 2,
                total_steps - 1]
    return [float(pct_start * total_steps) - 1, total_steps - 1]


_CYCLIC_SCALE_MODE = {"triangular": "cycle", "triangular2": "cycle", "exp_range": "iterations"}


@schedule_dataclass
class Cyclic(Schedule):
    r"""Cyclical lr (torch ``CyclicLR``, Paddle ``CyclicLR``): a triangle from
    ``base_lr`` up to ``max_lr`` over ``step_size_up`` steps and back over
    ``step_size_down`` (default: the same), its height scaled by ``mode``:
    "triangular" (1), "triangular2" (halved each cycle), "exp_range" (``gamma ** t``).

    ``scale_fn`` (a Python callable; not serialisable) replaces the mode's scaling; it is
    applied to the cycle number or to the step, as ``scale_mode`` says (default "cycle").
    ``cycle_momentum``: momentum = ``max_momentum - (max - base) * height`` (torch).
    """

    name = "cyclic"
    base_lr: float
    max_lr: float
    step_size_up: int
    step_size_down: int | None = None
    mode: str = "triangular"
    gamma: float = 1.0
    scale_fn: object = None
    scale_mode: str | None = None
    cycle_momentum: bool = False
    base_momentum: float = 0.8
    max_momentum: float = 0.9

    def _check(self, owner):
        out = {"base_lr": check_lr(owner, "base_lr", self.base_lr),
               "max_lr": check_lr(owner, "max_lr", self.max_lr),
               "step_size_up": v.check_int(owner, "step_size_up", self.step_size_up, low=1),
               "mode": v.check_choice(owner, "mode", self.mode, tuple(_CYCLIC_SCALE_MODE)),
               "gamma": v.check_range(owner, "gamma", self.gamma, low=0.0),
               "cycle_momentum": v.check_bool(owner, "cycle_momentum", self.cycle_momentum),
               "base_momentum": v.check_range(owner, "base_momentum", self.base_momentum,
                                              low=0.0),
               "max_momentum": v.check_range(owner, "max_momentum", self.max_momentum,
                                             low=0.0)}
        if self.step_size_down is not None:
            out["step_size_down"] = v.check_int(owner, "step_size_down", self.step_size_down,
                                                low=1)
        if self.scale_fn is not None:
            check_callable(owner, "scale_fn", self.scale_fn)
        if self.scale_mode is not None:
            v.check_choice(owner, "scale_mode", self.scale_mode, ("cycle", "iterations"))
            if self.scale_fn is None and self.scale_mode != _CYCLIC_SCALE_MODE[out["mode"]]:
                raise ValueError(f"{owner}: scale_mode={self.scale_mode!r} applies only with "
                                 f"scale_fn; mode={out['mode']!r} scales by "
                                 f"{_CYCLIC_SCALE_MODE[out['mode']]!r}")
        return out

    def _scale(self, x):
        if self.scale_fn is not None:
            return self.scale_fn(x)
        if self.mode == "triangular":
            return 1.0
        if self.mode == "triangular2":
            return 1 / 2.0 ** (x - 1)
        return self.gamma ** x

    def _height(self, step):
        """(scale factor in [0, 1] of the triangle, value the scaling is applied to)."""
        up = float(self.step_size_up)
        down = float(self.step_size_down) if self.step_size_down is not None else up
        total = up + down
        ratio = up / total
        cycle = math.floor(1 + step / total)
        x = 1.0 + step / total - cycle
        factor = x / ratio if x <= ratio else (x - 1) / (ratio - 1)
        mode = self.scale_mode or ("cycle" if self.scale_fn is not None
                                   else _CYCLIC_SCALE_MODE[self.mode])
        return factor, self._scale(cycle if mode == "cycle" else step)

    def value(self, step):
        factor, scale = self._height(step)
        return self.base_lr + (self.max_lr - self.base_lr) * factor * scale

    def momentum(self, step):
        if not self.cycle_momentum:
            return None
        factor, scale = self._height(step)
        return self.max_momentum - (self.max_momentum - self.base_momentum) * factor * scale
