"""Record sizes as Kafka counts them, and dead letters cut to fit a limit.

`record_size` is the size of a record batch holding that one record, at most: the batch header, the record's
worst-case framing, and its key, value and headers. A broker refuses a batch larger than the topic's
`max.message.bytes`, the producer a request larger than its `max_request_size`.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["BATCH_HEADER_BYTES", "RECORD_FRAMING_BYTES", "fit_dead_letter", "record_size"]

BATCH_HEADER_BYTES = 61  # record batch v2: base offset, length, epoch, magic, crc, attributes, ... record count
RECORD_FRAMING_BYTES = 21  # at most: length (5), attributes (1), timestamp delta (10), offset delta (5)

Header = tuple[str, bytes]


def _varint_size(n: int) -> int:
    """Bytes of `n` as a zigzag varint, the way record lengths and counts are written."""
    z = (n << 1) ^ (n >> 63)
    size = 1
    while z >= 0x80:
        z >>= 7
        size += 1
    return size


def _field_size(data: bytes | None) -> int:
    return 1 if data is None else _varint_size(len(data)) + len(data)


def record_size(key: bytes | None, value: bytes | None, headers: Sequence[Header]) -> int:
    """The most bytes a batch holding only this record takes (aiokafka's `estimate_size_in_bytes`)."""
    size = BATCH_HEADER_BYTES + RECORD_FRAMING_BYTES + _field_size(key) + _field_size(value)
    size += _varint_size(len(headers))
    for name, data in headers:
        size += _field_size(name.encode()) + _field_size(data)
    return size


def _value_room(key: bytes | None, headers: Sequence[Header], limit: int) -> int:
    """The longest value that fits beside `key` and `headers` under `limit`; negative when nothing does."""
    room = limit - (record_size(key, b"", headers) - 1)  # what the value's length prefix and bytes may take
    return room - _varint_size(room) if room > 0 else -1


def fit_dead_letter(
    key: bytes | None, value: bytes | None, headers: Sequence[Header], limit: int
) -> tuple[bytes | None, bytes | None, list[Header]]:
    """The dead letter `(key, value, headers)` itself when its `record_size` is within `limit`; else one that
    fits, decided by the record and the limit alone (a rebuilt worker writes the same dead letter).

    In order, until it fits: the value is cut to a prefix, with `dlq-truncated` holding its original size in
    bytes; then the headers are dropped from the first (the source's own come first), `dlq-headers-dropped`
    counting them; then the key is cut too, `dlq-key-truncated` holding its original size.
    """
    if record_size(key, value, headers) <= limit:
        return key, value, list(headers)
    size = b"0" if value is None else str(len(value)).encode()
    marked = [*headers, ("dlq-truncated", size)]
    room = _value_room(key, marked, limit)
    if room >= 0:
        return key, (value or b"")[:room], marked
    for dropped in range(1, len(headers) + 1):
        kept = [*headers[dropped:], ("dlq-truncated", size), ("dlq-headers-dropped", str(dropped).encode())]
        room = _value_room(key, kept, limit)
        if room >= 0:
            return key, (value or b"")[:room], kept
    key_size = b"0" if key is None else str(len(key)).encode()
    bare = [("dlq-truncated", size), ("dlq-headers-dropped", str(len(headers)).encode()),
            ("dlq-key-truncated", key_size)]  # fmt: skip
    key_room = _value_room(b"", bare, limit)  # a key is framed like a value
    return (key or b"")[: max(key_room, 0)], b"", bare
