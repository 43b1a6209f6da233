"""Verdicts and dead-letter reasons of PartitionState, on the fake core."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.stream._fakes import FAKE_CORE
from tests.stream._support import TOPIC, header, item, records
from worker.errors import GapError, WorkerError
from worker.stream import (
    DeadLetterReason,
    Destination,
    GapPolicy,
    OpenStreamPolicy,
    Outcome,
    PartitionState,
    SourceRecord,
    Verdict,
)

A, B = "run-a", "run-b"
CHILD = "run-child"


def state(**kw: Any) -> PartitionState:
    return PartitionState(TOPIC, 0, core=FAKE_CORE, **kw)


def feed(st: PartitionState, recs: list[SourceRecord]) -> list[Outcome]:
    return [st.process(r) for r in recs]


def only_dead_letter(outcome: Outcome, reason: DeadLetterReason) -> None:
    assert outcome.reason == reason
    assert len(outcome.records) == 1
    out = outcome.records[0]
    assert out.destination is Destination.DEAD_LETTER
    assert out.reason == reason.value
    assert header(out.headers, "dlq-reason") == reason.value


def run_a(last: int) -> list[tuple[str, bytes]]:
    """Root run A, sequences 0..last, the last one terminal."""
    return [(A, item(A, s, terminal=s == last)) for s in range(last + 1)]


def test_a_complete_stream_is_processed_and_closed() -> None:
    st = state()
    outs = feed(st, records(run_a(3)))
    assert [o.verdict for o in outs] == [Verdict.PROCESSED] * 4
    assert all(o.run_id == A and o.reason is None for o in outs)
    assert [r.event_type for r in outs[0].records] == ["RUN_STARTED", "CUSTOM"]
    assert st.open_streams == 0
    assert st.remembered_streams == 1
    assert st.last_offset == 3


@pytest.mark.parametrize("key", [None, b"", b"\xff\xfe"])
def test_a_missing_or_non_utf8_key_is_bad_key(key: bytes | None) -> None:
    st = state()
    (out,) = feed(st, records([(key, item(A, 0))]))
    assert out.verdict is Verdict.DEAD_LETTERED
    assert out.run_id is None
    only_dead_letter(out, DeadLetterReason.BAD_KEY)
    assert st.open_streams == 0


@pytest.mark.parametrize("value", [None, b"", b"not json", b"[]", b'{"run_id":"run-a"}'])
def test_an_undecodable_value_is_a_decode_error(value: bytes | None) -> None:
    st = state()
    (out,) = feed(st, records([(A, value)]))
    assert out.verdict is Verdict.DEAD_LETTERED
    only_dead_letter(out, DeadLetterReason.DECODE_ERROR)
    assert st.open_streams == 0


def test_a_decode_error_inside_a_stream_does_not_advance_its_sequence() -> None:
    st = state()
    outs = feed(st, records([(A, item(A, 0)), (A, b"{"), (A, item(A, 1)), (A, item(A, 2))]))
    assert [o.verdict for o in outs] == [Verdict.PROCESSED, Verdict.DEAD_LETTERED, Verdict.PROCESSED,
                                         Verdict.PROCESSED]


def test_an_item_of_another_run_with_no_open_stream_is_mis_keyed() -> None:
    (out,) = feed(state(), records([(A, item(B, 0))]))
    assert out.verdict is Verdict.DEAD_LETTERED
    only_dead_letter(out, DeadLetterReason.MIS_KEYED)
    assert "run-b" in header(out.records[0].headers, "dlq-message")


def test_a_stream_whose_first_record_is_not_sequence_0_is_a_gap_with_no_output() -> None:
    st = state()
    outs = feed(st, records([(A, item(A, 2)), (A, item(A, 3))]))
    assert [o.verdict for o in outs] == [Verdict.GAP, Verdict.GAP]
    for out in outs:
        only_dead_letter(out, DeadLetterReason.STREAM_START_MISSING)
    assert st.open_streams == 0


def test_a_start_missing_terminal_is_remembered_so_later_stragglers_are_not_gaps() -> None:
    st = state()
    outs = feed(st, records([(A, item(A, 5, terminal=True)), (A, item(A, 4)), (A, item(A, 6))]))
    assert [o.reason for o in outs] == [DeadLetterReason.STREAM_START_MISSING, DeadLetterReason.DUPLICATE,
                                        DeadLetterReason.STREAM_CLOSED]
    assert st.remembered_streams == 1


def test_repeated_and_older_sequences_of_a_run_are_duplicates() -> None:
    st = state()
    outs = feed(st, records([(A, item(A, 0)), (A, item(A, 1)), (A, item(A, 1)), (A, item(A, 0)),
                             (A, item(A, 2))]))
    assert [o.verdict for o in outs] == [Verdict.PROCESSED, Verdict.PROCESSED, Verdict.DUPLICATE,
                                         Verdict.DUPLICATE, Verdict.PROCESSED]
    only_dead_letter(outs[2], DeadLetterReason.DUPLICATE)
    # the duplicates took no event number: the next event continues the count
    assert header(outs[4].records[0].headers, "agui-seq") == "3"


def test_child_runs_count_their_own_sequences_and_their_duplicates_are_caught() -> None:
    st = state()
    outs = feed(st, records([(A, item(A, 0, announce=CHILD)), (A, item(CHILD, 0)), (A, item(A, 1)), (A, item(CHILD, 1)),
                             (A, item(CHILD, 1)), (A, item(CHILD, 2, terminal=True)), (A, item(A, 2))]))
    processed, duplicate = Verdict.PROCESSED, Verdict.DUPLICATE
    assert [o.verdict for o in outs] == [processed] * 4 + [duplicate] + [processed] * 2
    assert st.open_streams == 1  # a child terminal does not end the root stream


def test_a_child_whose_first_item_is_not_sequence_0_is_a_gap() -> None:
    st = state()
    outs = feed(st, records([(A, item(A, 0, announce=CHILD)), (A, item(CHILD, 1))]))
    assert outs[1].verdict is Verdict.GAP
    run_error = orjson.loads(outs[1].records[0].value or b"")
    assert run_error["message"] == f"source gap in run {CHILD}: expected sequence 0, received 1"


def test_an_item_of_a_run_not_announced_in_the_open_stream_of_its_key_is_mis_keyed_and_changes_nothing() -> None:
    st = state()
    recs = records([(A, item(A, 0)), (B, item(B, 0)), (A, item(B, 1)), (A, item(B, 0)), (A, item(CHILD, 0)),
                    (A, item(A, 1)), (B, item(B, 1)), (A, item(A, 2, announce=CHILD)), (A, item(CHILD, 0))])
    outs = feed(st, recs)
    assert [o.reason for o in outs] == [None, None, DeadLetterReason.MIS_KEYED, DeadLetterReason.MIS_KEYED,
                                        DeadLetterReason.MIS_KEYED, None, None, None, None]
    for out in outs[2:5]:
        only_dead_letter(out, DeadLetterReason.MIS_KEYED)
        assert out.run_id == A
    assert "neither that root run nor a child announced in it" in header(outs[2].records[0].headers, "dlq-message")
    # neither stream noticed: A numbers on (RUN_STARTED, CUSTOM, then CUSTOM #2), B's sequence 1 is no gap
    assert [header(r.headers, "agui-event-id") for r in outs[5].records] == [f"{A}:2"]
    assert outs[6].verdict is Verdict.PROCESSED
    # once announced, the child's items belong to A's stream
    assert [header(r.headers, "agui-event-id") for r in outs[8].records] == [f"{A}:4"]


def test_a_stream_closed_by_a_gap_dead_letters_foreign_items_as_closed_not_mis_keyed() -> None:
    # the gap may have swallowed the announcement: a closed stream cannot tell a child from a stranger
    outs = feed(state(), records([(A, item(A, 0)), (A, item(A, 2)), (A, item(CHILD, 0))]))
    assert [o.reason for o in outs] == [None, DeadLetterReason.GAP, DeadLetterReason.RUN_CLOSED_BY_GAP]


def test_a_gap_closes_the_run_with_one_run_error_then_dead_letters_until_the_terminal() -> None:
    st = state()
    recs = records([(A, item(A, 0)), (A, item(A, 1)), (A, item(A, 3)), (A, item(A, 4)),
                    (A, item(A, 2)), (A, item(A, 5, terminal=True)), (A, item(A, 6))])
    outs = feed(st, recs)
    assert [o.verdict for o in outs] == [Verdict.PROCESSED, Verdict.PROCESSED, Verdict.GAP,
                                         Verdict.DEAD_LETTERED, Verdict.DEAD_LETTERED,
                                         Verdict.DEAD_LETTERED, Verdict.DEAD_LETTERED]
    gap = outs[2]
    assert gap.reason == DeadLetterReason.GAP
    assert [r.destination for r in gap.records] == [Destination.OUTPUT, Destination.DEAD_LETTER]
    run_error, dead = gap.records
    assert orjson.loads(run_error.value or b"") == {
        "type": "RUN_ERROR",
        "timestamp": 1_748_736_003_000,
        "message": f"source gap in run {A}: expected sequence 2, received 3",
        "code": "source_gap",
    }
    assert run_error.event_type == "RUN_ERROR"
    assert header(run_error.headers, "agui-event-id") == f"{A}:3"  # RUN_STARTED, CUSTOM, CUSTOM came first
    assert header(run_error.headers, "source-sequence") == "3"
    assert header(run_error.headers, "source-offset") == "2"
    assert dead.value == recs[2].value
    assert header(dead.headers, "dlq-reason") == "gap"
    for out in outs[3:6]:
        only_dead_letter(out, DeadLetterReason.RUN_CLOSED_BY_GAP)
    # the terminal released the stream; the key is remembered
    assert st.open_streams == 0
    only_dead_letter(outs[6], DeadLetterReason.STREAM_CLOSED)


def test_a_gap_at_the_root_terminal_closes_the_stream_at_once() -> None:
    st = state()
    outs = feed(st, records([(A, item(A, 0)), (A, item(A, 2, terminal=True)), (A, item(A, 1))]))
    assert [o.verdict for o in outs] == [Verdict.PROCESSED, Verdict.GAP, Verdict.DUPLICATE]
    assert st.open_streams == 0


def test_halt_policy_raises_a_gap_error_and_changes_nothing() -> None:
    st = state(gap_policy=GapPolicy.HALT)
    recs = records([(A, item(A, 0)), (A, item(A, 2)), (A, item(A, 1))])
    st.process(recs[0])
    with pytest.raises(GapError) as info:
        st.process(recs[1])
    text = str(info.value)
    for part in (A, "expected sequence 1", "received 2", "offset 1"):
        assert part in text
    assert st.last_offset == 0
    assert st.open_streams == 1
    out = st.process(recs[2])
    assert out.verdict is Verdict.PROCESSED
    assert header(out.records[0].headers, "agui-seq") == "2"


@pytest.mark.parametrize(
    ("refuse", "reason"),
    [("agui", DeadLetterReason.OBSERVATION_ERROR), ("type", DeadLetterReason.TYPE_ERROR),
     ("validation", DeadLetterReason.OBSERVATION_ERROR), ("crash", DeadLetterReason.INTERNAL_ERROR)],
)
def test_observer_refusals_are_dead_lettered_and_the_stream_flows_on(
    refuse: str, reason: DeadLetterReason
) -> None:
    st = state()
    outs = feed(st, records([(A, item(A, 0)), (A, item(A, 1, refuse=refuse)), (A, item(A, 2)),
                             (A, item(A, 1))]))
    assert outs[1].verdict is Verdict.DEAD_LETTERED
    only_dead_letter(outs[1], reason)
    # refused item counts as delivered: the next one is no gap, and a resend of it is a duplicate
    assert outs[2].verdict is Verdict.PROCESSED
    assert outs[3].verdict is Verdict.DUPLICATE
    # the observer state was unchanged by the refusal: its running count skipped nothing
    value = orjson.loads(outs[2].records[0].value or b"")["value"]
    assert value == {"run": A, "seq": 2, "count": 1}
    assert header(outs[2].records[0].headers, "agui-seq") == "2"


def test_late_records_of_a_closed_stream_are_duplicates_or_stream_closed() -> None:
    st = state()
    outs = feed(st, records([*run_a(2), (A, item(A, 0)), (A, item(A, 2, terminal=True)), (A, item(A, 3)),
                             (A, item(CHILD, 0))]))
    assert [o.reason for o in outs[3:]] == [DeadLetterReason.DUPLICATE, DeadLetterReason.DUPLICATE,
                                            DeadLetterReason.STREAM_CLOSED, DeadLetterReason.STREAM_CLOSED]
    assert [o.verdict for o in outs[3:]] == [Verdict.DUPLICATE, Verdict.DUPLICATE, Verdict.DEAD_LETTERED,
                                             Verdict.DEAD_LETTERED]


def test_closed_stream_memory_forgets_the_oldest_key_first() -> None:
    st = state(closed_stream_memory=2)
    keys = ["run-1", "run-2", "run-3"]
    feed(st, records([(k, item(k, s, terminal=s == 1)) for k in keys for s in range(2)]))
    assert st.remembered_streams == 2
    late = records([(k, item(k, 0)) for k in keys], start=10)
    outs = feed(st, late)
    # run-1 was forgotten, so its late sequence 0 opens a new stream; the two others are duplicates
    assert [o.verdict for o in outs] == [Verdict.PROCESSED, Verdict.DUPLICATE, Verdict.DUPLICATE]


def test_zero_closed_stream_memory_remembers_nothing() -> None:
    st = state(closed_stream_memory=0)
    outs = feed(st, records([*run_a(1), (A, item(A, 1))]))
    assert st.remembered_streams == 0
    assert outs[-1].reason == DeadLetterReason.STREAM_START_MISSING


def test_the_open_stream_cap_dead_letters_new_streams() -> None:
    st = state(max_open_streams=2)
    outs = feed(st, records([("run-1", item("run-1", 0)), ("run-2", item("run-2", 0)),
                             ("run-3", item("run-3", 0)), ("run-1", item("run-1", 1, terminal=True)),
                             ("run-4", item("run-4", 0))]))
    assert [o.verdict for o in outs] == [Verdict.PROCESSED, Verdict.PROCESSED, Verdict.DEAD_LETTERED,
                                         Verdict.PROCESSED, Verdict.PROCESSED]
    only_dead_letter(outs[2], DeadLetterReason.OPEN_STREAM_CAP)
    assert "max_open_streams=2" in header(outs[2].records[0].headers, "dlq-message")
    assert st.open_streams == 2


def test_the_open_stream_cap_under_halt_raises_and_changes_nothing() -> None:
    st = state(max_open_streams=1, open_stream_policy=OpenStreamPolicy.HALT)
    recs = records([("run-1", item("run-1", 0)), ("run-2", item("run-2", 0))])
    st.process(recs[0])
    with pytest.raises(WorkerError, match="max_open_streams=1") as info:
        st.process(recs[1])
    assert type(info.value) is WorkerError
    assert st.open_streams == 1
    assert st.last_offset == 0


def test_offsets_must_increase() -> None:
    st = state()
    st.process(records([(A, item(A, 0))], start=5)[0])
    for offset in (5, 4):
        with pytest.raises(WorkerError, match=f"got {offset} after 5"):
            st.process(records([(A, item(A, 1))], start=offset)[0])
    assert st.process(records([(A, item(A, 1))], start=9)[0]).verdict is Verdict.PROCESSED


def test_a_record_of_another_partition_is_refused() -> None:
    st = state()
    with pytest.raises(WorkerError, match=r"harness.events\[3\]"):
        st.process(records([(A, item(A, 0))], partition=3)[0])
    assert st.last_offset is None


def test_invalid_limits_are_refused() -> None:
    with pytest.raises(ValueError, match="max_open_streams"):
        state(max_open_streams=0)
    with pytest.raises(ValueError, match="closed_stream_memory"):
        state(closed_stream_memory=-1)


def test_replay_from_is_the_first_offset_of_the_oldest_open_stream() -> None:
    st = state()
    assert st.replay_from(0) == 0
    recs = records([("run-1", item("run-1", 0)), ("run-2", item("run-2", 0)), ("run-3", item("run-3", 0)),
                    ("run-1", item("run-1", 1, terminal=True)), ("run-2", item("run-2", 2)),
                    ("run-3", item("run-3", 1, terminal=True)), ("run-2", item("run-2", 3, terminal=True))],
                   start=100, step=2)
    expected = [100, 100, 100, 102, 102, 102, None]
    for rec, want in zip(recs, expected, strict=True):
        st.process(rec)
        assert st.replay_from(rec.offset + 1) == (rec.offset + 1 if want is None else want)
    # run-2 was closed by a gap at offset 108 and held the replay start until its terminal at 112


def test_replay_from_never_exceeds_the_next_offset() -> None:
    st = state()
    st.process(records([(A, item(A, 0))], start=50)[0])
    assert st.replay_from(51) == 50
    assert st.replay_from(40) == 40


def test_a_decoder_that_fails_unexpectedly_dead_letters_the_record_and_the_partition_flows_on() -> None:
    st = state()
    outs = feed(st, records([(A, item(A, 0)), (A, item(A, 1, decoder="crash")), (A, item(A, 1))]))
    only_dead_letter(outs[1], DeadLetterReason.INTERNAL_ERROR)
    assert "KeyError" in header(outs[1].records[0].headers, "dlq-message")
    assert header(outs[1].records[0].headers, "dlq-exception-type") == "KeyError"
    assert isinstance(outs[1].error, KeyError)
    assert outs[2].verdict is Verdict.PROCESSED
