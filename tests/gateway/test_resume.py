"""Resume with Last-Event-ID (and ?after=) against a real broker and worker: an SSE client cut at random points
gets, concatenated, exactly the run's events, each id once, from memory (live runs) and from the output topic
(finished runs); a cursor the output topic can no longer serve, or one of another run, gets the late-join prelude."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import aiohttp
import pytest
from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete

from tests.gateway.support import (
    Frame,
    GatewayProcess,
    Topics,
    partition_of,
    read_stream,
    run_scenario,
    start_worker,
    wait_converted,
    wait_known,
)
from tests.kafka.conftest import TopicFactory
from tests.kafka.support import Run, corpus, interleave, produce, read_topic

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(600)]

NAMES = ["s01_hello", "s02_tool_roundtrip", "s05_failed", "s09_big_fragments", "c02_child_failed", "r0003", "r0011",
         "r0028", "r0050", "r0063", "r0077"]


async def _cut_and_resume(session: aiohttp.ClientSession, url: str, run: Run, rng: random.Random,
                          *, by_query: bool) -> list[Frame]:  # fmt: skip
    """Read the run's stream in pieces cut at random points, each piece resumed after the last id received."""
    got: list[Frame] = []
    cuts = sorted(rng.sample(range(1, len(run.events)), k=min(3, len(run.events) - 1)))
    for limit in [*(b - a for a, b in zip([0, *cuts], cuts, strict=False)), None]:
        headers, target = {}, url
        if got and by_query:
            target = f"{url}?after={got[-1].id.rsplit(':', 1)[1]}"  # type: ignore[union-attr]
        elif got:
            headers["Last-Event-ID"] = got[-1].id  # type: ignore[assignment]
        status, frames, _ = await read_stream(session, target, headers=headers, limit=limit)
        assert status == 200, frames
        got += frames
    return got


def _exactly(frames: list[Frame], run: Run) -> None:
    ids = [f.id for f in frames]
    assert len(ids) == len(set(ids)), f"{run.key}: an id came twice"
    assert ids == [f"{run.key}:{n}" for n in range(len(run.events))], f"{run.key}: {ids[:4]}"
    assert [f.data.encode() for f in frames] == run.events


def test_cut_streams_resumed_by_cursor_are_exactly_the_run(
    kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    rng = random.Random(29)
    topics = Topics.create(topic_factory)
    finished, live = corpus(names=NAMES), corpus(2, names=NAMES)[len(NAMES):]
    worker = start_worker(tmp_path, kafka_bootstrap, topics)
    gateway = GatewayProcess(tmp_path, kafka_bootstrap, topics)

    async def scenario() -> None:
        await produce(kafka_bootstrap, topics.source, interleave(finished))
        await wait_converted(kafka_bootstrap, topics, [r.key for r in finished])
        gateway.start()
        async with aiohttp.ClientSession() as session:
            for i, run in enumerate(finished):  # from the output topic
                url = f"{gateway.url}/runs/{run.key}/events"
                _exactly(await _cut_and_resume(session, url, run, rng, by_query=i % 2 == 1), run)
            assert gateway.metric("harness_agui_gateway_resumes_total", kind="topic") > 0

            await produce(kafka_bootstrap, topics.source, [(r.key.encode(), r.lines[0]) for r in live])
            await wait_converted(kafka_bootstrap, topics, [r.key for r in live])
            await wait_known(session, gateway, [r.key for r in live])
            readers = [asyncio.create_task(_cut_and_resume(session, f"{gateway.url}/runs/{r.key}/events", r, rng,
                                                           by_query=False)) for r in live]  # fmt: skip
            rest = interleave([Run(r.key, r.lines[1:]) for r in live])
            await produce(kafka_bootstrap, topics.source, rest, pace_s=0.003)
            for run, reader in zip(live, readers, strict=True):
                _exactly(await reader, run)
            assert gateway.metric("harness_agui_gateway_resumes_total", kind="memory") > 0

            # A cursor of another run cannot be served exactly: the prelude, then the events after the display.
            one, other = finished[0], finished[1]
            status, frames, ended = await read_stream(session, f"{gateway.url}/runs/{one.key}/events",
                                                      headers={"Last-Event-ID": f"{other.key}:3"})  # fmt: skip
            assert status == 200 and ended
            _prelude_then_rest(frames, one)

            # The output topic no longer holds the first events of a run: a cursor there gets the prelude too.
            await _delete_before_end(kafka_bootstrap, topics.output, partition_of(one.key))
            status, frames, ended = await read_stream(session, f"{gateway.url}/runs/{one.key}/events",
                                                      headers={"Last-Event-ID": f"{one.key}:1"})  # fmt: skip
            assert status == 200 and ended
            _prelude_then_rest(frames, one)
            assert gateway.metric("harness_agui_gateway_resumes_total", kind="prelude") == 2

    run_scenario(scenario(), gateway, worker)


def _prelude_then_rest(frames: list[Frame], run: Run) -> None:
    """RUN_STARTED and MESSAGES_SNAPSHOT without ids (never a durable id on a made frame), then durable events
    that continue the display without a gap, to the run's end."""
    made = [f for f in frames if f.id is None]
    durable = [f for f in frames if f.id is not None]
    assert [f.event()["type"] for f in made[:2]] == ["RUN_STARTED", "MESSAGES_SNAPSHOT"], made[:2]
    assert frames[: len(made)] == made, "made frames come first"
    tail = [int(f.id.rsplit(":", 1)[1]) for f in durable]  # type: ignore[union-attr]
    assert tail == list(range(len(run.events) - len(tail), len(run.events)))
    if not tail:
        assert made[-1].event()["type"] in ("RUN_FINISHED", "RUN_ERROR")


async def _delete_before_end(bootstrap: str, topic: str, partition: int) -> None:
    """Advance the partition's log start to its end, as retention would."""
    end = max(r.offset for r in await read_topic(bootstrap, topic) if r.partition == partition) + 1
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_records({TopicPartition(topic, partition): RecordsToDelete(end)})
    finally:
        await admin.close()
