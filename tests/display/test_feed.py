"""A projection's fold side needs only its feeds: plain data that pickles, made beside a cadence of their own, and
taken elsewhere (another process included) into the records `convert --display` gives at the same points."""

from __future__ import annotations

import multiprocessing
import pickle

import pytest

from tests.display._flows import ALL_RUNS, lines_of, project, reference_at_items, run_id_of, worker_batches
from worker.display import DisplayProjection, DisplayRecord
from worker.display.cadence import DisplayCadence
from worker.display.projection import DisplayFeed, display_feed


def _feeds(run: str, interval_ms: int) -> list[DisplayFeed]:
    """The run's feeds, made with a cadence no projection holds."""
    run_id, _ = run_id_of(lines_of(run))
    cadence = DisplayCadence(run_id, interval_ms)
    return [display_feed(cadence, batch.events, batch.first_seq, timestamp_ms=batch.timestamp_ms, ended=batch.ended,
                         source=batch.item, encoded=batch.encoded, observer=batch.observer)
            for batch in worker_batches(lines_of(run))]


def _taken(run: str, interval_ms: int, payload: bytes) -> list[DisplayRecord]:
    run_id, thread_id = run_id_of(lines_of(run))
    projection = DisplayProjection(run_id, thread_id, interval_ms=interval_ms)
    records = [projection.take(feed) for feed in pickle.loads(payload)]
    return [record for record in records if record is not None]


@pytest.mark.parametrize("run", ALL_RUNS)
def test_pickled_feeds_give_convert_displays_records(run: str) -> None:
    reference = reference_at_items(lines_of(run))
    records = _taken(run, 0, pickle.dumps(_feeds(run, 0)))
    assert [record.agui_seq for record in records] == sorted(reference)
    for record in records:
        assert record.value == reference[record.agui_seq], f"{run}: record at agui-seq {record.agui_seq} differs"


@pytest.mark.parametrize("run", ["r0002", "synthetic/long"])
def test_feeds_taken_in_another_process_give_the_records_of_offer(run: str) -> None:
    payload = pickle.dumps(_feeds(run, 1000))
    with multiprocessing.get_context("spawn").Pool(1) as pool:  # the records come back pickled too
        records = pool.apply_async(_taken, (run, 1000, payload)).get(timeout=120)
    assert records == project(lines_of(run), interval_ms=1000)


class _Observer:
    def __init__(self) -> None:
        self.exports = 0

    def export_data(self) -> dict[str, object]:
        self.exports += 1
        return {"exported": self.exports}


def test_the_continuation_is_exported_only_for_a_due_record() -> None:
    batches = [batch for batch in worker_batches(lines_of("s02_tool_roundtrip")) if batch.events]
    cadence, observer = DisplayCadence("run", 10**9), _Observer()
    feeds = [display_feed(cadence, batch.events, batch.first_seq, timestamp_ms=batch.timestamp_ms, ended=False,
                          encoded=batch.encoded, observer=observer)
             for batch in batches]
    dues = [due for _, _, _, due, _, _ in feeds]
    continuations = [continuation for _, _, _, _, continuation, _ in feeds]
    assert dues == [len(batches[0].events) - 1] + [None] * (len(feeds) - 1)
    assert observer.exports == 1 and continuations == [b'{"exported":1}'] + [None] * (len(feeds) - 1)
