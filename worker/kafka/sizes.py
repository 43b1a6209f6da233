"""Dead letters cut to fit the dead-letter topic, sizes measured with `worker.stream.record_size` (what a producer
counts for a record sent alone, compared with `max_request_size` and the topic's `max.message.bytes`)."""

from __future__ import annotations

from worker.stream import OutboundRecord, record_size

__all__ = ["fit_dead_letter"]

Header = tuple[str, bytes]


def _prefix(
    record: OutboundRecord, key: bytes | None, headers: tuple[Header, ...], limit: int
) -> OutboundRecord | None:
    """`record` with `key`, `headers` and the longest prefix of its value that fits `limit`; None if none does."""
    value = record.value or b""

    def cut(n: int) -> OutboundRecord:
        return OutboundRecord(record.destination, key, value[:n], headers, record.event_type, record.reason)

    # A value of n bytes takes n plus its varint length (1 to 5 bytes) where an empty one takes 1.
    n = min(len(value), limit - record_size(cut(0)))
    while n >= 0:
        candidate = cut(n)
        if record_size(candidate) <= limit:
            return candidate
        n -= 1
    return None


def fit_dead_letter(record: OutboundRecord, limit: int) -> OutboundRecord:
    """`record` itself when its `record_size` is within `limit`, else a dead letter that fits, decided by the
    record and the limit alone (a rebuilt worker writes the same one).

    In order, until it fits: the value is cut to a prefix, with `dlq-truncated` holding its original size in
    bytes; then the headers are dropped from the first (the source's own come first), `dlq-headers-dropped`
    counting them; then the key is cut too, `dlq-key-truncated` holding its original size.
    """
    if record_size(record) <= limit:
        return record
    headers = record.headers
    size = str(len(record.value or b"")).encode()
    for dropped in range(len(headers) + 1):
        kept: tuple[Header, ...] = (*headers[dropped:], ("dlq-truncated", size))
        if dropped:
            kept = (*kept, ("dlq-headers-dropped", str(dropped).encode()))
        fitted = _prefix(record, record.key, kept, limit)
        if fitted is not None:
            return fitted
    bare = (("dlq-truncated", size), ("dlq-headers-dropped", str(len(headers)).encode()),
            ("dlq-key-truncated", str(len(record.key or b"")).encode()))  # fmt: skip
    # Only a limit below a dead letter's own headers leaves the key to cut: the worker refuses such a topic.
    as_value = OutboundRecord(record.destination, None, record.key, bare, record.event_type, record.reason)
    key = _prefix(as_value, None, bare, limit)
    return OutboundRecord(record.destination, key.value if key is not None else b"", b"", bare, record.event_type,
                          record.reason)
