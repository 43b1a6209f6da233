"""The live read of this replica's share of the output, display and thread index topics.

The output topic is read by a member of the gateway group (`OwnersAssignor`: replicas divide the partitions and
learn who owns which; nothing is committed), each gained partition from its end; the display topic by a consumer
of no group, assigned the same-numbered partitions and reading each gained one from its beginning (the run
directory), and the thread index topic, when given, alike by a consumer of its own (the threads), a partition being
loaded once read to the end offsets taken when it was gained in both. A partition kept through a rebalance goes on
from where it was, and one lost ends its streams and is forgotten. Records go to the directory, the hub or the
thread index synchronously; the tail never writes to a socket.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    IllegalStateError,
    KafkaError,
    TopicAuthorizationFailedError,
)

from worker.client import (
    GRANT_HEALS_WITHIN_S,
    Denied,
    EndWatch,
    authorization_error,
    backoff_s,
    end_offsets,
    principal,
    topic_partitions,
    until_reachable,
    wait_beating,
)
from worker.contract import SEQ, THREAD_ID
from worker.errors import ConfigError, KafkaWorkerError, StalledReadError
from worker.gateway.directory import DisplayPointer, RunDirectory
from worker.gateway.hub import Hub
from worker.gateway.reader._records import (
    FETCH_FILTER,
    FETCH_LOG,
    TERMINAL_TYPE_BYTES,
    gateway_consumer,
    header,
    seq_and_kind,
)
from worker.gateway.routing import Owners, OwnersAssignor
from worker.gateway.settings import GatewaySettings
from worker.gateway.threads import ThreadIndex

__all__ = ["TopicTail"]

_log = logging.getLogger(__name__)
_BATCH_RECORDS = 500  # records handed to the hub between two turns of the writers (getmany may not yield)


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, tail: TopicTail) -> None:
        self._tail = tail

    async def on_partitions_revoked(self, revoked: Collection[TopicPartition]) -> None:
        """Nothing stops: the partitions this replica keeps go on where they were once the assignment arrives."""

    async def on_partitions_assigned(self, assigned: Collection[TopicPartition]) -> None:
        await self._tail.assigned({tp.partition for tp in assigned})


class TopicTail:
    """This replica's share of the topics, each read by a consumer of its own (a large fetch of display records
    never holds up an event, nor a thread's new run); `read` is set once the first assignment's partitions are
    loaded, `ready` while every partition of the latest one is. `threads` is None without a thread index topic."""

    def __init__(self, settings: GatewaySettings, hub: Hub, directory: RunDirectory, owners: Owners, *,
                 threads: ThreadIndex | None = None,
                 on_batch: Callable[[int], None] | None = None) -> None:  # fmt: skip
        self._settings = settings
        self._hub = hub
        self._directory = directory
        self._owners = owners
        self._threads = threads
        self._on_batch = on_batch
        self._consumers: list[AIOKafkaConsumer] = []  # the output topic's, the display topic's, the index topic's
        self._offered: dict[int, str] = {}  # the map of the assignment being taken
        # gained display (and index) partitions being read up to the end offsets taken when they were gained
        self._loading = EndWatch()
        self._index_loading = EndWatch()
        self._display_next: dict[int, int] = {}  # per own display partition, the next offset to read
        self._index_next: dict[int, int] = {}  # likewise, per own index partition
        self._who = principal(settings)
        self.read = asyncio.Event()  # set once the first assignment's partitions were loaded
        self.last_beat = time.monotonic()

    async def start(self, stop: asyncio.Event) -> bool:
        """Describe both topics and join the gateway group, retrying (one log line per attempt) until both exist
        and this principal may describe them; False when `stop` came first."""
        if FETCH_FILTER not in FETCH_LOG.filters:
            FETCH_LOG.addFilter(FETCH_FILTER)
        started = await until_reachable(self._start_once, stop, self.beat)
        return started is not None

    def beat(self) -> None:
        """Mark the tail's loop alive (for `/livez`)."""
        self.last_beat = time.monotonic()

    async def _start_once(self) -> bool:
        settings = self._settings
        options: dict[str, object] = {"fetch_max_wait_ms": settings.fetch_max_wait_ms,
                                      "max_partition_fetch_bytes": 4 * 1024 * 1024}  # fmt: skip
        assignor = OwnersAssignor(self._owners.url, lambda: self._owners.mine, self._offer)
        events = gateway_consumer(settings, "tail", group_id=settings.group, auto_offset_reset="latest",
                               partition_assignment_strategy=(assignor,),
                               session_timeout_ms=settings.session_timeout_ms,
                               heartbeat_interval_ms=settings.heartbeat_interval_ms, **options)  # fmt: skip
        displays = gateway_consumer(settings, "display", **options)
        beside = [(displays, settings.display_topic, "display_topic")]
        if self._threads is not None:
            beside.append((gateway_consumer(settings, "index", **options), settings.thread_index_topic,
                           "thread_index_topic"))  # fmt: skip
        started: list[AIOKafkaConsumer] = []
        try:
            for consumer in (events, *(consumer for consumer, _, _ in beside)):
                await consumer.start()
                started.append(consumer)
            output = await topic_partitions(events, settings.output_topic, "output_topic", self._who)
            for consumer, topic, role in beside:
                found = await topic_partitions(consumer, topic, role, self._who)
                if len(output) != len(found):
                    raise ConfigError(
                        f"{role.removesuffix('_topic').replace('_', ' ')} topic {topic!r} has {len(found)} partitions "
                        f"and output topic {settings.output_topic!r} {len(output)}: the worker writes them "
                        "co-partitioned, they must match"
                    )
            self._owners.partitions = len(output)
            events.subscribe([settings.output_topic], listener=_Rebalance(self))
        except BaseException:
            for consumer in started:
                await consumer.stop()
            raise
        self._consumers = started
        return True

    @property
    def ready(self) -> bool:
        return self._owners.ready

    async def behind(self) -> int:
        """Committed output records of this replica's partitions not read yet, as of the latest fetch (the last
        stable offset it returned less the tail's position; a partition being assigned counts 0)."""
        if not self._consumers:
            return 0
        events, topic = self._consumers[0], self._settings.output_topic
        lag = 0
        for tp in [TopicPartition(topic, partition) for partition in self._owners.mine]:
            try:
                end = events.last_stable_offset(tp)
                if end is not None and end >= 0:
                    lag += max(0, end - await asyncio.wait_for(events.position(tp), 1.0))
            except (IllegalStateError, AssertionError, KeyError, TimeoutError, KafkaError):
                continue  # not assigned (yet) in the client: a rebalance is under way
        return lag

    def _offer(self, owners: dict[int, str]) -> None:
        self._offered = owners

    async def assigned(self, mine: set[int]) -> None:
        """Take the group's new assignment: lost partitions end their streams and are forgotten, gained ones are read
        from the output topic's end and the display and index topics' beginning, kept ones go on where they were."""
        events, displays = self._consumers[:2]
        settings, hub = self._settings, self._hub
        gained, lost = self._owners.assign(self._offered, mine)
        if lost:
            hub.release(lost)
            self._directory.forget(lost)
            self._loading.drop(TopicPartition(settings.display_topic, partition) for partition in lost)
            for partition in lost:
                self._display_next.pop(partition, None)
            if self._threads is not None:
                self._threads.release(lost)
                self._index_loading.drop(TopicPartition(settings.thread_index_topic, p) for p in lost)
                for partition in lost:
                    self._index_next.pop(partition, None)
        if gained:
            tps = [TopicPartition(settings.output_topic, p) for p in sorted(gained)]
            for tp, end in (await end_offsets(events, tps)).items():
                hub.passed(tp.partition, end)
        for partition in mine:
            events.seek(TopicPartition(settings.output_topic, partition), hub.positions.get(partition, 0))
        display = [TopicPartition(settings.display_topic, p) for p in sorted(mine)]
        displays.assign(display)
        for tp in display:
            displays.seek(tp, self._display_next.setdefault(tp.partition, 0))
        if gained:
            ends = await end_offsets(displays, [tp for tp in display if tp.partition in gained])
            self._loading.add({tp: end for tp, end in ends.items() if end > 0})
        if self._threads is not None:
            await self._assign_index(mine, gained)
        self._owners.loaded(self._loaded(mine))
        _log.info("gateway group assignment: partitions %s here (%d gained, %d lost)", sorted(mine), len(gained),
                  len(lost), extra={"partitions": sorted(mine), "owners": self._owners.generation})  # fmt: skip
        self._check_loaded()

    async def _assign_index(self, mine: set[int], gained: frozenset[int]) -> None:
        """The index consumer takes the same partitions: gained ones from their beginning, loaded once read to the
        end offsets taken now."""
        assert self._threads is not None
        indexes = self._consumers[2]
        index = [TopicPartition(self._settings.thread_index_topic, p) for p in sorted(mine)]
        indexes.assign(index)
        for tp in index:
            indexes.seek(tp, self._index_next.setdefault(tp.partition, 0))
        if gained:
            self._threads.gained(gained)
            ends = await end_offsets(indexes, [tp for tp in index if tp.partition in gained])
            self._index_loading.add({tp: end for tp, end in ends.items() if end > 0})
            self._threads.loaded([p for p in gained if TopicPartition(self._settings.thread_index_topic, p)
                                  not in self._index_loading.ends])  # fmt: skip

    def _loaded(self, partitions: Collection[int]) -> list[int]:
        """Those of `partitions` whose display (and index) partition was read up to its end offset."""
        display, index = self._settings.display_topic, self._settings.thread_index_topic
        return [p for p in partitions if TopicPartition(display, p) not in self._loading.ends
                and TopicPartition(index, p) not in self._index_loading.ends]  # fmt: skip

    async def run(self, stop: asyncio.Event) -> None:
        """Read until `stop`; a client error is logged and retried, the consumers keep their positions."""
        if not self._consumers:
            raise KafkaWorkerError("the topic tail was not started")
        events, displays, *indexes = self._consumers
        loops = [self._loop(stop, events, "output_topic", self._output),
                 self._loop(stop, displays, "display_topic", self._display)]  # fmt: skip
        loops.extend(self._loop(stop, consumer, "thread_index_topic", self._index) for consumer in indexes)
        await asyncio.gather(*loops)

    async def _loop(
        self, stop: asyncio.Event, consumer: AIOKafkaConsumer, role: str, handle: Callable[[int, list[object]], None]
    ) -> None:
        refusals = 0
        topic = getattr(self._settings, role)
        while not stop.is_set():
            self.beat()
            if role != "output_topic" and not consumer.assignment():
                await wait_beating(stop, self.beat, 0.1)  # no partition here yet
                continue
            try:
                batches = await consumer.getmany(timeout_ms=500, max_records=_BATCH_RECORDS)
            except (TopicAuthorizationFailedError, GroupAuthorizationFailedError) as exc:  # a grant heals it
                if isinstance(exc, GroupAuthorizationFailedError):
                    group = self._settings.group
                    denied, what = Denied("Group", group, ("READ",)), f"join the gateway group {group!r}"
                else:
                    denied, what = Denied("Topic", topic, ("READ",)), f"read {role} {topic!r}"
                refusals += 1
                wait = backoff_s(refusals, GRANT_HEALS_WITHIN_S)
                _log.error("%s; retrying in %.1f s", authorization_error((denied,), self._who, what), wait)
                await wait_beating(stop, self.beat, wait)
                continue
            except KafkaError as exc:
                _log.warning("reading %s %r failed, retrying: %s", role, topic, exc)
                await wait_beating(stop, self.beat, 1.0)
                continue
            refusals = 0
            count = 0
            mine = self._owners.mine
            for tp, records in batches.items():
                if tp.partition in mine:  # a fetch that was under way when the partition was lost is dropped
                    count += len(records)
                    handle(tp.partition, records)
            if role == "display_topic" and self._loading:
                await self._positions(consumer, self._loading, "the run directory")
            elif role == "thread_index_topic" and self._index_loading:
                await self._positions(consumer, self._index_loading, "the thread index")
            if self._on_batch is not None and count:
                self._on_batch(count)
            await asyncio.sleep(0)  # the writers of what was just queued go before the next batch

    def _output(self, partition: int, records: list[object]) -> None:
        publish = self._hub.publish
        read_at = time.monotonic()
        for record in records:
            key, value = record.key, record.value  # type: ignore[attr-defined]
            seq, kind = seq_and_kind(record.headers)  # type: ignore[attr-defined]
            if key is None or value is None or seq is None:
                continue
            publish(partition, record.offset, key.decode(), int(seq), value,  # type: ignore[attr-defined]
                    record.timestamp, kind in TERMINAL_TYPE_BYTES, read_at)  # type: ignore[attr-defined]  # fmt: skip

    def _display(self, partition: int, records: list[object]) -> None:
        directory, hub = self._directory, self._hub
        for record in records:
            key, value, headers = record.key, record.value, record.headers  # type: ignore[attr-defined]
            self._display_next[partition] = record.offset + 1  # type: ignore[attr-defined]
            if key is None:
                continue
            run_id = key.decode()
            seq = header(headers, SEQ)
            thread = header(headers, THREAD_ID) or b""
            pointer = DisplayPointer(partition, record.offset, int(seq) if seq else -1,  # type: ignore[attr-defined]
                                     record.timestamp, thread.decode())  # type: ignore[attr-defined]  # fmt: skip
            directory.update(run_id, pointer, value)
            if seq is not None:
                hub.displayed(run_id, pointer.seq)

    def _index(self, partition: int, records: list[object]) -> None:
        threads = self._threads
        assert threads is not None
        for record in records:
            key, value, headers = record.key, record.value, record.headers  # type: ignore[attr-defined]
            offset = record.offset  # type: ignore[attr-defined]
            self._index_next[partition] = offset + 1
            thread = header(headers, THREAD_ID)
            if thread is not None:
                threads.update(partition, offset, key, value, thread_id=thread.decode("utf-8", "replace"),
                               timestamp_ms=record.timestamp)  # type: ignore[attr-defined]  # fmt: skip

    async def _positions(self, consumer: AIOKafkaConsumer, loading: EndWatch, what: str) -> None:
        """Mark the gained partitions read up to their end offsets (of `loading`, the display's or the index's)
        loaded once both are; a loading stall is told (and the partitions are read on)."""
        try:
            done = await loading.reached(consumer)
        except StalledReadError as exc:
            _log.warning("loading %s: %s; still reading", what, exc)
            return
        if loading is self._index_loading and self._threads is not None:
            self._threads.loaded([tp.partition for tp in done])
        self._owners.loaded(self._loaded([tp.partition for tp in done]))
        self._check_loaded()

    def _check_loaded(self) -> None:
        if not self.read.is_set() and self._owners.ready:
            self.read.set()
            _log.info("run directory read: %d runs", len(self._directory))

    async def stop(self) -> None:
        consumers, self._consumers = self._consumers, []
        for consumer in consumers:
            await consumer.stop()
