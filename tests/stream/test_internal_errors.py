"""Crash containment: an unexpected exception while converting one record dead-letters that record as
`internal-error`, the stream keeps its state, and a replay of the same records builds the same state."""

from __future__ import annotations

import dataclasses
import pickle
from typing import Any

import orjson
import pytest
from ag_ui.core import BaseEvent
from pydantic_core import PydanticSerializationError

from tests import processors
from tests.native import use_build
from tests.stream._fakes import FAKE_CORE, fake_encode
from tests.stream._support import TOPIC, golden_source, header, item, records
from worker.display import DisplayRecord
from worker.display.projection import Accepted
from worker.errors import ConfigError, NativePanicError
from worker.observe import HarnessAguiStreamObserver, encode_event
from worker.stream import (
    DeadLetterReason,
    Destination,
    Outcome,
    PartitionState,
    SourceRecord,
    StreamCore,
    Verdict,
    default_core,
    load_processor,
)
from worker.stream._hook import encodable
from worker.wire import decode_item

A = "run-a"


def _internal(outcome: Outcome) -> tuple[dict[str, str], BaseException]:
    """The dead letter's headers of an internal-error outcome, and its exception."""
    assert outcome.verdict is Verdict.DEAD_LETTERED
    assert outcome.reason == DeadLetterReason.INTERNAL_ERROR
    (dead,) = outcome.records
    assert dead.destination is Destination.DEAD_LETTER and dead.reason == "internal-error"
    assert outcome.error is not None
    names = ("dlq-reason", "dlq-message", "dlq-exception-type", "dlq-exception-message")
    return {name: header(dead.headers, name) for name in names}, outcome.error


def _continue_identically(
    core: StreamCore, recs: list[SourceRecord], upto: int, max_record_bytes: int | None = None
) -> list[Outcome]:
    """Records `[0, upto)` fed live to one state and replayed into another; both must then publish the same
    outcomes for the rest. Returns the live outcomes of every record."""
    live, replayed = (PartitionState(TOPIC, 0, core=core, max_record_bytes=max_record_bytes) for _ in range(2))
    outs = [live.process(r) for r in recs[:upto]]
    for r in recs[:upto]:
        replayed.process(r, publish=False)
    rest = [live.process(r) for r in recs[upto:]]
    assert rest == [replayed.process(r) for r in recs[upto:]]
    return outs + rest


def test_an_observer_bug_is_an_internal_error_and_the_stream_keeps_its_state() -> None:
    recs = records([(A, item(A, 0)), (A, item(A, 1, refuse="crash")), (A, item(A, 2)), (A, item(A, 3))])
    outs = _continue_identically(FAKE_CORE, recs, upto=2)
    headers, error = _internal(outs[1])
    assert isinstance(error, RuntimeError)
    assert headers["dlq-exception-type"] == "RuntimeError"
    assert headers["dlq-exception-message"] == "an observer bug"
    assert headers["dlq-message"] == f"conversion failed on run {A} sequence 1: RuntimeError: an observer bug"
    # The observer saw nothing of the failed item: its count goes on from 1, and no id was used.
    value = orjson.loads(outs[2].records[0].value or b"")["value"]
    assert value == {"run": A, "seq": 2, "count": 1}
    assert header(outs[2].records[0].headers, "agui-seq") == "2"
    assert outs[3].verdict is Verdict.PROCESSED


def test_an_exception_message_is_bounded_and_a_class_outside_builtins_is_named_with_its_module() -> None:
    class Boom(Exception):
        pass

    def crash(value: bytes) -> object:
        raise Boom("x" * 5000)

    core = dataclasses.replace(FAKE_CORE, decode=crash)
    out = PartitionState(TOPIC, 0, core=core).process(records([(A, item(A, 0))])[0])
    headers, _ = _internal(out)
    assert headers["dlq-exception-type"] == f"{__name__}.{Boom.__qualname__}"
    assert len(headers["dlq-exception-message"]) == 1000 and headers["dlq-exception-message"].endswith("…")


@pytest.mark.parametrize("measured", [False, True], ids=["replay-skips-encoding", "replay-encodes-to-measure"])
def test_an_event_that_cannot_be_encoded_skips_its_ids_as_a_replay_does(measured: bool) -> None:
    def encode(event: BaseEvent) -> bytes:
        if getattr(event, "value", {}).get("seq") == 1:
            raise OverflowError("cannot encode this one")
        return fake_encode(event)

    core = dataclasses.replace(FAKE_CORE, encode_event=encode)
    if measured:  # no bound: every item's events are encoded and measured against the limit, in replay too
        core = dataclasses.replace(core, event_bound=lambda item, widest: None)
    recs = records([(A, item(A, 0)), (A, item(A, 1, emit=2)), (A, item(A, 2)), (A, item(A, 3, terminal=True))])
    outs = _continue_identically(core, recs, upto=2, max_record_bytes=100_000 if measured else None)
    headers, error = _internal(outs[1])
    assert isinstance(error, OverflowError)
    assert "events 2 to 3 of run run-a sequence 1 could not be encoded" in headers["dlq-message"]
    # RUN_STARTED and the first CUSTOM took ids 0 and 1; the failed item's two events ids 2 and 3.
    assert header(outs[2].records[0].headers, "agui-seq") == "4"
    assert outs[3].verdict is Verdict.PROCESSED


def _golden(run: str, name: str = "s01_hello") -> list[SourceRecord]:
    lines = [orjson.dumps({**orjson.loads(ln), "run_id": run}) for ln in golden_source(name)]
    return records([(run, ln) for ln in lines])


def _reference(lines: list[bytes], processor: object) -> list[bytes]:
    """What the stream observer makes of `lines` with `processor`, an item it fails on contributing nothing."""
    observer = HarnessAguiStreamObserver(processor=processor, retain_events=False)  # type: ignore[arg-type]
    out = []
    for ln in lines:
        try:
            out.extend(encode_event(e) for e in observer.observe(decode_item(ln)))
        except Exception:  # the reference skips whatever the worker dead-letters
            continue
    return out


def test_a_processor_that_raises_dead_letters_its_item_and_the_run_goes_on() -> None:
    run = f"run-0001{processors.BUGGY_SUFFIX}"
    recs = _golden(run)
    core = default_core(processor="tests.processors:buggy")
    outs = _continue_identically(core, recs, upto=processors.BUGGY_SEQUENCE + 1)
    failed = outs[processors.BUGGY_SEQUENCE]
    headers, error = _internal(failed)
    assert isinstance(error, ValueError)
    assert headers["dlq-exception-type"] == "ValueError"
    assert headers["dlq-exception-message"] == f"injected conversion bug at {run} sequence 5"
    others = [o for i, o in enumerate(outs) if i != processors.BUGGY_SEQUENCE]
    assert all(o.verdict is Verdict.PROCESSED for o in others)
    published = [r for o in others for r in o.records]
    assert [r.value for r in published] == _reference([r.value or b"" for r in recs], processors.buggy)
    assert [header(r.headers, "agui-seq") for r in published] == [str(n) for n in range(len(published))]


def test_a_processor_replacement_json_cannot_hold_fails_inside_observe_and_changes_nothing() -> None:
    run = f"run-0001{processors.UNENCODABLE_SUFFIX}"
    recs = _golden(run)
    core = default_core(processor=processors.unencodable)
    outs = _continue_identically(core, recs, upto=len(recs))
    headers, error = _internal(outs[-1])  # the terminal, whose RUN_FINISHED carries the object
    assert isinstance(error, PydanticSerializationError)
    assert "conversion failed on" in headers["dlq-message"], "encoded inside observe, not after it"
    # The observer did not take the terminal in: the stream is still open, and its last id was never used.
    state = PartitionState(TOPIC, 0, core=core)
    for r in recs:
        state.process(r)
    assert state.open_streams == 1


def test_a_processor_applies_to_every_event_of_the_default_core() -> None:
    run = "run-0001-shout"
    recs = _golden(run)
    state = PartitionState(TOPIC, 0, core=default_core("tests.processors:shout"))
    out = [r.value for rec in recs for r in state.process(rec).records]
    assert out == _reference([r.value or b"" for r in recs], processors.shout)
    assert out != _reference([r.value or b"" for r in recs], None), "the processor changed nothing"


@pytest.mark.parametrize(
    ("spec", "needle"),
    [
        ("tests.processors", "must be written module:attribute"),
        ("tests.no_such_module:x", "cannot be imported: ModuleNotFoundError: No module named 'tests.no_such_module'"),
        ("tests.processors:nope", "tests.processors has no attribute nope"),
        ("tests.processors:NOT_CALLABLE", "is a int, not a callable"),
    ],
)
def test_a_processor_that_cannot_be_loaded_is_a_config_error_naming_it(spec: str, needle: str) -> None:
    with pytest.raises(ConfigError, match="processor") as caught:
        load_processor(spec)
    assert needle in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_named_processor_crosses_processes_as_its_name() -> None:
    checked = encodable("tests.processors:shout")
    assert encodable("tests.processors:shout") is checked, "loaded once"
    assert pickle.loads(pickle.dumps(checked)) is checked
    assert load_processor("tests.processors:shout") is processors.shout


@pytest.mark.parametrize("raised", [TypeError("not bytes"), ValueError("unexpected")], ids=["type", "value"])
def test_a_decoder_raising_keeps_decode_error_for_the_expected_kinds_and_internal_error_for_the_rest(
    raised: Exception,
) -> None:
    def decode(value: bytes) -> object:
        raise raised

    out = PartitionState(TOPIC, 0, core=dataclasses.replace(FAKE_CORE, decode=decode)).process(
        records([(A, item(A, 0))])[0])
    expected = DeadLetterReason.DECODE_ERROR if isinstance(raised, TypeError) else DeadLetterReason.INTERNAL_ERROR
    assert out.reason == expected
    assert (out.error is None) is (expected is DeadLetterReason.DECODE_ERROR)


def test_a_panic_of_the_native_display_fold_dead_letters_its_record_and_the_batch_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The native fold's panic, caught at its boundary (NativePanicError), dead-letters the record whose display it
    was folding, that record's output records kept; the other records of the batch and the next batches go on."""
    use_build("native", monkeypatch)
    from worker.display._native_projection import NativeDisplayProjection  # noqa: PLC0415  (native builds only)

    real = NativeDisplayProjection.complete
    calls = [0]

    def complete(self: NativeDisplayProjection, accepted: Accepted) -> DisplayRecord | None:
        calls[0] += 1
        if calls[0] == 3:
            raise NativePanicError("the native display projection panicked: index out of bounds")
        return real(self, accepted)

    monkeypatch.setattr(NativeDisplayProjection, "complete", complete)
    key = orjson.loads(golden_source("r0001")[0])["run_id"]
    recs = records((key, value) for value in golden_source("r0001"))
    state = PartitionState(TOPIC, 0, display_interval_ms=0)
    outcomes, error = state.process_batch(recs[:5])
    assert error is None
    assert [o.verdict for o in outcomes] == [Verdict.PROCESSED] * 2 + [Verdict.DEAD_LETTERED] + [Verdict.PROCESSED] * 2
    hit = outcomes[2]
    assert hit.reason == DeadLetterReason.INTERNAL_ERROR and isinstance(hit.error, NativePanicError)
    *kept, letter = hit.records
    assert [r.destination for r in kept] == [Destination.OUTPUT] * len(kept) and kept
    assert letter.destination is Destination.DEAD_LETTER
    assert header(letter.headers, "dlq-message").startswith("display fold of run ")
    assert "index out of bounds" in header(letter.headers, "dlq-message")
    assert Destination.DISPLAY in {r.destination for r in outcomes[3].records}
    more, error = state.process_batch(recs[5:])
    assert error is None and all(o.verdict is Verdict.PROCESSED for o in more)


def test_a_panic_of_the_native_observer_dead_letters_its_record_and_the_stream_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The native observer's panic, caught at its boundary (NativePanicError, an Exception), dead-letters its record
    as internal-error, the stream unchanged: the next items of the run convert as if it had not come."""
    use_build("native", monkeypatch)
    core = default_core()
    assert core.observe_records is not None
    observe = core.observe_records
    calls = [0]

    def panicking(observer: Any, item: Any, *rest: Any) -> Any:
        calls[0] += 1
        if calls[0] == 3:
            raise NativePanicError("the native observer panicked: index out of bounds")
        return observe(observer, item, *rest)

    lines = golden_source("s01_hello")
    key = orjson.loads(lines[0])["run_id"]
    recs = records((key, line) for line in lines)
    state = PartitionState(TOPIC, 0, core=dataclasses.replace(core, observe_records=panicking))
    outcomes = [state.process(rec) for rec in recs]
    headers, error = _internal(outcomes[2])
    assert isinstance(error, NativePanicError)
    assert headers["dlq-exception-type"] == "worker.errors.NativePanicError"
    assert headers["dlq-message"].endswith("NativePanicError: the native observer panicked: index out of bounds")
    assert [o.verdict for o in outcomes[3:]] == [Verdict.PROCESSED] * (len(outcomes) - 3)
