"""unified-opt: one definition per optimizer algorithm, lowered into native PyTorch,
PaddlePaddle and MindSpore optimizers, with a conformance suite that proves it.

The core is numpy only; a framework is imported when a call needs it.
"""

from typing import Any

from . import schedules
from .algorithms import (
    CAME,
    LARS,
    SGD,
    Adadelta,
    Adafactor,
    Adagrad,
    Adam,
    Adamax,
    AdamOffload,
    AdamW,
    DGCMomentum,
    Lamb,
    Lion,
    NAdam,
    RAdam,
    RMSprop,
    Rprop,
)
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
from .groups import Group
from .presets import preset, presets
from .presets.mindspore_groups import mindspore_groups
from .reference import Reference, reference
from .spec import Spec, algorithms, get, spec_from_dict

__version__ = "0.1.0"

__all__ = ["CAME", "LARS", "SGD", "Adadelta", "Adafactor", "Adagrad", "Adam", "AdamOffload",
           "Adamax", "AdamW", "DGCMomentum", "Lamb", "Lion", "NAdam", "RAdam", "RMSprop",
           "Rprop", "Decision", "Reference", "Spec", "algorithms", "backends",
           "build", "exchange_stats", "explain", "get", "native_scheduler", "optimizer_factory",
           "preset", "presets", "reference",
           "schedules", "spec_from_dict", "__version__", "ClipByGlobalNorm", "ClipByNorm",
           "ClipByValue", "Group", "mindspore_groups", "plateau_scheduler", "skipped_steps"]


#: porting a live run (``unified_opt.porting``; ``diff``: ``unified_opt.conformance``),
#: imported on first use
_PORTING = {"from_native": "unified_opt.porting.live", "save_state": "unified_opt.porting.state",
            "load_state": "unified_opt.porting.state", "resume": "unified_opt.porting.state",
            "convert_checkpoint": "unified_opt.porting.state",
            # runs the references and the suite's comparison: part of the conformance layer
            "diff": "unified_opt.conformance.spec_diff"}


def __getattr__(name: str) -> Any:
    if name in _PORTING:
        import importlib

        return getattr(importlib.import_module(_PORTING[name]), name)
    # ``uo.conformance`` (``uo.conformance.check``) without importing the suite with
    # the core: it is a sibling package installed as unified_opt.conformance
    if name == "conformance":
        import importlib

        return importlib.import_module("unified_opt.conformance")
    raise AttributeError(f"module 'unified_opt' has no attribute {name!r}")
