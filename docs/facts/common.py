"""What every figure source shares: where the committed results are, and how a number
reads in prose."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"


def load(path: Path) -> Any:
    """A committed results file's JSON."""
    return json.loads(path.read_text(encoding="utf-8"))


def num(value: float, digits: int = 2) -> str:
    """``value`` with at most ``digits`` decimals, trailing zeros dropped (``1.50`` ->
    ``1.5``, ``2.00`` -> ``2``)."""
    text = f"{value:.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def span(values, digits: int = 2, unit: str = "") -> str:
    """The range of ``values`` as prose: ``"0.7 to 13x"``, or one figure when they are
    all the same once rounded."""
    low, high = num(min(values), digits), num(max(values), digits)
    return f"{low}{unit}" if low == high else f"{low} to {high}{unit}"
