"""The TypeScript thread agent of docs/gateway.md, compiled against the pinned `@ag-ui/client` 1.0.0 and run by its
`connectAgent()` on the real broker: it passes `verifyEvents` over a thread whose runs finish and fail, and ends with
the messages the same client builds from all the runs' reference events; following, it applies a run that starts
after it attached, and ends when the page lets it go."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.gateway.support import (
    THREAD_KEY,
    GatewayProcess,
    compile_thread_agent,
    node_results,
    reference_messages,
    run_scenario,
    start_node,
    thread_site,
    wait_converted,
)
from tests.gateway.test_threads import start_order, thread_runs
from tests.kafka.conftest import TopicFactory
from tests.kafka.support import produce
from worker.gateway.tokens import mint_jwt

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

THREAD = "thread-agent"


def test_connect_agent_applies_a_threads_runs_and_its_later_run(
    topic_factory: TopicFactory, kafka_bootstrap: str, tmp_path: Path
) -> None:
    module = compile_thread_agent(tmp_path / "agent")
    topics, index, worker, flags = thread_site(topic_factory, kafka_bootstrap, tmp_path)
    gateway = GatewayProcess(tmp_path, kafka_bootstrap, topics, flags).start()
    # The later run finishes: the client, let go right after a RUN_ERROR, would report the abort as a second one.
    *earlier, later = sorted(thread_runs(["s01_hello", "s05_failed", "s02_tool_roundtrip", "r0000"], THREAD),
                             key=lambda run: "run-0002" in run.key)  # fmt: skip
    runs = {run.key: run for run in [*earlier, later]}
    token = mint_jwt(THREAD_KEY, "thread", THREAD, 600)

    async def scenario() -> None:
        for run in earlier:
            await produce(kafka_bootstrap, topics.source, [(run.key.encode(), line) for line in run.lines])
            await wait_converted(kafka_bootstrap, topics, [run.key])
        order = await start_order(kafka_bootstrap, index, THREAD)
        reference = await reference_messages(tmp_path, "earlier", [runs[key] for key in order], THREAD)
        assert reference["ok"], reference
        job = {"module": str(module), "gateway": gateway.url, "threadId": THREAD, "token": token}
        jobs = tmp_path / "jobs.json"
        jobs.write_text(json.dumps([{**job, "label": "ended", "follow": False},
                                    {**job, "label": "following", "stopAfterRuns": len(earlier) + 1}]))
        agents = await start_node("thread-agent.mjs", str(jobs))
        await asyncio.sleep(3)  # both attached; the later run starts now
        await produce(kafka_bootstrap, topics.source, [(later.key.encode(), line) for line in later.lines])
        results = {r["label"]: r for r in await node_results(agents, 120)}
        assert results["ended"]["ok"], results["ended"]
        assert results["ended"]["messages"] == reference["messages"]
        everything = [runs[key] for key in await start_order(kafka_bootstrap, index, THREAD)]
        assert everything[-1] is later, "the later run starts after the others"
        whole = await reference_messages(tmp_path, "whole", everything, THREAD)
        assert results["following"]["ok"], results["following"]
        assert results["following"]["runs"] == len(runs)
        assert results["following"]["messages"] == whole["messages"] != reference["messages"]

    run_scenario(scenario(), gateway, worker)
