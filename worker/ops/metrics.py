"""The worker's Prometheus metrics: one private registry per `Metrics`, no label ever holds a run id."""

from __future__ import annotations

import bisect
import copy
import itertools
import math
from collections.abc import Callable, Iterable, Iterator
from typing import Final, cast

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from worker._version import package_version
from worker.client import REFUSAL_CAUSES
from worker.ops.loop import LoopMetrics

__all__ = [
    "CONTENT_TYPE",
    "PREFIX",
    "TRANSACTION_RESULTS",
    "BatchHistogram",
    "Metrics",
    "register_process_collectors",
]

PREFIX: Final = "harness_agui_"
CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
TRANSACTION_RESULTS: Final = ("committed", "aborted")

_TP: Final = ("topic", "partition")
_le_text = cast(Callable[[float], str], floatToGoString)  # how the client writes a bucket's `le` (untyped there)
_TRANSACTION_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_REBUILD_BUCKETS: Final = (0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
_DELAY_BUCKETS: Final = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0,
)


def register_process_collectors(registry: CollectorRegistry) -> None:
    """Add prometheus-client's own collectors to `registry`: `process_*` (CPU, memory, file descriptors, start
    time), `python_info` and `python_gc_*` (collections and objects by generation)."""
    for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        registry.register(collector)


class _WithoutCreated(Collector):
    """The registry's families minus the `_created` timestamp series, which would double every counter."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        for family in self._registry.collect():
            clone = copy.copy(family)
            clone.samples = [s for s in family.samples if not s.name.endswith("_created")]
            yield clone


class BatchHistogram(Collector):
    """A histogram without labels filled a batch of values at a time: one bucket search per value and no lock
    (a scrape reads the counts as one tuple that each batch replaces whole, so it never sees half a batch)."""

    def __init__(self, name: str, documentation: str, buckets: Iterable[float], registry: CollectorRegistry) -> None:
        self._name = name
        self._documentation = documentation
        self._bounds = (*sorted(buckets), math.inf)
        self._les = tuple(_le_text(bound) for bound in self._bounds)
        self._counts: tuple[tuple[int, ...], float] = ((0,) * len(self._bounds), 0.0)
        registry.register(self)

    def observe(self, value: float) -> None:
        """Count one value."""
        self.observe_many((value,))

    def observe_many(self, values: Iterable[float]) -> None:
        """Count every value of `values` (each into the first bucket whose bound is at least the value)."""
        counts, total = self._counts
        updated = list(counts)
        find, bounds = bisect.bisect_left, self._bounds
        for value in values:
            updated[find(bounds, value)] += 1
            total += value
        self._counts = (tuple(updated), total)

    def collect(self) -> Iterator[Metric]:
        counts, total = self._counts
        cumulative = itertools.accumulate(counts)
        yield HistogramMetricFamily(
            self._name, self._documentation, buckets=list(zip(self._les, cumulative, strict=True)), sum_value=total
        )


class Metrics:
    """Every worker metric in this instance's own `registry`; labels are topic/partition and small enums."""

    def __init__(self, version: str | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._exposed = _WithoutCreated(self.registry)
        r = self.registry
        p = PREFIX
        self.source_records_total = Counter(
            f"{p}source_records_total", "Source records by verdict.", [*_TP, "verdict"], registry=r
        )
        self.output_events_total = Counter(
            f"{p}output_events_total", "AG-UI events published, by AG-UI event type.", ["type"], registry=r
        )
        self.display_records_total = Counter(
            f"{p}display_records_total", "Display records published to the display topic.", registry=r
        )
        self.index_records_total = Counter(
            f"{p}index_records_total", "Run start and end records published to the thread index topic.", registry=r
        )
        self.display_bytes_total = Counter(
            f"{p}display_bytes_total", "Bytes of the display records published (their values).", registry=r
        )
        self.display_evicted_items_total = Counter(
            f"{p}display_evicted_items_total",
            "Finished display items paged out of published display records to fit the display topic's record limit.",
            registry=r,
        )
        self.display_withheld_total = Counter(
            f"{p}display_withheld_total",
            "Display records due but withheld: the run's open items alone exceed the display topic's record limit.",
            registry=r,
        )
        self.dead_letter_records_total = Counter(
            f"{p}dead_letter_records_total", "Records sent to the dead-letter topic, by reason code.",
            ["reason"], registry=r,
        )
        self.transactions_total = Counter(
            f"{p}transactions_total", "Kafka transactions ended, by result.", ["result"], registry=r
        )
        self.transaction_duration_seconds = Histogram(
            f"{p}transaction_duration_seconds", "Time from a transaction's begin to its commit or abort.",
            registry=r, buckets=_TRANSACTION_BUCKETS,
        )
        self.rebuilds_total = Counter(
            f"{p}rebuilds_total", "Partition rebuilds started (replay of source history).", _TP, registry=r
        )
        self.rebuild_records_total = Counter(
            f"{p}rebuild_records_total", "Source records replayed by rebuilds.", _TP, registry=r
        )
        self.rebuild_duration_seconds = Histogram(
            f"{p}rebuild_duration_seconds", "Duration of a partition rebuild.",
            registry=r, buckets=_REBUILD_BUCKETS,
        )
        self.rebuild_progress_ratio = Gauge(
            f"{p}rebuild_progress_ratio", "Progress of the running rebuild, 0 to 1.", _TP, registry=r
        )
        self.replay_fallbacks_total = Counter(
            f"{p}replay_fallbacks_total",
            "Rebuilds whose replay on helper processes could not be used and ran again in the worker process.",
            registry=r,
        )
        self.changelog_fallbacks_total = Counter(
            f"{p}changelog_fallbacks_total",
            "Rebuilds that found no usable changelog checkpoint and replayed from the oldest open run, by reason "
            "(none, ahead: the offsets were reset below it, unreadable, display-off: written without display state).",
            ["reason"], registry=r,
        )
        self.checkpoints_total = Counter(
            f"{p}checkpoints_total", "Partition state checkpoints written to the changelog topic.", _TP, registry=r
        )
        self.changelog_records_total = Counter(
            f"{p}changelog_records_total", "Changelog records written (tombstones included).", _TP, registry=r
        )
        self.retention_gaps_total = Counter(
            f"{p}retention_gaps_total", "Rebuilds whose history started below the log start offset.",
            _TP, registry=r,
        )
        self.open_streams = Gauge(f"{p}open_streams", "Root streams currently open.", _TP, registry=r)
        self.assigned_partitions = Gauge(
            f"{p}assigned_partitions", "Source partitions assigned to this worker.", registry=r
        )
        self.partition_ready = Gauge(
            f"{p}partition_ready", "1 when the partition is live, 0 while rebuilding or failed.",
            _TP, registry=r,
        )
        self.partition_failures_total = Counter(
            f"{p}partition_failures_total", "Partitions halted by an error.", _TP, registry=r
        )
        self.internal_errors_total = Counter(
            f"{p}internal_errors_total",
            "Records whose conversion raised an unexpected exception; each is dead-lettered as internal-error.",
            registry=r,
        )
        self.dead_letters_truncated_total = Counter(
            f"{p}dead_letters_truncated_total",
            "Dead letters cut to fit the dead-letter topic's record size limit (header dlq-truncated).",
            registry=r,
        )
        self.producers_fenced_total = Counter(
            f"{p}producers_fenced_total", "Transactional producers fenced by a newer owner.", registry=r
        )
        self.consumer_lag_records = Gauge(
            f"{p}consumer_lag_records", "High watermark minus the consumer position.", _TP, registry=r
        )
        self.source_to_commit_delay_seconds = BatchHistogram(
            f"{p}source_to_commit_delay_seconds", "Source record timestamp to its transaction commit.",
            _DELAY_BUCKETS, r,
        )
        self.rebuild_retries_total = Counter(
            f"{p}rebuild_retries_total", "Rebuild attempts of a partition that failed and were retried after back-off.",
            _TP, registry=r,
        )
        self.transaction_failures_total = Counter(
            f"{p}transaction_failures_total",
            "Failures of a live partition's transaction, by diagnosed cause (fenced, unauthorised, deadline, error).",
            [*_TP, "cause"], registry=r,
        )
        self.authorization_failures_total = Counter(
            f"{p}authorization_failures_total",
            "Broker refusals for a missing ACL, by resource type (topic, group, transactional-id, cluster) and "
            "operation (read, write, describe, ...); the log names the resource and the grant.",
            ["resource_type", "operation"], registry=r,
        )
        self.authentication_failures_total = Counter(
            f"{p}authentication_failures_total",
            "Connections the brokers refused in the TLS or SASL handshake, by cause (authentication, mechanism, "
            "tls-untrusted, tls-hostname, tls-client-certificate, tls, token).",
            ["cause"], registry=r,
        )
        self.deadline_expirations_total = Counter(
            f"{p}deadline_expirations_total", "Broker calls of a partition abandoned at their deadline, by call.",
            ["call"], registry=r,
        )
        self.pending_records = Gauge(
            f"{p}pending_records", "Consumed records of a partition not yet in a transaction (fetched or processed).",
            _TP, registry=r,
        )
        self.backpressure_pauses_total = Counter(
            f"{p}backpressure_pauses_total",
            "Times fetching a partition paused because its pending records passed max_pending_records.",
            _TP, registry=r,
        )
        self.worker_info = Gauge(
            f"{p}worker_info", "Always 1; labelled with the worker version.", ["version"], registry=r
        )
        self.worker_info.labels(version=version or package_version()).set(1)
        self.loop = LoopMetrics(r, p)
        register_process_collectors(r)
        for result in TRANSACTION_RESULTS:
            self.transactions_total.labels(result=result)
        for cause in REFUSAL_CAUSES:
            self.authentication_failures_total.labels(cause=cause)
        self._per_partition: tuple[tuple[Counter | Gauge, tuple[str, ...]], ...] = (
            (self.source_records_total, (*_TP, "verdict")),
            (self.transaction_failures_total, (*_TP, "cause")),
            *((m, _TP) for m in (
                self.rebuilds_total,
                self.rebuild_records_total,
                self.rebuild_progress_ratio,
                self.retention_gaps_total,
                self.open_streams,
                self.partition_ready,
                self.partition_failures_total,
                self.consumer_lag_records,
                self.rebuild_retries_total,
                self.pending_records,
                self.backpressure_pauses_total,
                self.checkpoints_total,
                self.changelog_records_total,
            )),
        )

    def forget_partition(self, topic: str, partition: int) -> None:
        """Remove every series labelled with this topic and partition; call it on revocation."""
        want = (topic, str(partition))
        for metric, names in self._per_partition:
            seen: set[tuple[str, ...]] = set()
            for family in metric.collect():
                for sample in family.samples:
                    labels = sample.labels
                    if (labels.get("topic"), labels.get("partition")) != want:
                        continue
                    key = tuple(labels[name] for name in names)
                    if key not in seen:
                        seen.add(key)
                        metric.remove(*key)

    def render(self) -> bytes:
        """The registry in Prometheus text exposition format 0.0.4 (see `CONTENT_TYPE`)."""
        return bytes(generate_latest(self._exposed))
