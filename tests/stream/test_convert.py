"""convert_partition: the expected output of a whole partition, checked against the golden stream outputs."""

from __future__ import annotations

import orjson
import pytest

from tests.stream._cores import REAL_CORE
from tests.stream._fakes import FAKE_CORE
from tests.stream._support import TOPIC, golden_names, golden_path, golden_source, golden_stream_output, item, records
from worker.errors import WorkerError
from worker.stream import Destination, OutboundRecord, PartitionState, SourceRecord, convert_partition

GOLDEN = golden_names()


def as_records(name: str, *, start: int = 0) -> list[SourceRecord]:
    lines = golden_source(name)
    root = orjson.loads(lines[0])["run_id"]
    return records([(root, line) for line in lines], start=start)


def outputs_of(out: list[OutboundRecord], key: bytes) -> list[OutboundRecord]:
    return [r for r in out if r.destination is Destination.OUTPUT and r.key == key]


def test_an_empty_partition_publishes_nothing() -> None:
    assert convert_partition([], core=FAKE_CORE) == []


def test_records_of_two_partitions_are_refused() -> None:
    recs = [*records([("run-a", item("run-a", 0))]), *records([("run-a", item("run-a", 1))], start=1, partition=1)]
    with pytest.raises(WorkerError, match="fed to the state of"):
        convert_partition(recs, core=FAKE_CORE)


def test_it_equals_processing_record_by_record() -> None:
    recs = records([("run-a", item("run-a", 0)), ("run-b", item("run-b", 1)), ("run-a", item("run-a", 2))])
    state = PartitionState(TOPIC, 0, core=FAKE_CORE)
    expected = [r for rec in recs for r in state.process(rec).records]
    assert convert_partition(recs, core=FAKE_CORE) == expected
    assert [r.destination for r in expected] == [Destination.OUTPUT, Destination.OUTPUT, Destination.DEAD_LETTER,
                                                 Destination.OUTPUT, Destination.DEAD_LETTER]


@pytest.mark.parametrize("name", GOLDEN)
def test_each_golden_run_converts_to_its_reference_stream_output(name: str) -> None:
    out = convert_partition(as_records(name), core=REAL_CORE)
    expected = golden_stream_output(name)
    errors = sum(1 for line in golden_path(f"{name}.stream.agui.jsonl").read_bytes().splitlines()
                 if line.startswith(b'{"error"'))
    dead = [r for r in out if r.destination is Destination.DEAD_LETTER]
    assert [r.reason for r in dead] == ["observation-error"] * errors
    published = [r for r in out if r.destination is Destination.OUTPUT]
    assert [orjson.loads(r.value or b"") for r in published] == [orjson.loads(line) for line in expected]
    root = orjson.loads(golden_source(name)[0])["run_id"]
    assert [dict(r.headers)["agui-event-id"].decode() for r in published] == [
        f"{root}:{n}" for n in range(len(expected))]


def test_interleaved_golden_runs_each_keep_their_reference_output() -> None:
    names = ["c01_child_completed", "s07_errors", "r0063", "s04_suspended"]
    queues = [as_records(n) for n in names]
    pairs = []
    turn = 0
    while any(queues):
        q = queues[turn % len(queues)]
        if q:
            rec = q.pop(0)
            pairs.append((rec.key, rec.value))
        turn += 1
    out = convert_partition(records(pairs), core=REAL_CORE)
    for name in names:
        root = orjson.loads(golden_source(name)[0])["run_id"].encode()
        got = [orjson.loads(r.value or b"") for r in outputs_of(out, root)]
        assert got == [orjson.loads(line) for line in golden_stream_output(name)], name


def test_a_malformed_inline_delegation_is_an_observation_error_and_the_run_flows_on() -> None:
    lines = golden_source("c01_child_completed")
    at = next(i for i, line in enumerate(lines) if b'"inline_delegation"' in line)
    broken = orjson.loads(lines[at])
    broken["event"]["payload"]["action"] = "exploded"
    lines[at] = orjson.dumps(broken)
    out = convert_partition(records([("run-root-00", line) for line in lines]), core=REAL_CORE)
    dead = [r for r in out if r.destination is Destination.DEAD_LETTER]
    assert [r.reason for r in dead] == ["observation-error"]
    assert b"ValidationError" in dict(dead[0].headers)["dlq-message"]
    assert dict(dead[0].headers)["dlq-source-offset"] == str(at).encode()
    published = outputs_of(out, b"run-root-00")
    assert published[-1].event_type == "RUN_FINISHED"
