"""Reaching the brokers at start-up: an attempt is retried with a capped back-off until it succeeds or the worker
is told to stop, each failure logged in one line (the client's own connection errors folded into it, and a TLS or
SASL refusal named by its cause)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

from aiokafka import AIOKafkaClient
from aiokafka.errors import KafkaError, SaslAuthenticationFailed

from worker.client._connection import connection_options
from worker.client._deadlines import GRANT_HEALS_WITHIN_S
from worker.client._handshake import Refusal, refusal_in
from worker.client._settings import ConnectionSettings
from worker.errors import AuthorizationError, KafkaWorkerError

__all__ = ["reach_brokers", "reach_once", "until_reachable", "wait_beating"]

_log = logging.getLogger("worker.client")  # the kit's one logger: its modules are private
_T = TypeVar("_T")
_CLIENT_LOGGER = "aiokafka"  # where aiokafka's client logs a failed bootstrap


class _Withheld(logging.Filter):
    """Withholds every record of the logger it is added to."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        self.records.append(record)
        return False


@contextlib.contextmanager
def _client_log_withheld() -> Iterator[_Withheld]:
    logger = logging.getLogger(_CLIENT_LOGGER)
    withheld = _Withheld()
    logger.addFilter(withheld)
    try:
        yield withheld
    finally:
        logger.removeFilter(withheld)


async def until_reachable(
    attempt: Callable[[], Awaitable[_T]],
    stop: asyncio.Event,
    beat: Callable[[], None],
    *,
    first_backoff_s: float = 0.5,
    max_backoff_s: float = 30.0,
    denied_max_s: float = GRANT_HEALS_WITHIN_S,
    on_refusal: Callable[[str], None] | None = None,
) -> _T | None:
    """`attempt()`'s result once it succeeds; None when `stop` is set first (the attempt is then cancelled).

    An attempt failing with a client error or an OS error is logged as one warning line, then retried after a
    back-off doubling up to `max_backoff_s`; anything else (a ConfigError) propagates. A failure the brokers' TLS
    or SASL handshake caused is an ERROR line that starts with its meaning, and `on_refusal` gets its cause
    (`REFUSAL_CAUSES`). An attempt the broker denied a right (AuthorizationError) is one error line
    naming it, retried at most `denied_max_s` apart. `beat` is called every second meanwhile, so liveness holds
    while the brokers are away.
    """
    backoff = first_backoff_s
    number = 0
    while not stop.is_set():
        number += 1
        with _client_log_withheld() as withheld:
            task = asyncio.ensure_future(attempt())
            finished = await _beating(stop, beat, task=task)
        if not finished:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            return None
        try:
            result = task.result()
        except AuthorizationError as exc:  # named in one line; a grant heals it without a restart
            wait = min(backoff, denied_max_s)
            _log.error("%s; retrying in %.1f s", exc, wait)
            await _beating(stop, beat, seconds=wait)
            backoff = min(backoff * 2, max_backoff_s)
            continue
        except (KafkaError, OSError, TimeoutError) as exc:
            reason, refusal = _failure(exc, withheld)
        else:
            for record in withheld.records:  # a success may still have news: a bootstrap server that is down
                logging.getLogger(record.name).handle(record)
            return result
        if refusal is None:
            _log.warning("Kafka brokers not ready (attempt %d), retrying in %.1f s: %s", number, backoff, reason)
        else:
            _log.error("Kafka brokers refused the connection (attempt %d), retrying in %.1f s: %s. %s", number,
                       backoff, refusal.meaning, reason, extra={"cause": refusal.cause})
            if on_refusal is not None:
                on_refusal(refusal.cause)
        await _beating(stop, beat, seconds=backoff)
        backoff = min(backoff * 2, max_backoff_s)
    return None


def _args(record: logging.LogRecord) -> tuple[object, ...]:
    args = record.args
    return args if isinstance(args, tuple) else ()


def _failure(exc: BaseException, withheld: _Withheld) -> tuple[str, Refusal | None]:
    """What a failed attempt says, in one line (the client's own warnings folded in), and the handshake refusal
    that caused it, if one did."""
    told = dict.fromkeys(r.getMessage() for r in withheld.records if r.levelno >= logging.WARNING)
    named = str(exc) if str(exc).startswith(type(exc).__name__) else f"{type(exc).__name__}: {exc}"
    reason = " ".join(("; ".join(told) or named).split())
    return reason, refusal_in([exc, *(a for r in withheld.records for a in _args(r) if isinstance(a, BaseException))])


async def reach_brokers(
    settings: ConnectionSettings, stop: asyncio.Event, beat: Callable[[], None], *,
    on_refusal: Callable[[str], None] | None = None, topics: tuple[str, ...] = (),
) -> dict[str, int] | None:  # fmt: skip
    """Connect, authenticate and read the cluster's metadata, retrying as `until_reachable` does, until the brokers
    accept this client's TLS and credentials; then the partition count of each of `topics` the client may see.
    None when `stop` is set first."""

    return await until_reachable(lambda: _connect(settings, topics), stop, beat, on_refusal=on_refusal)


async def reach_once(settings: ConnectionSettings, *, topics: tuple[str, ...] = (), timeout_s: float = 30.0,
                     ) -> dict[str, int]:  # fmt: skip
    """One attempt of `reach_brokers`, within `timeout_s`: the partition count of each of `topics` the client may
    see. KafkaWorkerError saying in one line why it failed, starting with the cause of a TLS or SASL refusal
    (`REFUSAL_CAUSES`) and what to check."""
    with _client_log_withheld() as withheld:
        try:
            return await asyncio.wait_for(_connect(settings, topics), timeout_s)
        except (KafkaError, OSError, TimeoutError) as exc:
            reason, refusal = _failure(exc, withheld)
    if refusal is None:
        raise KafkaWorkerError(f"Kafka brokers not reachable: {reason}")
    raise KafkaWorkerError(f"Kafka brokers refused the connection ({refusal.cause}): {refusal.meaning}. {reason}")


async def _connect(settings: ConnectionSettings, topics: tuple[str, ...]) -> dict[str, int]:
    """Connect, authenticate and read the cluster's metadata once; the partition count of each of `topics` the
    client may see."""
    client = AIOKafkaClient(client_id=f"{settings.client_id}-connect", request_timeout_ms=30_000,
                            **connection_options(settings))  # fmt: skip
    try:
        await client.bootstrap()
        if settings.sasl_mechanism == "OAUTHBEARER" and not client.cluster.brokers():
            # A broker refuses a token with a challenge that aiokafka takes for success; the metadata it then
            # answers names no broker.
            raise SaslAuthenticationFailed(
                "the brokers refused the OAUTHBEARER token (invalid_token): check that its audience, issuer and "
                "signing key are those the brokers' sasl.oauthbearer.* settings expect"
            )
        if not topics:
            return {}
        metadata = await client.fetch_all_metadata()
        return {topic: len(parts) for topic in topics if (parts := metadata.partitions_for_topic(topic))}
    finally:
        await client.close()


async def _beating(
    stop: asyncio.Event, beat: Callable[[], None], *, task: asyncio.Future[_T] | None = None,
    seconds: float | None = None,
) -> bool:
    """Wait for `task` to finish (True) or `seconds` to pass (True), calling `beat` every second; False as soon as
    `stop` is set."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds if seconds is not None else None
    stopping = asyncio.ensure_future(stop.wait())
    try:
        while not stop.is_set():
            beat()
            left = 1.0 if deadline is None else deadline - loop.time()
            if left <= 0:
                return True
            waited: list[asyncio.Future[Any]] = [stopping] if task is None else [task, stopping]
            await asyncio.wait(waited, timeout=min(1.0, left), return_when=asyncio.FIRST_COMPLETED)
            if task is not None and task.done():
                return True
        return False
    finally:
        stopping.cancel()


async def wait_beating(stop: asyncio.Event, beat: Callable[[], None], seconds: float) -> bool:
    """Wait `seconds`, calling `beat` every second so liveness holds; False as soon as `stop` is set."""
    return await _beating(stop, beat, seconds=seconds)
