"""One :class:`.base.Driver` per framework (``drivers/<framework>.py``): how the
conformance worker makes parameters, feeds gradients and reads a built optimizer back."""
