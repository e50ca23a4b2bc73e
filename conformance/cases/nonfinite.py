"""One non-finite-gradient case per algorithm: ``+inf``, ``NaN`` and ``-inf`` planted in
three different parameters at three steps (:func:`..gradients.with_nonfinite`), with the
algorithm's default hyperparameters (a larger lr where the default barely moves).

Without ``skip_nonfinite`` a non-finite gradient reaches the update, and the backend must
put NaN and Inf where the oracle does: a backend whose ``sign(NaN)`` is 0 would leave
that element finite and silently stop training it. A native class that departs from the
spec here says so in its descriptor (``NativeClass.nonfinite``, shown by
``uo.explain``); its runs of these cases are compared with that tolerance
(:mod:`..compare`).
"""

from __future__ import annotations

import unified_opt as uo

from .case import Case

#: 0-based steps that get a non-finite element: +inf, NaN, -inf in turn
STEPS = (4, 11, 19)
#: lrs large enough that the parameters move far beyond float32 rounding
_LRS = {"adam": 0.01, "adamw": 0.01, "adam_offload": 0.01, "came": 0.01, "lion": 1e-3,
        "lamb": 0.01, "lars": 0.5, "sgd": 0.05, "dgc_momentum": 0.05}
#: paddle.optimizer.Rprop refuses a step with a non-finite gradient (it reads
#: uninitialised memory there; tested apart): an lr above the largest step size keeps
#: this case off it, on every other backend's native Rprop
_CHANGES = {"rprop": {"step_sizes": (1e-6, 0.005)}}


def cases() -> list[Case]:
    out = []
    for name in uo.algorithms():
        spec = uo.get(name, **_CHANGES.get(name, {}))
        if name in _LRS:
            spec = spec.replace(lr=_LRS[name])
        out.append(Case(id=f"nonfinite_{name}", spec=spec, nonfinite_steps=STEPS,
                        description="+inf, NaN and -inf gradient elements reach the update"))
    return out
