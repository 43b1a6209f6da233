"""A thread across 3 gateway replicas and 12 partitions on the real broker: six runs on six partitions (one ends in
RUN_ERROR, two overlap in time, one starts after the client attached), followed through the replica that owns none
of them nor the thread. The `EventSource` reader gets exactly the runs' events in the thread index's start order,
while the replica owning the thread and the later run is killed -9 in the middle of that run: the reader attaches
again with `Last-Event-ID` through a live replica and gets the rest exactly, never a gap, a repeat or a jump. The
`connectAgent()` client of docs/gateway.md then passes `verifyEvents` through the same replica and ends with the
messages the same client builds from all the runs' reference events; a run's token is refused."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
import pytest

from tests.gateway.support import (
    THREAD_KEY,
    Frame,
    GatewayProcess,
    compile_thread_agent,
    data_frames,
    node_results,
    partition_of,
    read_stream,
    reference_messages,
    run_scenario,
    start_node,
    thread_site,
    wait_converted,
)
from tests.gateway.test_threads import start_order
from tests.kafka.conftest import TopicFactory
from tests.kafka.support import GOLDEN, Run, converted, in_thread, interleave, produce, read_lines, rekey
from worker.gateway.tokens import mint_jwt

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(900)]

PARTITIONS = 12
FLAGS = ("--session-timeout-ms", "6000", "--heartbeat-interval-ms", "500", "--forward-wait-ms", "40000",
         "--keepalive-ms", "2000")  # fmt: skip


def _until_divided(gateways: list[GatewayProcess], timeout_s: float = 90) -> list[set[int]]:
    deadline = time.monotonic() + timeout_s
    while True:
        serving = [g.metric("harness_agui_gateway_partitions", state="serving") for g in gateways]
        owned = [g.owned() for g in gateways]
        if serving == [4.0, 4.0, 4.0] and set().union(*owned) == set(range(PARTITIONS)):
            return owned
        assert time.monotonic() < deadline, f"partitions not divided: {serving}"
        time.sleep(0.2)


def _steered(name: str, thread: str, fits: Callable[[int], bool], taken: set[int]) -> Run:
    """Golden run `name` under a run id whose partition `fits` and is not `taken`, in `thread`."""
    lines = read_lines(GOLDEN / f"{name}.jsonl")
    for n in itertools.count():
        key, relined = rekey(lines, f"t{n}")
        partition = partition_of(key, PARTITIONS)
        if fits(partition) and partition not in taken:
            taken.add(partition)
            return in_thread(converted(key, relined), thread)
    raise AssertionError("unreachable")


class _Reader:
    """A thread followed by `EventSource` rules: after any end it attaches again with `Last-Event-ID` through the
    entry replica while it lives, else any live one."""

    def __init__(self, thread: str, token: str, entry: GatewayProcess, live: list[GatewayProcess]) -> None:
        self.thread, self.token, self.entry, self.live = thread, token, entry, live
        self.frames: list[Frame] = []
        self.attachments = 0

    async def follow(self, session: aiohttp.ClientSession, total: int, deadline: float) -> None:
        while time.monotonic() < deadline:
            gateway = self.entry if self.entry in self.live else self.live[0]
            headers = {"Authorization": f"Bearer {self.token}"}
            if self.frames:
                headers["Last-Event-ID"] = str(self.frames[-1].id)
            self.attachments += 1
            try:
                async with session.get(f"{gateway.url}/threads/{self.thread}/events", headers=headers) as resp:
                    if resp.status != 200:
                        await asyncio.sleep(0.3)
                        continue
                    async for frame in data_frames(resp):
                        assert frame.id is not None, f"a frame without an id: {frame.data[:200]}"
                        self.frames.append(frame)
                        if len(self.frames) == total:
                            return
            except (aiohttp.ClientError, OSError, TimeoutError):
                pass
            await asyncio.sleep(0.1)
        raise AssertionError(f"not whole within the deadline ({len(self.frames)} of {total} frames)")


def test_a_thread_through_a_replica_owning_none_of_it_survives_its_owners_kill_exactly(
    topic_factory: TopicFactory, kafka_bootstrap: str, tmp_path: Path
) -> None:
    module = compile_thread_agent(tmp_path / "agent")
    topics, index, worker, flags = thread_site(topic_factory, kafka_bootstrap, tmp_path, PARTITIONS)
    gateways = [GatewayProcess(tmp_path, kafka_bootstrap, topics, (*FLAGS, *flags), name=f"g{i}").start()
                for i in range(3)]  # fmt: skip
    everyone = list(gateways)

    async def scenario() -> None:
        owned = _until_divided(gateways)
        entry, owner, other = gateways  # the entry owns none of the thread; the owner has the thread and a run
        thread = next(f"thread-wide-{n}" for n in itertools.count()
                      if partition_of(f"thread-wide-{n}", PARTITIONS) in owned[1])  # fmt: skip
        taken: set[int] = set()
        first, failed, *overlap, single = (_steered(name, thread, lambda p: p not in owned[0], taken) for name in
                                           ("s01_hello", "s05_failed", "s02_tool_roundtrip", "r0000", "r0001"))
        later = _steered("r0097", thread, lambda p: p in owned[1], taken)
        runs = {run.key: run for run in (first, failed, *overlap, single, later)}
        assert len({partition_of(key, PARTITIONS) for key in runs}) == len(runs) == 6
        assert not {partition_of(key, PARTITIONS) for key in runs} & owned[0]
        token = mint_jwt(THREAD_KEY, "thread", thread, 900)
        for run in (first, failed):
            await produce(kafka_bootstrap, topics.source, [(run.key.encode(), line) for line in run.lines])
            await wait_converted(kafka_bootstrap, topics, [run.key], partitions=PARTITIONS)
        await produce(kafka_bootstrap, topics.source, interleave(overlap), pace_s=0.02)  # in time together
        await produce(kafka_bootstrap, topics.source, [(single.key.encode(), line) for line in single.lines])
        await wait_converted(kafka_bootstrap, topics, [run.key for run in (*overlap, single)],
                             partitions=PARTITIONS)
        before = await start_order(kafka_bootstrap, index, thread)
        assert len(before) == 5
        total = sum(len(run.events) for run in runs.values())
        live = list(gateways)
        reader = _Reader(thread, token, entry, live)
        async with aiohttp.ClientSession() as session:
            following = asyncio.create_task(reader.follow(session, total, time.monotonic() + 400))
            for _ in range(600):  # the reader has the five runs and waits for the next one
                if len(reader.frames) == total - len(later.events):
                    break
                await asyncio.sleep(0.1)
            assert len(reader.frames) == total - len(later.events), len(reader.frames)
            lines = [(later.key.encode(), line) for line in later.lines]
            half = len(lines) // 2
            await produce(kafka_bootstrap, topics.source, lines[:half], pace_s=0.03)
            for _ in range(300):
                if any(frame.id and frame.id.startswith(f"{later.key}:") for frame in reader.frames):
                    break
                await asyncio.sleep(0.1)
            owner.kill()  # the thread's owner, and the later run's, in the middle of that run
            live.remove(owner)
            await produce(kafka_bootstrap, topics.source, lines[half:], pace_s=0.03)
            await following
            order = await start_order(kafka_bootstrap, index, thread)
            assert order[:5] == before and order[5] == later.key
            want = [(f"{key}:{n}", event) for key in order for n, event in enumerate(runs[key].events)]
            got = [(frame.id, frame.data.encode()) for frame in reader.frames]
            assert len(got) == len({frame_id for frame_id, _ in got}), "an event came twice"
            assert got == want, "the thread stream is not exactly its runs' events in start order"
            assert reader.attachments > 1, "the reader never attached again"

            run_token = mint_jwt(THREAD_KEY, "run", first.key, 600)
            status, frames, _ = await read_stream(session, f"{entry.url}/threads/{thread}/events",
                                                  headers={"Authorization": f"Bearer {run_token}"})
            assert (status, frames[0].event()["error"]) == (403, "forbidden")
            async with session.get(f"{other.url}/threads/{thread}?limit=10",
                                   headers={"Authorization": f"Bearer {token}"}) as resp:
                listed = await resp.json()
            assert [r["runId"] for r in listed["runs"]] == order[::-1], listed

        reference = await reference_messages(tmp_path, "all", [runs[key] for key in order], thread)
        assert reference["ok"], reference
        jobs = tmp_path / "jobs.json"
        jobs.write_text(json.dumps([{"label": "thread", "module": str(module), "gateway": entry.url,
                                     "threadId": thread, "token": token, "follow": False}]))  # fmt: skip
        (result,) = await node_results(await start_node("thread-agent.mjs", str(jobs)), 180)
        assert result["ok"], result["error"]
        assert result["messages"] == reference["messages"]

    try:
        run_scenario(scenario(), everyone[0], worker)
    finally:
        for gateway in everyone:
            gateway.kill()
