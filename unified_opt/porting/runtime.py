"""What a script ported by ``unified-opt port`` calls at run time (``uo.porting.<name>``)
where the target framework has no call of torch's meaning.

* :func:`named_parameters`: a MindSpore ``Cell``'s parameters under the names torch's
  ``named_parameters()`` gives the same model. MindSpore calls a ``LayerNorm``'s (and
  ``BatchNorm*``'s, ``GroupNorm``'s) parameters ``gamma``/``beta`` and an ``Embedding``'s
  ``embedding_table`` (:data:`.names.ATTRIBUTES`); a script's own tests on the names
  (``n.endswith("bias")``, ``pn.endswith("weight") and isinstance(m, LayerNorm)``) were
  written against torch's.
* :func:`check_clip_in_step`: where a MindSpore port moved a ``clip_grad_norm_`` into the
  optimizer (its spec's ``grad_clip``), the statement left in its place checks, at each
  step, that the optimizer steps exactly the parameters the script clipped: else the clip
  inside the optimizer would take another norm.
"""

from __future__ import annotations

import inspect
from typing import Any, Iterable, Iterator

from .names import ATTRIBUTES, module_kind


def named_parameters(module: Any, prefix: str = "", recurse: bool = True,
                     remove_duplicate: bool = True) -> Iterator[tuple[str, Any]]:
    """``(name, parameter)`` of a MindSpore Cell's parameters, named as torch's
    ``Module.named_parameters`` names them in the same model: each module's own
    parameters, then its submodules' (depth first, the order of ``cells_and_names``),
    the module path as MindSpore's, the attribute as torch's class of that module type
    calls it (``gamma`` -> ``weight``, ``beta`` -> ``bias``, ``embedding_table`` ->
    ``weight``).

    Args:
        module: a ``mindspore.nn.Cell``.
        prefix: put before every name, as torch's ``prefix``.
        recurse: False: the module's own parameters only.
        remove_duplicate: a parameter shared by two modules is given once (torch's
            default).

    Returns:
        An iterator of ``(name, mindspore.Parameter)``.

    Raises:
        TypeError: ``module`` is not a MindSpore Cell.

    Example:
        >>> decay = [p for n, p in uo.porting.named_parameters(cell)
        ...          if not n.endswith("bias")]          # doctest: +SKIP
    """
    if not hasattr(module, "cells_and_names") or not hasattr(module, "_params"):
        raise TypeError(f"named_parameters: module must be a MindSpore Cell, got "
                        f"{type(module).__qualname__}")
    if not isinstance(prefix, str):
        raise TypeError(f"named_parameters: prefix must be a str, got {prefix!r}")
    seen: set[int] = set()
    cells = module.cells_and_names() if recurse else [("", module)]
    for path, cell in cells:
        kind = module_kind(cell, "mindspore")
        for attribute, parameter in cell._params.items():
            if parameter is None or (remove_duplicate and id(parameter) in seen):
                continue
            seen.add(id(parameter))
            if kind is not None and attribute in ATTRIBUTES[kind]["mindspore"]:
                attribute = ATTRIBUTES[kind]["torch"][
                    ATTRIBUTES[kind]["mindspore"].index(attribute)]
            name = ".".join(part for part in (prefix, path, attribute) if part)
            yield name, parameter


def check_clip_in_step(optimizer: Any, parameters: Iterable[Any], max_norm: float) -> None:
    """Check that ``optimizer`` clips as the script's ``clip_grad_norm_(parameters,
    max_norm)`` did: its spec's ``grad_clip`` is ``ClipByGlobalNorm(max_norm, eps=1e-6)``
    and it steps exactly ``parameters`` (its clip takes the global norm over the
    parameters it steps).

    Args:
        optimizer: what ``uo.build`` returned (it has ``param_groups``).
        parameters: the parameters the script clipped.
        max_norm: the script's ``max_norm`` at this step.

    Raises:
        ValueError: the optimizer was not built by ``uo.build``, clips otherwise, steps a
            parameter the script did not clip, or the script clipped one the optimizer
            does not step.

    Example:
        >>> uo.porting.check_clip_in_step(optimizer, params, 1.0)  # doctest: +SKIP
    """
    from ..backend import record_of
    from ..clipping import ClipByGlobalNorm

    expected = ClipByGlobalNorm(max_norm=float(max_norm), eps=1e-6)
    clip = record_of(optimizer).spec.grad_clip
    if clip != expected:
        raise ValueError(f"check_clip_in_step: the optimizer clips with {clip!r}, the script "
                         f"with {expected!r} (max_norm={max_norm!r} at this step)")
    stepped = {id(p) for group in optimizer.param_groups for p in group["params"]}
    clipped = {id(p) for p in parameters}
    if stepped != clipped:
        raise ValueError(
            f"check_clip_in_step: the optimizer steps {len(stepped - clipped)} parameter(s) "
            f"the script does not clip and the script clips {len(clipped - stepped)} it "
            "does not step: the ported optimizer clips the global norm of the parameters "
            "it steps, which is another norm here; clip by hand (mindspore.ops."
            "clip_by_global_norm on the gradients) before calling the optimizer")


def torch_signature(qualified_name: str) -> inspect.Signature:
    """The signature of torch's optimizer class ``qualified_name`` (``params`` first, then
    its arguments and defaults as its preset reads them), without importing torch: what a
    ported script's ``inspect.signature(torch.optim.AdamW)`` asks (nanoGPT-style scripts
    test for ``"fused"`` in it; a ``fused=True`` given to the preset chooses torch's
    kernel, not the numbers: it is warned about and not carried).

    Args:
        qualified_name: a torch optimizer class with a preset (``"torch.optim.AdamW"``).

    Returns:
        An ``inspect.Signature``.

    Raises:
        ValueError: no preset has that name.

    Example:
        >>> "fused" in uo.porting.torch_signature("torch.optim.AdamW").parameters
        True
    """
    from ..presets._registry import registry, signature

    if not isinstance(qualified_name, str) or not qualified_name.startswith("torch.optim.") \
            or qualified_name not in registry().names():
        raise ValueError(f"torch_signature: qualified_name must name a torch optimizer class "
                         f"with a preset, got {qualified_name!r}")
    own = signature(qualified_name)
    params = inspect.Parameter("params", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return own.replace(parameters=[params, *own.parameters.values()])
