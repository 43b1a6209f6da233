"""The gateway's Prometheus metrics (prefix `harness_agui_gateway_`, base units, never labelled by run)."""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import HistogramMetricFamily
from prometheus_client.registry import Collector

from worker.ops.loop import LoopMetrics
from worker.ops.metrics import register_process_collectors

__all__ = ["DeliveryLatency", "GatewayMetrics"]

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class DeliveryLatency(Collector):
    """A histogram of delivery latency that takes many equal observations at once (the events of one fetch written
    together): plain counts per bucket, no lock, since only the event loop's thread observes and renders it."""

    def __init__(self, name: str, documentation: str, buckets: tuple[float, ...]) -> None:
        self._name = name
        self._documentation = documentation
        self._bounds = buckets
        self._counts = [0] * (len(buckets) + 1)  # the last one: above every bound
        self._sum = 0.0

    def observe(self, seconds: float, times: int = 1) -> None:
        """`times` observations of `seconds`."""
        self._counts[bisect_left(self._bounds, seconds)] += times
        self._sum += seconds * times

    def collect(self) -> Iterator[HistogramMetricFamily]:
        cumulative, buckets = 0, []
        for bound, count in zip((*map(str, self._bounds), "+Inf"), self._counts, strict=True):
            cumulative += count
            buckets.append((bound, cumulative))
        yield HistogramMetricFamily(self._name, self._documentation, buckets=buckets, sum_value=self._sum)


class GatewayMetrics:
    """One registry per gateway process."""

    def __init__(self) -> None:
        registry = self.registry = CollectorRegistry(auto_describe=True)
        self.connections = Gauge("harness_agui_gateway_connections", "Open event streams, by reader.",
                                 ["reader"], registry=registry)  # fmt: skip
        self.refused = Counter("harness_agui_gateway_refused_connections_total",
                               "Streams refused with 503: max_connections reached, or draining.", registry=registry)
        self.requests = Counter("harness_agui_gateway_failed_requests_total",
                                "Requests answered with an error, by code.", ["code"], registry=registry)
        self.events = Counter("harness_agui_gateway_events_sent_total",
                              "Output events written to clients (prelude events not counted).", registry=registry)
        self.late_joins = Counter("harness_agui_gateway_late_joins_total",
                                  "Streams that began with the late-join prelude.", ["exact"], registry=registry)
        self.resumes = Counter("harness_agui_gateway_resumes_total",
                               "Streams resumed after a cursor, by where the events came from: memory, topic, or "
                               "prelude (the cursor could not be served exactly); ended: the cursor was at or past "
                               "the run's terminal event (answered 204).", ["kind"], registry=registry)
        self.drops = Counter("harness_agui_gateway_slow_client_drops_total",
                             "Connections dropped because their queue overflowed.", registry=registry)
        self.latency = DeliveryLatency("harness_agui_gateway_delivery_latency_seconds",
                                       "From the read that returned a live event (read_committed: after its "
                                       "transaction's commit) to the write of its frame.", _LATENCY_BUCKETS)
        registry.register(self.latency)
        self.tracked_runs = Gauge("harness_agui_gateway_tracked_runs",
                                  "Runs whose recent events are kept in memory.", registry=registry)
        self.indexed_runs = Gauge("harness_agui_gateway_indexed_runs",
                                  "Runs of the display topic the gateway can find.", registry=registry)
        self.cache_bytes = Gauge("harness_agui_gateway_display_cache_bytes",
                                 "Bytes of display records kept in memory.", registry=registry)
        self.authentication_failures = Counter(
            "harness_agui_gateway_authentication_failures_total",
            "Connection attempts the brokers refused in the TLS or SASL handshake, by cause.", ["cause"],
            registry=registry)  # fmt: skip
        self.records = Counter("harness_agui_gateway_records_read_total",
                               "Records read from the tail of the output, display and thread index topics.",
                               registry=registry)  # fmt: skip
        self.forwarded = Counter("harness_agui_gateway_forwarded_requests_total", (
            "Requests for runs another replica owns, by outcome: `ok` (the owner answered), `retried` (it answered "
            "503), `unreachable` (no connection), `no-owner` (answered 503 after forward_wait_ms)."),
            ["outcome"], registry=registry)  # fmt: skip
        self.relayed = Counter("harness_agui_gateway_relayed_streams_total", (
            "Streams of runs another replica owns that followed a stream this replica already had open to the owner "
            "instead of opening one more."), registry=registry)  # fmt: skip
        self.relays = Gauge("harness_agui_gateway_relays", "Streams this replica has open to the owners of runs.",
                            registry=registry)  # fmt: skip
        self.behind = Gauge("harness_agui_gateway_tail_lag_records", (
            "Committed records of this replica's output partitions not read yet (last stable offset of the latest "
            "fetch minus the tail's position): growing, the replica reads slower than the worker writes."),
            registry=registry)  # fmt: skip
        self.partitions = Gauge("harness_agui_gateway_partitions", (
            "Output topic partitions this replica owns in the gateway group, by state: `loading` (its display "
            "records still being read) or `serving`."), ["state"], registry=registry)  # fmt: skip
        self.topic_partitions = Gauge("harness_agui_gateway_topic_partitions",
                                      "Partitions of the output topic the gateway group divides.", registry=registry)
        self.thread_streams = Gauge("harness_agui_gateway_thread_streams", (
            "Thread streams this replica serves (it owns the thread's index partition), by reader: `sse` (GET "
            "/threads/{id}/events) or `agent` (POST /threads/{id}/connect)."), ["reader"],
            registry=registry)  # fmt: skip
        self.thread_lookups = Counter("harness_agui_gateway_thread_lookups_total", (
            "Requests for a thread this replica owns, by outcome: `found`, or `unknown` (404: the thread index names "
            "no run of it)."), ["outcome"], registry=registry)  # fmt: skip
        self.thread_notice = DeliveryLatency("harness_agui_gateway_thread_notice_delay_seconds", (
            "From the timestamp of a run's start record (when the worker's producer appended it, before its "
            "transaction's commit) to the moment this replica read it and woke the thread's streams."),
            _LATENCY_BUCKETS)  # fmt: skip
        registry.register(self.thread_notice)
        self.thread_index_runs = Gauge("harness_agui_gateway_thread_index_runs",
                                       "Runs of the threads of this replica's index partitions kept in memory.",
                                       registry=registry)  # fmt: skip
        self.loop = LoopMetrics(registry, "harness_agui_gateway_")
        register_process_collectors(registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)
