"""Records through the native decoder (`worker._native_core`): what it leaves to the reference decoder (a malformed
record, a rare spelling) is decoded by `decode_item`, whose error names the fault, and read into a native item."""

from __future__ import annotations

from types import ModuleType
from typing import Any

from worker.wire._decode import decode_item
from worker.wire._items import timestamp_ms

__all__ = ["native_decode"]


def native_decode(native: ModuleType, value: bytes) -> Any:
    """The native item of one record (DecodeError as `decode_item` raises it); the reference's item for the one
    kind the native core cannot hold, a sequence beyond 64 bits, which no stream ever reaches."""
    item = native.decode(value)
    if item is not None:
        return item
    reference = decode_item(value)
    try:
        return native.import_item(reference, timestamp_ms(reference))
    except ValueError:
        return reference
