"""Rebuild by replay on helper processes, read from a real broker: shards that cannot stand in for one replay
are dropped, the fallback is reported, and the windows are replayed in the worker process instead."""

from __future__ import annotations

from collections.abc import Callable

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from tests.kafka.support import produce
from tests.stream._support import checkpoint, golden_source
from worker.errors import GapError, ShardedReplayError
from worker.recovery.replay import ReplayWindow, replay_into
from worker.stream import GapPolicy, PartitionState, ReplayPool, SourceRecord
from worker.stream._shards import shard_of

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]

NAMES = ["s01_hello", "s05_failed", "r0038", "r0063"]


def _root(lines: list[bytes]) -> bytes:
    return str(orjson.loads(lines[0])["run_id"]).encode()


def _two_runs_on_two_shards() -> tuple[tuple[bytes, list[bytes]], tuple[bytes, list[bytes]]]:
    runs = [(_root(lines), lines) for lines in map(golden_source, NAMES)]
    for x in runs:
        for y in runs:
            if shard_of(x[0], 2) == 0 and shard_of(y[0], 2) == 1:
                return x, y
    raise AssertionError(f"no two of {NAMES} fall on different shards of 2")


def _pairs() -> list[tuple[bytes, bytes]]:
    """Run X ends, then run Y ends, then X's first item arrives late, then Y's first item arrives late."""
    (x_key, x_lines), (y_key, y_lines) = _two_runs_on_two_shards()
    return [*((x_key, v) for v in x_lines), *((y_key, v) for v in y_lines), (x_key, x_lines[0]), (y_key, y_lines[0])]


async def _replay(bootstrap: str, topic: str, end: int, memory: int, on_fallback: Callable[[ShardedReplayError], None]
                  ) -> PartitionState:  # fmt: skip
    tp = TopicPartition(topic, 0)
    state = PartitionState(topic, 0, closed_stream_memory=memory)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                isolation_level="read_committed")  # fmt: skip
    pool = ReplayPool(2)
    await consumer.start()
    try:
        await pool.start()
        counts = await replay_into(consumer, {tp: ReplayWindow(tp, 0, end, "metadata", False)}, {tp: state},
                                   progress=lambda *_: None, pool=pool, on_fallback=on_fallback)  # fmt: skip
        assert counts == {tp: end}
    finally:
        await pool.close()
        await consumer.stop()
    return state


@pytest.mark.parametrize(
    ("memory", "falls_back"),
    [
        # Memory of one ended stream: Y's end pushes X out, so one replay reopens X at its late first item, while
        # X's shard, which never saw Y, still remembers X and calls that item a duplicate. The merge must refuse.
        pytest.param(1, True, id="shards-disagree-replay-in-process"),
        pytest.param(10, False, id="shards-agree-merged"),
    ],
)
async def test_replay_falls_back_in_process_exactly_when_the_shards_would_differ_from_one_replay(
    kafka_bootstrap: str, topic_factory: Callable[..., str], memory: int, falls_back: bool
) -> None:
    topic = topic_factory("src")
    pairs = _pairs()
    await produce(kafka_bootstrap, topic, pairs)
    heard: list[ShardedReplayError] = []

    state = await _replay(kafka_bootstrap, topic, len(pairs), memory, heard.append)

    assert len(heard) == int(falls_back), heard
    if falls_back:
        assert "closed-stream memory" in str(heard[0])
    one = PartitionState(topic, 0, closed_stream_memory=memory)
    history = [SourceRecord(topic, 0, i, 0, key, value) for i, (key, value) in enumerate(pairs)]
    verdicts = [one.process(rec, publish=False).verdict for rec in history]
    end = len(pairs)
    assert (state.open_streams, state.remembered_streams, state.replay_from(end), state.last_offset) == (
        one.open_streams, one.remembered_streams, one.replay_from(end), one.last_offset
    )
    # Going on live from both states gives the same verdicts and the same records.
    (x_key, x_lines), (y_key, y_lines) = _two_runs_on_two_shards()
    later = [(x_key, x_lines[1]), (y_key, y_lines[1]), (x_key, x_lines[0])]
    nxt = [SourceRecord(topic, 0, end + i, 0, key, value) for i, (key, value) in enumerate(later)]
    assert [state.process(rec) for rec in nxt] == [one.process(rec) for rec in nxt]
    # The scenario is the one described: with a one-stream memory X reopens, with a larger one it stays closed.
    reopened = verdicts[-2].value == "processed"
    assert reopened == falls_back, verdicts


async def test_an_in_process_replay_passes_over_a_gap_and_replays_the_rest_of_its_batch(
    kafka_bootstrap: str, topic_factory: Callable[..., str]
) -> None:
    """Under the halt policy a gap an operator moved the offset past is passed over in replay, as one record at a
    time passes it: the records after it in the same fetched batch are replayed, their displays folded."""
    topic = topic_factory("src")
    (x_key, x_lines), (y_key, y_lines) = _two_runs_on_two_shards()
    # x's item 1 is missing: a gap at offset 2, and at each later item of x; y stays open, its display in the state.
    pairs = [(x_key, x_lines[0]), (y_key, y_lines[0]), (x_key, x_lines[2]), *((y_key, v) for v in y_lines[1:-1]),
             *((x_key, v) for v in x_lines[3:])]  # fmt: skip
    await produce(kafka_bootstrap, topic, pairs)
    tp = TopicPartition(topic, 0)
    options = {"gap_policy": GapPolicy.HALT, "display_interval_ms": 0}
    state = PartitionState(topic, 0, **options)
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=None, enable_auto_commit=False,
                                isolation_level="read_committed")  # fmt: skip
    await consumer.start()
    try:
        counts = await replay_into(consumer, {tp: ReplayWindow(tp, 0, len(pairs), "metadata", False)}, {tp: state},
                                   progress=lambda *_: None)  # fmt: skip
        assert counts == {tp: len(pairs)}
        consumer.assign([tp])
        consumer.seek(tp, 0)
        read = []
        while len(read) < len(pairs):
            read += (await consumer.getmany(tp, timeout_ms=2000)).get(tp, [])
    finally:
        await consumer.stop()
    one = PartitionState(topic, 0, **options)
    passed = []
    for rec in read:
        try:
            one.process(SourceRecord(topic, 0, rec.offset, rec.timestamp, rec.key, rec.value), publish=False)
        except GapError:
            passed.append(rec.offset)
    assert passed == [i for i, (key, _) in enumerate(pairs) if key == x_key and i >= 2]
    changelog = list(checkpoint(state, len(pairs)))
    assert changelog == list(checkpoint(one, len(pairs)))
    assert any(b'"items"' in (value or b"") and y_key in key for key, value in changelog), "y's display was folded"
