"""One partition's trouble stays its own, on real brokers: an unreachable dead-letter partition, and a zombie.

(a) Six source partitions on three nodes. One node is the only replica of the dead-letter topic and the preferred
    leader of source partition 0, the only partition that dead-letters; the changelog lives on the other two.
    Stopping that node leaves partition 0 unable to commit; partitions 1-5 must keep committing and stay ready,
    partition 0 must come back when the node does, memory must stay bounded meanwhile, and the output must still
    be exactly once. The node is first made to coordinate no group and no transaction: a coordinator's move is
    the brokers' failover, which can fail a commit in flight of any partition, not partition 0's trouble. So
    partitions 1-5 fail no transaction at all.
(b) A worker stopped (SIGSTOP) past its session timeout while an heir takes over, then resumed: with busy and idle
    partitions, no committed offset stalls for a session timeout, the heir is never fenced, and a parked idle
    partition whose producer the heir fenced takes its next record at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.admin import AlterPartitionReassignmentsRequest

from devtools.kafka_cluster import KafkaCluster, free_port
from tests.kafka.conftest import TopicFactory
from tests.kafka.support import (
    Run,
    WorkerProcess,
    assert_exactly_once,
    collect,
    converted,
    corpus,
    expected_total,
    http_get,
    interleave,
    rekey,
)
from worker.settings import Settings

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

Record = tuple[int, bytes, bytes]  # partition, key, value
_POISON = 1_000  # undecodable records of partition 0, each dead-lettered once
_BOUND = 40  # --max-pending-records
# After the node stops: the partitions it led have new leaders and the clients have found them.
_SETTLE_S = 5.0
_OFFSETS, _TRANSACTIONS = "__consumer_offsets", "__transaction_state"  # their leaders coordinate groups, transactions


async def _create_assigned(bootstrap: str, name: str, replicas: Mapping[int, list[int]],
                           config: Mapping[str, str] | None = None) -> None:
    """Create a topic with an explicit replica list (node ids) per partition; wait until every one has a leader."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await admin.start()
    try:
        response = await admin.create_topics([NewTopic(name, -1, -1, replica_assignments=dict(replicas),
                                                       topic_configs=dict(config or {}))])
        assert all(entry[1] == 0 for entry in response.topic_errors), response.topic_errors
        async with asyncio.timeout(60):
            while True:
                (info,) = await admin.describe_topics([name])
                parts = info["partitions"] if not info["error_code"] else []
                if len(parts) == len(replicas) and all(p["leader"] >= 0 for p in parts):
                    return
                await asyncio.sleep(0.1)
    finally:
        await admin.close()


async def _feed(bootstrap: str, topic: str, records: list[Record], duration_s: float) -> None:
    """Send records to their partitions, spread evenly over `duration_s`; an idempotent producer retries."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True, linger_ms=5,
                                request_timeout_ms=60_000)
    await producer.start()
    try:
        loop = asyncio.get_running_loop()
        start = loop.time()
        futures = []
        for i, (partition, key, value) in enumerate(records):
            due = start + duration_s * i / max(1, len(records))
            if due > loop.time():
                await asyncio.sleep(due - loop.time())
            futures.append(await producer.send(topic, value=value, key=key, partition=partition))
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def _internal_topics(bootstrap: str) -> dict[str, list[dict[str, Any]]]:
    """The partitions of `__consumer_offsets` and `__transaction_state` (each made by the first look-up of its kind),
    once every one has a leader."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await admin.start()
    try:
        async with asyncio.timeout(60):
            while True:
                for kind in (0, 1):  # a group, a transaction: creates its topic when missing
                    with contextlib.suppress(Exception):  # not yet: being created, or a partition has no leader
                        await admin.find_coordinator("iso-probe", kind)
                described = await admin.describe_topics([_OFFSETS, _TRANSACTIONS])
                found = {info["topic"]: info["partitions"] for info in described if not info["error_code"]}
                if len(found) == 2 and all(p["leader"] >= 0 for parts in found.values() for p in parts):
                    return found
                await asyncio.sleep(0.2)
    finally:
        await admin.close()


async def _coordinate_nothing(cluster: KafkaCluster, node: int) -> None:
    """Leave `node` coordinating no group and no transaction for the rest of the session: it becomes the last
    replica of every partition of the internal topics (never their preferred leader, so a leader rebalance never
    brings one back), and a restart (a controlled shutdown) moves the leaderships it has.

    A worker's six transactional ids differ in their last digit only, so they hash onto every partition of a
    three-partition `__transaction_state`: no choice of names keeps them all off a node that leads one."""
    bootstrap = cluster.bootstrap_servers
    internal = await _internal_topics(bootstrap)
    topics = [(topic, [(p["partition"], [r for r in p["replicas"] if r != node] + [node], {}) for p in parts], {})
              for topic, parts in internal.items()]  # fmt: skip
    client = AIOKafkaClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    await client.bootstrap()
    try:
        response = await client.send(client.get_random_node(), AlterPartitionReassignmentsRequest(10_000, topics, {}))
    finally:
        await client.close()
    assert response.error_code == 0, response
    assert all(p[1] == 0 for topic in response.responses for p in topic[1]), response.responses
    index = cluster.index_of(node)
    await cluster.stop_node_async(index)
    await cluster.start_node_async(index)
    async with asyncio.timeout(60):
        while True:
            leaders = [p["leader"] for parts in (await _internal_topics(bootstrap)).values() for p in parts]
            if node not in leaders:
                return
            await asyncio.sleep(0.2)


def _spread(runs: list[Run], partitions: list[int]) -> list[Record]:
    """Runs dealt round-robin to `partitions`, all lines interleaved (each run in order, in one partition)."""
    home = {run.key: partitions[i % len(partitions)] for i, run in enumerate(runs)}
    return [(home[key.decode()], key, value) for key, value in interleave(runs)]


@dataclass
class _Watch:
    """Committed and end offsets of every partition, sampled over time."""

    bootstrap: str
    topic: str
    group: str
    partitions: int
    samples: list[tuple[float, dict[int, int], dict[int, int]]] = field(default_factory=list)

    async def sample(self, admin: AIOKafkaAdminClient, consumer: AIOKafkaConsumer) -> None:
        """One sample, timed when the committed offsets arrived (the end offsets, read after them, are never less
        than they were then): a slow end-offset look-up does not lengthen a stall."""
        tps = [TopicPartition(self.topic, p) for p in range(self.partitions)]
        try:
            committed = await asyncio.wait_for(admin.list_consumer_group_offsets(self.group, partitions=tps), 5)
            read_at = time.monotonic()
            ends = await asyncio.wait_for(consumer.end_offsets(tps), 5)
        except Exception:
            return  # a node is down or a coordinator moves: no sample this time
        self.samples.append((read_at, {tp.partition: (o.offset if o else -1) for tp, o in committed.items()},
                             {tp.partition: end for tp, end in ends.items()}))

    def longest_stall(self, partition: int, since: float, until: float) -> float:
        """Longest time the committed offset stayed put while records waited past it, within [since, until]: from
        the first sample showing an offset (with records beyond it) to the first sample showing another, so a
        stall is never shorter than it was (by up to one sampling interval, or a gap in the samples, longer)."""
        worst, stuck_since, last, last_at = 0.0, None, None, since
        for at, committed, ends in self.samples:
            if not since <= at <= until:
                continue
            c = committed.get(partition, -1)
            if c != last:
                if stuck_since is not None:
                    worst = max(worst, at - stuck_since)
                stuck_since = at if ends.get(partition, 0) > c else None
            elif stuck_since is None and ends.get(partition, 0) > c:
                stuck_since = at
            last, last_at = c, at
        if stuck_since is not None:
            worst = max(worst, last_at - stuck_since)
        return worst

    def committed_at_end(self) -> dict[int, int]:
        return self.samples[-1][1] if self.samples else {}


async def _clients(bootstrap: str) -> tuple[AIOKafkaAdminClient, AIOKafkaConsumer]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5_000)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, request_timeout_ms=5_000)
    await admin.start()
    await consumer.start()
    return admin, consumer


def _metric(body: str, name: str, partition: int | None = None, **labels: str) -> float:
    total = 0.0
    for line in body.splitlines():
        match = re.match(rf"^harness_agui_{name}(?:{{(.*)}})? ([0-9.e+-]+)$", line)
        if not match:
            continue
        got = dict(re.findall(r'(\w+)="([^"]*)"', match.group(1) or ""))
        if partition is not None and got.get("partition") != str(partition):
            continue
        if all(got.get(k) == v for k, v in labels.items()):
            total += float(match.group(2))
    return total


def _rss_mib(w: WorkerProcess) -> float:
    assert w.proc is not None
    for line in Path(f"/proc/{w.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def _until(what: str, condition: Callable[[], bool], timeout_s: float, w: WorkerProcess) -> float:
    """Seconds until `condition` holds (polled every 0.25 s)."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout_s and w.alive, f"{what} not within {timeout_s} s\n{w.log()[-4000:]}"
        await asyncio.sleep(0.25)
    return time.monotonic() - started


@pytest.mark.cluster3
def test_an_unreachable_dead_letter_partition_stalls_only_the_partition_that_needs_it(
    cluster3: KafkaCluster, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    bootstrap = cluster3.bootstrap_servers
    lone, a, b = 3, 1, 2  # node ids; node 3 holds the dead-letter topic alone and coordinates nothing
    base = f"iso-dlq-{int(time.time() * 1000) % 10**9}"
    source, output, dlq, group = f"{base}.src", f"{base}.out", f"{base}.dlq", f"{base}.g"

    runs = [r for r in corpus(copies=1) if not r.rejected]  # partitions 1-5: nothing to dead-letter
    p0_runs = [converted(*rekey(r.lines, "p0")) for r in corpus(copies=1, names=["s01_hello", "r0002", "r0003"])]
    poison = [(0, f"poison-{i}".encode(), f"{{not json {i}".encode()) for i in range(_POISON)]
    p0_feed: list[Record] = []
    for rec in _spread(p0_runs, [0]):  # partition 0 dead-letters all along: mostly poison, some runs
        p0_feed.append(rec)
        p0_feed.extend(poison.pop() for _ in range(min(len(poison), 8)))
    p0_feed.extend(poison)
    rest_feed = _spread(runs, [1, 2, 3, 4, 5])

    async def scenario() -> None:
        await _coordinate_nothing(cluster3, lone)
        # Source partition 0 is led by the lone node and moves; 1-5 are led by the others (all RF 3, min ISR 2).
        await _create_assigned(bootstrap, source, {0: [lone, a, b], **{p: [a, b, lone] if p % 2 else [b, a, lone]
                                                                        for p in range(1, 6)}})
        await _create_assigned(bootstrap, output, {0: [a, b], 1: [b, a], 2: [a, b]})
        await _create_assigned(bootstrap, dlq, {0: [lone]}, {"min.insync.replicas": "1"})
        await _create_assigned(bootstrap, f"{group}.changelog", {p: [a, b] if p % 2 else [b, a] for p in range(6)},
                               {"cleanup.policy": "compact"})
        port = free_port()
        w = WorkerProcess(tmp_path, "w", bootstrap, source, output, dlq, group, "--broker-call-timeout-ms", "3000",
                          "--rebuild-backoff-max-ms", "2000", "--max-pending-records", str(_BOUND),
                          metrics_port=port).start()
        request.addfinalizer(lambda: w.stop(60))
        watch = _Watch(bootstrap, source, group, 6)
        admin, consumer = await _clients(bootstrap)
        feeders: list[asyncio.Task[None]] = []
        try:
            body = ""

            def ready(p: int) -> bool:
                return _metric(body, "partition_ready", p) == 1

            async def scrape() -> None:
                nonlocal body
                try:
                    status, text = await asyncio.to_thread(http_get, port, "/metrics")
                except OSError:
                    return  # not serving yet
                if status == 200:
                    body = text

            feeders += [asyncio.create_task(_feed(bootstrap, source, rest_feed, 45.0)),
                        asyncio.create_task(_feed(bootstrap, source, p0_feed, 40.0))]
            started = time.monotonic()
            while not all(ready(p) for p in range(6)):
                assert time.monotonic() - started < 60 and w.alive, w.log()[-4000:]
                await scrape()
                await asyncio.sleep(0.25)
            await asyncio.sleep(4)
            settings = Settings(source_topic=source, output_topic=output, dlq_topic=dlq, group_id=group)
            coordinators = [await admin.find_coordinator(group, 0)]
            coordinators += [await admin.find_coordinator(settings.transactional_id(source, p), 1) for p in range(6)]
            assert lone not in coordinators, f"node {lone} coordinates some of {coordinators} (group, transactions)"
            rss_before = _rss_mib(w)
            lone_index = cluster3.index_of(lone)
            await cluster3.stop_node_async(lone_index)  # controlled shutdown: leaders move, the DLQ goes offline
            down_at = time.monotonic()
            not_ready: dict[int, int] = dict.fromkeys(range(6), 0)
            rss_peak, p0_pending_peak, ticks = rss_before, 0.0, 0
            settled: dict[int, float] | None = None  # transaction failures per partition once settled
            while time.monotonic() - down_at < 20:
                await scrape()
                await watch.sample(admin, consumer)
                if time.monotonic() - down_at >= _SETTLE_S:
                    if settled is None:
                        settled = {p: _metric(body, "transaction_failures_total", p) for p in range(6)}
                    ticks += 1
                    for p in range(6):
                        not_ready[p] += not ready(p)
                rss_peak = max(rss_peak, _rss_mib(w))
                p0_pending_peak = max(p0_pending_peak, _metric(body, "pending_records", 0))
                await asyncio.sleep(0.5)
            up_at = time.monotonic()
            failures_up = {p: _metric(body, "transaction_failures_total", p) for p in range(6)}
            await cluster3.start_node_async(lone_index)
            back_at = time.monotonic()

            async def p0_live() -> bool:
                await scrape()
                return ready(0)

            while not await p0_live():
                assert time.monotonic() - back_at < 60 and w.alive, w.log()[-4000:]
                await asyncio.sleep(0.25)
            p0_recovery_s = time.monotonic() - back_at
            await asyncio.gather(*feeders)
            while True:
                await watch.sample(admin, consumer)
                last = watch.samples[-1] if watch.samples else None
                if last is not None and all(last[1][p] == last[2][p] for p in range(6)):
                    break
                assert time.monotonic() - back_at < 120 and w.alive, f"{last}\n{w.log()[-4000:]}"
                await asyncio.sleep(0.5)
            await scrape()
        finally:
            for task in feeders:
                task.cancel()
            await asyncio.gather(*feeders, return_exceptions=True)
            await admin.close()
            await consumer.stop()

        assert settled is not None
        stalls = {p: watch.longest_stall(p, down_at + _SETTLE_S, up_at) for p in range(6)}
        commits_during = {p: [s[1][p] for s in watch.samples if down_at <= s[0] <= up_at] for p in range(6)}
        advanced_by = {p: c[-1] - c[0] if c else 0 for p, c in commits_during.items()}
        print(f"outage {up_at - down_at:.1f} s; records committed meanwhile per partition {advanced_by}; longest "
              f"stall of partitions 1-5: {max(stalls[p] for p in range(1, 6)):.2f} s; partition 0 ready "
              f"{p0_recovery_s:.1f} s after the node was back; not-ready samples {not_ready} of {ticks}; RSS "
              f"{rss_before:.0f} -> peak {rss_peak:.0f} MiB; partition 0 pending peak {p0_pending_peak:.0f}; "
              f"transaction failures as the node left {settled}, during the outage {failures_up}")
        for p in range(1, 6):
            assert advanced_by[p] > 0, f"partition {p} committed nothing while the node was down"
            assert stalls[p] < 3.0, f"partition {p} stalled {stalls[p]:.1f} s while another partition was stuck"
            assert not_ready[p] == 0, f"partition {p} was reported not ready while the node was down\n{w.log()[-6000:]}"
            failed = failures_up[p]
            assert failed == settled[p] <= 1, f"partition {p} failed {failed} transactions, {settled[p]} as it left"
        assert not_ready[0] > 0, "partition 0 cannot commit without its dead-letter partition: it must say so"
        assert _metric(body, "transaction_failures_total", 0) >= 1, "partition 0 was never isolated"
        assert p0_pending_peak <= _BOUND + 500, "partition 0's pending records passed the bound by more than a poll"
        assert _metric(body, "backpressure_pauses_total", 0) >= 1, "partition 0 kept fetching while it could not commit"
        assert rss_peak - rss_before < 150, f"memory grew {rss_peak - rss_before:.0f} MiB during the outage"
        assert w.alive

        out = await collect(bootstrap, output, expect=expected_total(runs + p0_runs), timeout_s=60, settle_s=2)
        assert_exactly_once(out, runs + p0_runs)
        dead = await collect(bootstrap, dlq, expect=_POISON, timeout_s=60, settle_s=2)
        values = sorted(d.value for d in dead)
        assert values == sorted(v for _, _, v in p0_feed if v.startswith(b"{not json")), "dead letters not exactly once"

    asyncio.run(scenario())


def test_a_resumed_zombie_never_makes_the_real_owner_wait_a_session_timeout(
    kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    source = topic_factory("source", partitions=6)
    output, dlq = topic_factory("output", partitions=3), topic_factory("dlq", partitions=1)
    group = f"group-{source}"
    session_s = 6.0
    fast = ("--session-timeout-ms", str(int(session_s * 1000)), "--heartbeat-interval-ms", "1000")
    busy, idle = [0, 1, 3], [2, 4, 5]  # the sticky assignor hands 3, 4 and 5 back to the resumed zombie
    runs = corpus(copies=1)
    openers = [_probe(r, f"open{p}") for r in corpus(copies=1, names=["s01_hello"]) for p in idle]
    probes = [_probe(r, f"idle{p}") for r in corpus(copies=1, names=["s01_hello"]) for p in idle]
    feed = _spread(runs, busy)
    zombie = WorkerProcess(tmp_path, "zombie", kafka_bootstrap, source, output, dlq, group, *fast,
                           metrics_port=free_port())
    heir = WorkerProcess(tmp_path, "heir", kafka_bootstrap, source, output, dlq, group, *fast,
                         metrics_port=free_port())

    def lines_of(some: list[Run]) -> list[Record]:
        return [(p, r.key.encode(), line) for p, r in zip(idle, some, strict=True) for line in r.lines]

    async def scenario() -> tuple[_Watch, float, float, dict[int, float]]:
        watch = _Watch(kafka_bootstrap, source, group, 6)
        admin, consumer = await _clients(kafka_bootstrap)
        feeder: asyncio.Task[None] | None = None
        try:
            await _feed(kafka_bootstrap, source, lines_of(openers), 0.0)  # idle partitions get a commit first
            zombie.start()
            feeder = asyncio.create_task(_feed(kafka_bootstrap, source, feed, 40.0))

            async def sampling(seconds: float) -> None:
                until = time.monotonic() + seconds
                while time.monotonic() < until:
                    await watch.sample(admin, consumer)
                    await asyncio.sleep(0.25)

            await _until("the zombie rebuilt its partitions",
                         lambda: sum(m.startswith("partition rebuilt") for m in _messages(zombie)) >= 6, 60, zombie)
            await sampling(3)
            zombie.signal(signal.SIGSTOP)
            heir.start()
            await sampling(session_s * 2)  # past the session timeout
            await _until("the heir owns every partition",  # however long a busy host made its start
                         lambda: sum(m.startswith("partition rebuilt") for m in _messages(heir)) >= 6, 120, heir)
            zombie.signal(signal.SIGCONT)
            resumed = time.monotonic()
            await sampling(12)
            # Each idle partition gets a short run now: a partition parked with a fenced producer takes it at once.
            before = {p: watch.committed_at_end().get(p, 0) for p in idle}
            probed = time.monotonic()
            await _feed(kafka_bootstrap, source, lines_of(probes), 0.0)
            taken: dict[int, float] = {}
            while len(taken) < len(idle) and time.monotonic() - probed < 20:
                await watch.sample(admin, consumer)
                for p in idle:
                    if p not in taken and watch.committed_at_end().get(p, 0) > before[p]:
                        taken[p] = time.monotonic() - probed
                await asyncio.sleep(0.2)
            await feeder
            return watch, resumed, probed, taken
        finally:
            if feeder is not None and not feeder.done():
                feeder.cancel()
            await admin.close()
            await consumer.stop()

    try:
        watch, resumed, probed, taken = asyncio.run(scenario())
        stalls = {p: watch.longest_stall(p, resumed, probed) for p in busy}
        moved = {int(r["partition"]): float(r["rebuild_seconds"]) for r in zombie.log_records()
                 if str(r.get("msg", "")).startswith("partition rebuilt") and r.get("ts", "") > _resumed_ts(zombie)}
        kept = sorted(int(r["partition"]) for r in zombie.log_records()
                      if str(r.get("msg", "")).startswith("partition kept through rebalance"))
        print(f"busy partitions' longest commit stall after the zombie resumed: "
              f"{ {p: round(s, 2) for p, s in stalls.items()} } s; rebuilt on the zombie after it resumed: {moved} s; "
              f"kept by the zombie: {kept}; idle partitions took their record after "
              f"{ {p: round(t, 2) for p, t in taken.items()} } s")
        assert kept, "no partition stayed with the resumed zombie: the parked, fenced case was not exercised"
        for p, stall in stalls.items():
            assert stall < session_s - 1, f"partition {p} stalled {stall:.1f} s: someone waited a session timeout"
            assert stall <= moved.get(p, 0.0) + 3.0, f"partition {p} stalled {stall:.1f} s, more than one rebuild"
        assert sorted(taken) == idle, f"idle partitions never took their record: {taken}"
        assert all(t < 3.0 for t in taken.values()), taken
        heir_said = _messages(heir)
        assert not any("fenced" in m for m in heir_said), "the real owner was fenced"
        assert not any(m.startswith("partition waits for the group") for m in heir_said)
        assert any(m.startswith(("producer fenced", "partitions revoked")) for m in _messages(zombie))
        everything = runs + openers + probes
        out = asyncio.run(collect(kafka_bootstrap, output, expect=expected_total(everything), timeout_s=60))
        assert_exactly_once(out, everything)
    except AssertionError:
        for w in (zombie, heir):
            print(f"---- {w.log_path.name}\n{w.log()[-4000:]}")
        raise
    finally:
        for w in (zombie, heir):
            if w.alive:
                w.signal(signal.SIGCONT)
                w.stop()


def _resumed_ts(w: WorkerProcess) -> str:
    """When the worker learnt it had left the group (its first revocation); "" if it never did."""
    return next((str(r["ts"]) for r in w.log_records() if str(r.get("msg", "")).startswith("partitions revoked")),
                "9999")


def _probe(run: Run, suffix: str) -> Run:
    """A copy of `run` under its own key."""
    return converted(*rekey(run.lines, suffix))
def _messages(w: WorkerProcess) -> list[str]:
    return [str(r.get("msg", "")) for r in w.log_records()]
