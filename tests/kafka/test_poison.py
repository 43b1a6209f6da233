"""Bad records go to the dead-letter topic with their reason and origin; the partition and other runs keep flowing."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path

import orjson
import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from devtools.kafka_cluster import free_port
from tests.kafka.support import (
    GOLDEN,
    WorkerProcess,
    assert_exactly_once,
    by_key,
    collect,
    converted,
    corpus,
    expected_total,
    http_get,
    interleave,
    produce,
    read_lines,
    rekey,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]


def _edit(line: bytes, **changes: object) -> bytes:
    obj = json.loads(line)
    for k, v in changes.items():
        if v is ...:
            obj.pop(k, None)
        else:
            obj[k] = v
    return json.dumps(obj).encode()


def _decode_poison(template: bytes) -> dict[str, bytes]:
    """One record for each class of undecodable input, all keyed to an open run."""
    big = {"schema_version": "1", "kind": "diagnostic", "payload": {"blob": "x" * (70 * 1024)}}
    return {
        "not-json": b"{not json",
        "not-object": b"[1, 2, 3]",
        "missing-field": _edit(template, occurred_at=...),
        "mistyped-field": _edit(template, sequence="seven"),
        "both-kinds": _edit(template, result={"status": "cancelled", "output": None, "usage": {}}),
        "neither-kind": _edit(template, event=...),
        "negative-sequence": _edit(template, sequence=-1),
        "unknown-event-kind": _edit(template, event={"event_kind": "no_such_kind", "index": 0}),
        "unknown-extension-kind": _edit(template, event={"schema_version": "1", "kind": "nope", "payload": {}}),
        "oversize-payload": _edit(template, event=big),
        "bad-timestamp": _edit(template, occurred_at="yesterday at noon"),
    }


def test_poison_records_are_dead_lettered_and_the_partition_keeps_flowing(
    kafka_bootstrap: str, topic_factory, tmp_path: Path
) -> None:
    source = topic_factory("source", partitions=1)  # one partition: every poison record sits between good ones
    output, dlq = topic_factory("output", partitions=2), topic_factory("dlq", partitions=1)
    clean = corpus(copies=1, names=["s01_hello", "s02_tool_roundtrip", "r0001", "r0002", "c01_child_completed"])
    host = clean[0]
    poison = _decode_poison(host.lines[1])
    records = interleave(clean)
    # Undecodable records right after the host run's first line.
    at = records.index((host.key.encode(), host.lines[0])) + 1
    records[at:at] = [(host.key.encode(), v) for v in poison.values()]

    # Observer errors: s07 keeps converting around its rejected lines; its item of a run never announced in the
    # stream is mis-keyed.
    errors = converted(*rekey(read_lines(GOLDEN / "s07_errors.jsonl"), "poison"))
    assert errors.rejected, "s07_errors must contain lines the observer rejects"
    assert len(errors.mis_keyed) == 1
    # A duplicate: the third line of r0003 sent twice.
    dup_key, dup_lines = rekey(read_lines(GOLDEN / "r0003.jsonl"), "dup")
    dup_run = converted(dup_key, dup_lines)
    dup_sent = [*dup_lines[:3], dup_lines[2], *dup_lines[3:]]
    # A gap: the fifth line of r0004 never arrives.
    gap_key, gap_lines = rekey(read_lines(GOLDEN / "r0004.jsonl"), "gap")
    gap_sent = gap_lines[:4] + gap_lines[5:]
    before_gap = converted(gap_key, gap_lines[:4])
    # Mis-keyed: a run's first item under someone else's key.
    _, mis_lines = rekey(read_lines(GOLDEN / "r0005.jsonl"), "mis")

    tail = [(errors.key.encode(), ln) for ln in errors.lines]
    tail += [(dup_key.encode(), ln) for ln in dup_sent]
    tail += [(gap_key.encode(), ln) for ln in gap_sent]
    tail += [(b"run-somebody-else", mis_lines[0])]
    asyncio.run(produce(kafka_bootstrap, source, records + tail))

    w = WorkerProcess(tmp_path, "w", kafka_bootstrap, source, output, dlq, f"group-{source}").start()
    try:
        good = [*clean, errors, dup_run]
        total = expected_total(good) + len(before_gap.events) + 1
        out = asyncio.run(collect(kafka_bootstrap, output, expect=total, timeout_s=90))
        grouped = by_key(out)
        gap_out = grouped.pop(gap_key, [])
        assert_exactly_once([o for recs in grouped.values() for o in recs], good)

        # The gap closes the run: its events so far, then one RUN_ERROR naming the expected and received sequence.
        assert [o.value for o in gap_out[:-1]] == before_gap.events
        last = orjson.loads(gap_out[-1].value)
        assert last["type"] == "RUN_ERROR" and last["code"] == "source_gap", last
        assert "expected sequence 4" in last["message"] and "received 5" in last["message"], last["message"]
        assert gap_out[-1].headers["agui-event-id"] == f"{gap_key}:{len(before_gap.events)}"

        n_dead = len(poison) + len(errors.rejected) + len(errors.mis_keyed) + 1 + (len(gap_sent) - 4) + 1
        dead = asyncio.run(collect(kafka_bootstrap, dlq, expect=n_dead, timeout_s=30))
        reasons = [d.headers["dlq-reason"] for d in dead]
        assert reasons.count("decode-error") == len(poison), reasons
        assert reasons.count("observation-error") == len(errors.rejected), reasons
        assert reasons.count("duplicate") == 1 and reasons.count("mis-keyed") == 1 + len(errors.mis_keyed), reasons
        assert reasons.count("gap") == 1, reasons
        assert reasons.count("run-closed-by-gap") == len(gap_sent) - 5, reasons
        assert len(dead) == n_dead
        values = {d.value for d in dead}
        assert set(poison.values()) <= values and set(errors.rejected) <= values
        for d in dead:
            assert d.headers["dlq-source-topic"] == source and d.headers["dlq-source-partition"] == "0"
            assert int(d.headers["dlq-source-offset"]) >= 0 and d.headers["dlq-message"]
            assert int(d.headers["dlq-source-timestamp"]) > 0
        assert all(m not in ("", None) for m in (d.headers.get("dlq-message") for d in dead))
    except AssertionError:
        print(w.log()[-5000:])
        raise
    finally:
        w.stop()




def test_halt_gap_policy_commits_before_the_gap_and_holds_the_partition(
    kafka_bootstrap: str, topic_factory, tmp_path: Path
) -> None:
    source = topic_factory("source", partitions=1)
    output, dlq = topic_factory("output", partitions=1), topic_factory("dlq", partitions=1)
    before = corpus(copies=1, names=["s01_hello"])
    gap_key, gap_lines = rekey(read_lines(GOLDEN / "r0004.jsonl"), "halt")
    after = corpus(copies=1, names=["s02_tool_roundtrip"])
    head = [(r.key.encode(), ln) for r in before for ln in r.lines] + [(gap_key.encode(), ln) for ln in gap_lines[:4]]
    tail = [(gap_key.encode(), ln) for ln in gap_lines[5:]] + [(r.key.encode(), ln) for r in after for ln in r.lines]
    asyncio.run(produce(kafka_bootstrap, source, head + tail))
    group = f"group-{source}"
    port = free_port()
    w = WorkerProcess(tmp_path, "w", kafka_bootstrap, source, output, dlq, group, "--gap-policy", "halt",
                      metrics_port=port).start()
    try:
        expected = expected_total(before) + len(converted(gap_key, gap_lines[:4]).events)
        out = asyncio.run(collect(kafka_bootstrap, output, expect=expected, timeout_s=60))
        assert len(out) == expected, "nothing after the gap may be published"
        deadline = time.monotonic() + 30
        while http_get(port, "/readyz")[0] != 503:
            assert time.monotonic() < deadline, "a halted partition must make the worker not ready"
            time.sleep(0.5)
        status, body = http_get(port, "/metrics")
        assert status == 200
        assert re.search(r'^harness_agui_partition_failures_total\{[^}]*partition="0"[^}]*\} 1\.0$', body, re.M), body
        assert http_get(port, "/livez")[0] == 200, "a halted partition is not a dead process"

        async def committed() -> int:
            admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
            await admin.start()
            try:
                offsets = await admin.list_consumer_group_offsets(group, partitions=[TopicPartition(source, 0)])
                return int(offsets[TopicPartition(source, 0)].offset)
            finally:
                await admin.close()

        assert asyncio.run(committed()) == len(head), "the committed offset must stop at the gapped record"
    except AssertionError:
        print(w.log()[-5000:])
        raise
    finally:
        w.stop()
