"""Exactly-once through one worker, crashes, rebalances and zombies, on a real broker; each run equals convert."""

from __future__ import annotations

import asyncio
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiokafka import TopicPartition

from tests.kafka.support import (
    Run,
    WorkerProcess,
    assert_exactly_once,
    collect,
    committed,
    corpus,
    expected_total,
    interleave,
    produce,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(420)]


@dataclass
class Topics:
    bootstrap: str
    source: str
    output: str
    dlq: str
    group: str
    log_dir: Path

    def worker(self, name: str, *extra: str) -> WorkerProcess:
        return WorkerProcess(self.log_dir, name, self.bootstrap, self.source, self.output, self.dlq, self.group,
                             *extra)


@pytest.fixture
def topics(kafka_bootstrap: str, topic_factory, tmp_path: Path, request: pytest.FixtureRequest) -> Topics:
    partitions = getattr(request, "param", 3)
    source = topic_factory("source", partitions=partitions)
    return Topics(kafka_bootstrap, source, topic_factory("output", partitions=3), topic_factory("dlq", partitions=1),
                  f"group-{source}", tmp_path)


def _finish(t: Topics, runs: list[Run], workers: list[WorkerProcess], timeout_s: float = 120) -> None:
    try:
        out = asyncio.run(collect(t.bootstrap, t.output, expect=expected_total(runs), timeout_s=timeout_s))
        assert_exactly_once(out, runs)
    except AssertionError:
        for w in workers:
            print(f"---- {w.log_path.name}\n{w.log()[-4000:]}")
        raise
    finally:
        for w in workers:
            if w.alive:
                w.stop()


async def _until_committed_everywhere(t: Topics, partitions: int, timeout_s: float = 90) -> None:
    """Wait until the group has committed an offset past 0 on every source partition: a worker killed then has
    something to rebuild (a checkpoint cut with its first commit, or records to replay), however slow its start."""
    deadline = time.monotonic() + timeout_s
    tps = [TopicPartition(t.source, p) for p in range(partitions)]
    while True:
        offsets = [await committed(t.bootstrap, t.group, tp) for tp in tps]
        if min(offsets) > 0:
            return
        assert time.monotonic() < deadline, f"no commit on every partition within {timeout_s} s: {offsets}"
        await asyncio.sleep(0.2)


def _log_messages(w: WorkerProcess) -> list[str]:
    return [str(r.get("msg", "")) for r in w.log_records()]


async def _until_rebuilt(w: WorkerProcess, partitions: int, timeout_s: float = 120) -> None:
    """Until `w` has rebuilt (taken over) `partitions` partitions, however long a busy host made it take."""
    deadline = time.monotonic() + timeout_s
    while len([m for m in _log_messages(w) if m.startswith("partition rebuilt")]) < partitions:
        assert time.monotonic() < deadline and w.alive, w.log()[-3000:]
        await asyncio.sleep(0.2)


def test_many_interleaved_runs_through_one_worker(topics: Topics) -> None:
    runs = corpus(copies=2)
    asyncio.run(produce(topics.bootstrap, topics.source, interleave(runs)))
    w = topics.worker("w1").start()
    _finish(topics, runs, [w])
    assert w.stop() == 0, w.log()[-3000:]


@pytest.mark.parametrize(("changelog", "helpers"), [(True, 0), (False, 0), (False, 2)],
                         ids=["changelog", "replay-in-worker", "replay-in-2-helpers"])
def test_kill_9_mid_stream_then_restart(topics: Topics, changelog: bool, helpers: int) -> None:
    runs = corpus(copies=2)
    records = interleave(runs)
    mode = () if changelog else ("--no-changelog",)
    w1 = topics.worker("w1", *mode).start()

    async def scenario() -> None:
        feeder = asyncio.create_task(produce(topics.bootstrap, topics.source, records, pace_s=0.0015))
        await _until_committed_everywhere(topics, partitions=3)
        w1.kill()
        await feeder

    asyncio.run(scenario())
    w2 = topics.worker("w2", *mode, "--replay-processes", str(helpers)).start()
    _finish(topics, runs, [w2])
    rebuilt = [m for m in _log_messages(w2) if m.startswith("partition rebuilt")]
    assert rebuilt, "the restarted worker never rebuilt its partitions"
    restored = [m for m in rebuilt if m.startswith("partition rebuilt: restored")]
    assert len(restored) == (len(rebuilt) if changelog else 0), rebuilt
    by_helpers = [m for m in _log_messages(w2) if m.startswith("replayed by helper processes")]
    assert bool(by_helpers) == bool(helpers), w2.log()[-3000:]


@pytest.mark.parametrize("topics", [6], indirect=True)
def test_three_workers_join_and_leave_under_load(topics: Topics) -> None:
    runs = corpus(copies=3)
    records = interleave(runs)
    workers = [topics.worker(f"w{i}", "--replay-processes", str(i % 2)) for i in range(4)]
    workers[0].start()

    async def scenario() -> None:
        feeder = asyncio.create_task(produce(topics.bootstrap, topics.source, records, pace_s=0.0015))
        # Every partition live before the first join, so that the members' partitions are parked at the revocation
        # and those given back are kept; a host too busy to bring the first member up in a fixed time decides no more.
        await _until_rebuilt(workers[0], 6)
        workers[1].start()
        await asyncio.sleep(3)
        workers[2].start()
        await asyncio.sleep(3)
        assert workers[0].stop() == 0, "a graceful leave must exit 0"
        await asyncio.sleep(2)
        workers[1].kill()
        workers[3].start()
        await feeder

    asyncio.run(scenario())
    _finish(topics, runs, workers)
    kept = [m for w in workers for m in _log_messages(w) if m.startswith("partition kept through rebalance")]
    assert kept, "a partition that stays with its member must keep its state, without a replay"


def test_zombie_is_fenced_and_publishes_nothing_more(topics: Topics) -> None:
    runs = corpus(copies=2)
    records = interleave(runs)
    fast = ("--session-timeout-ms", "6000", "--heartbeat-interval-ms", "1000")
    zombie = topics.worker("zombie", *fast).start()
    heir = topics.worker("heir", *fast)

    async def scenario() -> None:
        feeder = asyncio.create_task(produce(topics.bootstrap, topics.source, records, pace_s=0.0015))
        await asyncio.sleep(5)
        await _until_committed_everywhere(topics, partitions=3)  # publishing on every partition when it freezes
        zombie.signal(signal.SIGSTOP)
        heir.start()
        await asyncio.sleep(12)  # past the session timeout
        await _until_rebuilt(heir, 3)  # the heir owns every partition now
        zombie.signal(signal.SIGCONT)
        await feeder

    asyncio.run(scenario())
    _finish(topics, runs, [zombie, heir])
    said = _log_messages(zombie)
    assert any(m.startswith(("producer fenced", "partitions revoked")) for m in said), zombie.log()[-3000:]


async def _until_live(w: WorkerProcess, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not any(m.startswith("partition rebuilt") for m in _log_messages(w)):
        assert time.monotonic() < deadline and w.alive, w.log()[-3000:]
        await asyncio.sleep(0.2)


def test_sigterm_mid_stream_commits_and_exits_in_bounded_time(topics: Topics) -> None:
    runs = corpus(copies=1)
    w = topics.worker("w1").start()

    async def scenario() -> None:
        feeder = asyncio.create_task(produce(topics.bootstrap, topics.source, interleave(runs), pace_s=0.001))
        await _until_live(w)
        await asyncio.sleep(1.5)
        started = time.monotonic()
        assert w.stop(timeout_s=30) == 0, w.log()[-3000:]
        assert time.monotonic() - started < 25
        await feeder

    asyncio.run(scenario())
    assert "worker stopped cleanly" in _log_messages(w)
    w2 = topics.worker("w2").start()
    _finish(topics, runs, [w2])


def test_sigterm_while_joining_the_group_exits_cleanly(topics: Topics) -> None:
    w = topics.worker("w1").start()
    deadline = time.monotonic() + 30
    while not w.log_records():  # the first log line comes once settings are read, before the group is joined
        assert time.monotonic() < deadline and w.alive, w.log()[-3000:]
        time.sleep(0.05)
    assert w.stop(timeout_s=30) == 0, w.log()[-3000:]
    assert "worker stopped cleanly" in _log_messages(w)
