"""Latency summaries the benchmarks print alike: a percentile, and p50 / p99 in milliseconds."""

from __future__ import annotations

import statistics

__all__ = ["p50_p99_ms", "percentile"]


def percentile(values: list[float], share: float) -> float:
    """The value below which `share` of `values` lie (nan for none)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


def p50_p99_ms(values: list[float], digits: int = 1) -> tuple[float, float]:
    """p50 and p99 of `values` (seconds), in ms rounded to `digits`."""
    if not values:
        return float("nan"), float("nan")
    return round(1000 * statistics.median(values), digits), round(1000 * percentile(values, 0.99), digits)
