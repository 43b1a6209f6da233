"""The partition state's bytes for the golden runs are the recorded ones: every outcome's records and every
checkpoint's changelog records, live, restored mid-way and replayed, equal `tests/data/golden-bytes.json`.

The source is the adversarial mix of the golden runs (duplicates, mis-keyed items, gaps, poison), spread over
three partitions by key, with fixed timestamps, so the display cadence and the dead letters are the same in
every run. A refactor of the partition state that changes a byte of what it publishes or checkpoints fails here.
"""

from __future__ import annotations

import zlib
from collections import defaultdict
from typing import Any

import pytest

from tests.golden_bytes import Digest, changelog_value, check
from tests.kafka.adversarial import adversarial_source
from tests.stream._support import BASE_MS, TOPIC, checkpoint, restore
from worker.stream import GapPolicy, Outcome, PartitionState, SourceRecord

SEED = 20261201
PARTITIONS = 3
BATCH = 32
CHECKPOINT_EVERY = 97  # records between checkpoints: not a multiple of the batch
CASES: dict[str, dict[str, Any]] = {
    # Small bounds: the open-stream cap is reached, the ended-stream memory forgets, large events close streams.
    "state-display-bounded": {"max_open_streams": 6, "closed_stream_memory": 10, "max_record_bytes": 2048,
                              "display_interval_ms": 250},
    "state-plain": {"gap_policy": GapPolicy.CLOSE_RUN},
    # The bounded case with the thread index on: its outcomes add the runs' start and end records.
    "state-thread-index": {"max_open_streams": 6, "closed_stream_memory": 10, "max_record_bytes": 2048,
                           "display_interval_ms": 250, "thread_index": True},
}


def _source() -> dict[int, list[SourceRecord]]:
    """The adversarial records by partition (by a hash of the key), with offsets from 0 and timestamps 40 ms apart."""
    by_partition: dict[int, list[SourceRecord]] = defaultdict(list)
    for i, (key, value) in enumerate(adversarial_source(SEED).records):
        partition = zlib.crc32(key) % PARTITIONS
        recs = by_partition[partition]
        recs.append(SourceRecord(TOPIC, partition, len(recs), BASE_MS + 40 * i, key, value, (("h", b"1"),)))
    return dict(by_partition)


def _add_outcome(digest: Digest, offset: int, outcome: Outcome) -> None:
    digest.add(offset, outcome.verdict.value, outcome.run_id, outcome.reason)
    digest.add_all((r.destination.value, r.key, r.value, r.headers, r.event_type, r.reason) for r in outcome.records)


def _folded(changelog: dict[bytes, bytes], records: list[tuple[bytes, bytes | None]]) -> None:
    for key, value in records:
        if value is None:
            changelog.pop(key, None)
        else:
            changelog[key] = value


def _run(partition: int, recs: list[SourceRecord], options: dict[str, Any], digests: dict[str, Digest]) -> None:
    """Live processing in batches with periodic checkpoints, a restore from the changelog half-way, and a replay of
    everything; each adds its bytes to `digests`."""
    state = PartitionState(TOPIC, partition, **options)
    changelog: dict[bytes, bytes] = {}
    since = 0
    restored_at = len(recs) // 2
    done = 0
    while done < len(recs):
        chunk = recs[done : done + BATCH]
        outcomes, error = state.process_batch(chunk)
        assert error is None, error
        for rec, outcome in zip(chunk, outcomes, strict=True):
            _add_outcome(digests["outcomes"], rec.offset, outcome)
        done += len(chunk)
        since += len(chunk)
        if since >= CHECKPOINT_EVERY or done == len(recs) or done >= restored_at > done - len(chunk):
            since = 0
            records = checkpoint(state, done)
            digests["changelog"].add_all((key, changelog_value(value)) for key, value in records)
            _folded(changelog, records)
        if done >= restored_at > done - len(chunk):
            state, offset = restore(TOPIC, partition, changelog, **options)
            assert offset == done
            digests["replay-from"].add(state.replay_from(done), state.open_streams, state.remembered_streams)
    replay = PartitionState(TOPIC, partition, **options)
    outcomes, error = replay.process_batch(recs, publish=False)
    assert error is None, error
    assert all(not outcome.records for outcome in outcomes)
    digests["replayed"].add_all((key, changelog_value(value)) for key, value in checkpoint(replay, len(recs)))


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_partition_state_publishes_and_checkpoints_the_recorded_bytes(case: str) -> None:
    digests: dict[str, Digest] = defaultdict(Digest)
    for partition, recs in sorted(_source().items()):
        _run(partition, recs, CASES[case], digests)
    got = {name: digest.summary() for name, digest in sorted(digests.items())}
    assert got["outcomes"]["records"] > 3_000, got
    check(case, got)
