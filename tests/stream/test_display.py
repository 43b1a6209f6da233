"""The display topic in the partition state: each open run's projection is fed what the run publishes, live and in
replay alike; its records follow the events they cover in their Outcome, equal `convert --display` where they are
published, and its state travels with the run's changelog record."""

from __future__ import annotations

import dataclasses
import itertools
import pickle
from typing import Any

import orjson
import pytest
from ag_ui.core import BaseEvent

from tests.display._flows import lines_of, reference_at_items
from tests.stream._fakes import FAKE_CORE, fake_encode
from tests.stream._support import (
    TOPIC,
    Changelog,
    checkpoint,
    fold,
    golden_source,
    header,
    image,
    item,
    records,
    restore,
)
from worker.display import DisplaySnapshot
from worker.errors import CheckpointError, ConfigError
from worker.stream import Destination, OutboundRecord, Outcome, PartitionState, SourceRecord, Verdict
from worker.stream._shards import ShardState

NAMES = ["s01_hello", "s02_tool_roundtrip", "c03_child_nested", "r0014", "s05_failed"]


def run_id(name: str) -> str:
    return str(orjson.loads(golden_source(name)[0])["run_id"])


def interleaved(names: list[str], *, step: int = 1, start: int = 0) -> list[SourceRecord]:
    sources = {name: golden_source(name) for name in names}
    pairs = [(run_id(name), lines[i]) for i in range(max(map(len, sources.values())))
             for name, lines in sources.items() if i < len(lines)]  # fmt: skip
    return records(pairs, step=step, start=start)


def displayed(outcomes: list[Outcome]) -> dict[str, list[OutboundRecord]]:
    """Each run's display records, in order."""
    out: dict[str, list[OutboundRecord]] = {}
    for outcome in outcomes:
        for record in outcome.records:
            if record.destination is Destination.DISPLAY:
                assert record.key is not None
                out.setdefault(record.key.decode(), []).append(record)
    return out



def test_each_runs_display_records_equal_convert_display_where_they_are_published() -> None:
    state = PartitionState(TOPIC, 0, display_interval_ms=0)
    outcomes = [state.process(rec) for rec in interleaved(NAMES)]
    shown = displayed(outcomes)
    for name in NAMES:
        reference = reference_at_items(lines_of(name))
        got = {int(header(r.headers, "agui-seq")): r.value for r in shown[run_id(name)]}
        assert got == reference, name
        thread = orjson.loads(golden_source(name)[0])["thread_id"]
        assert {header(r.headers, "thread-id") for r in shown[run_id(name)]} == {thread}


def test_a_display_record_follows_the_events_it_covers_in_their_outcome() -> None:
    state = PartitionState(TOPIC, 0, display_interval_ms=0)
    published: dict[bytes | None, int] = {}
    for outcome in (state.process(rec) for rec in interleaved(NAMES)):
        kinds = [r.destination for r in outcome.records]
        assert Destination.DISPLAY not in kinds[:-1], "a display record is the last of its outcome"
        for record in outcome.records:
            if record.destination is Destination.OUTPUT:
                published[record.key] = int(header(record.headers, "agui-seq"))
            elif record.destination is Destination.DISPLAY:
                assert int(header(record.headers, "agui-seq")) == published[record.key]
                assert record.event_type is None and record.reason is None


def test_cadence_follows_source_record_timestamps_and_the_last_record_ends_the_run() -> None:
    interval = 1000
    recs = interleaved(NAMES, step=170)  # a record timestamp is 1_700_000_000_000 + its offset
    state = PartitionState(TOPIC, 0, display_interval_ms=interval)
    outcomes = [state.process(rec) for rec in recs]
    stamp = {id(record): rec.timestamp_ms for rec, o in zip(recs, outcomes, strict=True) for record in o.records}
    last_event: dict[bytes | None, int] = {}
    for outcome in outcomes:
        for record in outcome.records:
            if record.destination is Destination.OUTPUT:
                last_event[record.key] = int(header(record.headers, "agui-seq"))
    for name in NAMES:
        shown = displayed(outcomes)[run_id(name)]
        times = [stamp[id(r)] for r in shown]
        assert all(b - a >= interval for a, b in itertools.pairwise(times[:-1])), (name, times)
        assert int(header(shown[-1].headers, "agui-seq")) == last_event[run_id(name).encode()]
        assert shown[-1].value == reference_at_items(lines_of(name))[last_event[run_id(name).encode()]]
        assert len(shown) < len(reference_at_items(lines_of(name))), "the interval leaves records out"


def test_replay_publishes_nothing_and_builds_the_projections_live_processing_builds() -> None:
    recs = interleaved(NAMES, step=170)
    for cut in (7, len(recs) // 2, len(recs) - 4):
        live = PartitionState(TOPIC, 0, display_interval_ms=1000, display_max_bytes=6000)
        replayed = PartitionState(TOPIC, 0, display_interval_ms=1000, display_max_bytes=6000)
        for rec in recs[:cut]:
            live.process(rec)
            assert replayed.process(rec, publish=False).records == ()
        assert image(replayed, recs[cut].offset) == image(live, recs[cut].offset)
        assert [replayed.process(r) for r in recs[cut:]] == [live.process(r) for r in recs[cut:]]


def test_a_gap_ends_the_display_with_its_run_error() -> None:
    lines = golden_source("s02_tool_roundtrip")
    key = run_id("s02_tool_roundtrip")
    recs = records([(key, line) for i, line in enumerate(lines) if i != 6])
    state = PartitionState(TOPIC, 0, display_interval_ms=60_000)
    outcomes = [state.process(rec) for rec in recs]
    gap = next(o for o in outcomes if o.verdict is Verdict.GAP)
    assert [r.destination for r in gap.records] == [Destination.OUTPUT, Destination.DEAD_LETTER, Destination.DISPLAY]
    error, _, last = gap.records
    assert header(last.headers, "agui-seq") == header(error.headers, "agui-seq")
    snapshot = DisplaySnapshot.model_validate_json(last.value or b"")
    assert snapshot.items[-1].kind == "observation" and snapshot.items[-1].content["code"] == "source_gap"
    after = outcomes[outcomes.index(gap) + 1 :]
    assert after and not displayed(after), "a run closed by a gap shows nothing more"


def test_an_event_too_large_ends_the_display_with_its_run_error() -> None:
    key = run_id("s09_big_fragments")
    recs = records([(key, line) for line in golden_source("s09_big_fragments")])
    state = PartitionState(TOPIC, 0, max_record_bytes=2048, display_interval_ms=60_000)
    outcomes = [state.process(rec) for rec in recs]
    closed = next(o for o in outcomes if o.reason == "too-large")
    *_, last = closed.records
    assert last.destination is Destination.DISPLAY
    snapshot = DisplaySnapshot.model_validate_json(last.value or b"")
    assert snapshot.items[-1].content["code"] == "event_too_large"
    assert not displayed(outcomes[outcomes.index(closed) + 1 :])


def test_a_run_error_too_large_to_publish_still_ends_the_display_with_what_was_published() -> None:
    child = "c" * 1200  # the RUN_ERROR names the run whose event was too large
    state = PartitionState(TOPIC, 0, core=FAKE_CORE, max_record_bytes=1024, display_interval_ms=60_000)
    key = "run-a"
    outcomes = [state.process(r) for r in records([(key, item(key, 0, announce=child)),
                                                   (key, item(child, 0, thread="t"))])]  # fmt: skip
    assert outcomes[1].reason == "too-large"
    assert [r.destination for r in outcomes[1].records] == [Destination.DEAD_LETTER, Destination.DISPLAY]
    # the RUN_ERROR took n = 2 and was never published: the last record shows events 0 and 1 and tells a reader
    # to continue after 2, where nothing more comes
    last = outcomes[1].records[-1]
    assert header(last.headers, "agui-seq") == "2"
    first = outcomes[0].records[-1]
    assert header(first.headers, "agui-seq") == "1"
    assert orjson.loads(last.value or b"")["items"] == orjson.loads(first.value or b"")["items"]


def test_events_that_cannot_be_encoded_are_passed_over_by_the_display() -> None:
    def encode(event: BaseEvent) -> bytes:
        if getattr(event, "value", {}).get("seq") == 1:
            raise OverflowError("cannot encode this one")
        return fake_encode(event)

    state = PartitionState(TOPIC, 0, core=dataclasses.replace(FAKE_CORE, encode_event=encode), display_interval_ms=0)
    key = "run-a"
    outcomes = [state.process(r) for r in records([(key, item(key, 0)), (key, item(key, 1, emit=2)),
                                                   (key, item(key, 2))])]  # fmt: skip
    assert outcomes[1].reason == "internal-error"
    before, failed, after = (displayed([outcome])[key][-1] for outcome in outcomes)
    # events 2 and 3 were never published: the display covers their numbers without folding them
    assert [header(r.headers, "agui-seq") for r in (before, failed, after)] == ["1", "3", "4"]
    assert orjson.loads(failed.value or b"")["items"] == orjson.loads(before.value or b"")["items"]
    assert len(orjson.loads(after.value or b"")["items"]) > len(orjson.loads(failed.value or b"")["items"])


def test_evictions_and_withheld_records_are_tallied_when_publishing_only() -> None:
    recs = interleaved(["r0014", "r0095"])
    live = PartitionState(TOPIC, 0, display_interval_ms=0, display_max_bytes=4096)
    outcomes = [live.process(rec) for rec in recs]
    evicted, withheld = live.take_display_tally()
    assert evicted > 0 and withheld > 0
    assert live.take_display_tally() == (0, 0)
    assert all(len(r.value or b"") <= 4096 for r in displayed(outcomes)["run-4395033b08d60e06219057d257acb052"])
    replay = PartitionState(TOPIC, 0, display_interval_ms=0, display_max_bytes=4096)
    for rec in recs:
        replay.process(rec, publish=False)
    assert replay.take_display_tally() == (0, 0)


def test_display_options_are_checked() -> None:
    with pytest.raises(ConfigError, match="display_interval_ms must be >= 0"):
        PartitionState(TOPIC, 0, display_interval_ms=-1)
    with pytest.raises(ConfigError, match="display_max_bytes must be >= 1024"):
        PartitionState(TOPIC, 0, display_interval_ms=0, display_max_bytes=1000)


# ---- the changelog ------------------------------------------------------------------------------------------


def _stream_records(changelog: Changelog) -> dict[str, dict[str, Any]]:
    return {key.decode().removeprefix("stream:"): orjson.loads(value) for key, value in changelog.items()
            if key.startswith(b"stream:")}  # fmt: skip


def test_stream_records_carry_display_state_only_with_the_display_on() -> None:
    recs = interleaved(NAMES)
    on, off = PartitionState(TOPIC, 0, display_interval_ms=0), PartitionState(TOPIC, 0)
    for rec in recs[:40]:
        on.process(rec)
        off.process(rec)
    with_display, without = _stream_records(image(on, 40)), _stream_records(image(off, 40))
    assert with_display and set(with_display) == set(without)
    for key, record in with_display.items():
        assert record["display"]["next_seq"] == record["n"]
        assert record["display"]["fold"]["continuation"]["run_id"] == key
        assert {k: v for k, v in record.items() if k != "display"} == without[key]
    assert all("display" not in record for record in without.values())


def test_a_stream_closed_by_a_gap_keeps_no_display_state() -> None:
    key = run_id("s02_tool_roundtrip")
    lines = golden_source("s02_tool_roundtrip")
    state = PartitionState(TOPIC, 0, display_interval_ms=0)
    for rec in records([(key, line) for line in lines[:4] + lines[5:7]]):
        state.process(rec)
    changelog = image(state, 6)
    (record,) = _stream_records(changelog).values()
    assert record["closed_by"] == "source_gap" and record["display"] is None
    restored, _ = restore(TOPIC, 0, changelog, display_interval_ms=0)
    assert image(restored, 6) == changelog


def _changelog_at(cut: int, **options: Any) -> tuple[list[SourceRecord], Changelog]:
    recs = interleaved(NAMES)
    state = PartitionState(TOPIC, 0, **options)
    for rec in recs[:cut]:
        state.process(rec)
    return recs, fold({}, checkpoint(state, recs[cut].offset))


def test_a_restore_with_the_display_on_refuses_a_changelog_written_without_it() -> None:
    _, changelog = _changelog_at(30)
    with pytest.raises(CheckpointError, match="holds no display state: it was written with the display topic off"):
        restore(TOPIC, 0, changelog, display_interval_ms=1000)


def test_a_restore_with_the_display_off_ignores_display_state() -> None:
    recs, changelog = _changelog_at(30, display_interval_ms=1000)
    _, plain = _changelog_at(30)
    restored, k = restore(TOPIC, 0, changelog)
    expected, _ = restore(TOPIC, 0, plain)
    assert image(restored, k) == image(expected, k) == plain
    assert [restored.process(r) for r in recs[30:]] == [expected.process(r) for r in recs[30:]]


def test_a_restore_with_the_display_on_continues_exactly() -> None:
    recs = interleaved(NAMES, step=170)
    options: dict[str, Any] = {"display_interval_ms": 1000, "display_max_bytes": 6000}
    whole = PartitionState(TOPIC, 0, **options)
    outcomes = [whole.process(rec) for rec in recs]
    for cut in (3, 25, len(recs) // 2, len(recs) - 2):
        head = PartitionState(TOPIC, 0, **options)
        for rec in recs[:cut]:
            head.process(rec, publish=False)
        restored, k = restore(TOPIC, 0, fold({}, checkpoint(head, recs[cut].offset)), **options)
        assert k == recs[cut].offset
        assert [restored.process(r) for r in recs[cut:]] == outcomes[cut:]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param(lambda d: d.update(next_seq=d["next_seq"] + 1), "does not belong to this stream", id="seq"),
        pytest.param(lambda d: d.update(format=9), "display projection state has format 9", id="format"),
        pytest.param(lambda d: d.pop("fold"), "display projection state is not readable", id="unreadable"),
    ],
)
def test_display_state_that_cannot_serve_its_stream_is_refused(change: Any, message: str) -> None:
    _, changelog = _changelog_at(30, display_interval_ms=0)
    key = next(k for k in changelog if k.startswith(b"stream:"))
    record = orjson.loads(changelog[key])
    change(record["display"])
    changelog[key] = orjson.dumps(record)
    with pytest.raises(CheckpointError, match=message):
        restore(TOPIC, 0, changelog, display_interval_ms=0)


def test_a_shard_result_pickles_with_its_projections() -> None:
    shard = ShardState(TOPIC, 0, display_interval_ms=0)
    for rec in interleaved(NAMES)[:30]:
        shard.replay(rec)
    before = {key: stream.display.export_json() for key, stream in shard.result().streams if stream.display}
    after = pickle.loads(pickle.dumps(shard.result()))
    assert len(before) == len(after.streams) > 1
    assert {key: stream.display.export_json() for key, stream in after.streams if stream.display} == before
