r"""What happens to the gradients before the algorithm's update, written once.

Every spec has the same four fields for it (see :class:`unified_opt.spec.Spec`), applied
in this order to the gradients of one optimizer step:

1. ``loss_scale`` :math:`S`: :math:`g \leftarrow g \cdot (1/S)` (the loss was
   multiplied by :math:`S`; MindSpore's ``loss_scale``, which multiplies by the
   reciprocal the same way, whose stored weight decay is ``wd * S`` so that
   it adds up to the same :math:`g/S + \lambda\theta`).
2. ``skip_nonfinite``: if any unscaled gradient holds inf or NaN, the step is skipped:
   parameters, state, the step count and so the schedule position stay as they were,
   and the optimizer reports it (a dynamic loss scale lowers :math:`S` then).
3. ``grad_clip`` (:mod:`unified_opt.clipping`): over the parameters whose group does not
   exclude it, per group with ``per_group``.
4. ``grad_centralization``: :math:`g \leftarrow g - \operatorname{mean}(g)` over every
   axis but the first, for gradients of 2 or more dimensions (Yong et al., 2020).

The algorithm's own update follows, with any coupled L2 decay added to the clipped,
centralised gradient.

Differences between frameworks
------------------------------
* MindSpore ``nn`` optimizers add the L2 decay *before* centralising (their
  ``decay_weight`` precedes ``gradients_centralization``) and centralise only gradients
  with ``shape[1] % 16 == 0``; their CPU kernel cannot run it at all ("Unsupported op
  [Centralization] on CPU"). Here centralisation comes before the decay, for every
  gradient of 2+ dimensions.
* torch and Paddle skip on overflow outside the optimizer (``GradScaler``); MindSpore in
  ``TrainOneStepWithLossScaleCell``. Their optimizers' step counters do not advance on a
  skipped step; torch's and Paddle's scheduler advance when the loop calls
  ``scheduler.step()`` regardless, so the schedule position is this library's choice: the
  count of steps taken (MindSpore's ``global_step``).
"""

from __future__ import annotations

from typing import Sequence


def has_pre_step(spec) -> bool:
    """Whether ``spec`` changes the gradients before its update."""
    return (spec.loss_scale != 1.0 or spec.skip_nonfinite or spec.grad_clip is not None
            or spec.grad_centralization)


def prepare_gradients(spec, plans: Sequence, grads: list, ops) -> list | None:
    """The gradients the update sees, in ``plans`` order (one plan per parameter,
    :class:`unified_opt.groups.ParameterPlan`), or None when the step is skipped.

    ``grads`` may hold None for parameters without a gradient (left alone)."""
    if not has_pre_step(spec):
        return list(grads)
    out = list(grads)
    if spec.loss_scale != 1.0:
        inverse = 1.0 / spec.loss_scale
        out = [None if g is None else g * inverse for g in out]
    if spec.skip_nonfinite and not all(g is None or ops.all_finite(g) for g in out):
        return None
    if spec.grad_clip is not None:
        out = _clipped(spec.grad_clip, plans, out, ops)
    if spec.grad_centralization:
        out = [g if g is None else centralized(g, ops) for g in out]
    return out


def centralized(grad, ops):
    ndim = len(grad.shape)
    if ndim < 2 or ops.numel(grad) == 0:
        return grad
    mean = grad
    for axis in range(1, ndim):   # equal counts per axis: the mean of means is the mean
        mean = ops.mean(mean, axis=axis, keepdims=True)
    return grad - mean


def _clipped(clip, plans, grads, ops) -> list:
    per_group = getattr(clip, "per_group", False)
    sets: dict = {}
    for i, (plan, g) in enumerate(zip(plans, grads)):
        if g is not None and plan.clipped:
            sets.setdefault(plan.group if per_group else 0, []).append(i)
    out = list(grads)
    for indices in sets.values():
        for i, g in zip(indices, clip.apply([grads[i] for i in indices], ops)):
            out[i] = g
    return out
