"""Every framework's own optimizer classes, read as exact specs.

``uo.preset("mindspore.nn.AdamWeightDecay", learning_rate=1e-3, weight_decay=0.01)``
takes the native class's qualified name with its own argument names and defaults,
and returns the spec that computes what that class computes (eps placement, bias
correction, decay coupling, which parameters are decayed by default, ...). Each
backend's descriptors (``unified_opt.backends.<framework>.classes``) hold the presets
beside the lowerings they invert. Where a class does not do on CPU what its
documentation says, the preset follows the documentation and the descriptor's
conditions say why the backend does not use that class.
"""

from ._registry import preset, presets

__all__ = ["preset", "presets"]
