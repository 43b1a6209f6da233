"""Gateway replicas on the real broker divide the partitions and serve any run through any replica: SSE readers
spread over the replicas whatever the owner, while one replica is killed -9, a new one starts and the deployment
is scaled 3 -> 1 -> 2, get, concatenated across their reconnects through whichever replica is up, exactly each run
(ids `<run>:<n>` contiguous from 0, no gap, no duplicate, the reference's events)."""

from __future__ import annotations

import asyncio
import random
import time
from pathlib import Path

import aiohttp
import pytest

from tests.gateway.support import Frame, GatewayProcess, Topics, data_frames, run_scenario, start_worker
from tests.kafka.conftest import TopicFactory
from tests.kafka.support import Run, corpus, interleave, produce

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(900)]

PARTITIONS = 6
GROUP_FLAGS = ("--session-timeout-ms", "6000", "--heartbeat-interval-ms", "500", "--forward-wait-ms", "40000",
               "--keepalive-ms", "2000", "--drain-timeout-ms", "3000")  # fmt: skip
NAMES = ["s01_hello", "s02_tool_roundtrip", "s05_failed", "s09_big_fragments", "c02_child_failed", "r0003", "r0011",
         "r0028", "r0050", "r0063"]


def _serving(gateway: GatewayProcess) -> int:
    return int(gateway.metric("harness_agui_gateway_partitions", state="serving"))


def _until_divided(gateways: list[GatewayProcess], timeout_s: float = 60) -> list[int]:
    """Until the replicas serve every partition between them, each its balanced share; the shares."""
    deadline = time.monotonic() + timeout_s
    while True:
        shares = [_serving(g) if g.probe("/readyz")[0] == 200 else -1 for g in gateways]
        low, high = divmod(PARTITIONS, len(gateways))
        if sum(shares) == PARTITIONS and all(low <= s <= low + (1 if high else 0) for s in shares):
            return shares
        assert time.monotonic() < deadline, f"partitions not divided within {timeout_s} s: {shares}"
        time.sleep(0.2)


class _Reader:
    """One run followed by `EventSource` rules: from its start, and after any end without the terminal event
    (a lost connection, a drained or moved stream) attached again with `Last-Event-ID` through any live replica."""

    def __init__(self, run: Run, live: list[GatewayProcess], rng: random.Random) -> None:
        self.run = run
        self.live = live
        self.rng = rng
        self.frames: list[Frame] = []
        self.attachments = 0
        self.replicas: set[str] = set()

    async def follow(self, session: aiohttp.ClientSession, deadline: float) -> None:
        while time.monotonic() < deadline:
            gateway = self.rng.choice(self.live)
            headers = {"Last-Event-ID": self.frames[-1].id} if self.frames and self.frames[-1].id else {}
            self.attachments += 1
            self.replicas.add(gateway.name)
            try:
                async with session.get(f"{gateway.url}/runs/{self.run.key}/events", headers=headers) as resp:
                    if resp.status != 200:  # 404 before the run's first record, 503 while no owner answers
                        await asyncio.sleep(0.3)
                        continue
                    async for frame in data_frames(resp):
                        assert frame.id is not None, f"{self.run.key}: a frame without an id: {frame.data[:200]}"
                        self.frames.append(frame)
                        if frame.id == f"{self.run.key}:{len(self.run.events) - 1}":
                            return  # the run's last event
            except (aiohttp.ClientError, OSError, TimeoutError):
                pass  # the replica went away: attach again elsewhere, as a browser does
            await asyncio.sleep(0.1)
        raise AssertionError(f"{self.run.key}: not whole within the deadline ({len(self.frames)} frames)")

    def check(self) -> None:
        ids = [frame.id for frame in self.frames]
        assert len(ids) == len(set(ids)), f"{self.run.key}: an id came twice"
        assert ids == [f"{self.run.key}:{n}" for n in range(len(self.run.events))], f"{self.run.key}: {ids[:5]}"
        assert [frame.data.encode() for frame in self.frames] == self.run.events, self.run.key


def test_any_replica_serves_any_run_exactly_through_a_kill_a_start_and_scaling(
    topic_factory: TopicFactory, kafka_bootstrap: str, tmp_path: Path
) -> None:
    topics = Topics.create(topic_factory, partitions=PARTITIONS)
    runs = corpus(3, names=NAMES)
    worker = start_worker(tmp_path, kafka_bootstrap, topics)
    made = iter(range(100))

    def replica() -> GatewayProcess:
        return GatewayProcess(tmp_path, kafka_bootstrap, topics, GROUP_FLAGS, name=f"g{next(made)}")

    gateways = [replica().start(), replica().start(), replica().start()]
    everyone = list(gateways)
    rng = random.Random(7)

    async def scenario() -> None:
        shares = _until_divided(gateways)
        assert shares == [2, 2, 2], shares
        live = list(gateways)
        readers = [_Reader(run, live, rng) for run in runs]
        deadline = time.monotonic() + 300
        async with aiohttp.ClientSession() as session:
            following = [asyncio.create_task(r.follow(session, deadline)) for r in readers]
            source = asyncio.create_task(produce(kafka_bootstrap, topics.source, interleave(runs), pace_s=0.06))
            await asyncio.sleep(3)
            victim = live.pop(1)  # killed -9: its streams break, the group notices after the session timeout
            victim.kill()
            newcomer = replica().start(ready_timeout_s=None)
            everyone.append(newcomer)
            await asyncio.to_thread(newcomer.wait_ready, 90)
            live.append(newcomer)
            await asyncio.to_thread(_until_divided, live, 60)
            for leaving in (live.pop(), live.pop()):  # 3 -> 1: drained
                assert await asyncio.to_thread(leaving.stop) == 0, leaving.log()[-2000:]
            assert await asyncio.to_thread(_until_divided, live, 60) == [PARTITIONS]
            joining = replica().start(ready_timeout_s=None)  # 1 -> 2
            everyone.append(joining)
            await asyncio.to_thread(joining.wait_ready, 90)
            live.append(joining)
            assert await asyncio.to_thread(_until_divided, live, 60) == [3, 3]
            assert not source.done(), "the source was all produced before the last rebalance: no load during it"
            await source
            await asyncio.gather(*following)
        for reader in readers:
            reader.check()
        assert sum(r.attachments for r in readers) > len(readers), "no stream was ever attached again"
        forwarded = sum(g.metric("harness_agui_gateway_forwarded_requests_total", outcome="ok") for g in live)
        assert forwarded > 0, "no request was forwarded to an owner"

    try:
        run_scenario(scenario(), everyone[0], worker)
    finally:
        for gateway in everyone:
            gateway.kill()
