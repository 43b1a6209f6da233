"""Output and dead-letter record contents: keys, values, headers, event numbering."""

from __future__ import annotations

import dataclasses

import orjson

import worker.stream
from tests.stream._fakes import FAKE_CORE
from tests.stream._support import TOPIC, item, records
from worker.stream import Destination, PartitionState, SourceRecord, Verdict

A = "run-a"


def test_output_headers_name_the_event_and_its_source_in_order() -> None:
    st = PartitionState(TOPIC, 4, core=FAKE_CORE)
    rec = SourceRecord(TOPIC, 4, 77, 123, A.encode(), item(A, 0, thread="thread_x"), (("h", b"v"),))
    out = st.process(rec).records
    assert [r.destination for r in out] == [Destination.OUTPUT, Destination.OUTPUT]
    assert out[1].headers == (
        ("agui-event-id", b"run-a:1"),
        ("agui-seq", b"1"),
        ("agui-type", b"CUSTOM"),
        ("thread-id", b"thread_x"),
        ("source-partition", b"4"),
        ("source-offset", b"77"),
        ("source-sequence", b"0"),
    )
    assert out[0].key == b"run-a"
    assert out[0].event_type == "RUN_STARTED"
    assert out[0].reason is None
    assert orjson.loads(out[0].value or b"") == {
        "type": "RUN_STARTED", "timestamp": 1_748_736_000_000, "threadId": "thread_x", "runId": A,
    }


def test_child_events_carry_the_child_thread_and_sequence_under_the_root_key() -> None:
    st = PartitionState(TOPIC, 0, core=FAKE_CORE)
    st.process(records([(A, item(A, 0, announce="run-c"))])[0])
    (out,) = st.process(records([(A, item("run-c", 0, thread="thread_c"))], start=1)[0]).records
    assert out.key == b"run-a"
    assert dict(out.headers)["thread-id"] == b"thread_c"
    assert dict(out.headers)["source-sequence"] == b"0"
    assert dict(out.headers)["agui-event-id"] == b"run-a:2"


def test_event_numbers_run_from_0_without_holes_across_a_stream() -> None:
    st = PartitionState(TOPIC, 0, core=FAKE_CORE)
    pairs = [(A, item(A, 0, emit=2)), (A, item(A, 1, emit=0)), ("run-b", item("run-b", 0)),
             (A, item(A, 1)), (A, item(A, 2, emit=3)), (A, b"junk"), (A, item(A, 4))]
    outs = [st.process(r) for r in records(pairs)]
    ids = [dict(r.headers)["agui-event-id"].decode() for o in outs for r in o.records
           if r.destination is Destination.OUTPUT and r.key == b"run-a"]
    # 3 + 0 (seq 1 emitted nothing) + duplicate seq 1 (none) + 3 + gap RUN_ERROR
    assert ids == [f"run-a:{n}" for n in range(7)]
    assert dict(outs[-1].records[0].headers)["agui-type"] == b"RUN_ERROR"


def test_dead_letters_keep_the_original_record_and_add_provenance() -> None:
    st = PartitionState(TOPIC, 2, core=FAKE_CORE)
    raw = b"\x00not-json" + b"x" * 5000
    rec = SourceRecord(TOPIC, 2, 9, 1_700_000_000_123, b"\xffkey", raw, (("trace", b"t1"), ("trace", b"t2")))
    (dead,) = st.process(rec).records
    assert dead.destination is Destination.DEAD_LETTER
    assert (dead.key, dead.value) == (b"\xffkey", raw)
    assert dead.event_type is None
    assert dead.reason == "bad-key"
    names = [k for k, _ in dead.headers]
    assert names == ["trace", "trace", "dlq-reason", "dlq-message", "dlq-source-topic",
                     "dlq-source-partition", "dlq-source-offset", "dlq-source-timestamp"]
    values = dict(dead.headers[2:])
    assert values["dlq-source-topic"] == TOPIC.encode()
    assert values["dlq-source-partition"] == b"2"
    assert values["dlq-source-offset"] == b"9"
    assert values["dlq-source-timestamp"] == b"1700000000123"
    assert b"\\xffkey" in values["dlq-message"]


def test_dead_letter_messages_are_at_most_1000_characters() -> None:
    st = PartitionState(TOPIC, 0, core=FAKE_CORE)
    long_run = "run-" + "z" * 3000
    (dead,) = st.process(records([(A, item(long_run, 0))])[0]).records
    message = dict(dead.headers)["dlq-message"].decode()
    assert message.startswith("key 'run-a' has no open stream")
    assert len(message) == 1000


def test_the_public_surface_is_pinned() -> None:
    assert sorted(worker.stream.__all__) == sorted([
        "CHECKPOINT_FORMAT_VERSION", "EVENT_TOO_LARGE_CODE", "MIN_RECORD_BYTES", "SOURCE_GAP_CODE",
        "CheckpointHeader", "DeadLetterReason", "Destination", "GapPolicy", "OpenStreamPolicy", "OutboundRecord",
        "Outcome", "PartitionState",
        "ReplayPool", "ReplaySession", "SourceRecord", "StateOptions", "StreamCore", "StreamObserver", "Verdict",
        "WireItem", "decode_replay_metadata", "default_core", "encode_replay_metadata",
        "load_processor", "read_checkpoint_header", "record_size", "reference_core", "to_source_record",
        # the thread index's records, written by `worker index` with the worker's own builder
        "index_record",
        # the changelog's keys and values, read back by `worker inspect` through the same code
        "PARTITION_KEY", "decode_ended", "decode_stream", "ended_key", "split_key", "stream_key",
    ])
    assert [r.value for r in worker.stream.DeadLetterReason] == [
        "bad-key", "decode-error", "mis-keyed", "stream-start-missing", "stream-closed", "duplicate", "gap",
        "run-closed-by-gap", "observation-error", "type-error", "open-stream-cap", "too-large", "internal-error",
    ]
    assert [v.value for v in worker.stream.Verdict] == ["processed", "duplicate", "gap", "dead_lettered"]
    assert [d.value for d in worker.stream.Destination] == ["output", "dead-letter", "display", "index"]


def test_replay_builds_no_record_and_encodes_nothing() -> None:
    def refuse_to_encode(event: object) -> bytes:
        raise AssertionError(f"replay encoded {event!r}")

    core = dataclasses.replace(FAKE_CORE, encode_event=refuse_to_encode)
    st = PartitionState(TOPIC, 0, core=core)
    pairs = [(A, item(A, 0)), (A, item(A, 2)), (None, b"x"), (A, item(A, 3, terminal=True)), (A, item(A, 1))]
    outs = [st.process(r, publish=False) for r in records(pairs)]
    assert [o.records for o in outs] == [()] * 5
    assert [o.verdict for o in outs] == [Verdict.PROCESSED, Verdict.GAP, Verdict.DEAD_LETTERED,
                                         Verdict.DEAD_LETTERED, Verdict.DUPLICATE]
