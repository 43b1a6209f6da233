"""Two gateway replicas on the real broker, each owning one partition: viewers of a run that connect through the
replica that does not own it share one stream to the owner (a popular run costs its owner one stream per replica,
not one per viewer) and each gets the run exactly; the run's display record is answered through either replica; and
the official `HttpAgent`, attached late through the non-owner, passes `verifyEvents` and ends with the reference's
messages."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest

from tests.gateway.support import (
    GatewayProcess,
    Topics,
    node_results,
    partition_of,
    read_stream,
    reference_results,
    run_scenario,
    start_node,
    start_worker,
    thread_of,
    until_one_partition_each,
)
from tests.kafka.conftest import TopicFactory
from tests.kafka.support import corpus, produce

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(600)]

VIEWERS = 20
FLAGS = ("--session-timeout-ms", "6000", "--heartbeat-interval-ms", "500")


def test_viewers_through_a_non_owner_share_one_stream_and_http_agent_joins_late_through_it(
    topic_factory: TopicFactory, kafka_bootstrap: str, tmp_path: Path
) -> None:
    topics = Topics.create(topic_factory)
    worker = start_worker(tmp_path, kafka_bootstrap, topics, "--display-interval-ms", "0")
    gateways = [GatewayProcess(tmp_path, kafka_bootstrap, topics, FLAGS, name=f"g{i}").start() for i in range(2)]

    async def scenario() -> None:
        until_one_partition_each(gateways)
        candidates = sorted((r for r in corpus() if r.events), key=lambda r: -len(r.lines))[:6]
        expected = await reference_results(tmp_path, candidates)
        run = next(r for r in candidates if expected[r.key]["ok"])  # a reference HttpAgent itself accepts
        owner, other = sorted(gateways, key=lambda g: partition_of(run.key) not in g.owned())
        assert partition_of(run.key) in owner.owned() and partition_of(run.key) not in other.owned()
        half = len(run.lines) // 2
        await produce(kafka_bootstrap, topics.source, [(run.key.encode(), line) for line in run.lines[:half]])
        async with aiohttp.ClientSession() as session:
            for _ in range(600):  # through the non-owner: forwarded to the owner
                async with session.get(f"{other.url}/runs/{run.key}/display") as resp:
                    if resp.status == 200:
                        display = await resp.json()
                        break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError("the run's display record never came through the non-owner")
            assert display["runId"] == run.key and display["threadId"] == thread_of(run)
            jobs = tmp_path / "jobs.json"
            jobs.write_text(json.dumps([{"label": "late", "url": f"{other.url}/runs/{run.key}",
                                         "threadId": thread_of(run), "runId": run.key}]))  # fmt: skip
            agent = await start_node("agent.mjs", str(jobs))
            viewers = [asyncio.create_task(read_stream(session, f"{other.url}/runs/{run.key}/events", timeout_s=120))
                       for _ in range(VIEWERS)]  # fmt: skip
            for _ in range(300):  # every viewer and the agent attached, the run still half produced
                if other.metric("harness_agui_gateway_connections", reader="forwarded") == VIEWERS + 1:
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("not every viewer and the agent attached through the non-owner")
            assert owner.metric("harness_agui_gateway_connections", reader="sse") == 1, "one stream per replica"
            assert owner.metric("harness_agui_gateway_connections", reader="agent") == 1
            await produce(kafka_bootstrap, topics.source, [(run.key.encode(), line) for line in run.lines[half:]],
                          pace_s=0.02)  # fmt: skip
            for status, frames, ended in await asyncio.gather(*viewers):
                assert status == 200 and ended
                assert [f.id for f in frames] == [f"{run.key}:{n}" for n in range(len(run.events))]
                assert [f.data.encode() for f in frames] == run.events
            (result,) = await node_results(agent, 120)
        assert result["ok"], result.get("error")
        assert result["messages"] == expected[run.key]["messages"]
        assert other.metric("harness_agui_gateway_relayed_streams_total") == VIEWERS - 1
        assert owner.metric("harness_agui_gateway_forwarded_requests_total") == 0, "the owner forwarded nothing"
        for _ in range(50):  # the tail caught up: nothing committed is left unread (measured once a second)
            if owner.metric("harness_agui_gateway_tail_lag_records") == 0:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the owner's tail lag never came back to 0")

    try:
        run_scenario(scenario(), gateways[0], worker)
    finally:
        for gateway in gateways:
            gateway.kill()
