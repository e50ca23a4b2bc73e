"""What the ``alternatives()`` of every algorithm share.

``Spec.alternatives()`` lists other frameworks' knob values for the failure explainer
(:mod:`unified_opt.conformance.explainer`), and a test over the registry
(``tests/test_knob_visibility.py``) proves that each one listed fails ``unified-opt
check`` against the spec. So an alternative that computes the same numbers as the spec
in its configuration (the same canonical form, or the same numbers up to float32
rounding, e.g. the lr inside or outside a momentum buffer under a constant lr) is left
out: no run can show it, and a failure can never be explained by it.
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
