"""The viewer page in a real headless Chromium, following a run the worker is producing, while the gateway is
killed (-9) and started again: the page reconnects on its own and ends showing exactly the reference's texts; and
following a thread, run after run, one of them started while the page looks: the whole conversation, once."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.gateway.support import (
    GatewayProcess,
    Topics,
    partition_of,
    run_scenario,
    start_node,
    start_worker,
    wait_converted,
)
from tests.gateway.test_threads import start_order
from tests.kafka.conftest import TopicFactory
from tests.kafka.support import Run, corpus, in_thread, produce

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(300)]


def _reference(run: Run) -> list[tuple[str, str, str]]:
    """(id, kind, text) of each message, reasoning block and tool call of the reference conversion, in the order of
    their first event; a tool call's text is its arguments and its result."""
    found: dict[str, list[str]] = {}
    for raw in run.events:
        event = json.loads(raw)
        kind = event["type"]
        if kind in ("TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT"):
            found.setdefault(event["messageId"], ["message", ""])[1] += event.get("delta", "")
        elif kind in ("REASONING_MESSAGE_START", "REASONING_MESSAGE_CONTENT"):
            found.setdefault(event["messageId"], ["reasoning", ""])[1] += event.get("delta", "")
        elif kind in ("TOOL_CALL_START", "TOOL_CALL_ARGS"):
            found.setdefault(event["toolCallId"], ["tool", ""])[1] += event.get("delta", "")
        elif kind == "TOOL_CALL_RESULT":
            content = event["content"]
            text = content if isinstance(content, str) else json.dumps(content, separators=(",", ":"))
            found.setdefault(event["toolCallId"], ["tool", ""])[1] += "|" + text
    return [(key, kind, text) for key, (kind, text) in found.items()]


def _shown(state: dict) -> list[tuple[str, str, str]]:
    out = []
    for item in state["items"]:
        if item["kind"] == "tool":
            result = item["result"]
            out.append((item["id"], "tool", item["args"] + ("" if result is None else "|" + result)))
        else:
            out.append((item["id"], item["kind"], item["text"]))
    return out


def test_the_viewer_page_reconnects_after_a_gateway_kill_and_shows_the_whole_run(
    kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    (run,) = corpus(names=["r0097"])
    topics = Topics.create(topic_factory)
    worker = start_worker(tmp_path, kafka_bootstrap, topics)
    gateway = GatewayProcess(tmp_path, kafka_bootstrap, topics)
    lines = [(run.key.encode(), line) for line in run.lines]
    third = len(lines) // 3

    async def scenario() -> dict:
        await produce(kafka_bootstrap, topics.source, lines[:1])
        await wait_converted(kafka_bootstrap, topics, [run.key])
        gateway.start()
        page = await start_node("viewer.mjs", f"{gateway.url}/view/{run.key}", "180")
        assert page.stdout is not None
        assert json.loads(await asyncio.wait_for(page.stdout.readline(), 60)) == {"ready": True}
        await produce(kafka_bootstrap, topics.source, lines[1:third], pace_s=0.02)
        await asyncio.sleep(1.0)
        gateway.kill()
        await produce(kafka_bootstrap, topics.source, lines[third : 2 * third], pace_s=0.02)
        await asyncio.sleep(1.0)
        gateway.start()
        await produce(kafka_bootstrap, topics.source, lines[2 * third :], pace_s=0.02)
        state = json.loads(await asyncio.wait_for(page.stdout.readline(), 200))
        await asyncio.wait_for(page.wait(), 30)
        return state

    state = run_scenario(scenario(), gateway, worker)
    assert state["status"] == "finished", state["status"]
    assert state["reconnects"] >= 1, "the page never lost its stream"
    assert state["lastSeq"] == len(run.events) - 1
    assert _shown(state) == _reference(run)
    assert state["rendered"] > 0


def test_the_viewer_page_on_a_non_owner_replica_survives_the_owner_kill_and_shows_the_whole_run_once(
    kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    (run,) = corpus(names=["r0097"])
    topics = Topics.create(topic_factory)
    worker = start_worker(tmp_path, kafka_bootstrap, topics)
    flags = ("--session-timeout-ms", "6000", "--heartbeat-interval-ms", "500")
    gateways = [GatewayProcess(tmp_path, kafka_bootstrap, topics, flags, name=f"g{i}") for i in range(2)]
    lines = [(run.key.encode(), line) for line in run.lines]
    third = len(lines) // 3

    def owns(gateway: GatewayProcess) -> bool:
        return partition_of(run.key) in gateway.owned()

    async def scenario() -> dict:
        await produce(kafka_bootstrap, topics.source, lines[:1])
        await wait_converted(kafka_bootstrap, topics, [run.key])
        for gateway in gateways:
            gateway.start()
        for _ in range(300):
            if sum(g.metric("harness_agui_gateway_partitions", state="serving") for g in gateways) == 2 and \
                    any(owns(g) for g in gateways):  # fmt: skip
                break
            await asyncio.sleep(0.2)
        owner, other = sorted(gateways, key=lambda g: not owns(g))
        assert not owns(other)
        page = await start_node("viewer.mjs", f"{other.url}/view/{run.key}", "180")
        assert page.stdout is not None
        assert json.loads(await asyncio.wait_for(page.stdout.readline(), 60)) == {"ready": True}
        await produce(kafka_bootstrap, topics.source, lines[1:third], pace_s=0.02)
        await asyncio.sleep(1.0)
        owner.kill()  # the non-owner's stream to it breaks; the group gives its partition over after 6 s
        await produce(kafka_bootstrap, topics.source, lines[third:], pace_s=0.02)
        state = json.loads(await asyncio.wait_for(page.stdout.readline(), 200))
        await asyncio.wait_for(page.wait(), 30)
        assert other.metric("harness_agui_gateway_partitions", state="serving") == 2
        return state

    try:
        state = run_scenario(scenario(), gateways[1], worker)
    finally:
        for gateway in gateways:
            gateway.kill()
    assert state["status"] == "finished", state["status"]
    assert state["reconnects"] >= 1, "the page never lost its stream"
    assert state["lastSeq"] == len(run.events) - 1
    assert _shown(state) == _reference(run)


def test_the_thread_view_page_shows_the_whole_conversation_once(
    kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    thread = "thread-viewed"
    runs = [in_thread(run, thread) for run in corpus(names=["s01_hello", "s02_tool_roundtrip", "r0097"])]
    topics = Topics.create(topic_factory)
    index = topic_factory("index", 2, {"cleanup.policy": "compact"})
    worker = start_worker(tmp_path, kafka_bootstrap, topics, "--thread-index-topic", index)
    gateway = GatewayProcess(tmp_path, kafka_bootstrap, topics, ("--thread-index-topic", index))

    async def scenario() -> tuple[dict, list[str]]:
        for run in runs[:2]:
            await produce(kafka_bootstrap, topics.source, [(run.key.encode(), line) for line in run.lines])
            await wait_converted(kafka_bootstrap, topics, [run.key])
        gateway.start()
        page = await start_node("viewer.mjs", f"{gateway.url}/view/threads/{thread}", "180", str(len(runs)))
        assert page.stdout is not None
        assert json.loads(await asyncio.wait_for(page.stdout.readline(), 60)) == {"ready": True}
        await asyncio.sleep(2.0)  # the page shows the first two runs; the third starts while it looks
        await produce(kafka_bootstrap, topics.source, [(runs[2].key.encode(), line) for line in runs[2].lines],
                      pace_s=0.01)  # fmt: skip
        state = json.loads(await asyncio.wait_for(page.stdout.readline(), 200))
        await asyncio.wait_for(page.wait(), 30)
        return state, await start_order(kafka_bootstrap, index, thread)

    state, order = run_scenario(scenario(), gateway, worker)
    by_key = {run.key: run for run in runs}
    assert order[2] == runs[2].key, order
    assert state["runsEnded"] == len(runs) and state["status"] == "finished", state["status"]
    assert state["lastId"] == f"{runs[2].key}:{len(runs[2].events) - 1}"
    assert state["events"] == sum(len(run.events) for run in runs), "an event was shown twice, or missed"
    assert _shown(state) == [item for key in order for item in _reference(by_key[key])]
    assert state["rendered"] > 0
