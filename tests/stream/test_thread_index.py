"""Thread index records: a run's start record comes with its first event, its end record with its terminal event,
both after the outcome's output records, keyed by run and carrying the run's thread; the same records after a
restore from a checkpoint as without one, none in a replay, none with the index off."""

from __future__ import annotations

import json

import orjson

from tests.stream._support import TOPIC, checkpoint, golden_source, records, restore
from worker.contract import INDEX_END, INDEX_START, SEQ, THREAD_ID, split_index_key
from worker.stream import Destination, OutboundRecord, PartitionState


def _run(name: str) -> tuple[str, str, list[bytes]]:
    lines = golden_source(name)
    first = json.loads(lines[0])
    return first["run_id"], first["thread_id"], lines


def _index(out: list[OutboundRecord]) -> list[tuple[str, str, str, dict[str, object]]]:
    """(kind, run, thread, value) of every index record."""
    found = []
    for record in out:
        if record.destination is Destination.INDEX:
            split = split_index_key(record.key)
            assert split is not None, record.key
            headers = dict(record.headers)
            assert int(headers[SEQ]) == orjson.loads(record.value or b"")["aguiSeq"]
            found.append((split[0], split[1], headers[THREAD_ID].decode(), orjson.loads(record.value or b"")))
    return found


def _feed(state: PartitionState, key: str, lines: list[bytes], start: int = 0) -> list[list[OutboundRecord]]:
    return [list(state.process(record).records) for record in records([(key, line) for line in lines], start=start)]


def _events(outcomes: list[list[OutboundRecord]]) -> list[OutboundRecord]:
    return [r for records_ in outcomes for r in records_ if r.destination is Destination.OUTPUT]


def test_a_finished_run_has_a_start_record_with_its_first_event_and_an_end_record_with_its_last() -> None:
    run, thread, lines = _run("s01_hello")
    state = PartitionState(TOPIC, 0, thread_index=True)
    outcomes = _feed(state, run, lines)
    events = _events(outcomes)
    first = next(o for o in outcomes if any(r.destination is Destination.OUTPUT for r in o))
    assert [r.destination for r in first][-1] is Destination.INDEX, "the start record follows the output records"
    assert _index(first) == [(INDEX_START, run, thread, {"runId": run, "state": "running",
                                                        "at": orjson.loads(events[0].value or b"")["timestamp"],
                                                        "aguiSeq": 0})]  # fmt: skip
    last = outcomes[-1]
    terminal = orjson.loads(events[-1].value or b"")
    assert terminal["type"] == "RUN_FINISHED"
    assert _index(last) == [(INDEX_END, run, thread, {"runId": run, "state": "finished", "at": terminal["timestamp"],
                                                      "aguiSeq": len(events) - 1})]  # fmt: skip
    assert sum(len(_index(o)) for o in outcomes) == 2


def test_a_failed_run_ends_in_an_error_record() -> None:
    run, thread, lines = _run("s05_failed")
    outcomes = _feed(PartitionState(TOPIC, 0, thread_index=True), run, lines)
    (end,) = _index(outcomes[-1])
    assert end[:3] == (INDEX_END, run, thread)
    assert end[3]["state"] == "error" and end[3]["aguiSeq"] == len(_events(outcomes)) - 1


def test_a_run_closed_by_a_gap_ends_in_an_error_record_with_its_run_error() -> None:
    run, thread, lines = _run("s01_hello")
    state = PartitionState(TOPIC, 0, thread_index=True)
    outcomes = _feed(state, run, lines[:2])
    outcomes += _feed(state, run, [lines[3]], start=2)  # sequence 2 is missing: the stream closes with RUN_ERROR
    (end,) = _index(outcomes[-1])
    error = _events(outcomes)[-1]
    assert orjson.loads(error.value or b"")["type"] == "RUN_ERROR"
    assert end[3]["state"] == "error" and end[3]["aguiSeq"] == len(_events(outcomes)) - 1
    assert end[:3] == (INDEX_END, run, thread)


def test_a_restored_state_writes_the_index_records_an_uninterrupted_one_writes() -> None:
    run, _, lines = _run("s02_tool_roundtrip")
    whole = _feed(PartitionState(TOPIC, 0, thread_index=True), run, lines)
    half = len(lines) // 2
    first = PartitionState(TOPIC, 0, thread_index=True)
    before = _feed(first, run, lines[:half])
    restored, offset = restore(TOPIC, 0, dict(checkpoint(first, half)), thread_index=True)
    after = _feed(restored, run, lines[half:], start=offset)
    assert before + after == whole


def test_no_index_records_in_a_replay_or_with_the_index_off() -> None:
    run, _, lines = _run("s01_hello")
    replayed = [PartitionState(TOPIC, 0, thread_index=True).process(r, publish=False) for r in
                records([(run, line) for line in lines])]  # fmt: skip
    assert all(not o.records for o in replayed)
    off = _feed(PartitionState(TOPIC, 0), run, lines)
    on = _feed(PartitionState(TOPIC, 0, thread_index=True), run, lines)
    assert not _index([r for o in off for r in o])
    assert off == [[r for r in o if r.destination is not Destination.INDEX] for o in on], "only index records added"
