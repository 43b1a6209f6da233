"""Stop requests recorded while `python -m worker run` loads: imports nothing heavy, so it can come first."""

from __future__ import annotations

import signal

__all__ = ["record_stop_requests"]


def record_stop_requests() -> list[int]:
    """From now on SIGTERM and SIGINT are recorded in the returned list instead of ending the process, so a stop
    requested while the worker loads is honoured, with exit status 0, once it runs (nothing is open before)."""
    early: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: early.append(signum))
    return early
