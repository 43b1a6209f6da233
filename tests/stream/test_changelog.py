"""The changelog: its documented record format, checkpoints that write each changed key once, and restore."""

from __future__ import annotations

import dataclasses
import re
from importlib import metadata
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.stream._cores import REAL_CORE
from tests.stream._fakes import FAKE_CORE, FakeObserver
from tests.stream._support import TOPIC, Changelog, checkpoint, fold, golden_source, header, image, item, records
from tests.stream._support import restore as restore_state
from worker.errors import CheckpointError, CheckpointVersionError, WorkerError
from worker.stream import (
    CHECKPOINT_FORMAT_VERSION,
    CheckpointHeader,
    GapPolicy,
    OpenStreamPolicy,
    Outcome,
    PartitionState,
    SourceRecord,
    Verdict,
    default_core,
    read_checkpoint_header,
)

A, B, C = "run-a", "run-b", "run-c"


def state(**kw: Any) -> PartitionState:
    return PartitionState(TOPIC, 0, core=FAKE_CORE, **kw)


def feed(st: PartitionState, pairs: list[tuple[str, bytes]], start: int) -> list[Outcome]:
    return [st.process(r) for r in records(pairs, start=start)]



def restore(values: Changelog, **kw: Any) -> tuple[PartitionState, int]:
    return restore_state(TOPIC, 0, values, core=FAKE_CORE, **kw)


def test_the_records_follow_the_documented_format() -> None:
    st = state()
    a0, a1 = item(A, 0, emit=2), item(A, 1, thread="thread_runa", announce=C)
    feed(st, [(A, a0), (B, item(B, 0)), (A, a1), (B, item(B, 1, terminal=True))], start=10)
    delta = dict(checkpoint(st, 14))
    assert sorted(delta) == [b"ended:run-b", b"partition", b"stream:run-a"]
    assert list(dict(checkpoint(st, 15))) == [b"partition"]  # the partition record comes last
    assert orjson.loads(delta[b"stream:run-a"] or b"") == {
        "first_offset": 10, "thread_id": "thread_runa", "n": 4, "last": {A: 1, C: -1}, "widest": max(len(a0), len(a1)),
        "closed_by": None, "observer": {"accepted": 2, "threads": {A: "thread_runa"}},
    }
    assert orjson.loads(delta[b"ended:run-b"] or b"") == {"last_sequence": 1, "ended_at": 13}
    assert orjson.loads(delta[b"partition"] or b"") == {
        "format": 1, "topic": TOPIC, "partition": 0, "offset": 14, "open_streams": 1, "ended_streams": 1,
        "worker": metadata.version("harness-agui-worker"),
    }


def test_a_real_observer_is_stored_as_its_exported_continuation() -> None:
    st = PartitionState(TOPIC, 0, core=REAL_CORE)
    lines = golden_source("c01_child_completed")
    root = orjson.loads(lines[0])["run_id"]
    for rec in records([(root, line) for line in lines[:6]]):
        st.process(rec, publish=False)
    stored = orjson.loads(dict(checkpoint(st, 6))[f"stream:{root}".encode()] or b"")
    assert stored["observer"]["run_id"] == root
    assert set(stored["observer"]["state"]) == {"request_index", "parts", "children", "threads"}


def test_a_checkpoint_writes_only_what_changed_since_the_last_one() -> None:
    st = state()
    feed(st, [(A, item(A, 0)), (B, item(B, 0))], start=0)
    assert {k for k, _ in checkpoint(st, 2)} == {b"stream:run-a", b"stream:run-b", b"partition"}
    feed(st, [(A, item(A, 1)), (A, item(A, 2)), (A, item(A, 1)), (B, b"junk")], start=2)
    # A changed (twice: written once); a duplicate and a poison record change nothing
    assert [k for k, _ in checkpoint(st, 6)] == [b"stream:run-a", b"partition"]


def test_a_stream_that_opened_and_ended_between_two_checkpoints_writes_only_its_ended_record() -> None:
    st = state()
    feed(st, [(A, item(A, 0))], start=0)
    checkpoint(st, 1)
    feed(st, [(B, item(B, 0)), (B, item(B, 1, terminal=True))], start=1)
    assert [(k, v is None) for k, v in checkpoint(st, 3)] == [(b"ended:run-b", False), (b"partition", False)]


def test_a_written_stream_that_ends_is_tombstoned_and_remembered() -> None:
    st = state()
    feed(st, [(A, item(A, 0))], start=0)
    checkpoint(st, 1)
    feed(st, [(A, item(A, 1, terminal=True))], start=1)
    delta = dict(checkpoint(st, 2))
    assert delta[b"stream:run-a"] is None
    assert orjson.loads(delta[b"ended:run-a"] or b"") == {"last_sequence": 1, "ended_at": 1}


def test_forgotten_ended_streams_are_tombstoned_only_when_written() -> None:
    st = state(closed_stream_memory=1)
    feed(st, [(A, item(A, 0, terminal=True))], start=0)
    checkpoint(st, 1)
    # B ends (forgetting A), then C ends (forgetting B, never written)
    feed(st, [(B, item(B, 0, terminal=True)), (C, item(C, 0, terminal=True))], start=1)
    assert dict(checkpoint(st, 3)) == {
        b"ended:run-a": None, b"ended:run-c": b'{"last_sequence":0,"ended_at":2}',
        b"partition": image(st, 3)[b"partition"],
    }


def test_a_key_that_ends_reopens_and_ends_again_is_still_tombstoned() -> None:
    st = state(closed_stream_memory=0)
    feed(st, [(A, item(A, 0))], start=0)
    checkpoint(st, 1)
    feed(st, [(A, item(A, 1, terminal=True)), (A, item(A, 0)), (A, item(A, 1, terminal=True))], start=1)
    assert dict(checkpoint(st, 4))[b"stream:run-a"] is None
    st2 = state(closed_stream_memory=0)
    feed(st2, [(A, item(A, 0))], start=0)
    checkpoint(st2, 1)
    outs = feed(st2, [(A, item(A, 1, terminal=True)), (A, item(A, 0))], start=1)
    assert outs[1].verdict is Verdict.PROCESSED  # nothing remembered: a new stream under the same key
    delta = dict(checkpoint(st2, 3))
    assert orjson.loads(delta[b"stream:run-a"] or b"")["first_offset"] == 2


def test_folded_checkpoints_equal_the_image_and_restore_it() -> None:
    # `twin` is fed alike and never checkpointed but for its whole image: `st`'s checkpoints are its own.
    st, twin, changelog = state(closed_stream_memory=2), state(closed_stream_memory=2), {}
    batches = [
        [(A, item(A, 0)), (B, item(B, 0))],
        [(A, item(A, 1)), (B, item(B, 2)), (C, item(C, 0, terminal=True))],  # B: a gap closes it
        [(A, item(A, 2, terminal=True)), ("run-d", item("run-d", 0, terminal=True)), (B, item(B, 3))],
    ]
    offset = 0
    for batch in batches:
        feed(st, batch, start=offset)
        feed(twin, batch, start=offset)
        offset += len(batch) + 2  # transaction markers leave holes
        fold(changelog, checkpoint(st, offset))
        assert changelog == image(twin, offset)
        restored, k = restore(changelog, closed_stream_memory=2)
        assert k == offset
        assert image(restored, offset) == changelog
        assert restored.last_offset == st.last_offset == offset - 1
    b = orjson.loads(changelog[b"stream:run-b"])
    assert (b["observer"], b["closed_by"], b["last"]) == (None, "source_gap", {})


def test_restored_state_continues_as_the_original() -> None:
    st = state(closed_stream_memory=2, max_open_streams=2)
    feed(st, [(A, item(A, 0)), (B, item(B, 0)), (C, item(C, 0)), (A, item(A, 1, terminal=True))], start=0)
    changelog = fold({}, checkpoint(st, 4))
    restored, _ = restore(changelog, closed_stream_memory=2, max_open_streams=2)
    later = [(A, item(A, 0)), (C, item(C, 0)), (B, item(B, 1)), (C, item(C, 0)), ("run-d", item("run-d", 0))]
    assert feed(restored, later, start=4) == feed(st, later, start=4)
    # the restored state's next checkpoint brings the changelog to the original's state
    assert fold(dict(changelog), checkpoint(restored, 9)) == fold(changelog, checkpoint(st, 9))
    assert image(restored, 9) == image(st, 9) == changelog


def test_checkpoints_never_go_back() -> None:
    st = state()
    feed(st, [(A, item(A, 0))], start=5)
    with pytest.raises(WorkerError, match="would go back"):
        checkpoint(st, 5)
    checkpoint(st, 9)
    checkpoint(st, 9)  # nothing new: the same offset again is fine
    with pytest.raises(WorkerError, match="would go back"):
        checkpoint(st, 8)
    # every offset below a checkpoint counts as processed
    assert st.last_offset == 8
    with pytest.raises(WorkerError, match="must increase"):
        st.process(records([(A, item(A, 1))], start=8)[0])


def test_an_empty_changelog_has_no_header_and_nothing_to_restore() -> None:
    assert read_checkpoint_header({}, TOPIC, 0) is None
    with pytest.raises(CheckpointError, match="is empty"):
        restore({})


def test_the_header_tells_the_offset_and_the_format() -> None:
    st = state()
    feed(st, [(A, item(A, 0))], start=0)
    header = read_checkpoint_header(fold({}, checkpoint(st, 3)), TOPIC, 0)
    assert header == CheckpointHeader(CHECKPOINT_FORMAT_VERSION, TOPIC, 0, 3, 1, 0,
                                      metadata.version("harness-agui-worker"))  # fmt: skip


def _valid() -> Changelog:
    st = state()
    feed(st, [(A, item(A, 0)), (B, item(B, 0)), (B, item(B, 1, terminal=True))], start=0)
    return fold({}, checkpoint(st, 3))


def _with(values: Changelog, key: bytes, **changes: object) -> Changelog:
    data = orjson.loads(values[key])
    data.update(changes)
    return {**values, key: orjson.dumps(data)}


@pytest.mark.parametrize("version", [2, 0, 99])
def test_an_unknown_format_version_stops_with_its_own_error(version: int) -> None:
    values = _with(_valid(), b"partition", format=version)
    for call in (lambda: read_checkpoint_header(values, TOPIC, 0), lambda: restore(values)):
        with pytest.raises(CheckpointVersionError, match=f"checkpoint format {version} is not format 1") as info:
            call()
        assert not isinstance(info.value, CheckpointError)
        assert (info.value.version, info.value.partition) == (version, 0)


P, S, E = b"partition", b"stream:run-a", b"ended:run-b"
BROKEN: dict[str, tuple[Any, str]] = {
    "partition record missing": (lambda v: {k: x for k, x in v.items() if k != P}, "no partition record"),
    "partition not JSON": (lambda v: {**v, P: b"{"}, "is not JSON"),
    "format not an int": (lambda v: _with(v, P, format="1"), "'format' must be an integer"),
    "extra field": (lambda v: _with(v, P, extra=1), "fields must be"),
    "other topic": (lambda v: _with(v, P, topic="other"), r"holds the state of other\[0\]"),
    "other partition": (lambda v: _with(v, P, partition=3), r"\[3\]"),
    "negative offset": (lambda v: _with(v, P, offset=-1), "'offset' must be an integer >= 0"),
    "count mismatch": (lambda v: _with(v, P, open_streams=2), "holds 1 open and 1 ended streams"),
    "unknown key": (lambda v: {**v, b"other:x": b"{}"}, "not a key of this changelog format"),
    "empty stream key": (lambda v: {**v, b"stream:": b"{}"}, "not a key of this changelog format"),
    "stream not an object": (lambda v: {**v, S: b"[1]"}, "not a JSON object"),
    "first offset at K": (lambda v: _with(v, S, first_offset=3), "'first_offset' must be an integer >= 0 and < 3"),
    "bool n": (lambda v: _with(v, S, n=True), "'n' must be an integer"),
    "bad last": (lambda v: _with(v, S, last={"run-a": -2}), "'last' must map"),
    "bad observer": (lambda v: _with(v, S, observer={"accepted": "x"}), "observer continuation does not restore"),
    "closed without code": (lambda v: _with(v, S, observer=None), "must name what closed it"),
    "open with code": (lambda v: _with(v, S, closed_by="source_gap"), "was not closed"),
    "ended at K": (lambda v: _with(v, E, ended_at=3), "'ended_at' must be an integer >= 0 and < 3"),
    "open and ended": (lambda v: {**_with(v, P, ended_streams=2), b"ended:run-a": b'{"last_sequence":0,"ended_at":1}'},
                       "both open and ended"),
}  # fmt: skip


@pytest.mark.parametrize("case", BROKEN)
def test_an_unreadable_or_inconsistent_changelog_is_a_checkpoint_error(case: str) -> None:
    damage, message = BROKEN[case]
    with pytest.raises(CheckpointError, match=message) as info:
        restore(damage(_valid()))
    assert (info.value.topic, info.value.partition) == (TOPIC, 0)
    assert str(info.value).startswith(f"changelog of {TOPIC}[0]")


def test_a_checkpoint_error_names_the_record_at_fault() -> None:
    with pytest.raises(CheckpointError) as info:
        restore(_with(_valid(), S, n=-1))
    assert info.value.key == S
    assert "record b'stream:run-a'" in str(info.value)


def test_a_smaller_ended_memory_forgets_the_oldest_at_restore_and_tombstones_them() -> None:
    st = state()
    feed(st, [(k, item(k, 0, terminal=True)) for k in (C, A, B)], start=0)
    changelog = fold({}, checkpoint(st, 3))
    restored, _ = restore(changelog, closed_stream_memory=1)
    assert restored.remembered_streams == 1
    assert feed(restored, [(B, item(B, 0)), (A, item(A, 0))], start=3)[0].verdict is Verdict.DUPLICATE
    fold(changelog, checkpoint(restored, 5))
    assert changelog == image(restored, 5)
    assert b"ended:run-c" not in changelog


def test_a_state_rebuilt_without_the_changelog_adopts_its_keys_and_overwrites_them() -> None:
    old = state()
    feed(old, [(A, item(A, 0)), (B, item(B, 0)), (C, item(C, 0, terminal=True))], start=0)
    changelog = fold({b"junk-key": b"x"}, checkpoint(old, 3))
    fresh = state()  # e.g. replayed from replay_from, where B had already ended
    feed(fresh, [(A, item(A, 0)), (A, item(A, 1))], start=10)
    fresh.adopt_changelog_keys(changelog)
    fold(changelog, checkpoint(fresh, 12))
    assert changelog == image(fresh, 12)
    assert image(restore(changelog)[0], 12) == changelog


def test_adopted_keys_of_streams_that_end_before_the_next_checkpoint_are_tombstoned() -> None:
    old = state()
    feed(old, [(A, item(A, 0))], start=0)
    changelog = fold({}, checkpoint(old, 1))
    fresh = state()
    feed(fresh, [(A, item(A, 0))], start=0)
    fresh.adopt_changelog_keys(changelog)
    feed(fresh, [(A, item(A, 1, terminal=True))], start=1)
    fold(changelog, checkpoint(fresh, 2))
    assert changelog == image(fresh, 2)
    assert set(changelog) == {b"ended:run-a", b"partition"}


def test_options_rebuild_an_equal_state() -> None:
    st = state(gap_policy=GapPolicy.HALT, max_open_streams=7, open_stream_policy=OpenStreamPolicy.HALT,
               closed_stream_memory=3, max_record_bytes=4096, display_interval_ms=250,
               display_max_bytes=8192, thread_index=True)  # fmt: skip
    assert st.options == {"gap_policy": GapPolicy.HALT, "max_open_streams": 7,
                          "open_stream_policy": OpenStreamPolicy.HALT, "closed_stream_memory": 3,
                          "max_record_bytes": 4096, "display_interval_ms": 250, "display_max_bytes": 8192,
                          "thread_index": True}  # fmt: skip
    assert PartitionState(TOPIC, 0, core=FAKE_CORE, **st.options).options == st.options


def test_a_restored_golden_stream_publishes_what_the_uninterrupted_one_does() -> None:
    names = ["c03_child_nested", "s09_big_fragments", "s04_suspended"]
    pairs = [(orjson.loads(golden_source(n)[0])["run_id"], line) for n in names for line in golden_source(n)]
    recs = records(pairs)
    for cut in (5, len(recs) // 2, len(recs) - 3):
        whole = PartitionState(TOPIC, 0, core=REAL_CORE)
        head = [whole.process(r, publish=False) for r in recs[:cut]]
        assert all(o.records == () for o in head)
        restored, k = restore_state(TOPIC, 0, fold({}, checkpoint(whole, recs[cut].offset)), core=REAL_CORE)
        assert k == recs[cut].offset
        tail = [SourceRecord(r.topic, r.partition, r.offset, r.timestamp_ms, r.key, r.value) for r in recs[cut:]]
        assert [restored.process(r) for r in tail] == [whole.process(r) for r in tail]


def test_the_documented_examples_are_records_this_release_reads_and_writes() -> None:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "changelog-format.md").read_text()
    blocks = [orjson.loads(b) for b in re.findall(r"```json\n(.*?)\n```", doc, flags=re.S)]
    partition, stream, ended = blocks
    values = {b"partition": orjson.dumps(partition), b"stream:run-a": orjson.dumps(stream),
              b"ended:run-b": orjson.dumps(ended)}  # fmt: skip
    restored, offset = restore_state(TOPIC, 0, values, core=REAL_CORE)
    assert offset == partition["offset"]
    written = image(restored, offset)
    assert written.keys() == values.keys()
    assert (written[b"stream:run-a"], written[b"ended:run-b"]) == (values[b"stream:run-a"], values[b"ended:run-b"])
    assert orjson.loads(written[b"partition"]) == {**partition, "worker": metadata.version("harness-agui-worker")}


def test_event_numbers_continue_from_the_checkpoint_whatever_the_release_would_recount() -> None:
    st = state()
    feed(st, [(A, item(A, 0, emit=3)), (A, item(A, 1, emit=3))], start=0)  # RUN_STARTED + 6 CUSTOMs
    changelog = fold({}, checkpoint(st, 2))

    class Terse(FakeObserver):  # a release converting each item to one event fewer
        def observe(self, item: Any, /) -> tuple[Any, ...]:
            return super().observe(item)[1:]

    def restore_terse(data: Any) -> Any:
        observer = Terse()
        observer.accepted, observer.threads = data["accepted"], dict(data["threads"])
        return observer

    terse = dataclasses.replace(FAKE_CORE, restore_observer=restore_terse)
    restored, _ = restore_state(TOPIC, 0, changelog, core=terse)
    (out,) = feed(restored, [(A, item(A, 2, emit=2))], start=2)
    assert [header(r.headers, "agui-event-id") for r in out.records] == [f"{A}:7"]


def test_a_restored_real_observer_keeps_the_cores_processor() -> None:
    def shout(item: Any, event: Any) -> Any:
        if getattr(event, "type", None) == "TEXT_MESSAGE_CONTENT":
            event.delta = event.delta.upper()
        return event

    core = default_core(processor=shout)
    lines = golden_source("s01_hello")
    root = orjson.loads(lines[0])["run_id"]
    recs = records([(root, line) for line in lines])
    whole = PartitionState(TOPIC, 0, core=core)
    expected = [whole.process(r) for r in recs]
    for cut in range(1, len(recs)):
        first = PartitionState(TOPIC, 0, core=core)
        for r in recs[:cut]:
            first.process(r, publish=False)
        restored, _ = restore_state(TOPIC, 0, fold({}, checkpoint(first, recs[cut].offset)), core=core)
        assert [restored.process(r) for r in recs[cut:]] == expected[cut:]
    deltas = [orjson.loads(r.value or b"")["delta"] for o in expected for r in o.records
              if r.event_type == "TEXT_MESSAGE_CONTENT"]  # fmt: skip
    assert deltas and all(d == d.upper() for d in deltas)


def _two_alike() -> tuple[PartitionState, PartitionState, Changelog]:
    """Two states fed alike, with open, ended, forgotten and adopted stale keys to write."""
    old = state()
    feed(old, [(A, item(A, 0)), (B, item(B, 0)), (C, item(C, 0, terminal=True))], start=0)
    changelog = fold({b"junk-key": b"x"}, checkpoint(old, 3))
    pair = []
    for _ in range(2):
        st = state(closed_stream_memory=1)
        feed(st, [(A, item(A, 0)), ("run-d", item("run-d", 0)), ("run-e", item("run-e", 0, terminal=True)),
                  ("run-f", item("run-f", 0, terminal=True)), ("run-g", item("run-g", 0))], start=10)
        st.adopt_changelog_keys(changelog)
        pair.append(st)
    return pair[0], pair[1], changelog


def test_a_checkpoint_in_parts_writes_what_one_checkpoint_writes_and_marks_the_state_only_at_its_end() -> None:
    whole, in_parts, _ = _two_alike()
    parts = in_parts.checkpoint_parts(15, part_s=0)  # a part per encoded stream
    first = next(parts)
    assert len(first) == 1 and in_parts.checkpointed == -1  # nothing marked before the last part is taken
    taken = [first, *parts]
    assert len(taken) == 4  # A, run-d, run-g, then the tombstones, the ended records and the partition record
    assert [record for part in taken for record in part] == checkpoint(whole, 15)
    assert in_parts.checkpointed == whole.checkpointed == 15
    feed(whole, [(A, item(A, 1))], start=15)
    feed(in_parts, [(A, item(A, 1))], start=15)
    assert checkpoint(in_parts, 16) == checkpoint(whole, 16)
    assert image(in_parts, 16) == image(whole, 16)


def test_a_cut_left_before_its_last_part_leaves_every_change_to_the_next_checkpoint() -> None:
    left, whole, _ = _two_alike()
    parts = left.checkpoint_parts(15, part_s=0)
    next(parts)
    next(parts)
    del parts  # the transaction failed, say: the cut was never finished
    assert checkpoint(left, 15) == checkpoint(whole, 15)


def test_a_restore_in_parts_yields_between_streams_and_restores_what_restore_does() -> None:
    st, _, changelog = _two_alike()
    values = fold(dict(changelog), checkpoint(st, 15))
    parts = PartitionState.restore_in_parts(TOPIC, 0, values, {"closed_stream_memory": 1}, core=FAKE_CORE, part_s=0)
    yields = 0
    while True:
        try:
            next(parts)
        except StopIteration as done:
            restored, offset = done.value
            break
        yields += 1
    assert yields == st.open_streams == 3
    assert offset == 15
    assert image(restored, 15) == image(restore(values, closed_stream_memory=1)[0], 15) == image(st, 15)
