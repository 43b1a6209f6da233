"""A broker restart (one node) and a leader failover (three nodes) under load lose and repeat nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from devtools.kafka_cluster import KafkaCluster
from tests.kafka.support import (
    WorkerProcess,
    assert_exactly_once,
    collect,
    corpus,
    expected_total,
    interleave,
    produce,
)

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(600)]


async def _produce_with_retries(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    """Feed in slices; a slice that fails while a broker is down is sent again (the producer is idempotent)."""
    for i in range(0, len(records), 200):
        for _attempt in range(30):
            try:
                await produce(bootstrap, topic, records[i : i + 200], pace_s=0.002)
                break
            except Exception:
                await asyncio.sleep(1)
        else:
            raise AssertionError(f"could not produce slice {i} after 30 tries")


def _run_under_failure(cluster: KafkaCluster, tmp_path: Path, *, kill: bool, rf: int) -> None:
    """Stop the node leading source partition 0 a few seconds into a paced feed, then bring it back."""
    source, output, dlq = (f"failover-{kind}-{rf}-{kill}" for kind in ("src", "out", "dlq"))
    for name, partitions in ((source, 3), (output, 3), (dlq, 1)):
        cluster.create_topic(name, partitions=partitions, replication_factor=rf)
    node = cluster.index_of(cluster.leader_of(source, 0))
    runs = corpus(copies=2)
    w = WorkerProcess(tmp_path, "w", cluster.bootstrap_servers, source, output, dlq, f"g-{source}").start()

    async def scenario() -> None:
        feeder = asyncio.create_task(_produce_with_retries(cluster.bootstrap_servers, source, interleave(runs)))
        await asyncio.sleep(4)
        await asyncio.to_thread(cluster.stop_node, node, kill=kill)
        await asyncio.sleep(5)
        await asyncio.to_thread(cluster.start_node, node)
        await feeder

    try:
        asyncio.run(scenario())
        out = asyncio.run(collect(cluster.bootstrap_servers, output, expect=expected_total(runs), timeout_s=240))
        assert_exactly_once(out, runs)
    except AssertionError:
        print(w.log()[-6000:])
        raise
    finally:
        w.stop(60)


def test_single_broker_restart_under_load(tmp_path: Path) -> None:
    with KafkaCluster.start(nodes=1) as cluster:
        _run_under_failure(cluster, tmp_path, kill=False, rf=1)


@pytest.mark.cluster3
def test_leader_failover_three_nodes_under_load(cluster3: KafkaCluster, tmp_path: Path) -> None:
    _run_under_failure(cluster3, tmp_path, kill=True, rf=3)
