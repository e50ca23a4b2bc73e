"""A deterministic, seeded gradient stream with adversarial magnitudes (numpy only).

Every parameter gets, at every step, a float32 gradient of one *kind*. The kinds
cycle per parameter (offset by the parameter's position), so within any ten steps
each parameter sees every kind, and different parameters see different kinds at the
same step. The first step is always ``normal``: a zero first gradient would hide the
momentum first-step rule and the bias correction of the first step.

The values depend only on ``(seed, step, parameter position)``, so the worker
process and the comparing parent produce bit-identical gradients independently.

Cases of ``skip_nonfinite`` name steps that get one non-finite element
(:func:`with_nonfinite`): +inf, NaN and -inf in turn, in a different parameter each time.

*Quiet* streams (:func:`quiet_gradients_at`) give some tensors a whole history of small
gradients, step 0 included: near :data:`EPS_SIZED` (1e-8, the size of Adam's and Adamax's
default eps), near :data:`SMALL` (1e-12) or near :data:`SMALLER` (1e-20, whose square is
below float32's normal range); and one tensor exact zeros for :data:`QUIET_ZERO_STEPS`
steps after a normal first step (its state decays that long). The kind streams above
cannot show a knob that matters only for such a tensor (a trust-ratio eps, an eps added
to the squared gradient instead of a clamp): their first step is normal-sized for every
tensor, and a state that once held a normal-sized gradient hides the small ones for the
rest of the run. Each quiet stream keeps tensors of the normal kind cycle, so first-step
rules stay visible there too.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

KINDS = ("normal", "zeros", "tiny", "huge", "mixed", "zero_rows", "eps_sized", "small",
         "smaller")

#: The kind cycle: ``normal`` most often, so trajectories move, every kind within 10 steps.
CYCLE = ("normal", "mixed", "zeros", "normal", "tiny", "zero_rows", "normal", "huge",
         "mixed", "normal")

TINY = 1e-30      # below float32 sqrt range: g*g underflows in float32, not in float64
HUGE = 500.0
#: magnitudes mixed within one ``mixed`` tensor, each with a random sign
MIXED_MAGNITUDES = (TINY, 1e-6, 1.0, HUGE)


#: the magnitudes of the quiet streams' small tensors: 1e-8 is a common eps (an eps
#: placement or an eps inside a max shows where the gradients are of its size), 1e-12
#: squares to 1e-24 (a normal float32), 1e-20 to 1e-40 (a float32 subnormal: float32 and
#: float64 part there)
EPS_SIZED = 1e-8
SMALL = 1e-12
SMALLER = 1e-20
#: the steps a quiet stream's ``zeros`` tensor gets exact zeros after its first step
QUIET_ZERO_STEPS = 20
#: the roles of the tensors of a quiet stream, by position (:func:`quiet_role`):
#: ``eps_sized``, ``small`` and ``smaller``, the whole history near 1e-8, 1e-12 and 1e-20;
#: ``cycle``, the normal kind cycle; ``zeros``, a normal step 0, zeros for
#: :data:`QUIET_ZERO_STEPS` steps, then the kind cycle. On the standard parameter set
#: (``w`` 65x65, ``bias`` 7, ``ln.gamma`` 8, ``ln.beta`` 9, ``w3d`` 4x4x4, ``scale`` 1)
#: the factored tensors (Adafactor and CAME factor >= 2-D) get 1e-12 and 1e-8 and 1-D
#: ones 1e-20; a check lifts a tensor's small role to 1e-8 where its spec's float32 run
#: underflows below the role's magnitude (``Spec.smallest_float32_gradient``: a factored
#: moment's, about 3.3e-10: :func:`lifted_role`). Where float32 cannot hold what
#: float64 does, no float32 run can follow the oracle, and a check there would fail a
#: correct optimizer: a factored second moment of 1e-20 gradients (R C / mean R, each
#: about 1e-40) and a zero history from step 0 (V = 0) both meet Adafactor's clamp at
#: eps[0]**2, which is 0 in float32 for eps[0]=1e-30 (an infinite 1/sqrt(V), then NaN)
#: and 1e-60 in float64
QUIET_ROLES = ("small", "cycle", "smaller", "zeros", "eps_sized", "smaller")


def kind_at(step: int, position: int) -> str:
    """The gradient kind of the parameter at ``position`` for 0-based ``step``."""
    if step == 0:
        return "normal"
    return CYCLE[(step + 3 * position) % len(CYCLE)]


def quiet_role(position: int, rotation: int = 0) -> str:
    """The role (:data:`QUIET_ROLES`) of the parameter at ``position`` in quiet stream
    ``rotation``: ``QUIET_ROLES[(position + rotation) % 6]``."""
    return QUIET_ROLES[(position + rotation) % len(QUIET_ROLES)]


#: the small roles by magnitude, largest first
QUIET_MAGNITUDES = {"eps_sized": EPS_SIZED, "small": SMALL, "smaller": SMALLER}


def lifted_role(role: str, smallest: float) -> str:
    """``role``, or for a small role below ``smallest`` (a tensor whose float32 run
    underflows below it: ``Spec.smallest_float32_gradient``) the smallest small role at
    or above it (``"cycle"`` where none is)."""
    if role not in QUIET_MAGNITUDES or QUIET_MAGNITUDES[role] >= smallest:
        return role
    return min((r for r, m in QUIET_MAGNITUDES.items() if m >= smallest),
               key=QUIET_MAGNITUDES.get, default="cycle")


def quiet_kind_at(step: int, position: int, rotation: int, smallest: float = 0.0) -> str:
    """The gradient kind of the parameter at ``position`` for 0-based ``step`` of quiet
    stream ``rotation`` (:func:`quiet_role`, :func:`lifted_role` to ``smallest``)."""
    role = lifted_role(quiet_role(position, rotation), smallest)
    if role in ("eps_sized", "small", "smaller"):
        return role
    if role == "zeros" and 0 < step <= QUIET_ZERO_STEPS:
        return "zeros"
    return kind_at(step, position)


def gradient(kind: str, shape: Sequence[int], rng: np.random.Generator) -> np.ndarray:
    """One float32 gradient of ``kind``."""
    shape = tuple(shape)
    if kind == "normal":
        out = rng.standard_normal(shape)
    elif kind == "zeros":
        out = np.zeros(shape)
    elif kind == "tiny":
        out = rng.standard_normal(shape) * TINY
    elif kind == "eps_sized":
        out = rng.standard_normal(shape) * EPS_SIZED
    elif kind == "small":
        out = rng.standard_normal(shape) * SMALL
    elif kind == "smaller":
        out = rng.standard_normal(shape) * SMALLER
    elif kind == "huge":
        out = rng.standard_normal(shape) * HUGE
    elif kind == "mixed":
        magnitudes = rng.choice(np.array(MIXED_MAGNITUDES), size=shape)
        signs = rng.choice(np.array([-1.0, 1.0]), size=shape)
        out = magnitudes * signs * (1.0 + rng.random(shape))
    elif kind == "zero_rows":
        out = rng.standard_normal(shape)
        if out.size:
            # rows along the first axis (single elements of a 1-D tensor), at least one
            rows = rng.random(shape[0]) < 0.4
            rows[rng.integers(shape[0])] = True
            out[rows] = 0.0
    else:
        raise ValueError(f"gradient kind must be one of {KINDS}, got {kind!r}")
    return out.astype(np.float32)


#: the non-finite values :func:`with_nonfinite` plants, in turn
NONFINITE = (np.inf, np.nan, -np.inf)


def with_nonfinite(grads: Mapping[str, np.ndarray], index: int) -> dict:
    """A copy of ``grads`` with element 0 of one parameter set to ``NONFINITE[index % 3]``;
    the ``index``-th planting picks the ``index``-th parameter with elements (cyclically)."""
    names = [name for name, g in grads.items() if g.size]
    if not names:
        raise ValueError("with_nonfinite: no gradient has an element to make non-finite")
    out = {name: np.array(g, copy=True) for name, g in grads.items()}
    target = out[names[index % len(names)]]
    target.reshape(-1)[0] = NONFINITE[index % len(NONFINITE)]
    return out


def gradients_at(seed: int, step: int, shapes: Mapping[str, Sequence[int]]) -> dict:
    """The gradients of every parameter for 0-based ``step``: name -> float32 array (a
    fresh copy: a case's oracle, floors and runs all read the same steps)."""
    layout = tuple((name, tuple(shape)) for name, shape in shapes.items())
    stream = _shared_streams.get((seed, layout))
    if stream is not None and step < len(stream):
        return {name: g.copy() for name, g in stream[step].items()}
    return {name: g.copy() for name, g in _gradients_at(seed, step, layout).items()}


#: the stream :func:`share_stream` read or wrote last: (seed, layout) -> each step's
#: gradients
_shared_streams: dict = {}


def share_stream(folder: Path, seed: int, steps: int,
                 shapes: Mapping[str, Sequence[int]]) -> None:
    """Let :func:`gradients_at` give steps ``0 .. steps-1`` of ``(seed, shapes)`` from
    ``folder``, a conformance run's shared folder: read where another worker of the run
    wrote them, else drawn here and written for the others (atomically: a reader sees
    the whole file or none; ``.npz``, no pickle, float32 read back bit for bit). Drawing
    a case's stream costs about as much as running the case's own path, and each
    backend's worker needs it. One stream is held at a time: the worker's current case."""
    layout = tuple((name, tuple(shape)) for name, shape in shapes.items())
    text = json.dumps([seed, steps, [[name, list(shape)] for name, shape in layout]])
    file = Path(folder) / f"{hashlib.sha256(text.encode()).hexdigest()[:32]}.grads.npz"
    _shared_streams.clear()
    if file.exists():
        # one array per parameter, every step stacked: a handful of reads per case, where
        # an array per (step, parameter) cost a zip member and a header parse each
        with np.load(file, allow_pickle=False) as data:
            stacked = [data[f"p{position}"] for position in range(len(layout))]
        stream = [{name: stacked[position][t] for position, (name, _) in enumerate(layout)}
                  for t in range(steps)]
    else:
        stream = [_gradients_at(seed, t, layout) for t in range(steps)]
        file.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=file.parent, suffix=".npz",
                                         delete=False) as part:
            np.savez(part, **{f"p{position}": np.stack([grads[name] for grads in stream])
                              for position, (name, _) in enumerate(layout)})
        os.replace(part.name, file)
    _shared_streams[(seed, layout)] = stream


@functools.lru_cache(maxsize=512)
def _gradients_at(seed: int, step: int, shapes: tuple) -> dict:
    out = {}
    for position, (name, shape) in enumerate(shapes):
        out[name] = _drawn(kind_at(step, position), shape, seed, step, position)
    return out


def _drawn(kind: str, shape, seed: int, step: int, position: int) -> np.ndarray:
    """:func:`gradient` with the generator of ``(seed, step, position)``, made only for
    a kind that draws (``zeros`` draws nothing: the same values without its cost)."""
    if kind == "zeros":
        return np.zeros(tuple(shape), dtype=np.float32)
    return gradient(kind, shape, np.random.default_rng([seed, step, position]))


def quiet_gradients_at(seed: int, step: int, shapes: Mapping[str, Sequence[int]],
                       rotation: int, smallest: Mapping[str, float] | None = None) -> dict:
    """The gradients of every parameter for 0-based ``step`` of quiet stream ``rotation``
    (:func:`quiet_kind_at`; ``smallest``: name -> the smallest magnitude that tensor's
    small role may take, see :func:`lifted_role`): name -> float32 array, a fresh copy.
    The values depend only on ``(seed, step, parameter position, rotation, smallest)``."""
    smallest = smallest or {}
    key = (seed, step, tuple((name, tuple(shape), float(smallest.get(name, 0.0)))
                             for name, shape in shapes.items()), rotation)
    return {name: g.copy() for name, g in _quiet_gradients_at(*key).items()}


@functools.lru_cache(maxsize=512)
def _quiet_gradients_at(seed: int, step: int, shapes: tuple, rotation: int) -> dict:
    out = {}
    for position, (name, shape, smallest) in enumerate(shapes):
        out[name] = _drawn(quiet_kind_at(step, position, rotation, smallest), shape, seed,
                           step, position)
    return out


def stream(seed: int, steps: int, shapes: Mapping[str, Sequence[int]]):
    """Yield the gradients of steps ``0 .. steps-1``."""
    for step in range(steps):
        yield gradients_at(seed, step, shapes)
