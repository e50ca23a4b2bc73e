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
"""

from __future__ import annotations

import functools
from typing import Mapping, Sequence

import numpy as np

KINDS = ("normal", "zeros", "tiny", "huge", "mixed", "zero_rows")

#: The kind cycle: ``normal`` most often, so trajectories move, every kind within 10 steps.
CYCLE = ("normal", "mixed", "zeros", "normal", "tiny", "zero_rows", "normal", "huge",
         "mixed", "normal")

TINY = 1e-30      # below float32 sqrt range: g*g underflows in float32, not in float64
HUGE = 500.0
#: magnitudes mixed within one ``mixed`` tensor, each with a random sign
MIXED_MAGNITUDES = (TINY, 1e-6, 1.0, HUGE)


def kind_at(step: int, position: int) -> str:
    """The gradient kind of the parameter at ``position`` for 0-based ``step``."""
    if step == 0:
        return "normal"
    return CYCLE[(step + 3 * position) % len(CYCLE)]


def gradient(kind: str, shape: Sequence[int], rng: np.random.Generator) -> np.ndarray:
    """One float32 gradient of ``kind``."""
    shape = tuple(shape)
    if kind == "normal":
        out = rng.standard_normal(shape)
    elif kind == "zeros":
        out = np.zeros(shape)
    elif kind == "tiny":
        out = rng.standard_normal(shape) * TINY
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
    key = (seed, step, tuple((name, tuple(shape)) for name, shape in shapes.items()))
    return {name: g.copy() for name, g in _gradients_at(*key).items()}


@functools.lru_cache(maxsize=512)
def _gradients_at(seed: int, step: int, shapes: tuple) -> dict:
    out = {}
    for position, (name, shape) in enumerate(shapes):
        rng = np.random.default_rng([seed, step, position])
        out[name] = gradient(kind_at(step, position), shape, rng)
    return out


def stream(seed: int, steps: int, shapes: Mapping[str, Sequence[int]]):
    """Yield the gradients of steps ``0 .. steps-1``."""
    for step in range(steps):
        yield gradients_at(seed, step, shapes)
