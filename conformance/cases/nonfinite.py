"""One non-finite-gradient case per algorithm: ``+inf``, ``NaN`` and ``-inf`` planted in
three different parameters at three steps (:func:`..gradients.with_nonfinite`), with the
algorithm's default hyperparameters and its record's ``nonfinite`` changes
(:mod:`unified_opt.records`): a larger lr where the default barely moves, and for Rprop
step sizes whose largest is below the lr (paddle.optimizer.Rprop refuses a step with a
non-finite gradient, reading uninitialised memory there, tested apart: this keeps the
case off it, on every other backend's native Rprop).

Without ``skip_nonfinite`` a non-finite gradient reaches the update, and the backend must
put NaN and Inf where the oracle does: a backend whose ``sign(NaN)`` is 0 would leave
that element finite and silently stop training it. A native class that departs from the
spec here says so in its descriptor (``NativeClass.nonfinite``, shown by
``uo.explain``); its runs of these cases are compared with that tolerance
(:mod:`..compare`).
"""

from __future__ import annotations

import unified_opt as uo
from unified_opt.records import records

from .case import PARAMS, Case

#: 0-based steps that get a non-finite element: +inf, NaN, -inf in turn
STEPS = (4, 11, 19)


def cases() -> list[Case]:
    out = []
    for name, entry in records().items():
        spec = uo.get(name, **entry.nonfinite)
        out.append(Case(id=f"nonfinite_{name}", spec=spec, nonfinite_steps=STEPS,
                        params=dict(entry.params or PARAMS),
                        description="+inf, NaN and -inf gradient elements reach the update"))
    return out
