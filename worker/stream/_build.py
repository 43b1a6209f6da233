"""Builders for output, dead-letter and thread index records and their headers (host contract §2)."""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from worker._framing import framed_size
from worker.contract import EVENT_ID, INDEX_END, INDEX_START, RUN_STATES, SEQ, THREAD_ID, TYPE, index_key
from worker.stream._records import DeadLetterReason, Destination, OutboundRecord, SourceRecord

__all__ = [
    "MAX_DLQ_MESSAGE_CHARS", "dead_letter_record", "exception_type", "index_record", "output_record", "output_records",
    "record_size",
]

MAX_DLQ_MESSAGE_CHARS = 1000


def output_record(
    event_type: str,
    value: bytes,
    *,
    root_run_id: str,
    n: int,
    thread_id: str,
    source: SourceRecord,
    source_sequence: int,
) -> OutboundRecord:
    """Return the output record of the stream's `n`-th AG-UI event (of type `event_type`, an `EventType` or its
    value); its id `<root>:<n>` is durable."""
    (record,) = output_records((event_type,), (value,), root_run_id=root_run_id, first=n, thread_id=thread_id,
                               source=source, source_sequence=source_sequence)  # fmt: skip
    return record


def output_records(
    types: Sequence[str],
    values: Sequence[bytes],
    *,
    root_run_id: str,
    first: int,
    thread_id: str,
    source: SourceRecord,
    source_sequence: int,
) -> tuple[OutboundRecord, ...]:
    """`output_record` of each event one source record made, numbered from `first`: what they share made once.

    Each event's id is its key's bytes, `:` and its number (`_utf8` of `<root>:<n>`: UTF-8 and backslashreplace
    encode code point by code point, so the parts concatenate)."""
    key = root_run_id.encode("utf-8", "backslashreplace")  # _utf8's, without its call
    thread = (THREAD_ID, thread_id.encode("utf-8", "backslashreplace"))
    partition = ("source-partition", str(source.partition).encode())
    offset = ("source-offset", str(source.offset).encode())
    sequence = ("source-sequence", str(source_sequence).encode())
    prefix = key + b":"
    out = []
    for n, (event_type, value) in enumerate(zip(types, values, strict=True), first):
        name, type_bytes = _TYPE_NAMES.get(event_type) or _type_names(event_type)
        seq = b"%d" % n
        headers = ((EVENT_ID, prefix + seq), (SEQ, seq), (TYPE, type_bytes), thread, partition, offset, sequence)
        out.append(OutboundRecord(_OUTPUT, key, value, headers, name, None))
    return tuple(out)


def index_record(run_id: str, thread_id: str, n: int, at_ms: int, terminal_type: str | None) -> OutboundRecord:
    """The thread index record of run `run_id`'s start (its first event `n` = 0, `terminal_type` None) or end (its
    terminal event `n` of `terminal_type`), at source time `at_ms` (worker/contract.py has the layout)."""
    kind, state = (INDEX_START, "running") if terminal_type is None else (INDEX_END, RUN_STATES[terminal_type])
    value = orjson.dumps({"runId": run_id, "state": state, "at": at_ms, "aguiSeq": n})
    headers = ((THREAD_ID, _utf8(thread_id)), (SEQ, str(n).encode()))
    return OutboundRecord(Destination.INDEX, index_key(kind, run_id), value, headers, None, None)


_TYPE_NAMES: dict[str, tuple[str, bytes]] = {}
_OUTPUT = Destination.OUTPUT  # an enum member's lookup on its class is slow


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
    """The bytes Kafka's producers count for `record` sent alone (`worker._framing.framed_size`)."""
    return framed_size(record.key, record.value, record.headers)


def exception_type(error: BaseException) -> str:
    """The exception's class as `module.QualifiedName` (builtins by their bare name)."""
    cls = type(error)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


def _bounded(message: str) -> str:
    return message if len(message) <= MAX_DLQ_MESSAGE_CHARS else message[: MAX_DLQ_MESSAGE_CHARS - 1] + "…"


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "backslashreplace")
