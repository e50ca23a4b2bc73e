"""unified-opt: one definition per optimizer algorithm, lowered into native PyTorch,
PaddlePaddle and MindSpore optimizers, with a conformance suite that proves it.

The core is numpy only; a framework is imported when a call needs it. Every name in
``__all__`` is an attribute of the package (``dir(uo)``, ``from unified_opt import *``),
typed; ``conformance`` (the suite, a sibling package installed as
``unified_opt.conformance``) is imported on first use, and ``diff``, which runs the
suite's comparison, imports it when called.
"""

import typing as _typing

from . import algorithms as _algorithms_package
from . import diffs, lr_scheduler, porting, schedules, spec
from .backend import Decision
from .build import (
    backends,
    build,
    exchange_stats,
    explain,
    native_scheduler,
    optimizer_factory,
    plateau_scheduler,
    skipped_steps,
)
from .clipping import ClipByGlobalNorm, ClipByNorm, ClipByValue
from .devices import UnverifiedDeviceWarning
from .grad_clip import clip_grad_norm_, clip_grad_value_
from .groups import Group
from .porting.live import from_native
from .porting.state import convert_checkpoint, load_state, resume, save_state
from .presets import preset, presets
from .presets.mindspore_groups import mindspore_groups
from .reference import Reference, reference
from .spec import Spec, algorithms, get, spec_from_dict

# every spec class the package's algorithm modules register (uo.AdamW, ...): no list
_algorithm_classes = list(_algorithms_package.__all__)
globals().update({name: getattr(_algorithms_package, name) for name in _algorithm_classes})

__version__ = "0.1.0"

__all__ = [*_algorithm_classes, "Decision", "Reference", "Spec", "algorithms", "backends", "build",
           "exchange_stats", "explain", "get", "native_scheduler", "optimizer_factory", "preset",
           "presets", "reference", "schedules", "spec_from_dict", "__version__",
           "ClipByGlobalNorm", "ClipByNorm", "ClipByValue", "Group", "mindspore_groups",
           "plateau_scheduler", "skipped_steps", "UnverifiedDeviceWarning", "conformance",
           "convert_checkpoint", "diff", "from_native", "load_state", "porting", "resume",
           "save_state", "lr_scheduler", "clip_grad_norm_", "clip_grad_value_"]


def diff(spec_a: "Spec | str", spec_b: "Spec | str") -> "diffs.Diff":
    """Whether two configurations compute the same numbers, and which knobs differ.

    Both run as float32 references over 3 seeded gradient streams of 50 steps each
    against ``spec_a``'s float64 oracle, judged by the conformance suite's rule (within
    a small multiple of the float32 noise floor at every step); each differing field is
    then tried alone on ``spec_a``. Imports the conformance suite
    (``unified_opt.conformance.spec_diff``) when called.

    Args:
        spec_a: a spec, or a spec expression string: a native constructor call as a
            script writes it (``"torch.optim.Adam(lr=1e-3)"``, read through its preset)
            or a registry call (``"adamw(lr=1e-3)"``); never evaluated by Python.
        spec_b: the same, compared against ``spec_a``.

    Returns:
        unified_opt.diffs.Diff: ``same`` (also its truth value), ``parting`` (the
        first step and quantity where ``spec_b`` leaves ``spec_a``'s floor, the worst
        error/floor ratio) and ``knobs`` (each differing field, with how it alone
        parts); ``str()`` gives the report ``unified-opt diff`` prints.

    Raises:
        TypeError: ``spec_a`` or ``spec_b`` is neither a spec nor a string.
        ValueError: an expression that does not parse or names no known class or
            algorithm, or a native configuration its preset refuses.

    Example:
        >>> import unified_opt as uo
        >>> found = uo.diff("torch.optim.Adam(lr=1e-3)",
        ...                 "mindspore.nn.Adam(learning_rate=1e-3)")
        >>> found.same, [knob.field for knob in found.knobs]
        (False, ['eps_placement'])
    """
    import importlib

    # the suite is a sibling package (installed as unified_opt.conformance) that the
    # core never imports by name: loaded by its module path when called
    spec_diff = importlib.import_module("unified_opt.conformance.spec_diff")
    return spec_diff.diff(spec_a, spec_b)


def __getattr__(name: str) -> _typing.Any:
    # ``uo.conformance`` (``uo.conformance.check``) without importing the suite with
    # the core: it is a sibling package installed as unified_opt.conformance
    if name == "conformance":
        import importlib

        return importlib.import_module("unified_opt.conformance")
    # an algorithm registered from outside the package (unified_opt.records) is
    # ``uo.<its class name>`` as the package's own are
    for registered in algorithms():
        cls = spec.spec_class(registered)
        if cls.__name__ == name:
            return cls
    raise AttributeError(f"module 'unified_opt' has no attribute {name!r}")


def __dir__() -> list[str]:
    # the lazily imported ``conformance`` listed before its first use (tab completion)
    return sorted(set(globals()) | {"conformance"})
