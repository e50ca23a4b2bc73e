r"""``uo.clip_grad_norm_`` and ``uo.clip_grad_value_``: torch's
``torch.nn.utils.clip_grad_norm_`` / ``clip_grad_value_`` (signatures, numbers, in-place
writes) on torch and Paddle parameters, whose gradients live in ``p.grad``.

The math is the spec's clips (:mod:`unified_opt.clipping`), run through the framework's
ops binding: ``ClipByGlobalNorm(max_norm, eps=1e-6)`` is torch's rule (the total norm is
the L2 norm of the per-gradient norms; every gradient is multiplied by
:math:`\min(1, \text{max\_norm} / (\text{total} + 10^{-6}))`, the factor 1 included) and
``ClipByValue(clip_value)`` clamps to :math:`[-\text{clip\_value}, \text{clip\_value}]`.
Parameters whose gradient is None are skipped, as torch does; each gradient is
overwritten in place (``Tensor.copy_`` on torch, ``paddle.assign(..., output=grad)`` on
Paddle), so references to it see the clipped values.

MindSpore parameters carry no gradients (a train step gets them from
``mindspore.value_and_grad``), so there is nothing to clip in place: both functions
refuse MindSpore parameters and name the two exact alternatives.
"""

from __future__ import annotations

import numbers
import types
from typing import Any

from . import _validation as v

_MINDSPORE = (
    "MindSpore parameters carry no gradients (a train step computes them with "
    "mindspore.value_and_grad and passes them to the optimizer), so {name} has nothing to "
    "clip in place. Clip in the spec: {spec} (the optimizer clips the gradients it is "
    "given, torch's numbers), or in the train step with {native}")
_NORM_NATIVE = ("mindspore.ops.clip_by_global_norm(grads, max_norm) (its eps is 0: it "
                "scales by max_norm / norm, not max_norm / (norm + 1e-6))")


def _parameters(caller: str, parameters: Any) -> tuple[str, list[Any]]:
    """(framework, the parameters with a gradient), refusing a mix of frameworks."""
    from .backend import framework_of

    if isinstance(parameters, (str, bytes)):
        raise TypeError(f"{caller}: parameters must be a parameter or an iterable of them, "
                        f"got {parameters!r}")
    if framework_of(parameters) is not None:
        items = [parameters]
    elif hasattr(parameters, "__iter__"):
        items = list(parameters)
    else:
        raise TypeError(f"{caller}: parameters must be a parameter or an iterable of them, "
                        f"got {parameters!r} of type {type(parameters).__name__}")
    frameworks = {framework_of(p) for p in items}
    if not items or frameworks == {None}:
        empty = isinstance(parameters, types.GeneratorType) and not items
        raise ValueError(f"{caller}: parameters holds no torch, Paddle or MindSpore parameter "
                         f"(got {'an empty generator' if empty else repr(parameters)}); a "
                         "used-up generator such as model.parameters() iterated before is "
                         "empty")
    if None in frameworks or len(frameworks) > 1:
        found = sorted(str(f) for f in frameworks)
        raise TypeError(f"{caller}: parameters must all be of one framework, got {found}")
    framework = frameworks.pop()
    assert framework is not None      # (None was refused above)
    return framework, items


def _grads_and_ops(caller: str, parameters: Any,
                   alternatives: tuple[str, str]) -> tuple[str, list[Any], Any]:
    """(framework, the gradients, the framework's ops binding); ``alternatives``: the
    spec's clip and MindSpore's own call, named in MindSpore's refusal."""
    import importlib

    framework, items = _parameters(caller, parameters)
    if framework == "mindspore":
        raise TypeError(_MINDSPORE.format(name=caller, spec=alternatives[0],
                                          native=alternatives[1]))
    # the backend's binding, found by name as unified_opt.backend.load finds backends
    ops = getattr(importlib.import_module(f"unified_opt.backends.{framework}.ops"),
                  f"{framework}_ops")
    return framework, [p.grad for p in items if p.grad is not None], ops


def _write(framework: str, grads: list[Any], values: list[Any]) -> None:
    if framework == "torch":
        import torch

        with torch.no_grad():
            for grad, value in zip(grads, values):
                grad.copy_(value)
    else:
        import paddle

        with paddle.no_grad():
            for grad, value in zip(grads, values):
                paddle.assign(value, output=grad)


def _foreach(caller: str, foreach: Any) -> None:
    if foreach is not None:
        v.check_bool(caller, "foreach", foreach)
    if foreach:
        raise ValueError(f"{caller}: foreach=True asks for torch's multi-tensor kernels, "
                         "which this function does not use (the numbers are the same); pass "
                         "foreach=None, or call torch.nn.utils's own function")


def clip_grad_norm_(parameters: Any, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, foreach: bool | None = None) -> Any:
    """Scales the gradients of ``parameters`` in place so that their total L2 norm is at
    most ``max_norm`` (torch's ``clip_grad_norm_``: factor ``min(1, max_norm / (total +
    1e-6))``), on torch or Paddle parameters.

    Args:
        parameters: A parameter or an iterable of parameters of one framework (torch or
            Paddle); those without a gradient are skipped.
        max_norm: The largest total norm, > 0.
        norm_type: 2.0 (the L2 norm; other p-norms are refused).
        error_if_nonfinite: Raise when the total norm is NaN or infinite (else the
            gradients are scaled by the non-finite factor, as torch does).
        foreach: None or False (torch's multi-tensor switch; the numbers do not depend
            on it).

    Returns:
        The total norm before clipping: a 0-dim tensor of the parameters' framework, in
        the gradients' dtype (0.0 when no parameter has a gradient).

    Raises:
        TypeError: MindSpore parameters (the message names the two alternatives), a mix
            of frameworks, or arguments of the wrong type.
        ValueError: ``max_norm`` <= 0, no parameters, ``foreach=True``.
        NotImplementedError: ``norm_type`` other than 2.
        RuntimeError: ``error_if_nonfinite`` and a non-finite total norm.

    Example:
        >>> import torch
        >>> import unified_opt as uo
        >>> w = torch.nn.Parameter(torch.zeros(2))
        >>> w.grad = torch.tensor([3.0, 4.0])
        >>> uo.clip_grad_norm_([w], 1.0)
        tensor(5.)
        >>> w.grad
        tensor([0.6000, 0.8000])
    """
    from .clipping import ClipByGlobalNorm

    caller = "clip_grad_norm_"
    # (the clips' __init__ is made by a decorator mypy does not see through)
    clip = ClipByGlobalNorm(max_norm=max_norm, eps=1e-6)  # type: ignore[call-arg]
    if isinstance(norm_type, bool) or not isinstance(norm_type, (numbers.Real, str)):
        raise TypeError(f"{caller}: norm_type must be a number, got {norm_type!r} of type "
                        f"{type(norm_type).__name__}")
    if norm_type != 2.0:       # (torch also takes "inf" and any p)
        raise NotImplementedError(f"{caller}: norm_type={norm_type!r}: only the L2 norm "
                                  "(2.0) is supported (the spec's ClipByGlobalNorm)")
    v.check_bool(caller, "error_if_nonfinite", error_if_nonfinite)
    _foreach(caller, foreach)
    framework, grads, ops = _grads_and_ops(
        caller, parameters,
        (f"grad_clip=uo.ClipByGlobalNorm(max_norm={max_norm!r}, eps=1e-6)", _NORM_NATIVE))
    if not grads:
        if framework == "torch":
            import torch
            return torch.tensor(0.0)
        import paddle
        return paddle.to_tensor(0.0)
    total = clip.global_norm(grads, ops)
    if error_if_nonfinite and not ops.all_finite(total):
        raise RuntimeError(f"{caller}: the total norm of the gradients is {float(total)!r}, "
                           "so it cannot be clipped; to scale the gradients by the non-finite "
                           "norm anyway, set error_if_nonfinite=False")
    _write(framework, grads, clip.scaled(grads, total, ops))
    return total


def clip_grad_value_(parameters: Any, clip_value: float, foreach: bool | None = None) -> None:
    """Clamps every gradient element of ``parameters`` to ``[-clip_value, clip_value]``
    in place (torch's ``clip_grad_value_``), on torch or Paddle parameters.

    Args:
        parameters: A parameter or an iterable of parameters of one framework (torch or
            Paddle); those without a gradient are skipped.
        clip_value: The bound, >= 0.
        foreach: None or False (torch's multi-tensor switch).

    Returns:
        None, as torch's: the gradients are clamped in place.

    Raises:
        TypeError: MindSpore parameters (the message names the two alternatives), a mix
            of frameworks, or arguments of the wrong type.
        ValueError: ``clip_value`` < 0, no parameters, ``foreach=True``.

    Example:
        >>> import torch
        >>> import unified_opt as uo
        >>> w = torch.nn.Parameter(torch.zeros(2))
        >>> w.grad = torch.tensor([3.0, -0.2])
        >>> uo.clip_grad_value_([w], 0.5)
        >>> w.grad
        tensor([ 0.5000, -0.2000])
    """
    from .clipping import ClipByValue

    caller = "clip_grad_value_"
    clip = ClipByValue(max=v.check_range(caller, "clip_value",  # type: ignore[call-arg]
                                         clip_value, low=0.0))
    _foreach(caller, foreach)
    framework, grads, ops = _grads_and_ops(
        caller, parameters,
        (f"grad_clip=uo.ClipByValue(max={clip_value!r})",
         f"mindspore.ops.clip_by_value(grad, -{clip_value!r}, {clip_value!r}) per gradient"))
    if grads:
        _write(framework, grads, clip.apply(grads, ops))
