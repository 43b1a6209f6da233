"""Dead letters cut to fit the dead-letter topic, and the limits the topics set, without a broker."""

from __future__ import annotations

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from worker.live.publishing import fit_dead_letter
from worker.live.topics import SIZE_MARGIN_BYTES, TopicLimits, record_limit
from worker.stream import Destination, OutboundRecord, record_size

MiB = 1024 * 1024
HEADERS = (("trace", b"abc"), ("dlq-reason", b"decode-error"), ("dlq-message", "naïve message".encode()),
           ("dlq-source-offset", b"123"))


def _letter(key: bytes | None, value: bytes | None, headers: tuple[tuple[str, bytes], ...] = HEADERS
            ) -> OutboundRecord:
    return OutboundRecord(Destination.DEAD_LETTER, key, value, headers, None, "decode-error")


def _batch(record: OutboundRecord) -> int:
    """Bytes of a real record batch holding this one record, as aiokafka writes it for the broker."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=1, producer_id=7,
                                        producer_epoch=1, base_sequence=0, batch_size=64 * MiB)
    assert builder.append(0, timestamp=1_800_000_000_000, key=record.key, value=record.value,
                          headers=list(record.headers)) is not None
    return len(builder.build())


def test_a_dead_letter_that_fits_is_left_alone() -> None:
    letter = _letter(b"run-1", b"x" * 1000)
    assert fit_dead_letter(letter, record_size(letter)) is letter


@pytest.mark.parametrize("limit", [16 * 1024, 100_000, record_limit(MiB + 12)])
def test_a_dead_letter_too_large_keeps_key_and_headers_and_the_longest_prefix_that_fits(limit: int) -> None:
    value = bytes(range(256)) * (6 * 1024)  # 1.5 MiB
    cut = fit_dead_letter(_letter(b"run-1", value), limit)
    assert cut.key == b"run-1" and cut.reason == "decode-error" and cut.destination is Destination.DEAD_LETTER
    assert cut.headers == (*HEADERS, ("dlq-truncated", str(len(value)).encode()))
    assert cut.value is not None and value.startswith(cut.value)
    assert record_size(cut) <= limit
    longer = OutboundRecord(cut.destination, cut.key, value[: len(cut.value) + 1], cut.headers, None, cut.reason)
    assert record_size(longer) > limit, "a longer prefix would have fitted"
    assert _batch(cut) <= limit


def test_cutting_depends_only_on_the_record_and_the_limit() -> None:
    value = b"{" + b"y" * 300_000
    assert fit_dead_letter(_letter(b"k", value), 50_000) == fit_dead_letter(_letter(b"k", bytes(value)), 50_000)


def test_headers_too_large_are_dropped_from_the_first_and_counted() -> None:
    big = (("blob-1", b"a" * 9000), ("blob-2", b"b" * 9000), *HEADERS)
    cut = fit_dead_letter(_letter(b"run-1", b"v" * 20_000, big), 16 * 1024)
    assert cut.headers == (big[1], *HEADERS, ("dlq-truncated", b"20000"), ("dlq-headers-dropped", b"1"))
    assert cut.key == b"run-1" and cut.value and cut.value != b"v" * 20_000
    assert record_size(cut) <= 16 * 1024


def test_a_key_too_large_is_cut_last_with_every_header_gone() -> None:
    key = b"k" * 40_000
    cut = fit_dead_letter(_letter(key, b"v" * 10), 16 * 1024)
    assert cut.value == b""
    assert cut.headers == (("dlq-truncated", b"10"), ("dlq-headers-dropped", str(len(HEADERS)).encode()),
                           ("dlq-key-truncated", b"40000"))
    assert cut.key is not None and cut.key != key and key.startswith(cut.key)
    assert record_size(cut) <= 16 * 1024


def test_limits_take_the_smaller_of_topic_and_request_less_the_margin() -> None:
    assert record_limit(MiB) == MiB - SIZE_MARGIN_BYTES
    assert record_limit(64 * MiB) == 4 * MiB - SIZE_MARGIN_BYTES
    limits = TopicLimits(output_partitions=3, output_record_bytes=record_limit(MiB),
                         dead_letter_record_bytes=record_limit(100_000))
    assert limits.batch_bytes == 100_000 - SIZE_MARGIN_BYTES
    assert TopicLimits(3, record_limit(MiB), record_limit(MiB)).batch_bytes == 256 * 1024
