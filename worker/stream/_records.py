"""The values that cross the boundary between the Kafka layer and the per-partition logic.

They are immutable named tuples: several are made per source record, and a tuple is built several times
faster than a frozen dataclass.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

__all__ = ["DeadLetterReason", "Destination", "OutboundRecord", "Outcome", "SourceRecord", "Verdict"]

Headers = tuple[tuple[str, bytes], ...]


class SourceRecord(NamedTuple):
    """One source record, copied out of the client's consumer record; offsets of one partition only grow."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()


class Destination(StrEnum):
    """Which topic an outbound record goes to."""

    OUTPUT = "output"
    DEAD_LETTER = "dead-letter"


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


class OutboundRecord(NamedTuple):
    """A record to publish: an AG-UI event (`event_type` set) or a dead letter (`reason` set)."""

    destination: Destination
    key: bytes | None
    value: bytes | None
    headers: Headers
    event_type: str | None
    reason: str | None


class Verdict(StrEnum):
    """How a source record was classified; each record gets exactly one verdict."""

    PROCESSED = "processed"
    DUPLICATE = "duplicate"
    GAP = "gap"
    DEAD_LETTERED = "dead_lettered"


class Outcome(NamedTuple):
    """The verdict on one source record and the records it publishes (always empty during replay)."""

    verdict: Verdict
    records: tuple[OutboundRecord, ...]
    run_id: str | None
    reason: str | None
