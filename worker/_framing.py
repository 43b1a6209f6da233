"""The bytes Kafka's producers count for a record sent alone, the figure `max.request.size` and a topic's
`max.message.bytes` are compared with: the one formula both the output records and the display records are sized by."""

from __future__ import annotations

from typing import Final

__all__ = ["RECORD_OVERHEAD_BYTES", "Headers", "framed_size", "varint_size"]

# A record sent alone: the v2 batch header (61 bytes) and the most framing one record can take (21 bytes).
RECORD_OVERHEAD_BYTES: Final = 61 + 21

Headers = tuple[tuple[str, bytes], ...]


def framed_size(key: bytes | None, value: bytes | None, headers: Headers) -> int:
    """Batch header, record framing, and key, value and each header's name and value, each behind its varint length
    (a null counts one byte)."""
    size = RECORD_OVERHEAD_BYTES + _field_size(key) + _field_size(value) + varint_size(len(headers))
    for name, data in headers:
        size += _field_size(name.encode()) + _field_size(data)
    return size


def _field_size(data: bytes | None) -> int:
    return 1 if data is None else varint_size(len(data)) + len(data)


def varint_size(n: int) -> int:
    """Bytes of the zig-zag varint Kafka writes for the length `n` >= 0."""
    z = n << 1
    size = 1
    while z >= 0x80:
        z >>= 7
        size += 1
    return size
