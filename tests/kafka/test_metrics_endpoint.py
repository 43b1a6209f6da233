"""A running worker serves every metric of the README on /metrics, with values where work was done."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import pytest

from devtools.kafka_cluster import free_port
from tests.kafka.support import (
    WorkerProcess,
    collect,
    corpus,
    expected_total,
    http_get,
    interleave,
    produce,
)
from tests.test_readme import readme_metric_names

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(180)]




def _value(body: str, series: str) -> float:
    found = [float(m) for m in re.findall(rf"^{re.escape(series)}(?:{{[^}}]*}})? ([0-9.e+-]+)$", body, flags=re.M)]
    return sum(found)


def test_every_documented_metric_is_served_by_a_running_worker(
    kafka_bootstrap: str, topic_factory, tmp_path: Path
) -> None:
    source = topic_factory("source", partitions=2)
    output, dlq = topic_factory("output", partitions=2), topic_factory("dlq", partitions=1)
    runs = corpus(copies=1, names=["s01_hello", "s02_tool_roundtrip", "s07_errors", "r0001"])
    asyncio.run(produce(kafka_bootstrap, source, [*interleave(runs), (b"run-nobody", b"{garbage")]))
    port = free_port()
    w = WorkerProcess(tmp_path, "w", kafka_bootstrap, source, output, dlq, f"group-{source}",
                      metrics_port=port).start()
    try:
        asyncio.run(collect(kafka_bootstrap, output, expect=expected_total(runs), timeout_s=60, settle_s=1))
        deadline = time.monotonic() + 30
        while http_get(port, "/readyz")[0] != 200:
            assert time.monotonic() < deadline, "the worker never became ready"
            time.sleep(0.3)
        assert http_get(port, "/livez")[0] == 200
        status, body = http_get(port, "/metrics")
        assert status == 200
        served = set(re.findall(r"^# TYPE (\S+) ", body, flags=re.M))
        for name in readme_metric_names():
            assert name in served or name.removesuffix("_total") in served, f"{name} is not served"
        assert _value(body, "harness_agui_source_records_total") == sum(len(r.lines) for r in runs) + 1
        assert _value(body, "harness_agui_output_events_total") == expected_total(runs)
        dead = sum(len(r.rejected) + len(r.mis_keyed) for r in runs) + 1
        assert _value(body, "harness_agui_dead_letter_records_total") == dead
        assert _value(body, 'harness_agui_transactions_total{result="committed"}') >= 1 or \
            _value(body, "harness_agui_transactions_total") >= 1
        assert _value(body, "harness_agui_assigned_partitions") == 2
        assert _value(body, "harness_agui_partition_ready") == 2
        assert _value(body, "harness_agui_rebuilds_total") == 2
        assert _value(body, "harness_agui_source_to_commit_delay_seconds_count") >= len(runs)
        assert _value(body, "harness_agui_worker_info") == 1
        assert "run_id" not in body and not any(r.key in body for r in runs), "no metric may name a run"
    except AssertionError:
        print(w.log()[-4000:])
        raise
    finally:
        w.stop()
