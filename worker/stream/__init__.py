"""Kafka-free per-partition logic: stream table, dedupe and gap verdicts, event ids, outputs, dead letters."""

from worker.stream._convert import convert_partition
from worker.stream._core import StreamCore, StreamObserver, WireItem, default_core
from worker.stream._metadata import decode_replay_metadata, encode_replay_metadata
from worker.stream._partition import SOURCE_GAP_CODE, PartitionState
from worker.stream._pool import ReplayPool, ReplaySession
from worker.stream._records import (
    DeadLetterReason,
    Destination,
    OutboundRecord,
    Outcome,
    SourceRecord,
    Verdict,
)

__all__ = [
    "SOURCE_GAP_CODE",
    "DeadLetterReason",
    "Destination",
    "OutboundRecord",
    "Outcome",
    "PartitionState",
    "ReplayPool",
    "ReplaySession",
    "SourceRecord",
    "StreamCore",
    "StreamObserver",
    "Verdict",
    "WireItem",
    "convert_partition",
    "decode_replay_metadata",
    "default_core",
    "encode_replay_metadata",
]
