"""A projection exports its run's observer continuation only for a record it publishes: between records the
observer is never asked for it."""

from __future__ import annotations

from tests.display._flows import lines_of, offer, run_id_of, worker_batches
from worker.display import DisplayProjection


class _Observer:
    def __init__(self) -> None:
        self.exports = 0

    def export_data(self) -> dict[str, object]:
        self.exports += 1
        return {"exported": self.exports}


def test_the_continuation_is_exported_only_for_a_due_record() -> None:
    lines = lines_of("s02_tool_roundtrip")
    run_id, thread_id = run_id_of(lines)
    batches = [batch for batch in worker_batches(lines) if batch.events]
    projection, observer = DisplayProjection(run_id, thread_id, interval_ms=10**9), _Observer()
    records = [offer(projection, batch.events, batch.first_seq, timestamp_ms=batch.timestamp_ms, ended=False,
                                encoded=batch.encoded, observer=observer)
               for batch in batches]
    assert [record is not None for record in records] == [True] + [False] * (len(batches) - 1)
    assert observer.exports == 1
    first = records[0]
    assert first is not None and b'"observer":{"exported":1}' in first.value
