"""Copies aiokafka's consumer records into the Kafka-free `SourceRecord` the stream layer understands."""

from __future__ import annotations

from typing import Any

from worker.stream import SourceRecord

__all__ = ["to_source_record"]


def to_source_record(rec: Any) -> SourceRecord:
    """One consumed record, detached from the client."""
    return SourceRecord(
        topic=rec.topic,
        partition=rec.partition,
        offset=rec.offset,
        timestamp_ms=rec.timestamp,
        key=rec.key,
        value=rec.value,
        headers=tuple(rec.headers or ()),
    )
