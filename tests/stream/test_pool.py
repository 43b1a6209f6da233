"""Replay helper processes: shards built in other processes merge into the state one replay builds."""

from __future__ import annotations

import asyncio
import multiprocessing
import pickle
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from tests.stream._cores import REAL_CORE
from tests.stream._fakes import fake_decode
from tests.stream._support import TOPIC, golden_source, image, records
from worker.errors import ShardedReplayError
from worker.stream import PartitionState, ReplayPool, SourceRecord, default_core
from worker.stream._shard_pieces import PIECE_BYTES, PIECE_LOG, ShardPieces, failure_message, shard_messages
from worker.stream._shards import ShardState, merge_shards

NAMES = ["s01_hello", "s05_failed", "c01_child_completed", "c03_child_nested", "r0038", "r0063", "s07_errors"]


def interleaved(partition: int) -> list[SourceRecord]:
    sources = [golden_source(n) for n in NAMES]
    pairs = [
        (fake_decode(lines[0]).run_id, lines[i])
        for i in range(max(map(len, sources)))
        for lines in sources
        if i < len(lines)
    ]
    return records([*pairs, ("bad-key-run", b"not json")], partition=partition, step=2)


def rows(recs: list[SourceRecord]) -> list[tuple[int, int, bytes | None, bytes | None]]:
    return [(r.offset, r.timestamp_ms, r.key, r.value) for r in recs]


def fresh(partition: int) -> PartitionState:
    return PartitionState(TOPIC, partition, core=REAL_CORE)


def one_replay(recs: list[SourceRecord]) -> PartitionState:
    state = fresh(recs[0].partition)
    for rec in recs:
        state.process(rec, publish=False)
    return state


@pytest.fixture
async def pool() -> AsyncIterator[ReplayPool]:
    pool = ReplayPool(2)
    await pool.start()
    yield pool
    await pool.close()
    for process in multiprocessing.active_children():  # killed, not yet gone: the next test counts helpers
        process.join(5)


async def replay_in(pool: ReplayPool, windows: dict[int, list[SourceRecord]]) -> dict[int, PartitionState]:
    states = {p: fresh(p) for p in windows}
    async with pool.session({(TOPIC, p): s for p, s in states.items()}) as session:
        assert session is not None
        for recs in windows.values():
            session.add(TOPIC, recs[0].partition, rows(recs))
            await session.flush()
        await session.finish()
    return states


@pytest.mark.timeout(120)
async def test_two_partitions_replayed_by_helpers_continue_exactly_as_one_replay_each(pool: ReplayPool) -> None:
    windows = {p: interleaved(p) for p in (0, 1)}
    cut = {p: len(recs) * 2 // 3 for p, recs in windows.items()}
    states = await replay_in(pool, {p: recs[: cut[p]] for p, recs in windows.items()})
    for p, recs in windows.items():
        one = one_replay(recs[: cut[p]])
        nxt = recs[cut[p]].offset
        assert (states[p].open_streams, states[p].replay_from(nxt)) == (one.open_streams, one.replay_from(nxt))
        assert states[p].open_streams > 1
        live, expected = [states[p].process(r) for r in recs[cut[p]:]], [one.process(r) for r in recs[cut[p]:]]
        assert live == expected
        assert sum(len(o.records) for o in live) > 0


@pytest.mark.timeout(120)
async def test_a_helper_that_dies_fails_the_session_and_the_next_rebuild_gets_new_helpers(pool: ReplayPool) -> None:
    recs = interleaved(0)
    states = {(TOPIC, 0): fresh(0)}
    with pytest.raises(ShardedReplayError, match="is gone"):
        async with pool.session(states) as session:
            assert session is not None
            for helper in multiprocessing.active_children():
                helper.kill()
            session.add(TOPIC, 0, rows(recs))
            await session.flush(everything=True)
            await session.finish()
    assert states[(TOPIC, 0)].open_streams == 0
    again = await replay_in(pool, {0: recs})
    assert again[0].open_streams == one_replay(recs).open_streams


@pytest.mark.timeout(120)
async def test_a_record_a_helper_cannot_replay_fails_the_session_naming_its_offset(pool: ReplayPool) -> None:
    recs = interleaved(0)
    states = {(TOPIC, 0): fresh(0)}
    backwards = [*rows(recs), (recs[1].offset, 0, recs[1].key, recs[1].value)]  # an offset that does not grow
    with pytest.raises(ShardedReplayError, match=rf"stopped: offset {recs[1].offset} of {TOPIC}\[0\]: WorkerError"):
        async with pool.session(states) as session:
            assert session is not None
            session.add(TOPIC, 0, backwards)
            await session.flush(everything=True)
            await session.finish()
    assert states[(TOPIC, 0)].open_streams == 0
    again = await replay_in(pool, {0: recs})
    assert again[0].open_streams == one_replay(recs).open_streams


@pytest.mark.timeout(120)
async def test_the_helpers_serve_one_rebuild_at_a_time_and_none_once_closed(pool: ReplayPool) -> None:
    async with pool.session({(TOPIC, 0): fresh(0)}) as first:
        assert first is not None
        async with pool.session({(TOPIC, 1): fresh(1)}) as second:
            assert second is None  # that rebuild replays in-process
        await first.finish()
    await pool.close()
    async with pool.session({(TOPIC, 0): fresh(0)}) as late:
        assert late is None


@pytest.mark.timeout(120)
async def test_a_cancelled_rebuild_discards_the_helpers(pool: ReplayPool) -> None:
    processes = multiprocessing.active_children()
    assert len(processes) == 2

    async def rebuild() -> None:
        async with pool.session({(TOPIC, 0): fresh(0)}) as session:
            assert session is not None
            await asyncio.sleep(30)

    task = asyncio.create_task(rebuild())
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for process in processes:
        process.join(5)
        assert not process.is_alive()
    recs = interleaved(0)
    state, one = (await replay_in(pool, {0: recs}))[0], one_replay(recs)
    assert (state.open_streams, state.remembered_streams) == (one.open_streams, one.remembered_streams)
    assert state.remembered_streams == len(NAMES)


@pytest.mark.timeout(120)
async def test_helpers_replay_with_the_options_of_the_states_they_rebuild(pool: ReplayPool) -> None:
    options: dict[str, Any] = {"max_record_bytes": 2048, "closed_stream_memory": 10, "display_interval_ms": 0,
                               "display_max_bytes": 8192}  # fmt: skip
    recs = interleaved(0)
    big = golden_source("s09_big_fragments")
    recs += records([("run-0009", line) for line in big], start=recs[-1].offset + 1)
    one = PartitionState(TOPIC, 0, core=REAL_CORE, **options)
    outcomes = [one.process(r, publish=False) for r in recs]
    assert sum(o.reason == "too-large" for o in outcomes) == 1  # decided in the helpers too, or the images differ
    state = PartitionState(TOPIC, 0, core=REAL_CORE, **options)
    async with pool.session({(TOPIC, 0): state}) as session:
        assert session is not None
        session.add(TOPIC, 0, rows(recs))
        await session.flush(everything=True)
        await session.finish()
    end = recs[-1].offset + 1
    assert image(state, end) == image(one, end)
    # and with runs still open, their projections come back from the helpers
    cut = len(recs) // 3
    one = PartitionState(TOPIC, 0, core=REAL_CORE, **options)
    for rec in recs[:cut]:
        one.process(rec, publish=False)
    state = PartitionState(TOPIC, 0, core=REAL_CORE, **options)
    async with pool.session({(TOPIC, 0): state}) as session:
        assert session is not None
        session.add(TOPIC, 0, rows(recs[:cut]))
        await session.flush(everything=True)
        await session.finish()
    helped = image(state, recs[cut].offset)
    assert state.open_streams > 0 and b'"display":{' in b"".join(helped.values())
    assert helped == image(one, recs[cut].offset)
    assert [state.process(r) for r in recs[cut:]] == [one.process(r) for r in recs[cut:]]


@pytest.mark.timeout(120)
async def test_helpers_convert_with_the_processor_the_pool_names() -> None:
    # The helpers import the processor from its name; the merged states continue as one replay with it does.
    spec = "tests.processors:shout"
    core = default_core(spec)
    recs = interleaved(0)
    cut = len(recs) // 2
    pool = ReplayPool(2, processor=spec)
    await pool.start()
    try:
        states = {(TOPIC, 0): PartitionState(TOPIC, 0, core=core)}
        async with pool.session(states) as session:
            assert session is not None
            session.add(TOPIC, 0, rows(recs[:cut]))
            await session.flush(everything=True)
            await session.finish()
    finally:
        await pool.close()
    one = PartitionState(TOPIC, 0, core=core)
    for rec in recs[:cut]:
        one.process(rec, publish=False)
    live = [o for rec in recs[cut:] for o in states[(TOPIC, 0)].process(rec).records]
    assert live == [o for rec in recs[cut:] for o in one.process(rec).records]
    # The observers came from the helpers: the deltas they convert now show whether they carry the processor.
    events = [orjson.loads(o.value or b"") for o in live if o.event_type is not None]
    deltas = [event["delta"] for event in events if event["type"] == "TEXT_MESSAGE_CONTENT"]
    assert any(d != d.lower() for d in deltas) and all(d == d.upper() for d in deltas), deltas


def opened_runs(count: int) -> list[SourceRecord]:
    """`count` runs, each started and given a text part, none ended."""
    stamp = "2026-12-01T00:00:00Z"
    events: list[dict[str, Any]] = [
        {"schema_version": "1", "kind": "lifecycle", "payload": {"type": "run_started"}},
        {"event_kind": "part_start", "index": 0, "previous_part_kind": None, "part": {
            "part_kind": "text", "content": "", "id": None, "provider_name": None, "provider_details": None}},
    ]  # fmt: skip
    pairs = [
        (f"run-{i:05d}", orjson.dumps({"thread_id": f"thread-{i}", "run_id": f"run-{i:05d}", "sequence": seq,
                                       "occurred_at": stamp, "event": event}))
        for seq, event in enumerate(events)
        for i in range(count)
    ]  # fmt: skip
    return records(pairs)


def test_shards_handed_back_in_pieces_come_back_whole() -> None:
    recs = opened_runs(3000)
    shard = ShardState(TOPIC, 0, core=REAL_CORE)
    shard.replay_rows(rows(recs))
    result = shard.result()._replace(memory_log=[(i, f"run-{i}", i, i % 2 == 0) for i in range(2 * PIECE_LOG + 1)])
    messages = list(shard_messages({(TOPIC, 0): result}))
    kinds = [pickle.loads(m)[0] for m in messages]
    pieces = [pickle.loads(m)[1][1] for m in messages if pickle.loads(m)[0] == "streams"]
    assert len(pieces) > 2 and sum(map(len, pieces)) == 3000
    # a piece ends with the run that took it to PIECE_BYTES: what came before stayed under the bound
    assert all(sum(map(len, piece[:-1])) < PIECE_BYTES for piece in pieces)
    assert kinds[len(pieces):] == ["log", "log", "log", "shard", "done"]
    back = ShardPieces("replay helper 0")
    assert [back.take(m) for m in messages] == [False] * (len(messages) - 1) + [True]
    (whole,) = back.results.values()
    assert whole.memory_log == result.memory_log
    assert (whole.peak_open, whole.gaps, whole.last_offset) == (result.peak_open, result.gaps, result.last_offset)
    state, one, end = fresh(0), one_replay(recs), recs[-1].offset + 1
    merge_shards({(TOPIC, 0): state}, {(TOPIC, 0): [whole._replace(memory_log=[])]})
    assert state.open_streams == 3000
    assert image(state, end) == image(one, end)


def test_a_helper_that_failed_hands_back_its_reason() -> None:
    with pytest.raises(ShardedReplayError, match="replay helper 1 stopped: a gap at offset 7"):
        ShardPieces("replay helper 1").take(failure_message("a gap at offset 7"))


@pytest.mark.timeout(120)
async def test_many_open_runs_replayed_by_helpers_rebuild_the_state_one_replay_builds(pool: ReplayPool) -> None:
    recs = opened_runs(3000)
    state = fresh(0)
    async with pool.session({(TOPIC, 0): state}) as session:
        assert session is not None
        session.add(TOPIC, 0, rows(recs))
        await session.flush(everything=True)
        await session.finish()
    one = one_replay(recs)
    end = recs[-1].offset + 1
    assert state.open_streams == 3000
    assert image(state, end) == image(one, end)
