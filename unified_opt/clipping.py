r"""Gradient clipping as data: the ``grad_clip`` field every spec has.

With :math:`c` the clip threshold and :math:`\epsilon` the guard added to the norm:

.. math::

    \text{global norm:}\quad g_i &\leftarrow g_i\cdot\min\!\Big(1,
        \frac{c}{\lVert(g_1,\dots,g_n)\rVert_2+\epsilon}\Big)\\
    \text{per-tensor norm:}\quad g_i &\leftarrow g_i\cdot\min\!\Big(1,
        \frac{c}{\lVert g_i\rVert_2+\epsilon}\Big)\\
    \text{value:}\quad g_i &\leftarrow \operatorname{clip}(g_i, a, b)

Clipping sees the unscaled gradient (after ``loss_scale``) and comes before any
coupled L2 weight decay: the order of Paddle's ``step`` (clip, then regularizer) and of
the usual torch loop (``clip_grad_norm_`` before ``optimizer.step()``, whose
``weight_decay`` is added inside).

Differences between frameworks
------------------------------
* ``torch.nn.utils.clip_grad_norm_``: global norm with :math:`\epsilon = 10^{-6}`
  (``ClipByGlobalNorm(max_norm, eps=1e-6)``); a per-tensor clip is the same call per
  parameter. ``clip_grad_value_``: value clip with :math:`a = -b`.
* ``paddle.nn.ClipGradByGlobalNorm``: :math:`\epsilon = 0`, and with parameter groups
  the "global" norm is taken **per group** (``per_group=True``); parameters with
  ``need_clip=False`` are left out (``uo.Group(exclude_from=("grad_clip",))``).
  ``ClipGradByNorm``: per tensor, :math:`\epsilon = 0`. ``ClipGradByValue(max, min)``.
* ``mindspore.ops.clip_by_global_norm`` / ``nn.ClipByNorm``: :math:`\epsilon = 0`, done
  by the user's train step before the optimizer (MindSpore optimizers take no clip).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Mapping

from . import _validation as v
from .ops import Ops

_CLIPS: dict[str, type["Clip"]] = {}


def _clip_dataclass(cls):
    from ._validation import checked_keyword_init as _checked_init

    cls = dataclasses.dataclass(frozen=True, kw_only=True)(cls)
    cls.__init__ = _checked_init(cls, cls.__init__)
    _CLIPS[cls.kind] = cls
    return cls


class Clip:
    """Base of the gradient clips: ``apply(grads, ops)`` clips one set of gradients
    (a list, clipped together for a global norm)."""

    kind: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for key, value in self._check(type(self).__name__).items():
            object.__setattr__(self, key, value)

    def _check(self, owner: str) -> dict:
        return {}

    def apply(self, grads: list[Any], ops: Ops) -> list[Any]:
        raise NotImplementedError

    def to_dict(self) -> dict[str, Any]:
        return {"clip": self.kind, **{f.name: getattr(self, f.name)
                                      # every clip class is a dataclass
                                      for f in dataclasses.fields(self)}}  # type: ignore[arg-type]


def _scaled(grad, norm, max_norm: float, eps: float, ops):
    # min(1, c / (norm + eps)) as c / max(norm + eps, c): the same float either way
    # (torch clamps the quotient, Paddle divides by the max), with no division by zero
    bound = norm + eps
    coefficient = max_norm / ops.maximum(bound, ops.full_like(bound, max_norm))
    return grad * coefficient


@_clip_dataclass
class ClipByGlobalNorm(Clip):
    """Scale every gradient by ``min(1, max_norm / (global_norm + eps))``.

    Args:
        max_norm: the largest global norm, > 0.
        eps: >= 0, added to the norm (torch's ``clip_grad_norm_`` adds 1e-6).
        per_group: with parameter groups, one norm per group (Paddle's rule) instead
            of one over all clipped parameters.

    Example:
        >>> import unified_opt as uo
        >>> spec = uo.AdamW(lr=1e-3, grad_clip=uo.ClipByGlobalNorm(max_norm=1.0, eps=1e-6))
    """

    kind = "global_norm"
    max_norm: float
    eps: float = 0.0
    per_group: bool = False

    def _check(self, owner):
        return {"max_norm": v.check_range(owner, "max_norm", self.max_norm, low=0.0,
                                          low_open=True),
                "eps": v.check_range(owner, "eps", self.eps, low=0.0),
                "per_group": v.check_bool(owner, "per_group", self.per_group)}

    def apply(self, grads: list[Any], ops: Ops) -> list[Any]:
        if not grads:
            return grads
        return self.scaled(grads, self.global_norm(grads, ops), ops)

    def global_norm(self, grads: list[Any], ops: Ops) -> Any:
        """The L2 norm of all of ``grads`` (a non-empty list): the norm of the per-tensor
        norms, torch's ``clip_grad_norm_`` composition, so that the native path matches
        a hand-written torch loop bit for bit."""
        return ops.norm(ops.stack([ops.norm(g) for g in grads]))

    def scaled(self, grads: list[Any], total: Any, ops: Ops) -> list[Any]:
        """``grads`` scaled by ``min(1, max_norm / (total + eps))``."""
        return [_scaled(g, total, self.max_norm, self.eps, ops) for g in grads]


@_clip_dataclass
class ClipByNorm(Clip):
    """Scale each gradient by ``min(1, max_norm / (its norm + eps))``.

    Args:
        max_norm: the largest norm of each gradient, > 0.
        eps: >= 0, added to the norm.
    """

    kind = "norm"
    max_norm: float
    eps: float = 0.0

    def _check(self, owner):
        return {"max_norm": v.check_range(owner, "max_norm", self.max_norm, low=0.0,
                                          low_open=True),
                "eps": v.check_range(owner, "eps", self.eps, low=0.0)}

    def apply(self, grads: list[Any], ops: Ops) -> list[Any]:
        return [_scaled(g, ops.norm(g), self.max_norm, self.eps, ops) for g in grads]


@_clip_dataclass
class ClipByValue(Clip):
    """Clamp every gradient element to ``[min, max]``.

    Args:
        max: the upper bound (>= 0 when ``min`` is not given).
        min: the lower bound, <= ``max``; None: ``-max`` (torch's ``clip_grad_value_``,
            Paddle's default).
    """

    kind = "value"
    max: float
    min: float | None = None   # None: -max (torch clip_grad_value_, Paddle's default)

    def _check(self, owner):
        high = v.check_real(owner, "max", self.max)
        if self.min is None and high < 0.0:
            raise ValueError(f"{owner}: max must be >= 0 when min is not given (min "
                             f"defaults to -max), got max={high!r}")
        low = -high if self.min is None else v.check_real(owner, "min", self.min)
        if low > high:
            raise ValueError(f"{owner}: min must be <= max, got min={low!r}, max={high!r}")
        return {"max": high, "min": low}

    def apply(self, grads: list[Any], ops: Ops) -> list[Any]:
        # _check replaced a min of None by -max
        return [ops.clip(g, self.min, self.max) for g in grads]  # type: ignore[arg-type]


def clip_from_dict(data: Mapping[str, Any]) -> Clip:
    """Inverse of :meth:`Clip.to_dict`."""
    if not isinstance(data, Mapping) or data.get("clip") not in _CLIPS:
        raise ValueError(f"clip_from_dict: expected a mapping with 'clip' one of "
                         f"{sorted(_CLIPS)}, got {data!r}")
    return _CLIPS[data["clip"]](**{k: val for k, val in data.items() if k != "clip"})


#: Paddle's clip classes (``paddle.nn``; the 2.x ``GradientClipBy*`` names too) -> the
#: attributes, in their constructor's order, that :func:`paddle_clip` reads
PADDLE_CLIPS = {f"{prefix}{kind}": arguments
                for prefix in ("ClipGrad", "GradientClip")
                for kind, arguments in (("ByGlobalNorm", ("clip_norm",)),
                                        ("ByNorm", ("clip_norm",)),
                                        ("ByValue", ("max", "min")))}


def paddle_clip(kind: str, values: Mapping[str, float]) -> Clip:
    """The clip of Paddle's class ``kind`` (:data:`PADDLE_CLIPS`) with the argument
    ``values``: ``ClipGradByGlobalNorm(c)`` is ``ClipByGlobalNorm(c, per_group=True)``
    (Paddle takes one norm per parameter group), ``ClipGradByNorm(c)``
    ``ClipByNorm(c)``, ``ClipGradByValue(max, min)`` ``ClipByValue(max, min)`` (min
    None: ``-max``); no eps (Paddle's norms have none). The one rule of Paddle's presets
    (a live clip's attributes) and of ``unified-opt port`` (a script's call)."""
    if kind not in PADDLE_CLIPS:
        raise ValueError(f"paddle_clip: kind must be one of {sorted(PADDLE_CLIPS)}, "
                         f"got {kind!r}")
    # (the clips' keyword __init__ is made by _clip_dataclass, which mypy does not read)
    if kind.endswith("ByGlobalNorm"):
        return ClipByGlobalNorm(max_norm=float(values["clip_norm"]),  # type: ignore[call-arg]
                                per_group=True)
    if kind.endswith("ByNorm"):
        return ClipByNorm(max_norm=float(values["clip_norm"]))  # type: ignore[call-arg]
    low = values.get("min")
    return ClipByValue(max=float(values["max"]),  # type: ignore[call-arg]
                       min=None if low is None else float(low))
