"""The per-step error/floor series of a comparison (:attr:`.compare.Comparison.series`)
as short text for the reports: one byte per step, base64 per quantity.

Why: the HTML report plots every quantity of every result, and the full suite holds
about 1400 results x 20 quantities x 50 steps; float text would take megabytes per
report. A plot on a log scale needs the order of magnitude, not the digits.

A byte holds ``log10(ratio)`` on a fixed grid of ``PER_DECADE`` codes per decade,
anchored so that the tolerance K (:data:`.compare.K`) is exactly the code ``K_CODE``:

* code 0: a ratio below the grid (below ~1e-4, exact agreement included), read as 0;
* codes 1 .. 254: ``K * 10 ** ((code - K_CODE) / PER_DECADE)``, from ~9.2e-5 to ~6e11;
  a ratio above the grid is clipped to 254 (read: "at least 6e11");
* code 255: not finite (the comparison marks steps whose non-finite positions differ
  from the oracle's with inf), read as inf.

Resolution: a ratio on the grid is read back within a factor ``10 ** (1 / 32)`` (about
7.5 %), the nearest code, except that the side of K is kept: a ratio above K is never
read back at or below K (one code up: within a factor ``10 ** (1 / 16)``, 15.5 %), so a
failing step still plots above the K line.
"""

from __future__ import annotations

import base64
import math

import numpy as np

from .compare import K

PER_DECADE = 16
K_CODE = 80
ZERO_CODE = 0
TOP_CODE = 254          # the largest finite code; ratios above the grid are clipped to it
NONFINITE_CODE = 255


def grid() -> dict:
    """The constants a reader needs to decode (the HTML report's script reads these)."""
    return {"k": K, "k_code": K_CODE, "per_decade": PER_DECADE, "zero_code": ZERO_CODE,
            "nonfinite_code": NONFINITE_CODE}


def codes(ratios) -> np.ndarray:
    """One byte per step of an error/floor series (see the module)."""
    ratios = np.asarray(ratios, dtype=np.float64).reshape(-1)
    finite = np.isfinite(ratios)
    positive = finite & (ratios > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        steps = np.rint((np.log10(np.where(positive, ratios, 1.0)) - math.log10(K))
                        * PER_DECADE)
    out = np.clip(steps + K_CODE, ZERO_CODE, TOP_CODE)
    out[positive & (ratios > K) & (out <= K_CODE)] = K_CODE + 1   # keep the side of K
    out[~positive] = ZERO_CODE
    out[~finite] = NONFINITE_CODE
    return out.astype(np.uint8)


def ratios(codes_: np.ndarray) -> np.ndarray:
    """The ratios the codes stand for: 0, the grid's values, or inf."""
    codes_ = np.asarray(codes_, dtype=np.uint8)
    out = K * 10.0 ** ((codes_.astype(np.float64) - K_CODE) / PER_DECADE)
    out[codes_ == ZERO_CODE] = 0.0
    out[codes_ == NONFINITE_CODE] = np.inf
    return out


def encode(series: dict) -> dict[str, str]:
    """``{quantity: error/floor per step}`` -> ``{quantity: base64 of one byte per step}``."""
    return {name: base64.b64encode(codes(values).tobytes()).decode("ascii")
            for name, values in series.items()}


def decode(encoded: dict[str, str]) -> dict[str, np.ndarray]:
    """The inverse of :func:`encode`, within the resolution the module states."""
    return {name: ratios(np.frombuffer(base64.b64decode(text), dtype=np.uint8))
            for name, text in encoded.items()}
