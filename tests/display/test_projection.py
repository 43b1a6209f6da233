"""The worker's display projection equals `convert --display` wherever it publishes, on the records' cadence."""

from __future__ import annotations

import itertools
import json

import pytest

from tests.display._flows import (
    ALL_RUNS,
    lines_of,
    offer,
    project,
    reference_at_items,
    run_id_of,
    worker_batches,
)
from tests.display._golden import RUNS, expected_lines
from worker.display import DisplayProjection, DisplaySnapshot
from worker.errors import ConfigError, WorkerError


@pytest.mark.parametrize("run", ALL_RUNS)
def test_every_record_equals_convert_display_at_the_same_point(run: str) -> None:
    lines = lines_of(run)
    reference = reference_at_items(lines)
    records = project(lines, interval_ms=0)
    assert [record.agui_seq for record in records] == sorted(reference)
    for record in records:
        assert record.value == reference[record.agui_seq], f"{run}: record at agui-seq {record.agui_seq} differs"
        assert dict(record.headers)["agui-seq"] == str(record.agui_seq).encode()
        assert record.evicted == 0


@pytest.mark.parametrize("run", ALL_RUNS)
def test_folding_accepted_events_later_gives_the_records_of_folding_them_at_once(run: str) -> None:
    lines = lines_of(run)
    projection = DisplayProjection(*run_id_of(lines), interval_ms=0)
    accepted = [projection.accept(batch.events, batch.first_seq, timestamp_ms=batch.timestamp_ms, ended=batch.ended,
                                  source=batch.item, encoded=batch.encoded, observer=batch.observer)
                for batch in worker_batches(lines)]  # the observer has moved past them all before any is folded
    records = [record for record in map(projection.complete, accepted) if record is not None]
    assert records and records == project(lines, interval_ms=0)


@pytest.mark.parametrize("run", RUNS)
def test_last_record_is_the_golden_final_display(run: str) -> None:
    last = expected_lines(run)[-1].removeprefix('{"snapshot":').removesuffix("}")
    records = project(lines_of(run), interval_ms=1000)
    assert records[-1].value.decode() == last
    assert records[-1].key == json.loads(last)["continuation"]["run_id"].encode()
    thread = next(worker_batches(lines_of(run))).item.thread_id
    assert dict(records[-1].headers)["thread-id"] == thread.encode()


@pytest.mark.parametrize("run", ["r0002", "s02_tool_roundtrip", "c03_child_nested", "synthetic/long"])
@pytest.mark.parametrize("interval_ms", [0, 500, 1000, 5000])
def test_cadence_follows_source_timestamps(run: str, interval_ms: int) -> None:
    lines = lines_of(run)
    batches = list(worker_batches(lines))
    stamps = {batch.first_seq + len(batch.events) - 1: batch.timestamp_ms for batch in batches if batch.events}
    records = project(lines, interval_ms=interval_ms)
    first = next(batch for batch in batches if batch.events)
    assert records[0].agui_seq == first.first_seq + len(first.events) - 1, "the run's first events are published"
    assert records[-1].agui_seq == max(stamps), "the run's last events are published"
    times = [stamps[record.agui_seq] for record in records]
    for before, after in itertools.pairwise(times[:-1]):  # the last record comes with the run's end
        assert abs(after - before) >= interval_ms
    for batch in batches:
        if not batch.events:
            continue
        last = batch.first_seq + len(batch.events) - 1
        published = [stamps[record.agui_seq] for record in records if record.agui_seq < last]
        if published and abs(batch.timestamp_ms - published[-1]) >= interval_ms:
            assert any(record.agui_seq == last for record in records), f"due at agui-seq {last} but not published"
    assert project(lines, interval_ms=interval_ms) == records, "a replay publishes the same records"


def test_no_record_without_new_events() -> None:
    batches = list(worker_batches(lines_of("s01_hello")))
    projection = DisplayProjection("run-0001", "thread_demo1", interval_ms=0)
    first = batches[0]
    assert offer(projection, first.events, 0, timestamp_ms=first.timestamp_ms, ended=False, source=first.item)
    assert offer(projection, (), len(first.events), timestamp_ms=first.timestamp_ms + 10**6, ended=True) is None
    assert projection.published_seq == len(first.events) - 1


def test_events_must_continue_the_sequence() -> None:
    batch = next(worker_batches(lines_of("s01_hello")))
    projection = DisplayProjection("run-0001", "thread_demo1")
    with pytest.raises(WorkerError, match="expected event n=0, got n=3"):
        offer(projection, batch.events, 3, timestamp_ms=0, ended=False)


def test_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="interval"):
        DisplayProjection("r", "t", interval_ms=-1)
    with pytest.raises(ConfigError, match=r"max\.message\.bytes"):
        DisplayProjection("r", "t", max_bytes=100)


def test_a_gap_run_error_ends_the_display() -> None:
    from ag_ui.core import RunErrorEvent  # noqa: PLC0415

    batches = list(worker_batches(lines_of("s02_tool_roundtrip")))[:5]
    projection = DisplayProjection("run-0002", "thread_demo2", interval_ms=60_000)
    for batch in batches:
        offer(projection, batch.events, batch.first_seq, timestamp_ms=batch.timestamp_ms, ended=False,
                         source=batch.item)  # fmt: skip
    n = projection.next_seq
    gap = RunErrorEvent(message="source gap in run run-0002: expected sequence 5, received 7", code="source_gap",
                        timestamp=batches[-1].timestamp_ms + 1)  # fmt: skip
    record = offer(projection, (gap,), n, timestamp_ms=batches[-1].timestamp_ms + 1, ended=True)
    assert record is not None and record.agui_seq == n
    last = DisplaySnapshot.model_validate_json(record.value).items[-1]
    assert last.kind == "observation" and last.content["code"] == "source_gap"


def test_writing_records_retains_no_memory() -> None:
    import gc  # noqa: PLC0415
    import tracemalloc  # noqa: PLC0415

    lines = lines_of("r0014")
    projection = DisplayProjection("run-4395033b08d60e06219057d257acb052", "thread", interval_ms=0)
    for batch in worker_batches(lines):
        offer(projection, batch.events, batch.first_seq, timestamp_ms=batch.timestamp_ms, ended=False,
                         source=batch.item, encoded=batch.encoded)  # fmt: skip
    fold = projection.fold
    fold.export_json()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(200):
            fold.export_json()
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < len(fold.export_json()), f"{grown} bytes retained by 200 snapshots"
