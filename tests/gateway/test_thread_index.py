"""The thread index a replica holds and the thread streams it serves, without a broker: runs in the order of their
start records, an end record before its start, the notice told only for records read live, watches woken and moved,
the memory bound and its cost per run; a thread stream of runs whole in start order, a run's stream that ends early
opened again after its last event, a cursor in a run and at its end (told by the index, or by the run's owner), a
run its owner does not know yet, one the topics no longer hold, and `follow=false`."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import tracemalloc
from collections.abc import AsyncGenerator

import orjson
import pytest

from worker.contract import INDEX_END, INDEX_START, index_key
from worker.errors import GatewayError
from worker.gateway.frames import KEEP_ALIVE, RunEnded, event_frame
from worker.gateway.metrics import GatewayMetrics
from worker.gateway.streams import PartitionMoved
from worker.gateway.thread_streams import ThreadMoved, ThreadRequest, ThreadStreams
from worker.gateway.threads import BYTES_PER_INDEXED_THREAD_RUN, ThreadIndex

T = "thread-1"


def _record(index: ThreadIndex, offset: int, run: str, *, end: str | None = None, seq: int = 0,
            thread: str = T, partition: int = 0, stamp_ms: int = 1_000) -> None:  # fmt: skip
    kind, state = (INDEX_START, "running") if end is None else (INDEX_END, end)
    value = orjson.dumps({"runId": run, "state": state, "at": 5 + offset, "aguiSeq": seq})
    index.update(partition, offset, index_key(kind, run), value, thread_id=thread, timestamp_ms=stamp_ms)


def test_runs_are_in_start_record_order_and_an_end_before_its_start_waits_for_it() -> None:
    index = ThreadIndex(100)
    _record(index, 0, "run-b")
    _record(index, 1, "run-a", end="finished", seq=9)  # its start record was written later (a backfill)
    _record(index, 2, "run-b", end="error", seq=3)
    _record(index, 3, "run-a")
    _record(index, 4, "run-a")  # a second start record of one run keeps the first one's place
    runs = index.runs_of(T)
    assert runs is not None
    assert [(r.run_id, r.start_offset, r.state, r.last_seq) for r in runs] == [
        ("run-b", 0, "error", 3), ("run-a", 3, "finished", 9)]
    assert runs[1].as_json() == {"runId": "run-a", "state": "finished", "firstEventAt": 8, "lastEventAt": 6,
                                 "aguiSeq": 9}  # fmt: skip
    assert index.runs == 2 and index.runs_of("other") is None
    index.update(0, 9, b"not-an-index-key", b"{}", thread_id=T, timestamp_ms=0)
    index.update(0, 10, index_key(INDEX_START, "x"), b"not json", thread_id=T, timestamp_ms=0)
    assert index.runs == 2


def test_the_notice_is_told_for_start_records_read_live_only() -> None:
    told: list[float] = []
    index = ThreadIndex(100, on_notice=told.append, clock=lambda: 10.0)
    index.gained([0])
    _record(index, 0, "run-a", stamp_ms=9_000)  # loading: an old run, not a new one
    index.loaded([0])
    _record(index, 1, "run-a", end="finished")
    _record(index, 2, "run-b", stamp_ms=9_900)
    assert told == [pytest.approx(0.1)]


def test_watches_wake_on_a_change_and_move_with_the_partition() -> None:
    async def scenario() -> None:
        index = ThreadIndex(100)
        _record(index, 0, "run-a", partition=3)
        watch = index.watch(T)
        assert not await watch.wait(0.01)
        _record(index, 1, "run-a", end="finished", partition=3)
        assert await watch.wait(0.01) and not watch.moved
        index.release([3])
        assert await watch.wait(0.01) and watch.moved and index.runs_of(T) is None and index.runs == 0
        assert index.watch("unknown").moved

    asyncio.run(scenario())


def test_beyond_its_bound_the_least_recently_changed_unwatched_threads_go() -> None:
    index = ThreadIndex(4)
    for n, thread in enumerate(("t0", "t1", "t2")):
        _record(index, 2 * n, f"run-{n}-a", thread=thread)
        _record(index, 2 * n + 1, f"run-{n}-b", thread=thread)
    assert index.runs_of("t0") is None and index.runs == 4 and index.forgotten == 1
    watched = index.watch("t1")
    _record(index, 9, "run-3", thread="t3")
    assert index.runs_of("t1") is not None and index.runs_of("t2") is None  # t1 is watched: t2 goes instead
    index.unwatch(watched)


def test_a_run_held_costs_at_most_its_stated_bytes() -> None:
    index = ThreadIndex(10**6)
    runs = 20_000
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(runs):
            run = f"run-{hashlib.sha256(b'%d' % n).hexdigest()[:32]}"  # 36 characters, as the sample runs'
            thread = f"thread-{n // 10}"
            _record(index, 2 * n, run, thread=thread)
            _record(index, 2 * n + 1, run, end="finished", seq=40, thread=thread)
        gc.collect()
        per_run = (tracemalloc.get_traced_memory()[0] - before) / runs
    finally:
        tracemalloc.stop()
    assert index.runs == runs
    assert per_run <= BYTES_PER_INDEXED_THREAD_RUN, per_run


def _events(run: str, count: int) -> list[bytes]:
    """A run's frames: RUN_STARTED, CUSTOMs, RUN_FINISHED."""
    types = ["RUN_STARTED", *["CUSTOM"] * (count - 2), "RUN_FINISHED"]
    return [event_frame(run, n, orjson.dumps({"type": kind, "n": n})) for n, kind in enumerate(types)]


class _Owners:
    """Runs' streams as their owners would serve them: each opening may end early after `cut` frames (once), may be
    refused first, is told the run ended (204) when asked after its last frame, and records what was asked."""

    def __init__(self, frames: dict[str, list[bytes]]) -> None:
        self.frames = frames
        self.cut: dict[str, int] = {}
        self.refuse: dict[str, list[int]] = {}
        self.asked: list[tuple[str, int | None]] = []
        self.gone: set[str] = set()

    async def open_run(self, run_id: str, after: int | None) -> AsyncGenerator[bytes, None]:
        self.asked.append((run_id, after))
        if run_id in self.gone:
            raise GatewayError(410, "not-held", "gone")
        refusals = self.refuse.get(run_id)
        if refusals:
            raise GatewayError(refusals.pop(0), "unknown-run", "not yet")
        if after is not None and after >= len(self.frames[run_id]) - 1:
            raise RunEnded(run_id)
        frames = self.frames[run_id][(after + 1) if after is not None else 0:]
        cut = self.cut.pop(run_id, None)

        async def chunks() -> AsyncGenerator[bytes, None]:
            for n, frame in enumerate(frames):
                if cut is not None and n == cut:
                    raise PartitionMoved(run_id)
                yield frame

        return chunks()


def _streams() -> tuple[ThreadIndex, ThreadStreams, _Owners]:
    index = ThreadIndex(100)
    owners = _Owners({"run-a": _events("run-a", 4), "run-b": _events("run-b", 5), "run-c": _events("run-c", 3)})
    _record(index, 0, "run-a")
    _record(index, 1, "run-b")
    _record(index, 2, "run-a", end="finished", seq=3)
    return index, ThreadStreams(index, GatewayMetrics(), keepalive_s=0.2), owners


async def _take(streams: ThreadStreams, owners: _Owners, request: ThreadRequest, frames: int) -> list[bytes]:
    out: list[bytes] = []
    chunks = streams.chunks(request, owners.open_run)
    try:
        async for chunk in chunks:
            if chunk != KEEP_ALIVE:
                out.extend(frame + b"\n\n" for frame in chunk.split(b"\n\n")[:-1])
            if len(out) >= frames:
                break
    finally:
        await chunks.aclose()
    return out


def test_a_thread_stream_sends_its_runs_whole_in_start_order_then_the_next_one() -> None:
    async def scenario() -> None:
        index, streams, owners = _streams()
        owners.cut["run-b"] = 2  # its owner's stream ends early once: opened again after event 1
        taking = asyncio.create_task(_take(streams, owners, ThreadRequest(T, None, "sse"), 12))
        await asyncio.sleep(0.3)  # run-b is sent; the stream waits for the next run, with keep-alives
        assert not taking.done()
        _record(index, 3, "run-c")
        got = await asyncio.wait_for(taking, 5)
        assert got == owners.frames["run-a"] + owners.frames["run-b"] + owners.frames["run-c"]
        assert owners.asked == [("run-a", None), ("run-b", None), ("run-b", 1), ("run-c", None)]

    asyncio.run(scenario())


def test_a_cursor_resumes_in_its_run_or_after_its_end_and_a_foreign_one_is_refused() -> None:
    async def scenario() -> None:
        _index, streams, owners = _streams()
        got = await _take(streams, owners, ThreadRequest(T, ("run-a", 1), "sse", follow=False), 100)
        assert got == owners.frames["run-a"][2:] + owners.frames["run-b"]
        owners.asked.clear()
        got = await _take(streams, owners, ThreadRequest(T, ("run-a", 3), "sse", follow=False), 100)
        assert got == owners.frames["run-b"] and owners.asked == [("run-b", None)]  # run-a not opened again
        with pytest.raises(GatewayError) as refused:
            await _take(streams, owners, ThreadRequest(T, ("run-x", 3), "sse"), 1)
        assert (refused.value.status, refused.value.code) == (400, "bad-cursor")
        with pytest.raises(GatewayError) as unknown:
            await _take(streams, owners, ThreadRequest("no-thread", None, "sse"), 1)
        assert (unknown.value.status, unknown.value.code) == (404, "unknown-thread")

    asyncio.run(scenario())


def test_a_cursor_at_a_run_s_end_the_index_does_not_know_yet_goes_on_to_the_next_run_when_its_owner_says_so() -> None:
    async def scenario() -> None:
        index, streams, owners = _streams()  # run-b (events 0 to 4) has no end record
        _record(index, 3, "run-c")
        got = await asyncio.wait_for(_take(streams, owners, ThreadRequest(T, ("run-b", 4), "sse", follow=False),
                                           100), 10)  # fmt: skip
        assert got == owners.frames["run-c"]
        assert owners.asked == [("run-b", 4), ("run-c", None)], "run-b asked once, after its end record was awaited"

    asyncio.run(scenario())


def test_a_run_not_known_to_its_owner_yet_is_asked_again_and_one_not_held_is_passed_over() -> None:
    async def scenario() -> None:
        _index, streams, owners = _streams()
        owners.refuse["run-a"] = [404, 403]
        owners.gone.add("run-b")
        got = await _take(streams, owners, ThreadRequest(T, None, "sse", follow=False), 100)
        assert got == [*owners.frames["run-a"], b": run run-b is no longer retained\n\n"]

    asyncio.run(scenario())


def test_follow_false_ends_after_the_runs_known_at_attach_and_a_moved_thread_ends_early() -> None:
    async def scenario() -> None:
        index, streams, owners = _streams()
        owners.refuse["run-b"] = [404]  # the stream waits a moment for run-b's owner: run-c starts meanwhile
        taking = asyncio.create_task(_take(streams, owners, ThreadRequest(T, None, "sse", follow=False), 100))
        await asyncio.sleep(0.05)
        _record(index, 3, "run-c")  # after it attached: not sent
        assert await asyncio.wait_for(taking, 5) == owners.frames["run-a"] + owners.frames["run-b"]
        following = asyncio.create_task(_take(streams, owners, ThreadRequest(T, None, "sse"), 100))
        await asyncio.sleep(0.3)
        index.release([0])
        with pytest.raises(ThreadMoved):
            await asyncio.wait_for(following, 5)

    asyncio.run(scenario())
