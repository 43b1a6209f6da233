"""`until_reachable` without a broker: retries client errors with a growing back-off, one line each, beats
meanwhile, gives up at once when told to stop, and lets errors that retrying cannot fix through."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time

import pytest
from aiokafka.errors import KafkaConnectionError

from worker.client import until_reachable
from worker.errors import AuthorizationError, ConfigError


def test_client_errors_are_retried_with_a_doubling_back_off_and_one_line_each(caplog: pytest.LogCaptureFixture
                                                                              ) -> None:
    calls: list[float] = []

    async def attempt() -> str:
        calls.append(time.monotonic())
        if len(calls) < 4:
            logging.getLogger("aiokafka").error('Unable connect to "%s": %s', "h:1", "refused")
            raise KafkaConnectionError("Unable to bootstrap")
        return "connected"

    beats: list[float] = []
    with caplog.at_level(logging.WARNING):
        got = asyncio.run(until_reachable(attempt, asyncio.Event(), lambda: beats.append(time.monotonic()),
                                          first_backoff_s=0.05, max_backoff_s=0.1))
    assert got == "connected"
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    assert gaps[0] >= 0.045 and gaps[1] >= 0.095 and 0.095 <= gaps[2] < 1, gaps
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [f'Kafka brokers not ready (attempt {n}), retrying in {b:.1f} s: Unable connect to "h:1": refused'
                     for n, b in ((1, 0.05), (2, 0.1), (3, 0.1))]
    assert beats, "liveness is kept while waiting"


def test_stop_cancels_an_attempt_that_hangs_and_returns_none() -> None:
    cancelled = []

    async def attempt() -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    async def scenario() -> object:
        stop = asyncio.Event()
        asyncio.get_running_loop().call_later(0.2, stop.set)
        return await asyncio.wait_for(until_reachable(attempt, stop, lambda: None), 5)

    assert asyncio.run(scenario()) is None
    assert cancelled == [True]


def test_an_error_retrying_cannot_fix_is_raised_at_once() -> None:
    async def attempt() -> None:
        raise ConfigError("output_topic 'x' does not exist")

    with pytest.raises(ConfigError, match="does not exist"):
        asyncio.run(until_reachable(attempt, asyncio.Event(), lambda: None))


def test_a_successful_attempt_lets_the_clients_own_warnings_through(caplog: pytest.LogCaptureFixture) -> None:
    async def attempt() -> int:
        logging.getLogger("aiokafka").warning("one bootstrap server is down")
        return 7

    with caplog.at_level(logging.WARNING):
        assert asyncio.run(until_reachable(attempt, asyncio.Event(), lambda: None)) == 7
    assert [r.getMessage() for r in caplog.records] == ["one bootstrap server is down"]


def test_a_denied_right_is_named_at_error_level_each_attempt_and_retried_until_granted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[float] = []
    message = "not authorised to create changelog_topic: CREATE on Topic 'g.changelog' for User:w"

    async def attempt() -> str:
        calls.append(time.monotonic())
        if len(calls) < 3:
            raise AuthorizationError(message, (("topic", "create"),))
        return "granted"

    with caplog.at_level(logging.WARNING):
        got = asyncio.run(until_reachable(attempt, asyncio.Event(), lambda: None, first_backoff_s=0.05,
                                          max_backoff_s=5.0, denied_max_s=0.08))
    assert got == "granted"
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.ERROR, f"{message}; retrying in 0.1 s"), (logging.ERROR, f"{message}; retrying in 0.1 s")]
    assert all(r.exc_info is None for r in caplog.records), "no traceback"
    assert 0.075 <= calls[2] - calls[1] < 1, "a denial is retried at most denied_max_s apart"
