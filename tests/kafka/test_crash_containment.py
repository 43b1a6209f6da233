"""A conversion bug injected through `--processor` stays one dead letter: the item is dead-lettered as
`internal-error`, its run goes on and is published exactly once, the worker keeps running, and a worker that
rebuilds the run (replaying through the processor, in a helper process) continues it with the same ids."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest
from aiokafka import TopicPartition

from devtools.kafka_cluster import free_port
from tests import processors
from tests.kafka.support import (
    GOLDEN,
    Run,
    WorkerProcess,
    assert_exactly_once,
    collect,
    committed,
    corpus,
    expected_total,
    interleave,
    metric,
    produce,
    read_lines,
    rekey,
)
from worker.observe import HarnessAguiStreamObserver, encode_event
from worker.wire import decode_item

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

PROCESSOR = "tests.processors:buggy"


def _with_processor(key: str, lines: list[bytes]) -> tuple[Run, list[int]]:
    """The run as the worker must publish it with the buggy processor, and the indexes of the lines it fails."""
    observer = HarnessAguiStreamObserver(processor=processors.buggy, retain_events=False)
    run, failed = Run(key, lines), []
    for i, ln in enumerate(lines):
        try:
            run.events.extend(encode_event(e) for e in observer.observe(decode_item(ln)))
        except ValueError as exc:
            assert "injected conversion bug" in str(exc)
            failed.append(i)
    return run, failed


def test_a_processor_bug_dead_letters_one_item_and_the_run_and_the_worker_go_on(
    kafka_bootstrap: str, topic_factory, tmp_path: Path
) -> None:
    bs = kafka_bootstrap
    source = topic_factory("source", partitions=1)
    output, dlq = topic_factory("output", partitions=2), topic_factory("dlq", partitions=1)
    group = f"group-{source}"
    buggy, failed = _with_processor(*rekey(read_lines(GOLDEN / "s01_hello.jsonl"), processors.BUGGY_SUFFIX[1:]))
    assert buggy.key.endswith(processors.BUGGY_SUFFIX) and failed == [processors.BUGGY_SEQUENCE]
    others = corpus(names=["s02_tool_roundtrip", "r0001"])
    head = interleave([Run(buggy.key, buggy.lines[: processors.BUGGY_SEQUENCE + 2]), *others])
    tail = [(buggy.key.encode(), ln) for ln in buggy.lines[processors.BUGGY_SEQUENCE + 2:]]
    asyncio.run(produce(bs, source, head))

    port = free_port()
    # Without the changelog the rebuild replays the run from its start, through the processor in a helper process.
    extra = ("--processor", PROCESSOR, "--replay-processes", "1", "--no-changelog")
    first = WorkerProcess(tmp_path, "first", bs, source, output, dlq, group, *extra, metrics_port=port).start()
    second = WorkerProcess(tmp_path, "second", bs, source, output, dlq, group, *extra)
    try:
        deadline = time.monotonic() + 90
        while asyncio.run(committed(bs, group, TopicPartition(source, 0))) < len(head):
            assert time.monotonic() < deadline, "the records before the restart were never committed"
            assert first.alive, "the worker exited"
            time.sleep(0.2)
        assert first.alive
        assert metric(port, "harness_agui_internal_errors_total") == 1
        assert metric(port, "harness_agui_dead_letter_records_total", reason="internal-error") == 1
        first.signal(signal.SIGKILL)  # the run is open: the next worker replays it through the processor
        first.wait(10)
        second.start()
        asyncio.run(produce(bs, source, tail))
        out = asyncio.run(collect(bs, output, expect=expected_total([buggy, *others]), timeout_s=120))
        assert_exactly_once(out, [buggy, *others])
        dead = asyncio.run(collect(bs, dlq, expect=1, timeout_s=30, settle_s=2))
        assert len(dead) == 1, [d.headers for d in dead]
        [letter] = dead
        assert letter.key == buggy.key and letter.value == buggy.lines[processors.BUGGY_SEQUENCE]
        assert letter.headers["dlq-reason"] == "internal-error"
        assert letter.headers["dlq-exception-type"] == "ValueError"
        assert letter.headers["dlq-exception-message"] == (
            f"injected conversion bug at {buggy.key} sequence {processors.BUGGY_SEQUENCE}")
        tracebacks = [r for r in first.log_records() if r.get("exc")]
        assert len(tracebacks) == 1 and "ValueError: injected conversion bug" in tracebacks[0]["exc"]
        assert tracebacks[0]["run_id"] == buggy.key
        assert not [r for r in second.log_records() if r.get("exc")]
        assert any("replayed by helper processes" in r["msg"] for r in second.log_records()), \
            "the rebuild was meant to replay through the processor in a helper process"
        assert second.alive
    except AssertionError:
        for w in (first, second):
            print(f"---- {w.log_path.name}\n{w.log()[-4000:]}")
        raise
    finally:
        assert second.stop() == 0
