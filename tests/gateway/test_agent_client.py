"""The official @ag-ui/client (HttpAgent, pinned, run by Node) against the gateway over a real broker and worker:
attached live and at several cut points of every golden run, `verifyEvents` passes and the messages the client
ends with equal those it makes of the reference conversion of the whole run."""

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
    reference_results,
    run_scenario,
    start_node,
    start_worker,
    thread_of,
    wait_converted,
)
from tests.kafka.conftest import TopicFactory
from tests.kafka.support import Run, converted, corpus, produce

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(900)]

CUTS = (0.3, 0.6, 0.9)  # shares of each run's source lines produced before a client attaches late


def _batch(runs: list[Run], upto: dict[str, int], done: dict[str, int]) -> list[tuple[bytes, bytes]]:
    out = []
    for run in runs:
        out += [(run.key.encode(), line) for line in run.lines[done[run.key] : upto[run.key]]]
        done[run.key] = upto[run.key]
    return out


async def _displayed(session: aiohttp.ClientSession, gateway: GatewayProcess, run: Run, lines: int) -> None:
    """Until the gateway's latest display record of `run` covers the events of its first `lines` lines."""
    last = len(converted(run.key, run.lines[:lines]).events) - 1
    for _ in range(400):
        async with session.get(f"{gateway.url}/runs/{run.key}/display") as resp:
            if resp.status == 200 and (await resp.json())["aguiSeq"] >= last:
                return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{run.key}: the display never reached event {last}")


def test_http_agent_live_and_late_ends_with_the_reference_messages(
    kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    runs = [run for run in corpus() if run.events]
    topics = Topics.create(topic_factory)
    worker = start_worker(tmp_path, kafka_bootstrap, topics, "--display-interval-ms", "0")
    gateway = GatewayProcess(tmp_path, kafka_bootstrap, topics)

    def jobs(label: str) -> Path:
        path = tmp_path / f"jobs-{label}.json"
        path.write_text(json.dumps([{"label": f"{label}:{r.key}", "url": f"{gateway.url}/runs/{r.key}",
                                     "threadId": thread_of(r), "runId": r.key} for r in runs]))
        return path

    async def scenario() -> None:
        expected = await reference_results(tmp_path, runs)
        # The client's verifyEvents rejects a few reference conversions themselves (the inline-children runs: their
        # SUBAGENT_STARTED names the root run as parent subagent; r0006 restarts an open text message): no gateway
        # can make those pass, so they are left out here.
        rejected = {key for key, r in expected.items() if not r["ok"]}
        assert len(rejected) <= 4, rejected
        runs[:] = [r for r in runs if r.key not in rejected]

        gateway.start()
        done = dict.fromkeys((r.key for r in runs), 0)
        clients = []
        async with aiohttp.ClientSession() as session:
            for label, share in (("live", 0.0), *((f"cut{c}", c) for c in CUTS)):
                upto = {r.key: max(1, int(len(r.lines) * share)) for r in runs}
                await produce(kafka_bootstrap, topics.source, _batch(runs, upto, done))
                await wait_converted(kafka_bootstrap, topics, [r.key for r in runs])
                await asyncio.gather(*(_displayed(session, gateway, r, upto[r.key]) for r in runs))
                clients.append(await start_node("agent.mjs", str(jobs(label))))
                await asyncio.sleep(1.0)  # every client has attached before the next lines
            await produce(kafka_bootstrap, topics.source,
                          _batch(runs, {r.key: len(r.lines) for r in runs}, done), pace_s=0.0005)
            results = [result for client in clients for result in await node_results(client, 300)]
        assert len(results) == len(runs) * (1 + len(CUTS))
        failed = [(r["label"], r.get("error")) for r in results if not r["ok"]]
        assert not failed, f"{len(failed)} clients failed, first: {failed[:3]}"
        differ = [r["label"] for r in results if r["messages"] != expected[r["label"].split(":", 1)[1]]["messages"]]
        assert not differ, f"{len(differ)} clients ended with other messages than the reference's: {differ[:5]}"
        exact = gateway.metric("harness_agui_gateway_late_joins_total", exact="true")
        assert exact >= len(runs), f"only {exact} late joins began with an exact prelude"

    run_scenario(scenario(), gateway, worker)
