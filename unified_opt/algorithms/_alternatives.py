"""What the ``alternatives()`` of every algorithm share.

``Spec.alternatives()`` lists other frameworks' knob values for the failure explainer
(:mod:`unified_opt.conformance.explainer`), and a test over the registry
(``tests/test_knob_visibility.py``) proves that each one listed fails ``unified-opt
check`` against the spec. So an alternative that computes the same numbers as the spec
in its configuration (the same canonical form, or the same numbers up to float32
rounding, e.g. the lr inside or outside a momentum buffer under a constant lr) is left
out: no run can show it, and a failure can never be explained by it. A knob that moves
the state alone (the lr inside or outside a momentum buffer under a constant lr: the same
parameters, buffers lr times apart) goes in ``Spec.state_alternatives()`` instead, which
the explainer tries where the optimizer's state was read.
"""

from __future__ import annotations

from ..schedules import Schedule

#: the steps within which an alternative must be able to move a number to be listed: a
#: conformance case's and a check stream's (at least 50)
VISIBLE_WITHIN = 50


def distinct(spec, candidates: list) -> list:
    """``candidates`` (``(description, spec)`` pairs) without those whose canonical
    form is ``spec``'s (:meth:`unified_opt.Spec.canonical`)."""
    canonical = spec.canonical()
    return [(text, other) for text, other in candidates
            if type(other) is not type(spec) or other.canonical() != canonical]


def lr_varies(spec) -> bool:
    """Does the lr change from step to step? Only then does the lr inside a momentum
    buffer (``b = mu b + lr d``, ``theta -= b``) compute other numbers than the lr
    outside it (``b = mu b + d``, ``theta -= lr b``): under a constant lr the two differ
    by rounding alone."""
    return isinstance(spec.lr, Schedule)


def lr_placement_in_state_only(spec) -> bool:
    """Does the other lr placement move the state alone? Under a constant lr other than 1
    the lr inside a momentum buffer (``b = mu b + lr d``) and outside it (``b = mu b +
    d``) give the same parameters up to rounding, but buffers ``lr`` times apart: a run
    whose state is read shows it (``torch.optim.SGD`` keeps the lr outside, Paddle's
    ``LarsMomentumOptimizer`` inside)."""
    return not lr_varies(spec) and spec.lr != 1.0


def lr_placement_state_alternatives(spec) -> list:
    """A momentum spec's ``state_alternatives()``: the other lr placement where it moves
    the state alone (:func:`lr_placement_in_state_only`), else none."""
    if spec.momentum != 0.0 and lr_placement_in_state_only(spec):
        return [other_lr_placement(spec)]
    return []


def other_lr_placement(spec) -> tuple:
    """``spec`` with the lr on the other side of its momentum buffer, described."""
    other = "inside" if spec.lr_placement == "outside" else "outside"
    return (f"lr_placement={other!r} (lr {other} the momentum buffer)",
            spec.replace(lr_placement=other))
