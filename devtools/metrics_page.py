"""A metrics page (Prometheus' text format) read as the benches read it: each metric's samples summed over labels."""

from __future__ import annotations

import contextlib

__all__ = ["summed_by_name"]


def summed_by_name(text: str) -> dict[str, float]:
    """Each metric name of `text` with the sum of its samples' values over every label set (comments skipped)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        series, _, value = line.rpartition(" ")
        name = series.split("{", 1)[0]
        with contextlib.suppress(ValueError):
            out[name] = out.get(name, 0.0) + float(value)
    return out
