"""Figures the benchmarks share: a percentile of samples, a jet/JetStream ratio."""

from __future__ import annotations

from collections.abc import Sequence


def pct(values: Sequence[float], q: float, empty: float = float("nan")) -> float:
    """The ``q`` quantile of ``values`` (the sample at rank ``int(q * n)``, sorted);
    ``empty`` if there are none."""
    if not values:
        return empty
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ratio_text(jet: float, js: float, higher_is_better: bool) -> str:
    """How many times better jet's figure is than JetStream's (``"n/a"`` without both)."""
    if jet <= 0 or js <= 0:
        return "n/a"
    return f"{(jet / js if higher_is_better else js / jet):.2f}x"
