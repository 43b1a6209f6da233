"""Where each record of an outcome goes and in what form, decided by the record and the destinations alone.

An output event and its run's display record go to the output (display) partition of the run's key, as Kafka's
default partitioner picks it (murmur2), so one run's events stay in order in one partition; a thread index record
goes to the partition of its thread, chosen the same way from the thread id among as many partitions, so a thread's
records are in one partition, in order; a dead letter is cut to fit its topic (the same cut for the same record and
limit, so a rebuilt worker writes the same one); a changelog record goes to the partition of its source partition.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from aiokafka import TopicPartition

from worker.client import partition_for
from worker.contract import TERMINAL_TYPES, THREAD_ID
from worker.live.topics import TopicLimits
from worker.stream import Destination, OutboundRecord, Outcome, record_size

__all__ = ["Destinations", "KeyPartitioner", "Sent", "fit_dead_letter", "put_outcome"]

_log = logging.getLogger(__name__)
Header = tuple[str, bytes]


class KeyPartitioner:
    """Maps a key to its partition (`partition_for`, a murmur2 hash in Python: tens of microseconds), caching the
    keys of runs under way: a run's key is forgotten once its terminal event is put (`ended`), so the cache follows
    the open runs, not every run seen; at `cap` keys it is emptied (more runs open at once than that)."""

    __slots__ = ("_cache", "_cap", "partitions")

    def __init__(self, partitions: int, cap: int = 100_000) -> None:
        self.partitions = partitions
        self._cap = cap
        self._cache: dict[bytes, int] = {}

    def __call__(self, key: bytes) -> int:
        hit = self._cache.get(key)
        if hit is None:
            if len(self._cache) >= self._cap:
                self._cache.clear()
            hit = self._cache[key] = partition_for(key, self.partitions)
        return hit

    def ended(self, key: bytes) -> None:
        """The run keyed `key` ended: nothing more of it is partitioned."""
        self._cache.pop(key, None)


@dataclass(frozen=True, slots=True)
class Destinations:
    """The destinations as last checked: topic names, the output's key partitioner, every topic's record limit (None
    before the topics were read: dead letters then go uncut), and the thread index topic with its thread partitioner
    ("" and None with the index off)."""

    output_topic: str
    dlq_topic: str
    display_topic: str
    changelog_topic: str
    partitioner: KeyPartitioner
    limits: TopicLimits | None = None
    index_topic: str = ""
    thread_partitioner: KeyPartitioner | None = None


@dataclass(slots=True)
class Sent:
    """What went into the open transaction since the last `clear`, counted in the metrics when it commits."""

    events: dict[str, int] = field(default_factory=dict)  # output events by type
    display_records: int = 0
    display_bytes: int = 0
    index_records: int = 0
    dead_letters: dict[str, int] = field(default_factory=dict)  # by reason
    truncated: int = 0  # dead letters cut to fit

    def clear(self) -> None:
        self.events = {}
        self.dead_letters = {}
        self.display_records = self.display_bytes = self.index_records = self.truncated = 0


class _Open(Protocol):
    """An open transaction (`transaction.Transaction`), as far as putting records into it goes."""

    def put(
        self, topic: str, key: bytes | None, value: bytes | None, headers: Iterable[Header], partition: int | None
    ) -> Awaitable[None] | None: ...

    async def send(
        self, topic: str, key: bytes | None, value: bytes | None, headers: list[Header], partition: int | None = None
    ) -> None: ...


_OUTPUT, _DISPLAY, _DEAD_LETTER = Destination.OUTPUT, Destination.DISPLAY, Destination.DEAD_LETTER


def put_outcome(
    txn: _Open, outcome: Outcome, destinations: Destinations, sent: Sent, source: TopicPartition, *, start: int = 0
) -> Awaitable[None] | None:
    """Put the records of one outcome of a record of `source` into the open transaction, in order, from its
    `start`-th on: None when each went into its partition's open batch (`Transaction.put`), else what puts the rest,
    to be awaited before anything else goes into the transaction."""
    partition_of = destinations.partitioner
    records = outcome.records
    for index in range(start, len(records)):
        out = records[index]
        destination, key = out.destination, out.key
        if destination is _OUTPUT:
            kind = out.event_type or ""
            sent.events[kind] = sent.events.get(kind, 0) + 1
            pending = txn.put(destinations.output_topic, key, out.value, out.headers,
                              partition_of(key) if key is not None else None)  # fmt: skip
        elif destination is _DISPLAY:
            sent.display_records += 1
            sent.display_bytes += len(out.value or b"")
            pending = txn.put(destinations.display_topic, key, out.value, out.headers,
                              partition_of(key) if key is not None else None)  # fmt: skip
        elif destination is _DEAD_LETTER:
            pending = _dead_letter(txn, out, outcome, destinations, sent, source=source)
        else:
            pending = _index(txn, out, destinations, sent)
        if pending is not None:
            return _then(pending, txn, outcome, destinations, sent, source=source, start=index + 1)
    for out in records:  # after the run's last display record, which follows its terminal event
        if out.event_type in TERMINAL_TYPES and out.key is not None:
            partition_of.ended(out.key)
    return None


async def _then(
    pending: Awaitable[None], txn: _Open, outcome: Outcome, destinations: Destinations, sent: Sent, *,
    source: TopicPartition, start: int,
) -> None:  # fmt: skip
    """`pending`, then `put_outcome` of the outcome's records from `start` on."""
    await pending
    more = put_outcome(txn, outcome, destinations, sent, source, start=start)
    if more is not None:
        await more


async def _index(txn: _Open, out: OutboundRecord, destinations: Destinations, sent: Sent) -> None:
    """A thread index record into its thread's partition; one over the index topic's limit (a thread id of
    hundreds of kilobytes) is left out, decided by the record and the limit alone, and logged."""
    partitioner = destinations.thread_partitioner
    if partitioner is None:
        return  # the index is off: a state built with it on publishes into no topic
    limit = destinations.limits.index_record_bytes if destinations.limits is not None else None
    if limit is not None and record_size(out) > limit:
        _log.warning("thread index record %r left out: %d bytes, over the thread index topic's limit of %d bytes",
                     (out.key or b"")[:200], record_size(out), limit)  # fmt: skip
        return
    thread = next((value for name, value in out.headers if name == THREAD_ID), b"")
    pending = txn.put(destinations.index_topic, out.key, out.value, out.headers, partitioner(thread))
    if pending is not None:
        await pending
    sent.index_records += 1


async def _dead_letter(
    txn: _Open, out: OutboundRecord, outcome: Outcome, destinations: Destinations, sent: Sent, *, source: TopicPartition
) -> None:
    limit = destinations.limits.dead_letter_record_bytes if destinations.limits is not None else None
    fitted = out if limit is None or record_size(out) <= limit else fit_dead_letter(out, limit)
    cut = fitted is not out
    if cut:
        sent.truncated += 1
    await txn.send(destinations.dlq_topic, fitted.key, fitted.value, list(fitted.headers))
    reason = out.reason or ""
    sent.dead_letters[reason] = sent.dead_letters.get(reason, 0) + 1
    _log.warning("record dead-lettered (%s)%s: %s", out.reason,
                 f", cut to the dead-letter topic's limit of {limit} bytes" if cut else "",
                 _header(out.headers, "dlq-message"),
                 extra={"topic": source.topic, "partition": source.partition,
                        "offset": _header(out.headers, "dlq-source-offset"), "run_id": outcome.run_id})


def _header(headers: Iterable[Header], name: str) -> str:
    return next((v.decode(errors="replace") for k, v in headers if k == name), "")


def _prefix(
    record: OutboundRecord, key: bytes | None, headers: tuple[Header, ...], limit: int
) -> OutboundRecord | None:
    """`record` with `key`, `headers` and the longest prefix of its value that fits `limit`; None if none does."""
    value = record.value or b""

    def cut(n: int) -> OutboundRecord:
        return OutboundRecord(record.destination, key, value[:n], headers, record.event_type, record.reason)

    # A value of n bytes takes n plus its varint length (1 to 5 bytes) where an empty one takes 1.
    n = min(len(value), limit - record_size(cut(0)))
    while n >= 0:
        candidate = cut(n)
        if record_size(candidate) <= limit:
            return candidate
        n -= 1
    return None


def fit_dead_letter(record: OutboundRecord, limit: int) -> OutboundRecord:
    """`record` itself when its `record_size` is within `limit`, else a dead letter that fits, decided by the
    record and the limit alone (a rebuilt worker writes the same one).

    In order, until it fits: the value is cut to a prefix, with `dlq-truncated` holding its original size in
    bytes; then the headers are dropped from the first (the source's own come first), `dlq-headers-dropped`
    counting them; then the key is cut too, `dlq-key-truncated` holding its original size.
    """
    if record_size(record) <= limit:
        return record
    headers = record.headers
    size = str(len(record.value or b"")).encode()
    for dropped in range(len(headers) + 1):
        kept: tuple[Header, ...] = (*headers[dropped:], ("dlq-truncated", size))
        if dropped:
            kept = (*kept, ("dlq-headers-dropped", str(dropped).encode()))
        fitted = _prefix(record, record.key, kept, limit)
        if fitted is not None:
            return fitted
    bare = (("dlq-truncated", size), ("dlq-headers-dropped", str(len(headers)).encode()),
            ("dlq-key-truncated", str(len(record.key or b"")).encode()))  # fmt: skip
    # Only a limit below a dead letter's own headers leaves the key to cut: the worker refuses such a topic.
    as_value = OutboundRecord(record.destination, None, record.key, bare, record.event_type, record.reason)
    key = _prefix(as_value, None, bare, limit)
    return OutboundRecord(record.destination, key.value if key is not None else b"", b"", bare, record.event_type,
                          record.reason)
