"""`python -m worker inspect` against a worker stopped mid-run: the committed offsets, checkpoints, open runs, their
agui-seq and offsets equal what the source, output, changelog and display topics hold; `--run` of an ended and of
an open run; `--thread` of the thread they all belong to; every JSON answer valid against docs/inspect.schema.json."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.kafka.conftest import TopicFactory, UniqueNames
from tests.kafka.support import (
    ROOT,
    Rec,
    WorkerProcess,
    converted,
    corpus,
    in_thread,
    interleave,
    produce,
    read_topic,
    wait_caught_up,
)
from worker.client import partition_for

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

SCHEMA = json.loads((ROOT / "docs" / "inspect.schema.json").read_text())
_ENDED = ["s01_hello", "s02_tool_roundtrip", "s05_failed", "r0000", "r0001", "r0002"]
_CUT = ["r0003", "r0004", "r0005", "c01_child_completed", "c03_child_nested"]  # produced in part: open at the stop


def inspect(bootstrap: str, *flags: str, json_out: bool = True) -> Any:
    done = subprocess.run([sys.executable, "-m", "worker", "inspect", "--bootstrap-servers", bootstrap, *flags,
                           *(["--json"] if json_out else []), "--timeout-ms", "60000"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    if not json_out:
        return done.stdout
    found = json.loads(done.stdout)
    jsonschema.validate(found, SCHEMA)
    return found


def by_key(records: list[Rec]) -> dict[str, list[Rec]]:
    grouped: dict[str, list[Rec]] = defaultdict(list)
    for rec in sorted(records, key=lambda r: (r.partition, r.offset)):
        grouped[(rec.key or b"").decode()].append(rec)
    return grouped


def test_inspect_a_group_stopped_mid_run(kafka_bootstrap: str, topic_factory: TopicFactory,
                                        unique_names: UniqueNames, tmp_path: Path) -> None:  # fmt: skip
    source, output = topic_factory("source", partitions=2), topic_factory("output", partitions=2)
    dlq = topic_factory("dlq")
    display = topic_factory("display", partitions=2, config={"cleanup.policy": "compact"})
    group, index, thread = unique_names("group"), unique_names("index"), "thread-inspected"
    ended = [in_thread(run, thread) for run in corpus(names=_ENDED)]
    cut = [in_thread(converted(run.key, run.lines[: len(run.lines) // 2]), thread) for run in corpus(names=_CUT)]
    asyncio.run(produce(kafka_bootstrap, source, interleave([*ended, *cut])))
    worker = WorkerProcess(tmp_path, "worker", kafka_bootstrap, source, output, dlq, group,
                           "--display-topic", display, "--thread-index-topic", index).start()  # fmt: skip
    try:
        asyncio.run(wait_caught_up(kafka_bootstrap, group, source, 120))
    finally:
        assert worker.stop() == 0, worker.log()[-3000:]
    flags = ["--source-topic", source, "--output-topic", output, "--dlq-topic", dlq, "--group-id", group,
             "--display-topic", display, "--thread-index-topic", index]  # fmt: skip
    sources, outputs = by_key(asyncio.run(read_topic(kafka_bootstrap, source))), \
        by_key(asyncio.run(read_topic(kafka_bootstrap, output)))  # fmt: skip
    changelog = asyncio.run(read_topic(kafka_bootstrap, f"{group}.changelog"))
    displays = by_key(asyncio.run(read_topic(kafka_bootstrap, display)))
    last_seq = {key: max(int(rec.header("agui-seq")) for rec in recs) for key, recs in outputs.items()}

    found = inspect(kafka_bootstrap, *flags, "--max-runs", "100")
    assert found["group"] == group and found["group_state"] in ("Empty", "Dead") and found["members"] == 0
    assert found["changelog_topic"] == f"{group}.changelog"
    open_keys = {run.key for run in cut}
    seen_open: set[str] = set()
    for row in found["partitions"]:
        p = row["partition"]
        end = 1 + max(rec.offset for recs in sources.values() for rec in recs if rec.partition == p)
        assert row["committed"] == row["end_offset"] >= end and row["lag"] == 0, row
        checkpoint = row["checkpoint"]
        assert checkpoint["error"] is None, checkpoint
        assert checkpoint["offset"] == row["committed"], checkpoint  # a stop checkpoints
        header = [json.loads(rec.value or b"null") for rec in changelog
                  if rec.partition == p and rec.key == b"partition"]  # fmt: skip
        assert header[-1]["offset"] == checkpoint["offset"]
        assert (checkpoint["open_runs"], checkpoint["remembered_runs"]) == \
            (header[-1]["open_streams"], header[-1]["ended_streams"])  # fmt: skip
        in_partition = {key for key, recs in sources.items() if recs[0].partition == p}
        assert {run["run_id"] for run in checkpoint["runs"]} == open_keys & in_partition
        assert checkpoint["remembered_runs"] == len(in_partition - open_keys)
        for run in checkpoint["runs"]:
            key = run["run_id"]
            assert run["agui_seq"] == last_seq[key], run  # the output topic's last event of the run
            assert run["first_offset"] == sources[key][0].offset, run  # its first source record
            seen_open.add(key)
        if checkpoint["runs"]:
            oldest = checkpoint["oldest_open_run"]
            assert oldest["first_offset"] == min(run["first_offset"] for run in checkpoint["runs"])
            assert oldest["age_s"] is not None and oldest["age_s"] >= 0
        firsts = [run["first_offset"] for run in checkpoint["runs"]]
        assert row["replay_from"] == min(firsts, default=row["committed"])
    assert seen_open == open_keys
    assert [p["end_offset"] > 0 for p in found["display"]["partitions"]] == [True, True]

    done = next(run.key for run in ended if run.events)
    run = inspect(kafka_bootstrap, *flags, "--run", done)
    terminal = sources[done][-1]
    assert run["state"] == "ended" and run["open"] is None
    assert run["ended"]["ended_at"] == terminal.offset == run["last_source_offset"]
    assert run["agui_seq"] == last_seq[done] == len(next(r for r in ended if r.key == done).events) - 1
    assert run["last_event"]["type"] in ("RUN_FINISHED", "RUN_ERROR")
    assert run["display"]["agui_seq"] == last_seq[done]  # the last event always publishes the display
    assert run["display"]["offset"] == displays[done][-1].offset and run["display"]["items"] > 0

    going = next(run.key for run in cut if run.events)
    run = inspect(kafka_bootstrap, *flags, "--run", going)
    last_event = max(outputs[going], key=lambda rec: int(rec.header("agui-seq")))
    assert run["state"] == "open" and run["ended"] is None
    assert run["agui_seq"] == run["open"]["agui_seq"] == last_seq[going]
    assert run["open"]["first_offset"] == sources[going][0].offset
    assert run["last_source_offset"] == int(last_event.header("source-offset"))
    assert run["last_event"]["offset"] == last_event.offset
    assert run["display"]["offset"] == displays[going][-1].offset
    assert run["display"]["agui_seq"] == int(displays[going][-1].header("agui-seq"))
    assert (run["source_partition"], run["output_partition"]) == (sources[going][0].partition, last_event.partition)

    unknown = inspect(kafka_bootstrap, *flags, "--run", "no-such-run")
    assert unknown["state"] == "unknown" and unknown["last_event"] is None and unknown["agui_seq"] is None
    assert unknown["searched_from"] == {"output": 0, "display": 0}  # the whole partitions were read

    indexed = asyncio.run(read_topic(kafka_bootstrap, index))
    thread_partition = partition_for(thread.encode(), 2)
    starts = [rec for rec in sorted(indexed, key=lambda r: r.offset) if (rec.key or b"").startswith(b"start:")]
    assert {rec.partition for rec in indexed} == {thread_partition}, "a thread's records are in one partition"
    listed = inspect(kafka_bootstrap, *flags, "--thread", thread)
    assert listed["index_partition"] == thread_partition and not listed["unstarted"]
    assert [run["runId"] for run in listed["runs"]] == [(rec.key or b"")[6:].decode() for rec in starts]
    assert [run["startOffset"] for run in listed["runs"]] == [rec.offset for rec in starts]
    assert {run["runId"] for run in listed["runs"]} == {run.key for run in [*ended, *cut] if run.events}
    for run in listed["runs"]:
        key = run["runId"]
        first = json.loads(outputs[key][0].value or b"")
        assert run["firstEventAt"] == first["timestamp"], run
        if key in open_keys:
            assert (run["state"], run["lastEventAt"], run["aguiSeq"]) == ("running", None, None), run
            continue
        last = json.loads(outputs[key][-1].value or b"")
        assert run["state"] == {"RUN_FINISHED": "finished", "RUN_ERROR": "error"}[last["type"]], run
        assert (run["aguiSeq"], run["lastEventAt"]) == (last_seq[key], last["timestamp"]), run
    assert "error" in {run["state"] for run in listed["runs"]}, "s05_failed ends in RUN_ERROR"
    lines = inspect(kafka_bootstrap, *flags, "--thread", thread, json_out=False).splitlines()
    assert lines[0].startswith(f"thread {thread}: {len(listed['runs'])} runs, thread index partition ")
    assert len(lines) == 1 + len(listed["runs"])

    text = inspect(kafka_bootstrap, *flags, json_out=False)
    lines = text.splitlines()
    assert lines[0].startswith(f"group {group} (") and lines[1].startswith("p0: committed ")
    assert any(line.strip().startswith(going) for line in lines)
