"""The values that cross the boundary between the Kafka layer and the per-partition logic.

They are never changed once built (`Final`, checked by mypy) and have plain constructors: several are made per
source record, and compiled, such a constructor is cheaper than a named tuple's.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from worker._value import FrozenValue

__all__ = ["DeadLetterReason", "Destination", "OutboundRecord", "Outcome", "SourceRecord", "Verdict"]

Headers = tuple[tuple[str, bytes], ...]


class SourceRecord(FrozenValue):
    """One source record, copied out of the client's consumer record; offsets of one partition only grow."""

    __slots__ = ("headers", "key", "offset", "partition", "timestamp_ms", "topic", "value")
    _FIELDS = ("topic", "partition", "offset", "timestamp_ms", "key", "value", "headers")

    def __init__(  # noqa: PLR0917  # positional, as the named tuple it replaced was built
        self, topic: str, partition: int, offset: int, timestamp_ms: int, key: bytes | None, value: bytes | None,
        headers: Headers = (),
    ) -> None:  # fmt: skip
        self.topic: Final = topic
        self.partition: Final = partition
        self.offset: Final = offset
        self.timestamp_ms: Final = timestamp_ms
        self.key: Final = key
        self.value: Final = value
        self.headers: Final = headers


class Destination(StrEnum):
    """Which topic an outbound record goes to."""

    OUTPUT = "output"
    DEAD_LETTER = "dead-letter"
    DISPLAY = "display"
    INDEX = "index"  # the thread index, partitioned by the record's thread (its `thread-id` header)


class DeadLetterReason(StrEnum):
    """The machine code written in the `dlq-reason` header of a dead-letter record."""

    BAD_KEY = "bad-key"
    DECODE_ERROR = "decode-error"
    MIS_KEYED = "mis-keyed"
    STREAM_START_MISSING = "stream-start-missing"
    STREAM_CLOSED = "stream-closed"
    DUPLICATE = "duplicate"
    GAP = "gap"
    RUN_CLOSED_BY_GAP = "run-closed-by-gap"
    OBSERVATION_ERROR = "observation-error"
    TYPE_ERROR = "type-error"
    OPEN_STREAM_CAP = "open-stream-cap"
    TOO_LARGE = "too-large"
    INTERNAL_ERROR = "internal-error"


class OutboundRecord(FrozenValue):
    """A record to publish: an AG-UI event (`event_type` set), a dead letter (`reason` set), a run's display record
    or a thread index record (neither; `destination` tells them apart)."""

    __slots__ = ("destination", "event_type", "headers", "key", "reason", "value")
    _FIELDS = ("destination", "key", "value", "headers", "event_type", "reason")

    def __init__(  # noqa: PLR0917  # positional, as the named tuple it replaced was built
        self, destination: Destination, key: bytes | None, value: bytes | None, headers: Headers,
        event_type: str | None, reason: str | None,
    ) -> None:  # fmt: skip
        self.destination: Final = destination
        self.key: Final = key
        self.value: Final = value
        self.headers: Final = headers
        self.event_type: Final = event_type
        self.reason: Final = reason


class Verdict(StrEnum):
    """How a source record was classified; each record gets exactly one verdict."""

    PROCESSED = "processed"
    DUPLICATE = "duplicate"
    GAP = "gap"
    DEAD_LETTERED = "dead_lettered"


class Outcome(FrozenValue):
    """The verdict on one source record and the records it publishes (always empty during replay).

    `error` is the unexpected exception behind an `internal-error` dead letter, kept for the traceback; it is
    not compared (an exception equals only itself).
    """

    __slots__ = ("error", "reason", "records", "run_id", "verdict")
    _FIELDS = ("verdict", "records", "run_id", "reason")

    def __init__(
        self, verdict: Verdict, records: tuple[OutboundRecord, ...], run_id: str | None, reason: str | None,
        error: BaseException | None = None,
    ) -> None:  # fmt: skip
        self.verdict: Final = verdict
        self.records: Final = records
        self.run_id: Final = run_id
        self.reason: Final = reason
        self.error: Final = error
