"""A finished run's stream asked from a cursor at or past its terminal event, on the real broker, with two replicas
owning one partition each: 204 No Content through the run's owner and through the other replica (forwarded), known
from the events the owner holds or, for a run it forgot, from the run's latest display record; a cursor one before
gets the terminal event and a clean end; and a bare `EventSource` in headless Chromium, through either replica,
receives the run once and then stops reconnecting (a browser reconnects after every clean end by itself); a cursor
at a terminal event the replicas read only after the request came is answered 204 too, never an empty stream."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest

from tests.gateway.support import (
    GatewayProcess,
    Topics,
    node_results,
    partition_of,
    read_stream,
    run_scenario,
    start_node,
    start_worker,
    until_one_partition_each,
    wait_converted,
    wait_known,
)
from tests.kafka.conftest import TopicFactory
from tests.kafka.support import Run, corpus, produce

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(600)]

# The owner's hub tracks one run at most and keeps it for the whole test: the run produced first is forgotten once
# the second one's events are read, the second is held.
FLAGS = ("--session-timeout-ms", "6000", "--heartbeat-interval-ms", "500", "--max-tracked-runs", "1",
         "--recent-window-ms", "600000")  # fmt: skip
STREAM_WAIT_S = 20  # a stream that does not end by then waits for events that never come


def _two_finished_runs_of_one_partition() -> tuple[Run, Run]:
    runs = [r for r in sorted(corpus(), key=lambda r: len(r.lines))
            if r.events and json.loads(r.events[-1])["type"] in ("RUN_FINISHED", "RUN_ERROR")]  # fmt: skip
    for partition in (0, 1):
        on_it = [r for r in runs if partition_of(r.key) == partition]
        if len(on_it) >= 2:
            return on_it[0], on_it[1]
    raise AssertionError("no partition has two finished golden runs")


async def _until_final_display(session: aiohttp.ClientSession, gateway: GatewayProcess, run: Run) -> None:
    """Until the gateway's display record of `run` is its last one, which covers its terminal event."""
    for _ in range(300):
        async with session.get(f"{gateway.url}/runs/{run.key}/display") as answer:
            if answer.status == 200 and (await answer.json())["aguiSeq"] == len(run.events) - 1:
                return
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {run.key}'s last display record never came through {gateway.name}")


def _on_two_replicas(kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path, flags: tuple[str, ...],
                     run: Run, scenario: Callable[[Topics, GatewayProcess, GatewayProcess], Awaitable[None]]) -> None:
    """`scenario(topics, owner, other)` on new topics with a worker and two gateway replicas started with `flags`,
    one partition each, `owner` the one owning `run`'s partition; the replicas are killed after."""
    topics = Topics.create(topic_factory)
    worker = start_worker(tmp_path, kafka_bootstrap, topics)
    gateways = [GatewayProcess(tmp_path, kafka_bootstrap, topics, flags, name=f"g{i}").start() for i in range(2)]

    async def on_both() -> None:
        until_one_partition_each(gateways)
        owner, other = sorted(gateways, key=lambda g: partition_of(run.key) not in g.owned())
        assert partition_of(run.key) in owner.owned()
        await scenario(topics, owner, other)

    try:
        run_scenario(on_both(), gateways[0], worker)
    finally:
        for gateway in gateways:
            gateway.kill()


def test_a_cursor_at_a_finished_run_s_end_is_answered_204_by_any_replica_and_eventsource_stops_reconnecting(
    kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    forgotten, held = _two_finished_runs_of_one_partition()

    async def scenario(topics: Topics, owner: GatewayProcess, other: GatewayProcess) -> None:
        gateways = (owner, other)
        for run in (forgotten, held):  # one after the other: the owner's hub reads the held run last
            await produce(kafka_bootstrap, topics.source, [(run.key.encode(), line) for line in run.lines])
            await wait_converted(kafka_bootstrap, topics, [run.key])
        async with aiohttp.ClientSession() as session:
            for gateway in gateways:
                for run in (forgotten, held):
                    await _until_final_display(session, gateway, run)
            for run in (held, forgotten):
                last = len(run.events) - 1
                url = f"/runs/{run.key}/events"
                for gateway in (owner, other):
                    for target, headers in [(url, {"Last-Event-ID": f"{run.key}:{last}"}), (f"{url}?after={last}", {}),
                                            (f"{url}?after={last + 5}", {})]:  # fmt: skip
                        status, frames, _ = await read_stream(session, gateway.url + target, headers=headers,
                                                              timeout_s=STREAM_WAIT_S)  # fmt: skip
                        assert (status, frames[0].data) == (204, ""), (run.key, gateway.name, target, frames)
                    status, frames, ended = await read_stream(session, gateway.url + url, timeout_s=STREAM_WAIT_S,
                                                              headers={"Last-Event-ID": f"{run.key}:{last - 1}"})
                    assert status == 200 and ended, (run.key, gateway.name)
                    assert [(f.id, f.data.encode()) for f in frames] == [(f"{run.key}:{last}", run.events[-1])]
            ended = owner.metric("harness_agui_gateway_resumes_total", kind="ended")
            assert ended == 12 and other.metric("harness_agui_gateway_resumes_total", kind="ended") == 0, ended

            # A page that leaves a finished run's EventSource open: it reads the run, reconnects once by itself with
            # the terminal event's id, is answered 204 and asks no more.
            pages = [await start_node("eventsource.mjs", f"{gateway.url}/openapi.json",
                                      f"{gateway.url}/runs/{held.key}/events", "60", "5")
                     for gateway in (owner, other)]  # fmt: skip
            for page in pages:
                (state,) = await node_results(page, 120)
                assert state["ids"] == [f"{held.key}:{n}" for n in range(len(held.events))], state
                assert (state["opens"], state["readyState"]) == (1, 2), state
            assert owner.metric("harness_agui_gateway_resumes_total", kind="ended") == ended + 2, "one reconnect each"
            for gateway in gateways:
                assert gateway.metric("harness_agui_gateway_connections") == 0, gateway.name

    _on_two_replicas(kafka_bootstrap, topic_factory, tmp_path, FLAGS, held, scenario)


def test_a_cursor_at_a_terminal_event_the_replicas_read_after_it_came_is_answered_204_not_an_empty_stream(
    kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    # The client has the run's terminal event (from another replica, before its partition moved) before this
    # replica's tail read it: its stream waits, and once the tail reads the event it is answered 204, as it would
    # be after, through the owner and through the other replica alike. No keep-alive comes before (60 s).
    _, run = _two_finished_runs_of_one_partition()
    last = len(run.events) - 1

    async def scenario(topics: Topics, owner: GatewayProcess, other: GatewayProcess) -> None:
        *before, final = run.lines
        await produce(kafka_bootstrap, topics.source, [(run.key.encode(), line) for line in before])
        await wait_converted(kafka_bootstrap, topics, [run.key])
        async with aiohttp.ClientSession() as session:
            for gateway in (owner, other):
                await wait_known(session, gateway, [run.key])
            url = f"/runs/{run.key}/events"
            cursors = [(url, {"Last-Event-ID": f"{run.key}:{last}"}), (f"{url}?after={last}", {})]
            waiting = [asyncio.create_task(read_stream(session, gateway.url + target, headers=headers, timeout_s=50))
                       for gateway in (owner, other) for target, headers in cursors]  # fmt: skip
            await asyncio.sleep(3)
            assert not any(task.done() for task in waiting), "the run has not ended: every stream waits"
            await produce(kafka_bootstrap, topics.source, [(run.key.encode(), final)])
            for task in waiting:
                status, frames, _ = await task
                assert (status, frames[0].data if frames else None) == (204, ""), (status, frames)
            assert owner.metric("harness_agui_gateway_resumes_total", kind="ended") == 4
            assert other.metric("harness_agui_gateway_resumes_total", kind="ended") == 0

    _on_two_replicas(kafka_bootstrap, topic_factory, tmp_path, ("--keepalive-ms", "60000"), run, scenario)
