"""Builders for output and dead-letter records and their headers (host contract §2)."""

from __future__ import annotations

from ag_ui.core import BaseEvent

from worker.stream._records import DeadLetterReason, Destination, OutboundRecord, SourceRecord

__all__ = [
    "MAX_DLQ_MESSAGE_CHARS", "RECORD_OVERHEAD_BYTES", "dead_letter_record", "exception_type", "output_record",
    "record_size",
]

MAX_DLQ_MESSAGE_CHARS = 1000
# A record sent alone: the v2 batch header (61 bytes) and the most framing one record can take (21 bytes).
RECORD_OVERHEAD_BYTES = 61 + 21


def output_record(
    event: BaseEvent,
    value: bytes,
    *,
    root_run_id: str,
    n: int,
    thread_id: str,
    source: SourceRecord,
    source_sequence: int,
) -> OutboundRecord:
    """Return the output record of the stream's `n`-th AG-UI event; its id `<root>:<n>` is durable."""
    event_type, type_bytes = _type_names(event.type)
    seq = str(n)
    headers = (
        ("agui-event-id", _utf8(f"{root_run_id}:{seq}")),
        ("agui-seq", seq.encode()),
        ("agui-type", type_bytes),
        ("thread-id", _utf8(thread_id)),
        ("source-partition", str(source.partition).encode()),
        ("source-offset", str(source.offset).encode()),
        ("source-sequence", str(source_sequence).encode()),
    )
    return OutboundRecord(Destination.OUTPUT, _utf8(root_run_id), value, headers, event_type, None)


_TYPE_NAMES: dict[str, tuple[str, bytes]] = {}


def _type_names(event_type: str) -> tuple[str, bytes]:
    """The event type's value and its header bytes (an enum's `.value` is a slow property)."""
    names = _TYPE_NAMES.get(event_type)
    if names is None:
        value = getattr(event_type, "value", event_type)
        names = _TYPE_NAMES[event_type] = (value, _utf8(value))
    return names


def dead_letter_record(
    source: SourceRecord, reason: DeadLetterReason, message: str, error: BaseException | None = None
) -> OutboundRecord:
    """Return the dead letter of `source`: original key, value and headers, plus reason and provenance, and
    the type and message of `error` when an unexpected exception caused it."""
    headers = (
        *source.headers,
        ("dlq-reason", reason.value.encode()),
        ("dlq-message", _utf8(_bounded(message))),
        ("dlq-source-topic", _utf8(source.topic)),
        ("dlq-source-partition", str(source.partition).encode()),
        ("dlq-source-offset", str(source.offset).encode()),
        ("dlq-source-timestamp", str(source.timestamp_ms).encode()),
    )
    if error is not None:
        headers = (
            *headers,
            ("dlq-exception-type", _utf8(exception_type(error))),
            ("dlq-exception-message", _utf8(_bounded(str(error)))),
        )
    return OutboundRecord(
        destination=Destination.DEAD_LETTER,
        key=source.key,
        value=source.value,
        headers=headers,
        event_type=None,
        reason=reason.value,
    )


def record_size(record: OutboundRecord) -> int:
    """The bytes Kafka's producers count for `record` sent alone, the figure `max.request.size` and a topic's
    `max.message.bytes` are compared with: batch header, record framing, and key, value and each header's
    name and value, each behind its varint length (a null counts one byte)."""
    headers = record.headers
    size = RECORD_OVERHEAD_BYTES + _field_size(record.key) + _field_size(record.value) + _varint_size(len(headers))
    for name, value in headers:
        size += _field_size(name.encode()) + _field_size(value)
    return size


def _field_size(data: bytes | None) -> int:
    return 1 if data is None else _varint_size(len(data)) + len(data)


def _varint_size(n: int) -> int:
    """Bytes of the zig-zag varint Kafka writes for the length `n` >= 0."""
    z = n << 1
    size = 1
    while z >= 0x80:
        z >>= 7
        size += 1
    return size


def exception_type(error: BaseException) -> str:
    """The exception's class as `module.QualifiedName` (builtins by their bare name)."""
    cls = type(error)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def _bounded(message: str) -> str:
    return message if len(message) <= MAX_DLQ_MESSAGE_CHARS else message[: MAX_DLQ_MESSAGE_CHARS - 1] + "…"


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "backslashreplace")
