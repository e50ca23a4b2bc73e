"""What schedule-free SGD and AdamW share (Defazio et al., 2024): the average's weights,
the step that moves the training point :math:`y` and the base point :math:`z`, and the
swap between :math:`y` and the point to evaluate at, :math:`x`.

With :math:`\\beta` the interpolation (SGD's ``momentum``, AdamW's :math:`\\beta_1`):
:math:`y = (1-\\beta) z + \\beta x`, so :math:`x = y + (z - y)(1 - 1/\\beta)` and back
:math:`y = x + (z - x)(1 - \\beta)`, as ``schedulefree``'s ``eval()`` and ``train()``
compute them (``lerp``). The parameter the optimizer holds while training is :math:`y`.
"""

from __future__ import annotations

from typing import Any

from .. import _validation as v
from ..ops import Ops
from ..spec import State, Tensor


def check_averaging(spec, owner: str) -> dict[str, Any]:
    """The knobs of the average: ``warmup_steps``, ``r``, ``weight_lr_power``."""
    warmup = spec.warmup_steps
    if isinstance(warmup, bool) or not isinstance(warmup, int):
        raise TypeError(f"{owner}: warmup_steps must be an int >= 0, got {warmup!r}")
    if warmup < 0:
        raise ValueError(f"{owner}: warmup_steps must be >= 0, got {warmup!r}")
    return {"r": v.check_range(owner, "r", spec.r, low=0.0),
            "weight_lr_power": v.check_range(owner, "weight_lr_power", spec.weight_lr_power,
                                             low=0.0)}


def scheduled_lr(spec, lr: float, step: int) -> float:
    """:math:`\\eta_t`: the lr, times :math:`t / T` during the ``warmup_steps`` :math:`T`."""
    return lr * (step / spec.warmup_steps if step <= spec.warmup_steps else 1.0)


def averaging_weight(spec, lr_t: float, state: State, step: int, ops: Ops):
    """``(c_t, lr_max, weight_sum)``: the weight :math:`c_t` of the new base point in
    the average, :math:`c_t = w_t / \\sum_{i \\le t} w_i` with
    :math:`w_i = i^r \\max_{j \\le i}(\\eta_j)^p` (0 while the sum is 0), and the new
    state of the running maximum and sum (0-d)."""
    lr_max = ops.maximum(state["lr_max"], ops.full_like(state["lr_max"], lr_t))
    # the common powers as products (the kernel VM has no power; another one runs eagerly)
    power = spec.weight_lr_power
    scaled = {2.0: lambda: lr_max * lr_max, 1.0: lambda: lr_max,
              0.0: lambda: ops.full_like(lr_max, 1.0)}.get(power, lambda: lr_max ** power)()
    weight = scaled * float(step) ** spec.r
    weight_sum = state["weight_sum"] + weight
    positive = weight_sum > 0.0
    ckp1 = ops.where(positive, weight / ops.where(positive, weight_sum,
                                                  ops.full_like(weight_sum, 1.0)),
                     ops.full_like(weight_sum, 0.0))
    return ckp1, lr_max, weight_sum


def averaged_step(param: Tensor, z: Tensor, direction: Tensor, ckp1, lr_t: float,
                  beta: float) -> tuple[Tensor, Tensor]:
    """The new ``(y, z)``: :math:`y \\leftarrow y + (z - y) c_t
    + \\eta_t(\\beta(1 - c_t) - 1)\\, d` and :math:`z \\leftarrow z - \\eta_t d`."""
    y = param + (z - param) * ckp1
    y = y + direction * ((1.0 - ckp1) * beta - 1.0) * lr_t
    return y, z - direction * lr_t


def initial_state(param: Tensor, ops: Ops) -> State:
    """:math:`z = y` (a copy), the running maximum of the lr at -1 and the weight sum at
    0, as ``schedulefree`` starts them."""
    return {"z": param * 1.0, "lr_max": ops.scalar_like(param, -1.0),
            "weight_sum": ops.scalar_like(param, 0.0)}


def evaluation_point(param: Tensor, state: State, beta: float) -> Tensor:
    return param + (state["z"] - param) * (1.0 - 1.0 / beta)


def training_point(param: Tensor, state: State, beta: float) -> Tensor:
    return param + (state["z"] - param) * (1.0 - beta)
