"""The whole-partition conversion, test support: the expected output of processing a partition from its start,
built from what production emits (`PartitionState.process`, record by record)."""

from __future__ import annotations

from collections.abc import Iterable

from worker.stream import GapPolicy, OpenStreamPolicy, OutboundRecord, PartitionState, SourceRecord, StreamCore

__all__ = ["convert_partition"]


def convert_partition(
    records: Iterable[SourceRecord],
    *,
    gap_policy: GapPolicy = GapPolicy.CLOSE_RUN,
    max_open_streams: int = 100_000,
    open_stream_policy: OpenStreamPolicy = OpenStreamPolicy.DEAD_LETTER,
    closed_stream_memory: int = 10_000,
    core: StreamCore | None = None,
) -> list[OutboundRecord]:
    """Return every record that processing `records` from a fresh state publishes, in order.

    The records must belong to one partition with increasing offsets (else WorkerError, as in `process`).
    """
    state: PartitionState | None = None
    out: list[OutboundRecord] = []
    for record in records:
        if state is None:
            state = PartitionState(
                record.topic,
                record.partition,
                gap_policy=gap_policy,
                max_open_streams=max_open_streams,
                open_stream_policy=open_stream_policy,
                closed_stream_memory=closed_stream_memory,
                core=core,
            )
        out.extend(state.process(record).records)
    return out
