"""How long a caller may wait on the brokers: a call under a deadline, and a capped back-off between attempts."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable
from typing import TypeVar

from worker.errors import DeadlineError

__all__ = ["GRANT_HEALS_WITHIN_S", "backoff_s", "bounded"]

_T = TypeVar("_T")
_FIRST_BACKOFF_S = 0.25


async def bounded(aw: Awaitable[_T], seconds: float, call: str, where: str) -> _T:
    """`await aw`, cancelled and turned into a DeadlineError naming `call` and `where` after `seconds`."""
    limit = asyncio.timeout(seconds)
    try:
        async with limit:
            return await aw
    except TimeoutError:
        if limit.expired():
            raise DeadlineError(call, seconds, where) from None
        raise


GRANT_HEALS_WITHIN_S = 10.0  # the longest back-off while a right is missing, in the worker and the gateway alike


def backoff_s(attempt: int, cap_s: float) -> float:
    """Wait before retry `attempt` (1, 2, ...): 250 ms doubling, capped, minus up to a fifth at random so that
    partitions failing together do not retry together."""
    base: float = min(cap_s, _FIRST_BACKOFF_S * 2.0 ** min(max(attempt, 1) - 1, 20))
    return base * random.uniform(0.8, 1.0)  # spreads retries; not for security
