"""Kafka-free per-partition logic: stream table, dedupe and gap verdicts, event ids, outputs, dead letters,
and the partition state as changelog records (checkpoint and restore)."""

from worker.stream._build import index_record, record_size
from worker.stream._changelog import (
    CHECKPOINT_FORMAT_VERSION,
    PARTITION_KEY,
    CheckpointHeader,
    decode_ended,
    decode_stream,
    ended_key,
    read_checkpoint_header,
    split_key,
    stream_key,
)
from worker.stream._core import StreamCore, StreamObserver, WireItem, default_core, reference_core
from worker.stream._hook import load_processor
from worker.stream._metadata import decode_replay_metadata, encode_replay_metadata
from worker.stream._partition import (
    EVENT_TOO_LARGE_CODE,
    MIN_RECORD_BYTES,
    SOURCE_GAP_CODE,
    PartitionState,
    StateOptions,
)
from worker.stream._policies import GapPolicy, OpenStreamPolicy
from worker.stream._pool import ReplayPool, ReplaySession
from worker.stream._records import (
    DeadLetterReason,
    Destination,
    OutboundRecord,
    Outcome,
    SourceRecord,
    Verdict,
)
from worker.stream._source import to_source_record

__all__ = [
    "CHECKPOINT_FORMAT_VERSION",
    "EVENT_TOO_LARGE_CODE",
    "MIN_RECORD_BYTES",
    "PARTITION_KEY",
    "SOURCE_GAP_CODE",
    "CheckpointHeader",
    "DeadLetterReason",
    "Destination",
    "GapPolicy",
    "OpenStreamPolicy",
    "OutboundRecord",
    "Outcome",
    "PartitionState",
    "ReplayPool",
    "ReplaySession",
    "SourceRecord",
    "StateOptions",
    "StreamCore",
    "StreamObserver",
    "Verdict",
    "WireItem",
    "decode_ended",
    "decode_replay_metadata",
    "decode_stream",
    "default_core",
    "encode_replay_metadata",
    "ended_key",
    "index_record",
    "load_processor",
    "read_checkpoint_header",
    "record_size",
    "reference_core",
    "split_key",
    "stream_key",
    "to_source_record",
]
