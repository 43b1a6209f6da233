"""The Harness wire format: typed source items and `decode_item` (conversion-spec §1a)."""

from worker.errors import DecodeError
from worker.wire._decode import EXTENSION_KINDS, MAX_EXTENSION_PAYLOAD_BYTES, decode_item, parse_datetime
from worker.wire._items import (
    AgentEvent,
    ExtensionEvent,
    HarnessEvent,
    HarnessItem,
    HarnessRunResultEvent,
    RunResult,
    is_terminal,
    timestamp_ms,
)
from worker.wire._media import binary_size, is_media
from worker.wire._redact import redact

__all__ = [
    "EXTENSION_KINDS",
    "MAX_EXTENSION_PAYLOAD_BYTES",
    "AgentEvent",
    "DecodeError",
    "ExtensionEvent",
    "HarnessEvent",
    "HarnessItem",
    "HarnessRunResultEvent",
    "RunResult",
    "binary_size",
    "decode_item",
    "is_media",
    "is_terminal",
    "parse_datetime",
    "redact",
    "timestamp_ms",
]
