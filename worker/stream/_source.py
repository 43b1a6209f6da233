"""A consumed record copied out of the client into the Kafka-free `SourceRecord` the stream layer understands; read
by its attributes (those of aiokafka's consumer record), so nothing of the client is imported."""

from __future__ import annotations

from typing import Any

from worker.stream._records import SourceRecord

__all__ = ["to_source_record"]


def to_source_record(rec: Any) -> SourceRecord:
    """One consumed record, detached from the client."""
    return SourceRecord(rec.topic, rec.partition, rec.offset, rec.timestamp, rec.key, rec.value,
                        tuple(rec.headers or ()))
