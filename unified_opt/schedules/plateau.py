r"""Reduce the lr when a metric stops improving: :class:`ReduceOnPlateau`.

A plateau rule has no ``lr(step)``: the lr depends on the metric values the training loop
reports (``scheduler.step(val_loss)``), so it is not a :class:`Schedule`. The rule is a
frozen spec; :meth:`ReduceOnPlateau.lrs` is its pure meaning (the lr after each report)
and ``uo.plateau_scheduler(optimizer, rule)`` makes the framework's own plateau scheduler
for an optimizer built by ``uo.build`` (each backend from :func:`native_arguments`),
refusing a rule that scheduler does not compute exactly.

The rule, per report of a metric ``m`` (torch's ``ReduceLROnPlateau``):

* ``m`` is *better* than ``best`` when ``m < best * (1 - threshold)`` (``mode="min"``,
  ``threshold_mode="rel"``), ``m < best - threshold`` (``"abs"``), and mirrored for
  ``mode="max"``; a better ``m`` becomes ``best`` and clears the count of bad reports,
  otherwise the count grows. ``best`` starts at the worst value (``+-inf``).
* During ``cooldown`` reports after a reduction the count stays 0.
* When the count exceeds ``patience``: ``new = max(lr * factor, min_lr)``, taken only when
  ``lr - new > eps``; the count clears and the cooldown starts.

Differences between the native schedulers (each a preset, :meth:`ReduceOnPlateau.from_native`;
all measured against the frameworks in ``tests/test_plateau.py``):

* ``torch.optim.lr_scheduler.ReduceLROnPlateau(opt, ...)`` is the rule above, in float64
  (``float(metrics)``), per parameter group (each group's lr is reduced and clamped on its
  own); it writes ``param_groups[i]["lr"]``, used from the next ``opt.step()``.
* ``paddle.optimizer.lr.ReduceOnPlateau(learning_rate, ..., epsilon=1e-8)`` (same defaults;
  ``epsilon`` is ``eps``) owns the lr: its ``learning_rate`` replaces the optimizer's
  (``initial_lr``), and group ``learning_rate`` values multiply the reduced lr (the clamp
  at ``min_lr`` acts on it, not per group). It ignores the metric entirely during the
  cooldown (``best_in_cooldown=False``: a better metric there does not become ``best``),
  takes the first metric as ``best`` whatever it is (``first_is_best=True``: an inf or NaN
  first metric stays ``best``), computes the relative benchmark as ``best - best *
  threshold`` (``rel_form="offset"``, which can round differently), and compares in the
  dtype of the metric given: Python floats in float64, float32 Tensors in float32
  (``metric_dtype``). The lr is a Python float; ``opt.get_lr()`` reads it.
* ``mindspore.experimental.optim.lr_scheduler.ReduceLROnPlateau(opt, ...)`` (torch's
  arguments and defaults) casts the metric to float32 and keeps ``best``, ``min_lr`` and
  the group lr Parameters in float32: every comparison and the reduction run in float32
  (``metric_dtype = lr_dtype = "float32"``), the ``eps`` test as ``lr > new + eps``. Only
  for ``mindspore.experimental.optim`` optimizers; the group lr is used from the next call.
* ``mindspore.train.ReduceLROnPlateau(monitor='eval_loss', factor=0.1, patience=10,
  verbose=False, mode='auto', min_delta=1e-4, cooldown=0, min_lr=0)`` is a ``Model``
  callback run at each epoch end (``on_train_epoch_end``), for ``mindspore.nn`` optimizers
  with one constant lr Parameter (no lr list, Cell or group lr). Keras semantics: it
  reduces when the count *reaches* ``patience`` (torch ``patience - 1``; 0 and 1 are the
  same), its cooldown counter is decremented before the metric is read (torch ``cooldown -
  1``), ``min_delta`` is an absolute threshold (``abs(min_delta)``; no relative mode), it
  reduces whenever ``lr > min_lr`` (``eps = 0``), in float32 (``lr_dtype``), and a metric
  equal to 0 is dropped as missing (``skip_zero_metric``: ``np.array(v) if v else None``).
  ``mode='auto'`` is ``min`` for the loss-like monitors, else ``max``. The train ``loss``
  monitor arrives as a Python float (float64 comparisons).

Errors: a wrong type is a ``TypeError`` and a wrong value a ``ValueError``, naming the
argument and the value; a native argument the rule cannot hold is ``NotImplementedError``.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import warnings
from typing import Any, Mapping

import numpy as np

from .. import _validation as v
from .._native_registry import NativeRegistry

DTYPES = ("float64", "float32")
RULE = "reduce_on_plateau"
TORCH = "torch.optim.lr_scheduler.ReduceLROnPlateau"
PADDLE = "paddle.optimizer.lr.ReduceOnPlateau"
MS_EXP = "mindspore.experimental.optim.lr_scheduler.ReduceLROnPlateau"
MS_CALLBACK = "mindspore.train.ReduceLROnPlateau"
#: ``mindspore.train.ReduceLROnPlateau``'s monitors that ``mode='auto'`` minimises.
MS_SMALLER_BETTER = ("hausdorff_distance", "mae", "mse", "loss", "perplexity",
                     "mean_surface_distance", "root_mean_square_distance", "eval_loss")


@dataclasses.dataclass(frozen=True)
class PlateauState:
    """Where a rule stands after some reports: the lr, the best metric (None before the
    first with ``first_is_best``), the count of bad reports and the cooldown left."""

    lr: float
    best: float | None
    bad: int = 0
    cooldown_left: int = 0


class ReduceOnPlateau:
    """A metric-driven lr rule (see the module docstring for the natives' differences).

    Torch's knobs: ``mode``, ``factor``, ``patience``, ``threshold``, ``threshold_mode``,
    ``cooldown``, ``min_lr``, ``eps``. Framework conventions (the presets set them):
    ``initial_lr`` (None: the optimizer's lr; Paddle's scheduler brings its own),
    ``rel_form`` ("scaled": ``best * (1 -+ threshold)``; "offset": ``best -+ best *
    threshold``), ``best_in_cooldown``, ``first_is_best``, ``metric_dtype`` and
    ``lr_dtype`` (the arithmetic of the comparisons and of the reduction),
    ``skip_zero_metric``.
    """

    mode: str = "min"
    factor: float = 0.1
    patience: int = 10
    threshold: float = 1e-4
    threshold_mode: str = "rel"
    cooldown: int = 0
    min_lr: float = 0.0
    eps: float = 1e-8
    initial_lr: float | None = None
    rel_form: str = "scaled"
    best_in_cooldown: bool = True
    first_is_best: bool = False
    metric_dtype: str = "float64"
    lr_dtype: str = "float64"
    skip_zero_metric: bool = False

    def __post_init__(self) -> None:
        o = type(self).__name__
        checked = {
            "mode": v.check_choice(o, "mode", self.mode, ("min", "max")),
            "factor": v.check_range(o, "factor", self.factor, low=0.0, high=1.0,
                                    high_open=True),
            "patience": v.check_int(o, "patience", self.patience, low=0),
            "threshold": v.check_range(o, "threshold", self.threshold, low=0.0),
            "threshold_mode": v.check_choice(o, "threshold_mode", self.threshold_mode,
                                             ("rel", "abs")),
            "cooldown": v.check_int(o, "cooldown", self.cooldown, low=0),
            "min_lr": v.check_range(o, "min_lr", self.min_lr, low=0.0),
            "eps": v.check_range(o, "eps", self.eps, low=0.0),
            "initial_lr": (None if self.initial_lr is None else
                           v.check_range(o, "initial_lr", self.initial_lr, low=0.0)),
            "rel_form": v.check_choice(o, "rel_form", self.rel_form, ("scaled", "offset")),
            "best_in_cooldown": v.check_bool(o, "best_in_cooldown", self.best_in_cooldown),
            "first_is_best": v.check_bool(o, "first_is_best", self.first_is_best),
            "metric_dtype": v.check_choice(o, "metric_dtype", self.metric_dtype, DTYPES),
            "lr_dtype": v.check_choice(o, "lr_dtype", self.lr_dtype, DTYPES),
            "skip_zero_metric": v.check_bool(o, "skip_zero_metric", self.skip_zero_metric),
        }
        for key, value in checked.items():
            object.__setattr__(self, key, value)

    # -- the rule -------------------------------------------------------------------------

    def start(self, initial_lr: float | None = None) -> PlateauState:
        """The state before the first report; ``initial_lr`` defaults to the rule's."""
        lr = self._initial(initial_lr)
        return PlateauState(lr=float(self._lr(lr)),
                            best=None if self.first_is_best else self._worst())

    def report(self, state: PlateauState, metric: Any) -> PlateauState:
        """The state after one report of ``metric`` (a real number)."""
        if not isinstance(state, PlateauState):
            raise TypeError(f"ReduceOnPlateau.report: state must be a PlateauState, got "
                            f"{state!r}")
        m = self._metric(_check_metric("metric", metric))
        if self.skip_zero_metric and metric == 0:
            return state
        best, bad, left = state.best, state.bad, state.cooldown_left
        if left > 0 and not self.best_in_cooldown:
            return dataclasses.replace(state, cooldown_left=left - 1)
        if best is None or self._better(m, best):
            best, bad = m, 0
        else:
            bad += 1
        if left > 0:
            left, bad = left - 1, 0
        lr = state.lr
        if bad > self.patience:
            lr, left, bad = self._reduced(lr), self.cooldown, 0
        return PlateauState(lr=lr, best=best, bad=bad, cooldown_left=left)

    def lrs(self, initial_lr: float | None, metrics: Any) -> list[float]:
        """The lr after each report of ``metrics``, starting from ``initial_lr`` (None:
        the rule's ``initial_lr``). With ``lr_dtype="float32"`` the values are float32."""
        if isinstance(metrics, (str, bytes)) or not hasattr(metrics, "__iter__"):
            raise TypeError(f"ReduceOnPlateau.lrs: metrics must be a sequence of real "
                            f"numbers, got {metrics!r}")
        metrics = [_check_metric(f"metrics[{i}]", m) for i, m in enumerate(metrics)]
        state, out = self.start(initial_lr), []
        for m in metrics:
            state = self.report(state, m)
            out.append(state.lr)
        return out

    def _initial(self, initial_lr):
        if initial_lr is None:
            if self.initial_lr is None:
                raise ValueError("ReduceOnPlateau: initial_lr is None and the rule has no "
                                 "initial_lr; give the lr the optimizer starts with")
            return self.initial_lr
        lr = v.check_range("ReduceOnPlateau", "initial_lr", initial_lr, low=0.0)
        if self.initial_lr is not None and lr != self.initial_lr:
            raise ValueError(f"ReduceOnPlateau: initial_lr={lr!r}, but the rule starts from "
                             f"its own initial_lr={self.initial_lr!r} (Paddle's scheduler "
                             "replaces the optimizer's lr)")
        return lr

    def _worst(self):
        return self._metric(math.inf if self.mode == "min" else -math.inf)

    def _metric(self, x):
        return np.float32(x) if self.metric_dtype == "float32" else float(x)

    def _lr(self, x):
        return np.float32(x) if self.lr_dtype == "float32" else float(x)

    def _better(self, m, best) -> bool:
        c, t, sign = self._metric, self.threshold, (-1.0 if self.mode == "min" else 1.0)
        with np.errstate(all="ignore"):   # inf - inf is NaN, as in the natives
            if self.threshold_mode == "abs":
                bench = best - c(t) if sign < 0 else best + c(t)
            elif self.rel_form == "scaled":
                bench = best * c(1.0 - t if sign < 0 else t + 1.0)
            else:
                bench = best - best * c(t) if sign < 0 else best + best * c(t)
        return bool(m < bench) if sign < 0 else bool(m > bench)

    def _reduced(self, lr: float) -> float:
        if self.lr_dtype == "float64":
            new = max(lr * self.factor, self.min_lr)
            return new if lr - new > self.eps else lr
        old = np.float32(lr)
        new = max(old * np.float32(self.factor), np.float32(self.min_lr))
        return float(new) if old > new + np.float32(self.eps) else lr

    # -- JSON and presets -------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {"rule": RULE, **dataclasses.asdict(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ReduceOnPlateau":
        if not isinstance(data, Mapping) or data.get("rule") != RULE:
            raise ValueError(f"ReduceOnPlateau.from_dict: expected a mapping with "
                             f"'rule': {RULE!r}, got {data!r}")
        return cls(**{k: value for k, value in data.items() if k != "rule"})

    @staticmethod
    def from_native(qualified_name: str, **native_kwargs: Any) -> "ReduceOnPlateau":
        """The rule ``qualified_name(**native_kwargs)`` follows (without the optimizer):
        one of :func:`natives`."""
        fn = REGISTRY.checked(qualified_name, native_kwargs)
        try:
            return fn(**native_kwargs)
        except (TypeError, ValueError, NotImplementedError) as exc:
            raise type(exc)(f"{qualified_name}: {exc}") from exc

    def replace(self, **changes: Any) -> "ReduceOnPlateau":
        return dataclasses.replace(self, **changes)


ReduceOnPlateau = dataclasses.dataclass(frozen=True, kw_only=True)(ReduceOnPlateau)
ReduceOnPlateau.__init__ = v.checked_keyword_init(ReduceOnPlateau, ReduceOnPlateau.__init__)


def _check_metric(name: str, value: Any) -> Any:
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise TypeError(f"ReduceOnPlateau: {name} must be a real number, got {value!r} of "
                        f"type {type(value).__name__}")
    return value


# -- presets: each native's signature (no optimizer) and defaults -------------------------

REGISTRY = NativeRegistry("plateau preset", "uo.schedules.plateau.natives()")


def natives() -> list[str]:
    """The native plateau schedulers :meth:`ReduceOnPlateau.from_native` reads."""
    return REGISTRY.names()


def _one_min_lr(value):
    if isinstance(value, (list, tuple)):
        raise NotImplementedError(f"min_lr={value!r} gives one floor per parameter group; "
                                  "a rule holds one min_lr")
    return value


def _lower(value):
    return value.lower() if isinstance(value, str) else value


@REGISTRY.register(TORCH)
def _torch(mode="min", factor=0.1, patience=10, threshold=1e-4, threshold_mode="rel",
           cooldown=0, min_lr=0, eps=1e-8):
    return ReduceOnPlateau(mode=mode, factor=factor, patience=patience, threshold=threshold,
                           threshold_mode=threshold_mode, cooldown=cooldown,
                           min_lr=_one_min_lr(min_lr), eps=eps)


@REGISTRY.register(PADDLE)
def _paddle(learning_rate, mode="min", factor=0.1, patience=10, threshold=1e-4,
            threshold_mode="rel", cooldown=0, min_lr=0, epsilon=1e-8, verbose=False):
    """Python-float metrics; pass float32 Tensors to Paddle with ``metric_dtype="float32"``."""
    if verbose:
        warnings.warn(f"{PADDLE}: verbose={verbose!r} only prints; the rule does not carry "
                      "it", stacklevel=3)
    return ReduceOnPlateau(mode=_lower(mode), factor=factor, patience=patience,
                           threshold=threshold, threshold_mode=_lower(threshold_mode),
                           cooldown=cooldown, min_lr=min_lr, eps=epsilon,
                           initial_lr=learning_rate, rel_form="offset",
                           best_in_cooldown=False, first_is_best=True)


@REGISTRY.register(MS_EXP)
def _mindspore_experimental(mode="min", factor=0.1, patience=10, threshold=1e-4,
                            threshold_mode="rel", cooldown=0, min_lr=0, eps=1e-8):
    return _torch(mode, factor, patience, threshold, threshold_mode, cooldown, min_lr,
                  eps).replace(metric_dtype="float32", lr_dtype="float32")


@REGISTRY.register(MS_CALLBACK)
def _mindspore_callback(monitor="eval_loss", factor=0.1, patience=10, verbose=False,
                        mode="auto", min_delta=1e-4, cooldown=0, min_lr=0):
    if not isinstance(monitor, str):
        raise TypeError(f"monitor must be a str, got {monitor!r}")
    v.check_bool(MS_CALLBACK, "verbose", verbose)
    v.check_choice(MS_CALLBACK, "mode", mode, ("auto", "min", "max"))
    if mode == "auto":
        mode = "min" if monitor in MS_SMALLER_BETTER else "max"
    patience = v.check_int(MS_CALLBACK, "patience", patience, low=0)
    cooldown = v.check_int(MS_CALLBACK, "cooldown", cooldown, low=0)
    v.check_range(MS_CALLBACK, "factor", factor, low=0.0, high=1.0, low_open=True,
                  high_open=True)
    return ReduceOnPlateau(mode=mode, factor=factor, patience=max(patience - 1, 0),
                           threshold=abs(v.check_real(MS_CALLBACK, "min_delta", min_delta)),
                           threshold_mode="abs", cooldown=max(cooldown - 1, 0),
                           min_lr=min_lr, eps=0.0, lr_dtype="float32",
                           skip_zero_metric=True)



# -- the arguments of a framework's own plateau scheduler -----------------------------------

def native_arguments(rule: ReduceOnPlateau, native: str, record, monitor: str | None) -> dict:
    """The keyword arguments of the native plateau scheduler ``native`` computing ``rule``
    for an optimizer made by ``uo.build`` (``record``: its build record), checked first:
    the spec's lr must be constant and the rule's; with group lr factors ``min_lr`` and
    ``eps`` must be 0 (the frameworks apply them to group lrs differently); and the native
    must compute the rule exactly (``NotImplementedError`` naming the knobs that differ;
    ``ReduceOnPlateau.from_native(name, ...)`` gives the forms that run natively). Each
    backend builds its scheduler from them (``uo.plateau_scheduler``)."""
    from .base import Schedule

    if monitor is not None and not isinstance(monitor, str):
        raise TypeError(f"plateau_scheduler: monitor must be a str, got {monitor!r}")
    if monitor is not None and native != MS_CALLBACK:
        raise ValueError(f"plateau_scheduler: monitor={monitor!r} is for the "
                         f"{MS_CALLBACK} callback; {native} takes the metric in step()")
    if isinstance(record.spec.lr, Schedule):
        raise ValueError(f"plateau_scheduler: the optimizer's spec has the scheduled lr "
                         f"{record.spec.lr!r}; a plateau rule drives a constant-lr optimizer")
    lr0 = float(record.spec.lr)
    if rule.initial_lr is not None and rule.initial_lr != lr0:
        raise ValueError(f"plateau_scheduler: rule.initial_lr={rule.initial_lr!r} differs "
                         f"from the optimizer's lr {lr0!r}; build the spec with "
                         f"lr={rule.initial_lr!r}")
    scaled = [p.name for p in (record.plans or ())
              if p.lr_scale != 1.0 or p.fixed_lr is not None]
    if scaled and (rule.min_lr > 0.0 or rule.eps > 0.0):
        # torch and MindSpore clamp and compare each group's own lr, Paddle one lr that
        # it multiplies per group: with factors they part at min_lr and at eps
        raise NotImplementedError(
            f"plateau_scheduler: parameters {scaled} have a group lr factor, and the "
            f"frameworks apply min_lr={rule.min_lr!r} / eps={rule.eps!r} to group lrs "
            "differently (torch and MindSpore per group, Paddle before the factor); with "
            "groups give the rule min_lr=0 and eps=0")
    return _native_kwargs(native, rule, lr0, monitor or "eval_loss")


def _native_kwargs(native: str, rule: ReduceOnPlateau, lr0: float, monitor: str) -> dict:
    """The native's arguments for ``rule``, once the native's preset of them is the rule
    (NotImplementedError naming the knobs that differ)."""
    knobs = dict(mode=rule.mode, factor=rule.factor, patience=rule.patience,
                 threshold=rule.threshold, threshold_mode=rule.threshold_mode,
                 cooldown=rule.cooldown, min_lr=rule.min_lr)
    if native == PADDLE:
        kwargs = dict(learning_rate=lr0, **knobs, epsilon=rule.eps)
    elif native == MS_CALLBACK:
        kwargs = dict(monitor=monitor, factor=rule.factor, patience=rule.patience + 1,
                      mode=rule.mode, min_delta=rule.threshold,
                      cooldown=rule.cooldown + 1 if rule.cooldown else 0, min_lr=rule.min_lr)
    else:
        kwargs = dict(knobs, eps=rule.eps)
    made = ReduceOnPlateau.from_native(native, **kwargs)
    want = rule.replace(initial_lr=made.initial_lr)
    if native in (PADDLE, MS_CALLBACK):   # the dtype of the values the loop reports
        want = want.replace(metric_dtype=made.metric_dtype)
    differ = [f"{f.name}={getattr(want, f.name)!r} ({getattr(made, f.name)!r} there)"
              for f in dataclasses.fields(made) if getattr(want, f.name) != getattr(made, f.name)]
    if differ:
        raise NotImplementedError(f"plateau_scheduler: {native} does not compute this rule: "
                                  f"{', '.join(differ)}; the rules it computes are "
                                  f"ReduceOnPlateau.from_native({native!r}, ...)")
    return kwargs
