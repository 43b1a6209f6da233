"""A replay split by key across shards, once merged, is the state one in-process replay builds, or is refused."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.stream._cores import CORES, REAL_CORE
from tests.stream._fakes import FAKE_CORE, fake_decode
from tests.stream._support import TOPIC, checkpoint, golden_source, image, item, records
from tests.stream.test_rebuild import Scenario, scenarios
from worker.errors import ShardedReplayError
from worker.stream import Outcome, PartitionState, SourceRecord, StreamCore
from worker.stream._shards import ShardState, merge_shards, shard_of

WHERE = (TOPIC, 0)


def sequential(core: StreamCore, recs: list[SourceRecord], memory: int, cap: int = 100_000) -> PartitionState:
    state = PartitionState(TOPIC, 0, core=core, closed_stream_memory=memory, max_open_streams=cap)
    for rec in recs:
        state.process(rec, publish=False)
    return state


def sharded(
    core: StreamCore, recs: list[SourceRecord], memory: int, shards: int, cap: int = 100_000
) -> PartitionState:
    """Each record replayed by the shard of its key, then merged into fresh state (ShardedReplayError if refused)."""
    parts = [ShardState(TOPIC, 0, closed_stream_memory=memory, core=core) for _ in range(shards)]
    for rec in recs:
        parts[shard_of(rec.key, shards)].replay(rec)
    state = PartitionState(TOPIC, 0, core=core, closed_stream_memory=memory, max_open_streams=cap)
    merge_shards({WHERE: state}, {WHERE: [p.result() for p in parts]})
    return state


def then_live(state: PartitionState, recs: list[SourceRecord]) -> list[Outcome]:
    return [state.process(rec) for rec in recs]


def shape(state: PartitionState, next_offset: int) -> tuple[int, int, int, int | None]:
    return state.open_streams, state.remembered_streams, state.replay_from(next_offset), state.last_offset


@pytest.mark.parametrize("core", CORES)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios(), shards=st.integers(1, 4))
def test_merged_shards_continue_exactly_as_one_replay(core: StreamCore, scenario: Scenario, shards: int) -> None:
    recs, memory = scenario.records, scenario.memory
    for cut in scenario.cuts:
        one = sequential(core, recs[:cut], memory)
        try:
            merged = sharded(core, recs[:cut], memory, shards)
        except ShardedReplayError:
            # Only a memory small enough to forget keys within the window can make the shards disagree.
            assert memory < cut
            continue
        next_offset = recs[cut].offset if cut < len(recs) else recs[-1].offset + 1
        assert shape(merged, next_offset) == shape(one, next_offset)
        expected = image(one, next_offset)
        assert image(merged, next_offset) == expected
        # a changelog that held other keys is brought to the merged state by the next checkpoint
        merged.adopt_changelog_keys([b"stream:gone", b"ended:gone", b"partition", *expected])
        changelog = dict.fromkeys([b"stream:gone", b"ended:gone", b"partition", *expected], b"{}")
        for key, value in checkpoint(merged, next_offset):
            if value is None:
                del changelog[key]
            else:
                changelog[key] = value
        assert changelog == expected
        assert then_live(merged, recs[cut:]) == then_live(one, recs[cut:])


def test_golden_runs_interleaved_across_three_shards_merge_and_publish_the_same_events() -> None:
    names = ["s01_hello", "s05_failed", "c01_child_completed", "c03_child_nested", "r0038", "r0063"]
    pairs = []
    sources = {n: golden_source(n) for n in names}
    for i in range(max(len(s) for s in sources.values())):
        for lines in sources.values():
            if i < len(lines):
                pairs.append((fake_decode(lines[0]).run_id, lines[i]))
    recs = records(pairs)
    assert len({shard_of(r.key, 3) for r in recs}) > 1
    for cut in (len(recs) // 3, len(recs) // 2, len(recs) - 1):
        one, merged = sequential(REAL_CORE, recs[:cut], 10_000), sharded(REAL_CORE, recs[:cut], 10_000, 3)
        assert shape(merged, recs[cut].offset) == shape(one, recs[cut].offset)
        live = then_live(merged, recs[cut:])
        assert live == then_live(one, recs[cut:])
        assert sum(len(o.records) for o in live) > 0


def _keys_on_different_shards(shards: int, count: int) -> list[str]:
    keys: list[str] = []
    for i in range(1000):
        key = f"run-{i}"
        if shard_of(key.encode(), shards) not in {shard_of(k.encode(), shards) for k in keys}:
            keys.append(key)
        if len(keys) == count:
            return keys
    raise AssertionError("no keys on distinct shards")


def test_a_key_one_replay_forgot_but_its_shard_remembers_refuses_the_merge() -> None:
    a, b = _keys_on_different_shards(2, 2)
    pairs = [
        (a, item(a, 0)), (a, item(a, 1, terminal=True)),  # a closes: remembered
        (b, item(b, 0)), (b, item(b, 1, terminal=True)),  # b closes: one replay (memory 1) forgets a
        (a, item(a, 0)),  # one replay opens a again; a's shard still remembers a and calls it a duplicate
    ]  # fmt: skip
    recs = records(pairs)
    assert sequential(FAKE_CORE, recs, memory=1).open_streams == 1  # a began again
    with pytest.raises(ShardedReplayError, match=r"closed-stream memory"):
        sharded(FAKE_CORE, recs, memory=1, shards=2)
    # With room for both keys nothing is forgotten: the shards agree with one replay (a's item is a duplicate).
    assert shape(sharded(FAKE_CORE, recs, memory=2, shards=2), 5) == shape(sequential(FAKE_CORE, recs, 2), 5)
    assert sequential(FAKE_CORE, recs, memory=2).open_streams == 0


def test_shards_that_could_have_reached_the_open_stream_cap_together_refuse_the_merge() -> None:
    a, b = _keys_on_different_shards(2, 2)
    recs = records([(a, item(a, 0)), (b, item(b, 0))])
    with pytest.raises(ShardedReplayError, match=r"max_open_streams=1"):
        sharded(FAKE_CORE, recs, memory=10, shards=2, cap=1)
    assert sharded(FAKE_CORE, recs, memory=10, shards=2, cap=2).open_streams == 2


def test_a_refused_merge_leaves_every_state_untouched() -> None:
    a, b = _keys_on_different_shards(2, 2)
    ok, bad = ShardState(TOPIC, 1, core=FAKE_CORE), [ShardState(TOPIC, 0, core=FAKE_CORE) for _ in range(2)]
    ok.replay(records([(a, item(a, 0))], partition=1)[0])
    for rec in records([(a, item(a, 0)), (b, item(b, 0))]):
        bad[shard_of(rec.key, 2)].replay(rec)
    states = {(TOPIC, 1): PartitionState(TOPIC, 1, core=FAKE_CORE), WHERE: PartitionState(TOPIC, 0, core=FAKE_CORE,
                                                                                        max_open_streams=1)}
    with pytest.raises(ShardedReplayError):
        merge_shards(states, {(TOPIC, 1): [ok.result()], WHERE: [s.result() for s in bad]})
    assert [s.open_streams for s in states.values()] == [0, 0]


def test_shards_merge_only_into_fresh_state() -> None:
    used = PartitionState(TOPIC, 0, core=FAKE_CORE)
    used.process(records([("k", item("k", 0))])[0])
    with pytest.raises(ShardedReplayError, match="fresh"):
        merge_shards({WHERE: used}, {WHERE: []})


def test_a_record_key_always_lands_on_the_same_shard_and_a_missing_key_on_shard_zero() -> None:
    assert shard_of(None, 3) == 0 and shard_of(b"", 3) == 0
    assert {shard_of(b"run-1", 3) for _ in range(5)} == {shard_of(b"run-1", 3)}
    assert len({shard_of(f"run-{i}".encode(), 3) for i in range(100)}) == 3
