"""How a UI backend opens a run's display from Kafka (the README's example, tested on a broker).

It reads the run's latest record on the display topic, then the run's output records after that record's agui-seq,
and keeps the resulting `DisplayReader`; feed it every later output record of the run to keep the display live.
"""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.partitioner import murmur2

from worker.display import DisplayReader
from worker.errors import DisplayGapError

__all__ = ["open_display"]

# How far apart the clocks of the workers that wrote one run may be: the output topic is read from this much
# before the display record's timestamp (records already covered are skipped).
CLOCK_SKEW_MS = 60_000


def _seq(record: ConsumerRecord[bytes, bytes]) -> int:
    return int(dict(record.headers)["agui-seq"])


async def _read_to_end(consumer: AIOKafkaConsumer, tp: TopicPartition, key: bytes, reader: DisplayReader | None
                       ) -> ConsumerRecord[bytes, bytes] | None:  # fmt: skip
    """Read `tp` from its position to its current end: feed the records of `key` to `reader`, or, without one,
    return the last record of `key`."""
    end = (await consumer.end_offsets([tp]))[tp]
    last = None
    while await consumer.position(tp) < end:
        for record in (await consumer.getmany(tp, timeout_ms=1000)).get(tp, []):
            if record.key != key or record.value is None:
                continue
            if reader is None:
                last = record
            else:
                reader.feed(_seq(record), record.value)
    return last


async def open_display(bootstrap: str, display_topic: str, output_topic: str, run_id: str) -> DisplayReader:
    """The display of run `run_id` as its committed output stands now."""
    key = run_id.encode()
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        [described] = await admin.describe_topics([output_topic])
    finally:
        await admin.close()
    # The display topic is keyed like the output topic and has as many partitions: the same one holds the run.
    partition = (murmur2(key) & 0x7FFFFFFF) % len(described["partitions"])
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed",
                                enable_auto_commit=False)  # fmt: skip
    await consumer.start()
    try:
        display, output = TopicPartition(display_topic, partition), TopicPartition(output_topic, partition)
        gap: DisplayGapError | None = None
        for _ in range(3):  # a transaction committing while we read may show on one topic first: read again
            consumer.assign([display, output])
            output_end = (await consumer.end_offsets([output]))[output]
            await consumer.seek_to_beginning(display)
            record = await _read_to_end(consumer, display, key, None)
            if record is None:  # no display record yet: the run published nothing, or every record was withheld
                reader = DisplayReader(run_id)
                await consumer.seek_to_beginning(output)
            else:
                reader = DisplayReader(run_id, record.value, _seq(record))
                found = (await consumer.offsets_for_times({output: max(0, record.timestamp - CLOCK_SKEW_MS)}))[output]
                consumer.seek(output, output_end if found is None else found.offset)
            try:
                await _read_to_end(consumer, output, key, reader)
            except DisplayGapError as error:
                gap = error
                continue
            return reader
        assert gap is not None
        raise gap
    finally:
        await consumer.stop()
