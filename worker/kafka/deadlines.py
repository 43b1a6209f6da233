"""How long one partition may wait on the broker: each call has a deadline, a failed rebuild a capped back-off."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TypeVar

from worker.errors import DeadlineError
from worker.settings import Settings

__all__ = ["GRANT_HEALS_WITHIN_S", "Deadlines", "backoff_s", "bounded"]

_T = TypeVar("_T")
_FIRST_BACKOFF_S = 0.25


@dataclass(frozen=True, slots=True)
class Deadlines:
    """Seconds a partition may spend in one broker call, in its revocation commit, and in a clean shutdown.

    The revocation budget is half the rebalance timeout (aiokafka's equals the session timeout): the member must
    still rejoin in time after it, or the group evicts it.
    """

    call_s: float
    revoke_s: float
    shutdown_s: float
    backoff_max_s: float

    @classmethod
    def from_settings(cls, s: Settings) -> Deadlines:
        call_s = s.broker_call_timeout_ms / 1000
        return cls(
            call_s=call_s,
            revoke_s=min(call_s, s.session_timeout_ms / 2000),
            shutdown_s=s.shutdown_timeout_ms / 1000,
            backoff_max_s=s.rebuild_backoff_max_ms / 1000,
        )


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
