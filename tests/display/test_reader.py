"""A late-joining UI: the run's latest display record, then its output records from agui-seq + 1, give the
display `convert --display` has at the same point, content bounds included, for runs ended or in progress."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.display._flows import (
    ALL_RUNS,
    lines_of,
    project,
    published_values,
    reference_at_events,
    without_observer,
)
from tests.display._synthetic import lookalike_run
from worker.display import DisplayReader, DisplayRecord, read_display
from worker.errors import ConfigError, DisplayGapError
from worker.stream import Destination, PartitionState, SourceRecord

# Text, tools, suspension, errors, extensions, fragments, children, realistic runs, and the synthetic ones.
CUT_RUNS = [
    "s01_hello", "s02_tool_roundtrip", "s04_suspended", "s07_errors", "s08_extensions", "s09_big_fragments",
    "c01_child_completed", "c03_child_nested", "r0001", "r0002", "r0014", "damaged/d023", "edges/edges",
    "edges/edges2", "synthetic/bounds", "synthetic/failures", "synthetic/long",
]  # fmt: skip


def _latest(records: list[DisplayRecord], k: int) -> DisplayRecord | None:
    """The last record covering at most the first k events (agui-seq < k)."""
    found = None
    for record in records:
        if record.agui_seq < k:
            found = record
    return found


def _reader_at(published: list[tuple[int, bytes]], records: list[DisplayRecord], k: int) -> DisplayReader:
    """A reader joining when the run has published k events (of `published`, its output topic): latest record,
    then the events after it up to k."""
    record = _latest(records, k)
    run_id = json.loads(records[0].value)["continuation"]["run_id"]
    reader = DisplayReader(run_id) if record is None else DisplayReader(run_id, record.value, record.agui_seq)
    for seq, value in published[reader.next_seq : k]:
        assert reader.feed(seq, value)
    return reader


@pytest.mark.parametrize("run", CUT_RUNS)
@pytest.mark.parametrize("interval_ms", [0, 1000])
def test_reader_equals_convert_display_at_every_event(run: str, interval_ms: int) -> None:
    lines = lines_of(run)
    reference = reference_at_events(lines)
    records = project(lines, interval_ms=interval_ms)
    published = published_values(lines)
    for k in range(len(reference)):
        reader = _reader_at(published, records, k)
        assert without_observer(reader.snapshot()) == reference[k], f"{run}: joined after {k} events"


@pytest.mark.parametrize("run", [run for run in ALL_RUNS if run != "synthetic/lookalike"])
def test_reader_from_the_start_equals_convert_display_at_every_event(run: str) -> None:
    lines = lines_of(run)
    reference = reference_at_events(lines)
    run_id = json.loads(project(lines)[0].value)["continuation"]["run_id"]
    reader = DisplayReader(run_id)
    assert without_observer(reader.snapshot()) == reference[0]
    for seq, value in published_values(lines):
        reader.feed(seq, value)
        assert without_observer(reader.snapshot()) == reference[seq + 1], f"{run}: after {seq + 1} events"


def _held(reference: dict[str, Any], evicted: set[str]) -> list[dict[str, Any]]:
    return [item for item in reference["items"] if item["id"] not in evicted]


@pytest.mark.parametrize("run", ["synthetic/long", "r0002", "r0014"])
def test_reader_after_eviction_holds_the_rest_of_convert_display(run: str) -> None:
    lines = lines_of(run)
    reference = reference_at_events(lines)
    records = project(lines, interval_ms=1000, max_bytes=16_384)
    assert any(record.evicted for record in records), "the limit is small enough to evict"
    evicted_ordinals: set[int] = set()
    published = published_values(lines)
    for k in range(len(reference)):
        reader = _reader_at(published, records, k)
        snapshot = without_observer(reader.snapshot())
        eviction = snapshot.get("evicted")
        gone = {item["id"] for item in reference[k]["items"]
                if eviction and any(low <= item["ordinal"] <= high for low, high in eviction["ordinals"])}  # fmt: skip
        assert snapshot["items"] == _held(reference[k], gone), f"{run}: joined after {k} events"
        assert snapshot["continuation"] == reference[k]["continuation"]
        if eviction:
            evicted_ordinals.update(o for low, high in eviction["ordinals"] for o in range(low, high + 1))
            assert eviction["count"] == sum(high - low + 1 for low, high in eviction["ordinals"])
    assert evicted_ordinals


def _partition_outputs(run: str) -> list[tuple[int, bytes]]:
    """The run's output records as PartitionState publishes them: (agui-seq header, value)."""
    state = PartitionState("harness.events", 0)
    lines = lines_of(run)
    key = json.loads(lines[0])["run_id"].encode()
    out = []
    for offset, line in enumerate(lines):
        record = SourceRecord("harness.events", 0, offset, 1_748_736_000_000 + offset, key, line.encode())
        outcome = state.process(record)
        for published in outcome.records:
            if published.destination is Destination.OUTPUT:
                assert published.value is not None
                out.append((int(dict(published.headers)["agui-seq"]), published.value))
    return out


@pytest.mark.parametrize("run", ["s02_tool_roundtrip", "s09_big_fragments", "c03_child_nested", "r0014",
                                 "synthetic/bounds", "synthetic/failures"])  # fmt: skip
def test_reader_on_the_partition_states_output_records(run: str) -> None:
    lines = lines_of(run)
    outputs = _partition_outputs(run)
    assert outputs == published_values(lines), "the partition publishes what the worker flow folds"
    reference = reference_at_events(lines)
    records = project(lines, interval_ms=1000)
    run_id = json.loads(lines[0])["run_id"]
    for record in records:
        tail = [(seq, value) for seq, value in outputs if seq > record.agui_seq]
        items = read_display(run_id, record.value, record.agui_seq, tail)
        assert [item.model_dump(mode="json") for item in items] == reference[-1]["items"]


def test_overlap_is_skipped_and_a_gap_refused() -> None:
    lines = lines_of("s02_tool_roundtrip")
    values = published_values(lines)
    records = project(lines, interval_ms=1000)
    record = records[1]
    reader = DisplayReader("run-0002", record.value, record.agui_seq)
    for seq, value in values[: record.agui_seq + 1]:
        assert reader.feed(seq, value) is False
    with pytest.raises(DisplayGapError, match=rf"continues at agui-seq {record.agui_seq + 1} but got"):
        reader.feed(record.agui_seq + 2, values[record.agui_seq + 2][1])
    assert reader.feed(*values[record.agui_seq + 1]) is True


def test_reader_checks_the_record() -> None:
    record = project(lines_of("s01_hello"))[0]
    with pytest.raises(ConfigError, match="agui-seq header"):
        DisplayReader("run-0001", record.value)
    with pytest.raises(ConfigError, match="given for run 'run-other'"):
        DisplayReader("run-other", record.value, record.agui_seq)


def test_the_one_failure_an_output_topic_cannot_tell_and_the_next_record_repairs() -> None:
    lines = tuple(lookalike_run())
    reference = reference_at_events(lines)
    records = project(lines, interval_ms=0)
    values = published_values(lines)
    reader = DisplayReader("run-lookalike", records[0].value, records[0].agui_seq)
    for seq, value in values[records[0].agui_seq + 1 :]:
        reader.feed(seq, value)
    [got] = [item for item in reader.items if item.kind == "tool_call"]
    [want] = [item for item in reference[-1]["items"] if item["kind"] == "tool_call"]
    assert got.state == want["state"] == "failed"
    assert want["content"]["failure"]["message"].startswith('[{"kind": "binary"') is False
    assert got.content["failure"] != want["content"]["failure"], "a plain answer read back as media"
    final = DisplayReader("run-lookalike", records[-1].value, records[-1].agui_seq)
    assert without_observer(final.snapshot()) == reference[-1]
