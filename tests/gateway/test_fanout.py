"""The hub's fan-out without a broker: bounded queues, slow clients dropped by their bound, memory and cursors, and
when a cursor is at or past a run's end."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from pathlib import Path

import orjson
import pytest

from worker.gateway.directory import DisplayPointer, RunDirectory
from worker.gateway.frames import KEEP_ALIVE, RunEnded, event_frame
from worker.gateway.hub import Hub, Subscription
from worker.gateway.metrics import GatewayMetrics
from worker.gateway.reader import HistoryReader
from worker.gateway.routing import Owners
from worker.gateway.settings import GatewaySettings
from worker.gateway.streams import RunStreams, StreamRequest


def _hub(**kwargs: object) -> Hub:
    options = {"max_runs": 10, "max_recent": 100, "window_s": 0.0, "queue_events": 4, **kwargs}
    return Hub(**options)  # type: ignore[arg-type]


async def test_a_client_whose_writer_waits_on_its_socket_is_dropped_at_its_bound_a_reading_one_is_not() -> None:
    hub = _hub()
    hub.passed(0, 0)
    dropped: list[Subscription] = []
    slow = hub.attach("run", 0, 0, dropped.append, lambda: True)
    fast = hub.attach("run", 0, 0, dropped.append, lambda: False)
    for seq in range(10):
        hub.publish(0, seq, "run", seq, b"{}", 0, False, 0.0)
    assert dropped == [slow.subscription] and slow.subscription.dropped
    assert len(fast.subscription) == 10  # a burst read in one fetch is not slowness
    for seq in range(10, 4 * 64 + 1):
        hub.publish(0, seq, "run", seq, b"{}", 0, False, 0.0)
    assert dropped == [slow.subscription, fast.subscription]  # the hard limit holds for everyone


async def test_a_subscription_joins_with_the_recent_events_it_missed_and_nothing_twice() -> None:
    hub = _hub()
    for seq in range(5):
        hub.publish(1, 100 + seq, "run", seq, b'{"n":%d}' % seq, 0, False, 0.0)
    joined = hub.attach("run", 1, 2, lambda s: None, lambda: False)
    assert joined.from_memory is not None and [d.seq for d in joined.from_memory] == [2, 3, 4]
    hub.publish(1, 105, "run", 5, b"{}", 0, True, 0.0)
    assert [d.seq for d in joined.subscription.take()] == [5] and not joined.subscription.take()
    unknown = hub.attach("other", 1, 0, lambda s: None, lambda: False)
    assert unknown.from_memory is None and unknown.live_from == 106  # read the topic up to where the tail is


async def test_recent_events_covered_by_a_display_record_go_after_the_window() -> None:
    hub = _hub(window_s=0.0)
    for seq in range(6):
        hub.publish(0, seq, "run", seq, b"{}", 0, False, 0.0)
    hub.displayed("run", 3)
    log = hub.log("run")
    assert log is not None and [e.seq for e in log.recent] == [4, 5] and log.recent_from == 4
    assert not log.covers(3) and log.covers(4)
    await asyncio.sleep(0)


async def test_a_waiting_writer_wakes_on_a_delivery_or_after_its_keep_alive_interval() -> None:
    hub = _hub()
    joined = hub.attach("run", 0, 0, lambda s: None, lambda: False)
    assert await joined.subscription.wait(0.01) is False
    waiting = asyncio.create_task(joined.subscription.wait(10))
    await asyncio.sleep(0)
    hub.publish(0, 0, "run", 0, b"{}", 0, False, 0.0)
    assert await asyncio.wait_for(waiting, 1) is True
    assert await joined.subscription.wait(10) is True  # still queued: no wait


async def test_a_followed_run_keeps_its_events_and_takes_back_what_was_read_from_the_topic() -> None:
    now = [100.0]
    hub = _hub(window_s=5.0, clock=lambda: now[0])
    for seq in range(4, 8):
        hub.publish(0, seq, "run", seq, b"{}", 0, False, 90.0)
    joined = hub.attach("run", 0, 0, lambda s: None, lambda: False)
    assert joined.from_memory is None  # events 0..3 are not held: read from the topic
    hub.displayed("run", 7)
    log = hub.log("run")
    assert log is not None and log.recent_from == 4  # followed: nothing trimmed
    assert not hub.backfill("run", [(0, b"{}", 0, False), (1, b"{}", 0, False)])  # 2 and 3 missing: a gap
    assert hub.backfill("run", [(n, b"{}", 0, False) for n in range(6)])  # 4 and 5 are kept already
    assert log.recent_from == 0 and [e.seq for e in log.recent] == list(range(8))
    again = hub.attach("run", 0, 0, lambda s: None, lambda: False)
    assert again.from_memory is not None and [d.seq for d in again.from_memory] == list(range(8))
    hub.detach(joined.subscription)
    hub.detach(again.subscription)
    now[0] += 4.0
    hub.displayed("run", 7)
    assert log.recent_from == 0  # left 4 s ago: still within the window
    now[0] += 2.0
    hub.displayed("run", 7)
    assert not log.recent and log.recent_from == 8  # nobody follows it and the window is over: trimmed


_GOLDEN = Path(__file__).resolve().parents[1] / "data" / "golden"


def _run_streams(hub: Hub, directory: RunDirectory) -> RunStreams:
    """RunStreams over one partition of this replica, its events and display records put by the test (no topic read
    back: every stream here is served from memory)."""
    config = GatewaySettings(bootstrap_servers="127.0.0.1:9", display_topic="d", insecure_no_auth=True)
    owners = Owners(config.peer_url)
    owners.partitions = 1
    owners.assign({0: config.peer_url}, [0])
    owners.loaded(owners.mine)
    return RunStreams(owners, hub, directory, HistoryReader(config, 1), GatewayMetrics(), keepalive_s=0.1)


def _final_display(name: str) -> tuple[int, bytes, bytes]:
    """A golden run's terminal event number, its final display record (as the display topic holds it: the snapshot),
    and a record of the same run before its end (the final one less its terminal observation)."""
    terminal = len((_GOLDEN / f"{name}.agui.jsonl").read_text().splitlines()) - 1
    final = orjson.loads((_GOLDEN / f"{name}.display.jsonl").read_text().splitlines()[-1])["snapshot"]
    assert final["items"][-1]["content"]["type"] == "RUN_FINISHED"
    running = {**final, "items": final["items"][:-1]}
    return terminal, orjson.dumps(final), orjson.dumps(running)


async def test_a_run_ended_at_or_before_a_cursor_is_told_by_its_events_or_its_display_record_never_guessed() -> None:
    hub, directory = _hub(), RunDirectory(10, 1 << 20)
    streams = _run_streams(hub, directory)
    for seq in range(6):
        hub.publish(0, seq, "read", seq, b"{}", 0, seq == 5, 0.0)
    assert [await streams.ended("read", n) for n in (4, 5, 9)] == [False, True, True], "the tail read its end"
    terminal, final, running = _final_display("s01_hello")
    directory.update("shown", DisplayPointer(0, 7, terminal, 0, "t"), final)  # the hub does not track it
    assert hub.log("shown") is None
    assert [await streams.ended("shown", n) for n in (terminal - 1, terminal, terminal + 3)] == [False, True, True]
    directory.update("open", DisplayPointer(0, 8, terminal - 1, 0, "t"), running)
    assert not await streams.ended("open", terminal + 3), "a display record before the end tells no end"
    for seq in range(3):
        hub.publish(0, 10 + seq, "live", seq, b"{}", 0, False, 0.0)
    directory.update("live", DisplayPointer(0, 9, 1, 0, "t"), b"never parsed")  # the tail read past its event 1
    assert not await streams.ended("live", 2) and not await streams.ended("unknown", 0)

    stream = streams.start(StreamRequest("shown", terminal, "sse"), lambda: None, lambda: False)
    with pytest.raises(RunEnded):  # before anything is read (the topic, at 127.0.0.1:9, would never answer)
        await asyncio.wait_for(streams.chunks(stream).__anext__(), 5)
    assert hub.log("shown") is None, "nothing attached for it"


def _past_the_tail(hub: Hub) -> AsyncGenerator[bytes, None]:
    """The chunks of a stream of "run" from cursor 5, of which the hub read events 0 to 2 so far (the keep-alive
    comes after 0.1 s)."""
    streams = _run_streams(hub, RunDirectory(10, 1 << 20))
    for seq in range(3):
        hub.publish(0, seq, "run", seq, b"{}", 0, False, 0.0)
    return streams.chunks(streams.start(StreamRequest("run", 5, "sse"), lambda: None, lambda: False))


async def test_a_stream_whose_cursor_is_past_the_events_read_so_far_ends_when_the_terminal_one_comes() -> None:
    # The client had events this replica's tail had not read yet (from another replica, before a partition moved):
    # the stream waits, and ends once the tail reads a terminal event the client already has.
    hub = _hub()
    chunks = _past_the_tail(hub)
    assert await asyncio.wait_for(chunks.__anext__(), 1) == KEEP_ALIVE
    for seq in range(3, 6):
        hub.publish(0, seq, "run", seq, b"{}", 0, seq == 5, 0.0)
    rest = await asyncio.wait_for(_all(chunks), 5)
    assert set(rest) <= {KEEP_ALIVE}, rest
    log = hub.log("run")
    assert log is not None and not log.subscribers


async def test_a_stream_whose_cursor_is_the_terminal_event_the_tail_reads_after_it_attached_is_told_the_end() -> None:
    # The cursor is the run's terminal event, which the tail reads only after the stream attached: the stream has
    # sent nothing, so it raises RunEnded (the client is answered 204), never a clean end of an empty stream.
    hub = _hub()
    first = asyncio.ensure_future(_past_the_tail(hub).__anext__())
    await asyncio.sleep(0.02)  # attached, waiting for events after 5 (the keep-alive comes after 0.1 s)
    log = hub.log("run")
    assert not first.done() and log is not None and log.subscribers
    for seq in range(3, 6):
        hub.publish(0, seq, "run", seq, b"{}", 0, seq == 5, 0.0)
    with pytest.raises(RunEnded):
        await asyncio.wait_for(first, 1)
    assert not log.subscribers


async def _all(chunks: AsyncGenerator[bytes, None]) -> list[bytes]:
    return [chunk async for chunk in chunks]


async def test_a_new_run_whose_display_record_came_before_its_events_gets_them_from_the_tail_at_once() -> None:
    # A new run's display record often reaches a replica before the tail reads its first events: its stream attaches
    # with nothing of it in memory and searches the output topic (here a broker that never answers), which ends as
    # soon as the tail brings event 0; what follows comes live, each event once.
    hub = _hub()
    streams = _run_streams(hub, directory := RunDirectory(10, 1 << 20))
    hub.publish(0, 0, "other", 0, b"{}", 0, False, 0.0)
    directory.update("new", DisplayPointer(0, 0, 0, 0, "t"), _final_display("s01_hello")[2])
    chunks = streams.chunks(streams.start(StreamRequest("new", None, "sse"), lambda: None, lambda: False))
    first = asyncio.ensure_future(chunks.__anext__())
    await asyncio.sleep(0.05)
    assert not first.done(), "nothing of the run was read yet"
    for seq in range(2):
        hub.publish(0, 1 + seq, "new", seq, b'{"n":%d}' % seq, 0, False, 0.0)
    assert await asyncio.wait_for(first, 1) == event_frame("new", 0, b'{"n":0}') + event_frame("new", 1, b'{"n":1}')
    hub.publish(0, 3, "new", 1, b'{"n":1}', 0, False, 0.0)  # read twice: held already
    hub.publish(0, 4, "new", 2, b'{"n":2}', 0, True, 0.0)
    assert await asyncio.wait_for(_all(chunks), 1) == [event_frame("new", 2, b'{"n":2}')]
