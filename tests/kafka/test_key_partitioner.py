"""The output key partitioner without a broker: each record of a run goes to its key's partition, and the
partitioner keeps the keys of the runs under way only, however many runs it has seen."""

from __future__ import annotations

import gc
import tracemalloc

from aiokafka import TopicPartition

from tests.kafka.puts import PutLog, put_all
from worker.client import partition_for
from worker.live.publishing import Destinations, KeyPartitioner, Sent
from worker.stream import Destination, OutboundRecord, Outcome, Verdict

SOURCE = TopicPartition("source", 0)


def _outcomes(run: str) -> list[Outcome]:
    """A run's outcomes as the partition state makes them: events, then the terminal event with its display record
    after it. Each record has a key object of its own, as `output_record` makes them."""

    def event(kind: str) -> OutboundRecord:
        return OutboundRecord(Destination.OUTPUT, run.encode(), b"{}", (), kind, None)

    display = OutboundRecord(Destination.DISPLAY, run.encode(), b"{}", (), None, None)
    return [Outcome(Verdict.PROCESSED, (event("RUN_STARTED"),), run, None),
            Outcome(Verdict.PROCESSED, (event("TEXT_MESSAGE_CONTENT"), display), run, None),
            Outcome(Verdict.PROCESSED, (event("RUN_FINISHED"), display), run, None)]  # fmt: skip


def _destinations(partitioner: KeyPartitioner) -> Destinations:
    return Destinations("output", "dead-letters", "display", "changelog", partitioner)


async def test_every_record_of_a_run_goes_to_its_keys_partition_its_display_records_too() -> None:
    destinations, txn = _destinations(KeyPartitioner(12)), PutLog()
    for n in range(50):
        for outcome in _outcomes(f"run-{n}"):
            await put_all(txn, outcome, destinations, Sent(), SOURCE)
    assert len(txn.puts) == 50 * 5
    assert all(partition == partition_for(key or b"", 12) for _, key, partition in txn.puts)
    assert {topic for topic, _, _ in txn.puts} == {"output", "display"}


async def test_the_router_forgets_a_run_once_it_ended_so_it_holds_no_more_for_more_runs_seen() -> None:
    """20,000 runs one after the other: what the partitioner holds afterwards does not grow with them (it held each
    run's key, about 150 bytes with its slot, until the cache's cap emptied it)."""
    destinations, txn = _destinations(KeyPartitioner(12)), PutLog()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(20_000):
            for outcome in _outcomes(f"run-{n:032x}"):
                await put_all(txn, outcome, destinations, Sent(), SOURCE)
            txn.puts.clear()
        del outcome
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held < 20_000, held  # bytes: the cache's empty table, not a key per run
