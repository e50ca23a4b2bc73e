"""``Cell.load_state_dict``'s hooks on the own MindSpore optimizer
(:class:`.optimizer.SpecOptimizer`), ``self`` being the optimizer: what MindSpore's own
loading would copy without a word or refuse only after copying is refused first, and
the keys it misreads are set right (see each function)."""

from __future__ import annotations

import numpy as np
from mindspore import Tensor

from .added_groups import apply_loaded_joined, loaded_joined
from .kernels import host_copy


def check_loaded_state(self, state_dict, prefix, local_metadata, strict, missing_keys,
                       unexpected_keys, error_msgs) -> None:
    """``Cell.load_state_dict``'s pre-hook, run before anything is copied: what
    MindSpore would refuse only after copying the rest (an array of another shape)
    and what it would copy without a word (a ``global_step`` that is negative,
    fractional or NaN, cast to int32; part of the spec's state) is refused with a
    ValueError naming the key. A dict without any of the spec's state arrays (the
    weights alone, ``strict=False``) is MindSpore's to judge."""
    self._load_prefix = prefix
    owner = f"{type(self).__name__}.load_state_dict"
    for name, p in self._params.items():
        value = state_dict.get(prefix + name)
        shape = getattr(value, "shape", None)
        if p is None or shape is None or tuple(shape) == tuple(p.shape):
            continue
        raise ValueError(f"{owner}: {prefix + name!r} has shape {tuple(shape)} in the "
                         f"state_dict, this optimizer keeps {tuple(p.shape)} (a state_dict "
                         "of another model?); nothing was loaded")
    slots = [prefix + slot.name for slots in self._slots for slot in slots.values()]
    held = [key for key in slots if key in state_dict]
    if held:
        lacks = [key for key in slots + [prefix + "global_step"] if key not in state_dict]
        if lacks:
            raise ValueError(f"{owner}: the state_dict lacks {lacks}; it holds "
                             f"{held} of the spec's state ({self.spec.name}), which keeps "
                             f"{slots} and 'global_step' (a state_dict of another spec or "
                             "model?); nothing was loaded")
    step = state_dict.get(prefix + "global_step")
    if step is not None and getattr(step, "shape", None) is not None:
        values = np.asarray(step.asnumpy() if isinstance(step, Tensor) else step,
                            dtype=np.float64).reshape(-1)
        value = float(values[0]) if values.size == 1 else float("nan")
        if not np.isfinite(value) or value < 0 or value != int(value) or \
                value > np.iinfo(np.int32).max:
            raise ValueError(f"{owner}: {prefix + 'global_step'!r} must be a whole count "
                             f">= 0 (the steps taken), got {values.tolist()}; nothing "
                             "was loaded")
    # the parameters' joining steps (add_param_group), set by the post-hook
    self._loaded_joined = loaded_joined(self, state_dict, prefix, bool(held))

def loaded_state_keys(self, incompatible_keys) -> None:
    """``Cell.load_state_dict``'s post-hook: MindSpore's strict check takes a loaded
    Parameter whose name holds a dot (``exp_avg.weight``) for a key of a child Cell
    and calls it unexpected; this optimizer has no child Cells, so such a key that it
    holds was loaded."""
    ours = {self._load_prefix + name for name in self._params}
    incompatible_keys.unexpected_keys[:] = [
        key for key in incompatible_keys.unexpected_keys if key not in ours]
    joined, self._loaded_joined = self._loaded_joined, None
    self.python_global_step = int(host_copy(self.global_step).reshape(-1)[0])
    apply_loaded_joined(self, joined, incompatible_keys, self._load_prefix)

