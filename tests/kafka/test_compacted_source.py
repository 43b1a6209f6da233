"""A compacted source (key = root run id, so compaction keeps a run's last item): the changelog carries the open
runs' state, so workers killed after compaction removed the early items of runs still open convert every run
exactly as `convert` does; an offset reset to the earliest offset publishes no run by halves."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import orjson
import pytest

from tests.kafka.support import (
    Rec,
    WorkerProcess,
    assert_exactly_once,
    collect,
    corpus,
    expected_total,
    interleave,
    produce,
    read_topic,
    reset_offsets,
    wait_caught_up,
)

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(400)]

NAMES = ["r0001", "r0004", "r0012", "r0014", "r0016", "r0019", "r0026", "r0036", "r0040", "r0051"]
# min.compaction.lag.ms: above the checkpoint interval plus the longest outage below (a killed member holds its
# partition for the 6 s session timeout, then the next one starts and rebuilds).
LAG_MS = 15_000
COMPACTED = {"cleanup.policy": "compact", "segment.ms": "1000", "min.cleanable.dirty.ratio": "0.01",
             "min.compaction.lag.ms": str(LAG_MS)}
PRODUCE_S = 40.0  # every run stays open about this long, far beyond the lag
KILLS_AT_S = (20.0, 30.0)
FAST_GROUP = ("--session-timeout-ms", "6000", "--heartbeat-interval-ms", "1000")


def _first_sequences(records: list[Rec]) -> dict[bytes, tuple[int, bool]]:
    """Per key of the source: the lowest sequence still present, and whether its root's terminal is."""
    out: dict[bytes, tuple[int, bool]] = {}
    for r in records:
        assert r.key is not None and r.value is not None
        item = orjson.loads(r.value)
        low, ended = out.get(r.key, (1 << 62, False))
        root = item["run_id"] == r.key.decode()
        out[r.key] = (min(low, item["sequence"]) if root else low, ended or (root and "result" in item))
    return out


def test_workers_killed_after_compaction_convert_every_run_and_a_reset_half_publishes_none(
    kafka_bootstrap: str, topic_factory, tmp_path: Path
) -> None:
    source = topic_factory("source", partitions=1, config=COMPACTED)
    output, dlq = topic_factory("output", partitions=2), topic_factory("dlq")
    group = f"group-{source}"
    runs = corpus(copies=1, names=NAMES)
    records = interleave(runs)
    workers: list[WorkerProcess] = []

    def start() -> None:
        workers.append(WorkerProcess(tmp_path, f"w{len(workers)}", kafka_bootstrap, source, output, dlq, group,
                                     "--checkpoint-interval-ms", "500", *FAST_GROUP).start())

    lost_while_open: list[bytes] = []

    async def scenario() -> None:
        start()
        began = time.monotonic()
        feeder = asyncio.create_task(produce(kafka_bootstrap, source, records, pace_s=PRODUCE_S / len(records)))
        for at in KILLS_AT_S:
            await asyncio.sleep(max(0.0, began + at - time.monotonic()))
            workers[-1].kill()
            present = _first_sequences(await read_topic(kafka_bootstrap, source))
            lost_while_open.extend(k for k, (low, ended) in present.items() if low > 0 and not ended)
            await asyncio.sleep(1.0)
            start()
        await feeder

    try:
        asyncio.run(scenario())
        assert lost_while_open, "compaction removed no early item of an open run before a restart"
        out = asyncio.run(collect(kafka_bootstrap, output, expect=expected_total(runs), timeout_s=120))
        assert_exactly_once(out, runs)
        restored = [m for w in workers[1:] for r in w.log_records()
                    if (m := str(r.get("msg", ""))).startswith("partition rebuilt: restored")]
        assert len(restored) == len(KILLS_AT_S), restored
        assert workers[-1].stop() == 0, workers[-1].log()[-3000:]
    except AssertionError:
        for w in workers:
            said = [str(r.get("msg", ""))[:200] for r in w.log_records() if "dead-lettered" not in str(r.get("msg"))]
            print(f"---- {w.log_path.name}", *said[-20:], sep="\n")
        raise
    finally:
        for w in workers:
            if w.alive:
                w.kill()

    # Replay after a reset to the earliest offset, into fresh topics: a run whose beginning compaction removed is
    # dead-lettered as stream-start-missing; a run still whole is published whole; none is published in part.
    asyncio.run(reset_offsets(kafka_bootstrap, group, source, 0))
    again, dead = topic_factory("output", partitions=2), topic_factory("dlq")
    w = WorkerProcess(tmp_path, "after-reset", kafka_bootstrap, source, again, dead, group).start()
    try:
        asyncio.run(wait_caught_up(kafka_bootstrap, group, source, timeout_s=120))
        assert w.stop() == 0, w.log()[-3000:]
    finally:
        if w.alive:
            w.kill()
    present = _first_sequences(asyncio.run(read_topic(kafka_bootstrap, source)))
    published: dict[bytes | None, list[bytes | None]] = {}
    for r in sorted(asyncio.run(read_topic(kafka_bootstrap, again)), key=lambda r: (r.partition, r.offset)):
        published.setdefault(r.key, []).append(r.value)
    missing_start = {r.key for r in asyncio.run(read_topic(kafka_bootstrap, dead))
                     if r.header("dlq-reason") == "stream-start-missing"}
    assert any(low > 0 for low, _ in present.values()), "compaction left every run whole"
    for run in runs:
        key = run.key.encode()
        low, _ = present[key]
        events = published.get(key, [])
        if low > 0:
            assert not events and key in missing_start, f"{run.key}: lost its beginning, yet published {len(events)}"
        else:
            assert events == run.events, f"{run.key}: whole in the source, published {len(events)} of {len(run.events)}"
