"""Deadlines come from the settings: the revocation budget leaves room to rejoin, back-off is capped and spread."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import ValidationError

from worker.client import backoff_s, bounded
from worker.errors import DeadlineError
from worker.live.task import Deadlines
from worker.settings import Settings


def test_the_revocation_budget_is_half_the_rebalance_timeout_at_most_one_call() -> None:
    d = Deadlines.from_settings(Settings(session_timeout_ms=10_000, broker_call_timeout_ms=10_000))
    assert (d.call_s, d.revoke_s) == (10.0, 5.0), "aiokafka's rebalance timeout is the session timeout"
    d = Deadlines.from_settings(Settings(session_timeout_ms=30_000, broker_call_timeout_ms=4_000))
    assert d.revoke_s == 4.0


def test_a_call_deadline_must_fire_before_the_broker_aborts_the_transaction() -> None:
    with pytest.raises(ValidationError, match=r"broker_call_timeout_ms \(60000\) must be below transaction_timeout_ms"):
        Settings(broker_call_timeout_ms=60_000, transaction_timeout_ms=60_000)


def test_back_off_doubles_from_a_quarter_second_to_its_cap_and_never_exceeds_it() -> None:
    for attempt, base in [(1, 0.25), (2, 0.5), (3, 1.0), (4, 2.0), (10, 5.0), (1000, 5.0)]:
        waits = [backoff_s(attempt, 5.0) for _ in range(200)]
        assert all(0.8 * base <= w <= base for w in waits), (attempt, min(waits), max(waits))
        assert len(set(waits)) > 1, "retries of partitions failing together must spread"


async def test_bounded_names_the_call_and_passes_other_timeouts_through() -> None:
    with pytest.raises(DeadlineError, match=r"t\[0\]: commit did not finish within 0\.01 s") as failure:
        await bounded(asyncio.Event().wait(), 0.01, "commit", "t[0]")
    assert (failure.value.call, failure.value.seconds) == ("commit", 0.01)

    async def own_timeout() -> None:
        raise TimeoutError("not ours")

    with pytest.raises(TimeoutError, match="not ours"):
        await bounded(own_timeout(), 5.0, "commit", "t[0]")
    assert await bounded(asyncio.sleep(0, "done"), 1.0, "begin", "t[0]") == "done"
