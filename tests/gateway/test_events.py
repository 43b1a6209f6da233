"""GET /runs/{id}/events against a real broker and worker: whole runs, finished and live, exactly the output topic."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest

from tests.gateway.support import (
    GatewayProcess,
    Topics,
    read_stream,
    run_scenario,
    start_worker,
    wait_converted,
    wait_known,
)
from tests.kafka.conftest import TopicFactory
from tests.kafka.support import Run, corpus, interleave, produce

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

NAMES = ["s01_hello", "s03_cancel_open_parts", "c01_child_completed", "r0001", "r0007", "r0042"]


def _expect(frames: list, run: Run) -> None:
    ids = [f.id for f in frames]
    assert ids == [f"{run.key}:{n}" for n in range(len(run.events))], f"{run.key}: ids {ids[:3]}..{ids[-3:]}"
    assert [f.data.encode() for f in frames] == run.events, f"{run.key}: event values differ from the conversion"


def test_whole_runs_finished_and_live_are_the_output_topics_events(
    kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    topics = Topics.create(topic_factory)
    finished = corpus(names=NAMES)
    live = corpus(2, names=NAMES)[len(NAMES):]
    worker = start_worker(tmp_path, kafka_bootstrap, topics)
    gateway = GatewayProcess(tmp_path, kafka_bootstrap, topics)

    async def scenario() -> None:
        await produce(kafka_bootstrap, topics.source, interleave(finished))
        await wait_converted(kafka_bootstrap, topics, [r.key for r in finished])
        gateway.start()
        async with aiohttp.ClientSession() as session:
            for run in finished:
                status, frames, ended = await read_stream(session, f"{gateway.url}/runs/{run.key}/events")
                assert status == 200 and ended
                _expect(frames, run)
            # Live: the first line of each run first (the gateway must know a run to serve it), then the rest.
            await produce(kafka_bootstrap, topics.source, [(r.key.encode(), r.lines[0]) for r in live])
            await wait_known(session, gateway, [r.key for r in live])
            readers = [asyncio.create_task(read_stream(session, f"{gateway.url}/runs/{r.key}/events"))
                       for r in live]
            await asyncio.sleep(0.5)
            rest = interleave([Run(r.key, r.lines[1:]) for r in live])
            await produce(kafka_bootstrap, topics.source, rest, pace_s=0.002)
            for run, reader in zip(live, readers, strict=True):
                status, frames, ended = await reader
                assert status == 200 and ended
                _expect(frames, run)

    run_scenario(scenario(), gateway, worker)

