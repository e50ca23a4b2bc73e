"""Shared test helpers: gradient streams and 'follows the oracle' checks."""

from __future__ import annotations

import numpy as np

import unified_opt as uo

SHAPES = {"w": (8, 6), "bias": (6,), "ln.gamma": (6,), "v22": (22,), "w3d": (3, 4, 5),
          "empty": (0,)}


def initial_params(shapes=SHAPES, seed=0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {n: rng.normal(size=s).astype(np.float32) for n, s in shapes.items()}


def gradient_stream(shapes=SHAPES, steps=100, seed=1):
    """Seeded float32 gradients with adversarial steps (zeros, 1e-30, 500, mixed)."""
    rng = np.random.default_rng(seed)
    for t in range(steps):
        out = {}
        for n, s in shapes.items():
            g = rng.normal(size=s)
            kind = t % 6
            if kind == 1:
                g = np.zeros(s)
            elif kind == 2:
                g = g * 1e-30
            elif kind == 3:
                g = g * 500.0
            elif kind == 4 and g.size:
                g = g * rng.choice([0.0, 1e-30, 1.0, 500.0], size=s)
            out[n] = g.astype(np.float32)
        yield out


def assert_follows_reference(run_step, read_params, spec, params, grads, factor=10.0,
                             read_state=None):
    """Drive ``run_step(grads) -> lr`` and check params (and state) against the float64
    oracle at every step, within ``factor`` times the float32 reference's own error
    (floored at a few float32 ulps of the values)."""
    oracle = uo.reference(spec, params, dtype="float64")
    floor32 = uo.reference(spec, params, dtype="float32")
    for t, g in enumerate(grads):
        lr = run_step(g)
        assert lr == oracle.step(g), f"lr differs at step {t}"
        floor32.step(g)
        got = read_params()
        pairs = [(f"param {n}", got[n], oracle.params[n], floor32.params[n]) for n in params]
        if read_state is not None:
            state = read_state()
            for n in params:
                for k, want in oracle.state[n].items():
                    pairs.append((f"state {n}.{k}", state[n][k], want, floor32.state[n][k]))
        for what, value, want, f32 in pairs:
            assert value.shape == want.shape, f"{what} shape {value.shape} != {want.shape}"
            if not want.size:
                continue
            error = np.abs(value.astype(np.float64) - want).max()
            floor = max(np.abs(f32.astype(np.float64) - want).max(),
                        4 * np.finfo(np.float32).eps * np.abs(want).max(), 1e-37)
            assert error <= factor * floor, (
                f"{what} at step {t}: error {error:.3e} > {factor} x floor {floor:.3e}")
