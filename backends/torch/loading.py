"""Checks of a state_dict before a torch optimizer of this package loads it.

torch's ``Optimizer.load_state_dict`` checks the counts of groups and parameters, casts
floating state to each parameter's dtype and device, and nothing else: a state array of
another shape or a missing one surfaces at the step, after the state was replaced, as a
broadcast, a KeyError, or (for a kernel called without torch's checks, such as
``torch._fused_adam_`` on host state) writes out of bounds. These optimizers check
first, in a load pre-hook, and refuse with a ValueError naming the parameter and the
difference, before anything changes.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

#: the per-parameter count of updates in a state (torch's name)
STEP = "step"


def check_loaded_state(owner: str, optimizer, state_dict: dict,
                       expected: Callable[[dict, torch.Tensor], dict[str, tuple]]) -> None:
    """Each saved parameter state holds exactly ``expected(group, p)``'s arrays (name:
    shape; ``group`` the saved group) and a whole, finite, non-negative ``step``. Saved
    states map to parameters in order, as torch's load maps them; where the counts of
    groups or parameters differ torch's load refuses with its own message."""
    groups, state = state_dict["param_groups"], state_dict["state"]
    if len(groups) != len(optimizer.param_groups) or any(
            len(a["params"]) != len(b["params"])
            for a, b in zip(groups, optimizer.param_groups)):
        return
    number = -1
    for saved, group in zip(groups, optimizer.param_groups):
        for key, p in zip(saved["params"], group["params"]):
            number += 1
            held = state.get(key)
            if held is None:
                continue
            where = f"{owner}: the state of parameter {number} {list(p.shape)}"
            arrays = expected(saved, p)
            missing = sorted(arrays.keys() - held.keys()) + \
                ([STEP] if STEP not in held else [])
            extra = sorted(held.keys() - arrays.keys() - {STEP})
            if missing or extra:
                differs = " and ".join(([f"lacks {missing}"] if missing else []) +
                                       ([f"has {extra}"] if extra else []))
                raise ValueError(f"{where} {differs}; it keeps {sorted(arrays)} and "
                                 f"{STEP!r} (a state_dict of another optimizer or spec?)")
            for name, shape in arrays.items():
                array = held[name]
                if not isinstance(array, torch.Tensor) or tuple(array.shape) != shape:
                    got = list(array.shape) if isinstance(array, torch.Tensor) else \
                        type(array).__name__
                    raise ValueError(f"{where}: {name!r} is {got}, it keeps {list(shape)} "
                                     f"(a state_dict of another model?)")
            count = held[STEP]
            value = float(count) if isinstance(count, torch.Tensor) and count.numel() == 1 \
                else count
            if not isinstance(value, (int, float)) or isinstance(value, bool) or \
                    not math.isfinite(value) or value < 0 or value != int(value):
                raise ValueError(f"{where}: {STEP!r} must be a whole count >= 0, got "
                                 f"{count!r}")
