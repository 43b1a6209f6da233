"""convert_partition: the expected output of a whole partition, checked against the golden stream outputs."""

from __future__ import annotations

import orjson
import pytest

from tests.stream._convert import convert_partition
from tests.stream._cores import REAL_CORE
from tests.stream._fakes import FAKE_CORE
from tests.stream._support import (
    GOLDEN as GOLDEN_DIR,
)
from tests.stream._support import (
    TOPIC,
    golden_names,
    golden_path,
    golden_source,
    golden_stream_output,
    item,
    records,
)
from worker.convert import convert_lines
from worker.errors import WorkerError
from worker.stream import Destination, OutboundRecord, PartitionState, SourceRecord

GOLDEN = golden_names()
# Source lines of a run that is neither the root nor a child announced in the stream: the reference observer
# converts them as an unannounced child, the worker dead-letters them as mis-keyed.
FOREIGN = {"s07_errors": [10]}


def expected_output(name: str) -> list[bytes]:
    """The reference stream output of `name` without the events of its FOREIGN lines."""
    if name not in FOREIGN:
        return golden_stream_output(name)
    kept = [line for i, line in enumerate(golden_source(name)) if i not in FOREIGN[name]]
    out, _ = convert_lines(b"\n".join(kept))
    return [line for line in out if not line.startswith(b'{"error"')]


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
    expected = expected_output(name)
    errors = [orjson.loads(line)["error"]["src"] for line in golden_path(f"{name}.stream.agui.jsonl").read_bytes()
              .splitlines() if line.startswith(b'{"error"')]  # fmt: skip
    dead = [(int(dict(r.headers)["dlq-source-offset"]), r.reason) for r in out
            if r.destination is Destination.DEAD_LETTER]  # fmt: skip
    assert dead == sorted([(src, "observation-error") for src in errors]
                          + [(src, "mis-keyed") for src in FOREIGN.get(name, [])])  # fmt: skip
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
        assert got == [orjson.loads(line) for line in expected_output(name)], name


def test_the_foreign_golden_line_is_the_only_thing_the_mis_keyed_rule_changes() -> None:
    assert len(expected_output("s07_errors")) == len(golden_stream_output("s07_errors")) - 2
    paths = [path for folder in (GOLDEN_DIR, GOLDEN_DIR / "damaged", GOLDEN_DIR / "edges")
             for path in folder.glob("*.jsonl") if path.name.count(".") == 1]  # fmt: skip
    mis_keyed = {}
    for path in sorted(paths):
        lines = [line for line in path.read_bytes().split(b"\n") if line.strip() and not line.startswith(b"#")]
        root = next(orjson.loads(line)["run_id"] for line in lines if line.startswith(b'{"thread_id"'))
        out = convert_partition(records([(root, line) for line in lines]), core=REAL_CORE)
        found = [int(dict(r.headers)["dlq-source-offset"]) for r in out if r.reason == "mis-keyed"]
        if found:
            mis_keyed[path.name.removesuffix(".jsonl")] = found
    assert len(paths) > 130
    assert mis_keyed == FOREIGN


def test_a_malformed_inline_delegation_is_an_observation_error_its_child_mis_keyed_and_the_run_flows_on() -> None:
    lines = golden_source("c01_child_completed")
    at = next(i for i, line in enumerate(lines) if b'"inline_delegation"' in line)
    broken = orjson.loads(lines[at])
    broken["event"]["payload"]["action"] = "exploded"
    lines[at] = orjson.dumps(broken)
    out = convert_partition(records([("run-root-00", line) for line in lines]), core=REAL_CORE)
    dead = [r for r in out if r.destination is Destination.DEAD_LETTER]
    # the refused delegation announced no child: the child's items are dead-lettered, the root goes on
    assert dead[0].reason == "observation-error"
    assert {r.reason for r in dead[1:]} == {"mis-keyed"}
    assert len(dead) > 2
    assert b"ValidationError" in dict(dead[0].headers)["dlq-message"]
    assert dict(dead[0].headers)["dlq-source-offset"] == str(at).encode()
    published = outputs_of(out, b"run-root-00")
    assert published[-1].event_type == "RUN_FINISHED"
