"""Record sizes as Kafka counts them, and dead letters cut to fit a limit, without a broker."""

from __future__ import annotations

import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from hypothesis import given
from hypothesis import strategies as st

from worker.kafka.sizes import fit_dead_letter, record_size
from worker.kafka.topics import SIZE_MARGIN_BYTES, TopicLimits, record_limit

MiB = 1024 * 1024
HEADERS = [("trace", b"abc"), ("dlq-reason", b"decode-error"), ("dlq-message", "naïve message".encode()),
           ("dlq-source-offset", b"123")]

keys = st.one_of(st.none(), st.binary(max_size=300))
values = st.one_of(st.none(), st.binary(max_size=20_000))
headers = st.lists(st.tuples(st.text(max_size=20), st.binary(max_size=300)), max_size=8)


def _batch(key: bytes | None, value: bytes | None, hdrs: list[tuple[str, bytes]]) -> int:
    """Bytes of a real record batch holding this one record, as aiokafka writes it for the broker."""
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=1, producer_id=7,
                                        producer_epoch=1, base_sequence=0, batch_size=64 * MiB)
    assert builder.append(0, timestamp=1_800_000_000_000, key=key, value=value, headers=hdrs) is not None
    return len(builder.build())


@given(keys, values, headers)
def test_record_size_is_aiokafkas_estimate_and_bounds_the_batch_written(
    key: bytes | None, value: bytes | None, hdrs: list[tuple[str, bytes]]
) -> None:
    assert record_size(key, value, hdrs) == DefaultRecordBatchBuilder.estimate_size_in_bytes(key, value, hdrs)
    assert _batch(key, value, hdrs) <= record_size(key, value, hdrs)


def test_a_dead_letter_that_fits_is_left_alone() -> None:
    value = b"x" * 1000
    assert fit_dead_letter(b"run-1", value, HEADERS, record_size(b"run-1", value, HEADERS)) == (
        b"run-1", value, HEADERS)


@pytest.mark.parametrize("limit", [16 * 1024, 100_000, record_limit(MiB + 12)])
def test_a_dead_letter_too_large_keeps_key_and_headers_and_the_longest_prefix_that_fits(limit: int) -> None:
    value = bytes(range(256)) * (6 * 1024)  # 1.5 MiB
    key, cut, hdrs = fit_dead_letter(b"run-1", value, HEADERS, limit)
    assert key == b"run-1"
    assert hdrs == [*HEADERS, ("dlq-truncated", str(len(value)).encode())]
    assert value.startswith(cut)
    assert record_size(key, cut, hdrs) <= limit
    assert record_size(key, value[: len(cut) + 2], hdrs) > limit, "a longer prefix would have fitted"
    assert _batch(key, cut, hdrs) <= limit


def test_cutting_depends_only_on_the_record_and_the_limit() -> None:
    value = b"{" + b"y" * 300_000
    first = fit_dead_letter(b"k", value, HEADERS, 50_000)
    again = fit_dead_letter(b"k", bytes(value), list(HEADERS), 50_000)
    assert first == again


def test_headers_too_large_are_dropped_from_the_first_and_counted() -> None:
    big = [("blob-1", b"a" * 9000), ("blob-2", b"b" * 9000), *HEADERS]
    key, value, hdrs = fit_dead_letter(b"run-1", b"v" * 20_000, big, 16 * 1024)
    assert hdrs == [big[1], *HEADERS, ("dlq-truncated", b"20000"), ("dlq-headers-dropped", b"1")]
    assert key == b"run-1" and value and value != b"v" * 20_000
    assert record_size(key, value, hdrs) <= 16 * 1024


def test_a_key_too_large_is_cut_last_with_every_header_gone() -> None:
    key, value, hdrs = fit_dead_letter(b"k" * 40_000, b"v" * 10, HEADERS, 16 * 1024)
    assert value == b""
    assert hdrs == [("dlq-truncated", b"10"), ("dlq-headers-dropped", str(len(HEADERS)).encode()),
                    ("dlq-key-truncated", b"40000")]
    assert key is not None and key != b"k" * 40_000 and (b"k" * 40_000).startswith(key)
    assert record_size(key, value, hdrs) <= 16 * 1024


def test_limits_take_the_smaller_of_topic_and_request_less_the_margin() -> None:
    assert record_limit(MiB) == MiB - SIZE_MARGIN_BYTES
    assert record_limit(64 * MiB) == 4 * MiB - SIZE_MARGIN_BYTES
    limits = TopicLimits(output_partitions=3, output_record_bytes=record_limit(MiB),
                         dead_letter_record_bytes=record_limit(100_000))
    assert limits.batch_bytes == 100_000 - SIZE_MARGIN_BYTES
    assert TopicLimits(3, record_limit(MiB), record_limit(MiB)).batch_bytes == 256 * 1024
