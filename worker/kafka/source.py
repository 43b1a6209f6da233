"""Copies aiokafka's consumer records into the Kafka-free `SourceRecord` the stream layer understands."""

from __future__ import annotations

from typing import Any

from worker.stream import SourceRecord

__all__ = ["to_source_record"]


def to_source_record(rec: Any) -> SourceRecord:
    """One consumed record, detached from the client."""
    return SourceRecord(rec.topic, rec.partition, rec.offset, rec.timestamp, rec.key, rec.value,
                        tuple(rec.headers or ()))
