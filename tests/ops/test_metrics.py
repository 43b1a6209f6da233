"""Metric names, label rules, partition forgetting and the text exposition of `Metrics`."""

from __future__ import annotations

import re
import time

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.parser import text_string_to_metric_families

from worker.gateway.metrics import GatewayMetrics
from worker.ops.metrics import PREFIX, TRANSACTION_RESULTS, BatchHistogram, Metrics
from worker.stream import Verdict

# The contract the Kafka layer codes against: attribute -> (type, label names).
EXPECTED = {
    "source_records_total": ("counter", {"topic", "partition", "verdict"}),
    "output_events_total": ("counter", {"type"}),
    "dead_letter_records_total": ("counter", {"reason"}),
    "transactions_total": ("counter", {"result"}),
    "transaction_duration_seconds": ("histogram", set()),
    "rebuilds_total": ("counter", {"topic", "partition"}),
    "rebuild_records_total": ("counter", {"topic", "partition"}),
    "rebuild_duration_seconds": ("histogram", set()),
    "rebuild_progress_ratio": ("gauge", {"topic", "partition"}),
    "retention_gaps_total": ("counter", {"topic", "partition"}),
    "replay_fallbacks_total": ("counter", set()),
    "open_streams": ("gauge", {"topic", "partition"}),
    "assigned_partitions": ("gauge", set()),
    "partition_ready": ("gauge", {"topic", "partition"}),
    "partition_failures_total": ("counter", {"topic", "partition"}),
    "producers_fenced_total": ("counter", set()),
    "internal_errors_total": ("counter", set()),
    "dead_letters_truncated_total": ("counter", set()),
    "consumer_lag_records": ("gauge", {"topic", "partition"}),
    "source_to_commit_delay_seconds": ("histogram", set()),
    "rebuild_retries_total": ("counter", {"topic", "partition"}),
    "transaction_failures_total": ("counter", {"topic", "partition", "cause"}),
    "authorization_failures_total": ("counter", {"resource_type", "operation"}),
    "deadline_expirations_total": ("counter", {"call"}),
    "authentication_failures_total": ("counter", {"cause"}),
    "pending_records": ("gauge", {"topic", "partition"}),
    "backpressure_pauses_total": ("counter", {"topic", "partition"}),
    "changelog_fallbacks_total": ("counter", {"reason"}),
    "checkpoints_total": ("counter", {"topic", "partition"}),
    "changelog_records_total": ("counter", {"topic", "partition"}),
    "display_records_total": ("counter", set()),
    "index_records_total": ("counter", set()),
    "display_bytes_total": ("counter", set()),
    "display_evicted_items_total": ("counter", set()),
    "display_withheld_total": ("counter", set()),
    "worker_info": ("gauge", {"version"}),
}
# `Metrics.loop`: the event loop's lag and the collector's pauses (worker/ops/loop.py), attribute -> family.
LOOP = {
    "lag_seconds": ("event_loop_lag_seconds", "histogram", set()),
    "gc_seconds": ("gc_duration_seconds", "histogram", {"generation"}),
}
# prometheus-client's own collectors, on both the worker's and the gateway's /metrics.
STANDARD = {"process_cpu_seconds", "process_resident_memory_bytes", "process_virtual_memory_bytes",
            "process_open_fds", "process_max_fds", "process_start_time_seconds", "python_info",
            "python_gc_objects_collected", "python_gc_objects_uncollectable", "python_gc_collections"}
UNITS = ("_total", "_seconds", "_ratio", "_records", "_streams", "_partitions", "_ready", "_info")


def _touch_everything(m: Metrics, topic: str = "harness.events", partition: int = 0) -> None:
    tp = {"topic": topic, "partition": partition}
    for verdict in Verdict:  # the labels the reporter gives (`verdict.value`)
        m.source_records_total.labels(**tp, verdict=verdict.value).inc()
    m.output_events_total.labels(type="TEXT_MESSAGE_CONTENT").inc()
    m.dead_letter_records_total.labels(reason="decode_error").inc()
    m.transactions_total.labels(result="committed").inc()
    m.transaction_duration_seconds.observe(0.02)
    m.rebuilds_total.labels(**tp).inc()
    m.rebuild_records_total.labels(**tp).inc(10)
    m.rebuild_duration_seconds.observe(1.5)
    m.rebuild_progress_ratio.labels(**tp).set(0.5)
    m.retention_gaps_total.labels(**tp).inc()
    m.replay_fallbacks_total.inc()
    m.open_streams.labels(**tp).set(4)
    m.assigned_partitions.set(1)
    m.partition_ready.labels(**tp).set(1)
    m.partition_failures_total.labels(**tp).inc()
    m.producers_fenced_total.inc()
    m.internal_errors_total.inc()
    m.dead_letters_truncated_total.inc()
    m.consumer_lag_records.labels(**tp).set(12)
    m.source_to_commit_delay_seconds.observe(0.004)
    m.rebuild_retries_total.labels(**tp).inc()
    m.transaction_failures_total.labels(**tp, cause="deadline").inc()
    m.authorization_failures_total.labels(resource_type="topic", operation="write").inc()
    m.deadline_expirations_total.labels(call="commit").inc()
    m.authentication_failures_total.labels(cause="authentication").inc()
    m.pending_records.labels(**tp).set(7)
    m.backpressure_pauses_total.labels(**tp).inc()
    m.changelog_fallbacks_total.labels(reason="ahead").inc()
    m.checkpoints_total.labels(**tp).inc()
    m.changelog_records_total.labels(**tp).inc(3)


def test_every_contract_metric_is_exposed_with_its_type_and_labels() -> None:
    m = Metrics(version="1.2.3")
    _touch_everything(m)
    families = {f.name: f for f in text_string_to_metric_families(m.render().decode())}
    for attr, (kind, labels) in EXPECTED.items():
        # The parser strips the counter `_total` suffix from family names.
        family_name = PREFIX + (attr.removesuffix("_total") if kind == "counter" else attr)
        family = families[family_name]
        assert family.type == kind, attr
        seen = {k for s in family.samples for k in s.labels if k != "le"}
        assert seen == labels, attr
        assert getattr(m, attr) is not None
    for attr, (name, kind, labels) in LOOP.items():
        family = families[PREFIX + name]
        assert family.type == kind, attr
        assert {k for s in family.samples for k in s.labels if k != "le"} == labels, attr
        assert getattr(m.loop, attr) is not None
    assert {name for name in families if name.startswith(PREFIX)} == {
        PREFIX + (attr.removesuffix("_total") if kind == "counter" else attr) for attr, (kind, _) in EXPECTED.items()
    } | {PREFIX + name for name, _, _ in LOOP.values()}
    assert {name for name in families if not name.startswith(PREFIX)} == STANDARD


@pytest.mark.parametrize("gateway", [False, True], ids=["worker", "gateway"])
def test_process_and_python_metrics_of_the_standard_collectors_are_served(gateway: bool) -> None:
    text = (GatewayMetrics() if gateway else Metrics()).render().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert set(families) >= STANDARD
    cpu = families["process_cpu_seconds"].samples[0].value
    assert 0 < cpu <= time.process_time() + 0.1  # this process's own CPU, as /proc reports it
    assert families["process_resident_memory_bytes"].samples[0].value > 10 * 2**20
    assert {s.labels["generation"] for s in families["python_gc_collections"].samples} == {"0", "1", "2"}
    assert families["python_info"].samples[0].labels["implementation"] == "CPython"
    prefix = "harness_agui_gateway_" if gateway else PREFIX
    assert f"{prefix}event_loop_lag_seconds" in families and f"{prefix}gc_duration_seconds" in families


def test_names_follow_prefix_and_unit_rules() -> None:
    m = Metrics()
    _touch_everything(m)
    names = {line.split("{")[0].split(" ")[0] for line in m.render().decode().splitlines()
             if line and not line.startswith("#")}
    for name in names:
        if name.startswith(("process_", "python_")):  # prometheus-client's collectors name their own
            continue
        assert name.startswith(PREFIX), name
        assert re.fullmatch(r"[a-z_]+", name), name
        base = re.sub(r"_(bucket|count|sum)$", "", name)
        assert base.endswith(UNITS), name
        assert "_milliseconds" not in name and "_ms" not in name, name
    counters = {n for n in names if not n.endswith(("_bucket", "_count", "_sum"))
                and EXPECTED.get(n.removeprefix(PREFIX), ("",))[0] == "counter"}
    assert counters and all(n.endswith("_total") for n in counters)
    assert not any(n.endswith("_created") for n in names)


def test_no_label_can_carry_a_run_id() -> None:
    m = Metrics()
    _touch_everything(m)
    for family in text_string_to_metric_families(m.render().decode()):
        for sample in family.samples:
            assert not {"run_id", "run", "thread_id", "key"} & set(sample.labels), family.name
    with pytest.raises(ValueError):
        m.source_records_total.labels(topic="t", partition=0, verdict="processed", run_id="r1")


def test_transaction_results_and_info_exist_before_any_traffic() -> None:
    text = Metrics(version="9.9.9").render().decode()
    for result in TRANSACTION_RESULTS:
        assert f'{PREFIX}transactions_total{{result="{result}"}} 0.0' in text
    assert f'{PREFIX}worker_info{{version="9.9.9"}} 1.0' in text


def test_forget_partition_removes_only_that_partitions_series() -> None:
    m = Metrics()
    _touch_everything(m, partition=0)
    _touch_everything(m, partition=1)
    _touch_everything(m, topic="other", partition=0)
    m.forget_partition("harness.events", 0)
    samples = [s for f in text_string_to_metric_families(m.render().decode()) for s in f.samples]
    labelled = [(s.labels.get("topic"), s.labels.get("partition")) for s in samples if "topic" in s.labels]
    assert ("harness.events", "0") not in labelled
    assert ("harness.events", "1") in labelled
    assert ("other", "0") in labelled
    # Every per-partition family still has its partition-1 series.
    per_partition = {f.name for f in text_string_to_metric_families(m.render().decode())
                     for s in f.samples if s.labels.get("partition") == "1"}
    assert len(per_partition) == sum(1 for _, labels in EXPECTED.values() if "partition" in labels)
    # Unlabelled and enum-labelled series are untouched.
    text = m.render().decode()
    assert f"{PREFIX}assigned_partitions 1.0" in text
    assert f'{PREFIX}output_events_total{{type="TEXT_MESSAGE_CONTENT"}} 3.0' in text


def test_instances_do_not_share_a_registry() -> None:
    a, b = Metrics(), Metrics()
    a.producers_fenced_total.inc()
    assert f"{PREFIX}producers_fenced_total 1.0" in a.render().decode()
    assert f"{PREFIX}producers_fenced_total 0.0" in b.render().decode()


def test_delay_buckets_cover_one_millisecond_to_thirty_seconds() -> None:
    m = Metrics()
    m.source_to_commit_delay_seconds.observe(0.0005)
    m.source_to_commit_delay_seconds.observe(29.0)
    text = m.render().decode()
    assert f'{PREFIX}source_to_commit_delay_seconds_bucket{{le="0.001"}} 1.0' in text
    assert f'{PREFIX}source_to_commit_delay_seconds_bucket{{le="30.0"}} 2.0' in text


@settings(max_examples=100, deadline=None)
@example(batches=[[1.0, 2.0, 0.5], [2.0]], bounds=[2.0, 1.0])  # values on a bound count in that bucket (le)
@given(batches=st.lists(st.lists(st.floats(min_value=0, max_value=100, allow_nan=False), max_size=20), max_size=5),
       bounds=st.lists(st.floats(min_value=0.0001, max_value=50), min_size=1, max_size=6, unique=True))  # fmt: skip
def test_a_batch_histogram_exposes_what_a_histogram_fed_one_value_at_a_time_exposes(
    batches: list[list[float]], bounds: list[float]
) -> None:
    batched, single = CollectorRegistry(), CollectorRegistry()
    ours = BatchHistogram("d_seconds", "d", bounds, batched)
    theirs = Histogram("d_seconds", "d", buckets=sorted(bounds), registry=single)
    for batch in batches:
        ours.observe_many(batch)
        for value in batch:
            theirs.observe(value)

    def samples(registry: CollectorRegistry) -> list[tuple[str, list[tuple[str, str]], float]]:
        found = [s for family in registry.collect() for s in family.samples if not s.name.endswith("_created")]
        return sorted((s.name, sorted(s.labels.items()), round(s.value, 6)) for s in found)

    assert samples(batched) == samples(single)
