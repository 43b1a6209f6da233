"""Records that do not fit their topic never fail a transaction: a record too large for the dead-letter topic is
dead-lettered once, cut to fit, and the partition moves past it within a commit interval; an AG-UI event too
large for the output topic closes its run with a RUN_ERROR. No aborted transaction, no rebuild, no loop."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition

from devtools.kafka_cluster import free_port
from tests.kafka.support import (
    GOLDEN,
    WorkerProcess,
    assert_exactly_once,
    by_key,
    collect,
    committed,
    converted,
    corpus,
    expected_total,
    metric,
    read_lines,
    rekey,
)
from worker.live.topics import record_limit
from worker.stream import EVENT_TOO_LARGE_CODE, Destination, OutboundRecord, record_size

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

MiB = 1024 * 1024
COMMIT_INTERVAL_MS = 100
SLACK_S = 2.0  # consuming 1.5 MiB, and the commit round trips on 2 shared cores


async def _send(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> list[int]:
    """Send records one by one (a 1.5 MiB one needs a large request size); returns their offsets."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, max_request_size=4 * MiB)
    await producer.start()
    try:
        return [(await (await producer.send(topic, value=v, key=k))).offset for k, v in records]
    finally:
        await producer.stop()


def test_a_record_too_large_for_the_dead_letter_topic_is_cut_to_fit_and_passed_within_a_commit_interval(
    kafka_bootstrap: str, topic_factory, tmp_path: Path
) -> None:
    bs = kafka_bootstrap
    source = topic_factory("source", partitions=1, config={"max.message.bytes": str(2 * MiB)})
    output = topic_factory("output", partitions=1)
    dlq = topic_factory("dlq", partitions=1, config={"max.message.bytes": str(MiB)})
    group = f"group-{source}"
    before, after = corpus(names=["s01_hello"]), corpus(names=["s02_tool_roundtrip"])
    header = json.loads(before[0].lines[1])
    # A wire item whose extension payload is over the 64 KiB limit: 1.5 MiB in all, undecodable.
    big = json.dumps({**{k: header[k] for k in ("thread_id", "run_id", "occurred_at")}, "sequence": 99,
                      "event": {"schema_version": "1", "kind": "diagnostic",
                                "payload": {"blob": "x" * (3 * MiB // 2)}}}).encode()  # fmt: skip
    assert len(big) > 3 * MiB // 2
    port = free_port()
    w = WorkerProcess(tmp_path, "w", bs, source, output, dlq, group, "--commit-interval-ms",
                      str(COMMIT_INTERVAL_MS), metrics_port=port).start()
    tp = TopicPartition(source, 0)
    try:
        asyncio.run(_send(bs, source, [(before[0].key.encode(), ln) for ln in before[0].lines]))
        asyncio.run(collect(bs, output, expect=expected_total(before), timeout_s=90, settle_s=0))
        deadline = time.monotonic() + 30
        while asyncio.run(committed(bs, group, tp)) < len(before[0].lines):
            assert time.monotonic() < deadline, "the first run was never committed"
            time.sleep(0.1)

        sent_at = time.monotonic()
        [offset] = asyncio.run(_send(bs, source, [(before[0].key.encode(), big)]))
        while asyncio.run(committed(bs, group, tp)) <= offset:
            assert time.monotonic() - sent_at < COMMIT_INTERVAL_MS / 1000 + SLACK_S + 10, \
                "the committed offset never passed the large record"
            time.sleep(0.05)
        passed_s = time.monotonic() - sent_at
        print(f"the committed offset passed the large record {passed_s:.3f} s after it was sent")
        asyncio.run(_send(bs, source, [(after[0].key.encode(), ln) for ln in after[0].lines]))

        out = asyncio.run(collect(bs, output, expect=expected_total(before + after), timeout_s=60, settle_s=2))
        assert_exactly_once(out, before + after)
        dead = asyncio.run(collect(bs, dlq, expect=1, timeout_s=30, settle_s=3))
        assert len(dead) == 1, f"dead-lettered {len(dead)} times"
        [letter] = dead
        assert letter.headers["dlq-reason"] == "decode-error"
        assert letter.headers["dlq-truncated"] == str(len(big))
        assert letter.headers["dlq-source-offset"] == str(offset)
        assert "over the 65536-byte limit" in letter.headers["dlq-message"]
        assert big.startswith(letter.value) and MiB // 2 < len(letter.value) < MiB
        encoded = tuple((k, v.encode()) for k, v in letter.headers.items())
        sent = OutboundRecord(Destination.DEAD_LETTER, letter.key.encode(), letter.value, encoded, None, None)
        assert record_size(sent) <= MiB

        time.sleep(2)  # a loop would abort and rebuild again and again meanwhile
        assert metric(port, "harness_agui_transactions_total", result="aborted") == 0
        assert metric(port, "harness_agui_transactions_total", result="committed") >= 2
        assert metric(port, "harness_agui_dead_letters_truncated_total") == 1
        assert metric(port, "harness_agui_rebuilds_total", topic=source) == 1
        assert passed_s < COMMIT_INTERVAL_MS / 1000 + SLACK_S, f"passed the large record after {passed_s:.2f} s"
    except AssertionError:
        print(w.log()[-5000:])
        raise
    finally:
        assert w.stop() == 0


def test_an_event_too_large_for_the_output_topic_closes_its_run_with_run_error_and_nothing_aborts(
    kafka_bootstrap: str, topic_factory, tmp_path: Path
) -> None:
    bs = kafka_bootstrap
    source = topic_factory("source", partitions=1)
    output = topic_factory("output", partitions=1, config={"max.message.bytes": str(64 * 1024)})
    dlq = topic_factory("dlq", partitions=1)
    # s09's tool call carries 120 KB of arguments: its TOOL_CALL_ARGS event cannot fit 64 KiB.
    key, lines = rekey(read_lines(GOLDEN / "s09_big_fragments.jsonl"), "big")
    whole = converted(key, lines)
    counts = [len(converted(key, lines[: i + 1]).events) for i in range(len(lines))]
    big_at = next(i for i, n in enumerate(counts) if any(len(e) > 64 * 1024 for e in whole.events[:n]))
    before = converted(key, lines[:big_at])
    others = corpus(names=["s01_hello"])
    records = [(key.encode(), ln) for ln in lines] + [(others[0].key.encode(), ln) for ln in others[0].lines]
    asyncio.run(_send(bs, source, records))
    port = free_port()
    w = WorkerProcess(tmp_path, "w", bs, source, output, dlq, f"group-{source}", metrics_port=port).start()
    try:
        out = asyncio.run(collect(bs, output, expect=len(before.events) + 1 + expected_total(others), timeout_s=90))
        grouped = by_key(out)
        closed = grouped.pop(key)
        assert_exactly_once([o for recs in grouped.values() for o in recs], others)
        assert [o.value for o in closed[:-1]] == before.events, "the run up to the event that does not fit"
        error = json.loads(closed[-1].value)
        assert error["type"] == "RUN_ERROR" and error["code"] == EVENT_TOO_LARGE_CODE, error
        assert f"over the limit of {record_limit(64 * 1024)} bytes" in error["message"], error
        assert len(whole.events) > len(closed), "the events after it are not published"
        dead = asyncio.run(collect(bs, dlq, expect=len(lines) - big_at, timeout_s=30, settle_s=2))
        reasons = [d.headers["dlq-reason"] for d in dead]
        assert reasons == ["too-large"] + ["run-closed-by-gap"] * (len(lines) - big_at - 1), reasons
        assert dead[0].headers["dlq-source-offset"] == str(big_at)
        assert metric(port, "harness_agui_transactions_total", result="aborted") == 0
        assert metric(port, "harness_agui_rebuilds_total", topic=source) == 1
    except AssertionError:
        print(w.log()[-5000:])
        raise
    finally:
        assert w.stop() == 0
