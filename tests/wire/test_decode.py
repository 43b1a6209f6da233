"""decode_item: well-formed items decode to typed items; every malformed class is a DecodeError with its path."""

from __future__ import annotations

import json
import warnings
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.errors import DecodeError
from worker.wire import (
    AgentEvent,
    ExtensionEvent,
    HarnessEvent,
    HarnessRunResultEvent,
    decode_item,
    is_terminal,
    timestamp_ms,
)

BASE: dict[str, Any] = {"thread_id": "thread_a", "run_id": "run-a", "sequence": 3,
                        "occurred_at": "2025-06-01T12:00:00.100000Z"}
TEXT_START = {"index": 0, "part": {"content": "hi", "part_kind": "text"}, "event_kind": "part_start"}
USAGE = {"input_tokens": 1, "output_tokens": 2}


def line(**changes: Any) -> str:
    body = {**BASE, "event": TEXT_START}
    body.update(changes)
    return json.dumps({k: v for k, v in body.items() if v is not _DROP})


_DROP = object()


def _error(value: bytes | str) -> DecodeError:
    with pytest.raises(DecodeError) as info:
        decode_item(value)
    return info.value


def test_event_item_decodes_with_normalized_fields() -> None:
    item = decode_item(line().encode())
    assert isinstance(item, HarnessEvent) and not is_terminal(item)
    assert (item.thread_id, item.run_id, item.sequence) == ("thread_a", "run-a", 3)
    assert item.occurred_at == datetime(2025, 6, 1, 12, 0, 0, 100000, tzinfo=UTC)
    assert isinstance(item.event, AgentEvent) and item.event.event_kind == "part_start"
    assert list(item.event.data["part"]) == ["content", "id", "provider_name", "provider_details", "citations",
                                             "part_kind"]
    assert list(item.event.data) == ["index", "part", "previous_part_kind", "event_kind"]
    assert timestamp_ms(item) == 1748779200100


def test_result_item_and_extension_item() -> None:
    result = decode_item(json.dumps({**BASE, "result": {"status": "cancelled", "usage": USAGE}}))
    assert isinstance(result, HarnessRunResultEvent) and is_terminal(result)
    assert result.result.status == "cancelled"
    ext = decode_item(line(event={"schema_version": "1", "kind": "context",
                                  "payload": {"api_key": "k", "input_tokens": 5, "note": "Bearer abc.def"}}))
    assert isinstance(ext, HarnessEvent) and isinstance(ext.event, ExtensionEvent)
    assert ext.event.payload == {"api_key": "[REDACTED]", "input_tokens": 5, "note": "Bearer [REDACTED]"}


@pytest.mark.parametrize(
    ("key", "value", "iso", "ms"),
    [
        ("z", "2025-06-01T12:00:00Z", "2025-06-01T12:00:00+00:00", 1748779200000),
        ("offset", "2025-06-01T05:00:00.5-07:00", "2025-06-01T05:00:00.500000-07:00", 1748779200500),
        ("space", "2025-06-01 12:00:00+05:30", "2025-06-01T12:00:00+05:30", 1748759400000),
        ("nanos", "2025-06-01T12:00:00.1234567Z", "2025-06-01T12:00:00.123456+00:00", 1748779200123),
        ("epoch", 1748779200, "2025-06-01T12:00:00+00:00", 1748779200000),
        ("epoch-str", "1748779200.5", "2025-06-01T12:00:00.500000+00:00", 1748779200500),
        ("float-low", "2038-08-27T08:17:58.101Z", "2038-08-27T08:17:58.101000+00:00", 2166509878100),
        ("pre-1970", "1969-12-31T23:59:59.9995Z", "1969-12-31T23:59:59.999500+00:00", 0),
    ],
)
def test_datetimes_follow_pydantic_and_float_timestamps(key: str, value: Any, iso: str, ms: int) -> None:
    item = decode_item(line(occurred_at=value))
    assert item.occurred_iso == iso
    assert timestamp_ms(item) == ms


def test_naive_datetime_uses_local_time_and_has_no_offset() -> None:
    item = decode_item(line(occurred_at="2025-06-01T12:00:00"))
    assert item.occurred_iso == "2025-06-01T12:00:00"
    assert timestamp_ms(item) == int(datetime(2025, 6, 1, 12).timestamp() * 1000)
    other = decode_item(line(occurred_at="2025-06-01T12:00:00+01:00"))
    assert other.occurred_at.utcoffset() == timedelta(hours=1)
    assert other.occurred_at.tzinfo is not None and other.occurred_at.tzinfo != UTC


def test_unknown_capability_and_custom_names_are_accepted_quietly() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cap = decode_item(line(event={"kind": "vendor.thing", "event_kind": "capability", "foo": 1}))
        custom = decode_item(line(event={"name": "my.note", "event_kind": "custom", "payload": {"a": 1}}))
    assert isinstance(cap.event, AgentEvent) and next(iter(cap.event.data)) == "foo"
    assert isinstance(custom.event, AgentEvent)
    assert custom.event.data["data"] == {"payload": {"a": 1}}


@pytest.mark.parametrize(
    ("value", "path", "reason"),
    [
        (b"{not json", "$", "not valid JSON"),
        (b"\xff\xfe", "$", "not valid JSON"),
        ("[1, 2]", "$", "expected a JSON object, got array"),
        ('"text"', "$", "expected a JSON object, got string"),
        ('{"a": NaN}', "$", "not valid JSON"),
        (line(thread_id=_DROP), "$.thread_id", "required field is missing"),
        (line(thread_id=7), "$.thread_id", "expected a string, got integer"),
        (line(thread_id="  "), "$.thread_id", "must not be blank"),
        (line(run_id=""), "$.run_id", "must not be blank"),
        (line(sequence=-1), "$.sequence", "must be >= 0, got -1"),
        (line(sequence="1"), "$.sequence", "expected an integer, got string"),
        (line(sequence=True), "$.sequence", "expected an integer, got boolean"),
        (line(occurred_at=_DROP), "$.occurred_at", "required field is missing"),
        (line(occurred_at="yesterday"), "$.occurred_at", "invalid datetime"),
        (line(occurred_at="2025-02-30T00:00:00Z"), "$.occurred_at", "invalid datetime"),
        (line(occurred_at=None), "$.occurred_at", "expected a datetime string or number, got null"),
        (line(event=_DROP), "$", "exactly one of 'event' and 'result'"),
        (line(result={"status": "cancelled", "usage": USAGE}), "$", "exactly one of 'event' and 'result'"),
        (line(event=[1]), "$.event", "expected an object, got array"),
    ],
)
def test_envelope_errors(value: str | bytes, path: str, reason: str) -> None:
    error = _error(value)
    assert error.path == path
    assert reason in error.reason


def _event_error(event: dict[str, Any]) -> DecodeError:
    return _error(line(event=event))


@pytest.mark.parametrize(
    ("event", "path", "reason"),
    [
        ({"event_kind": "teleport"}, "$.event.event_kind", "unknown event kind 'teleport'"),
        ({"event_kind": 3}, "$.event.event_kind", "expected a string"),
        ({**TEXT_START, "index": "0"}, "$.event.index", "expected an integer"),
        ({**TEXT_START, "part": {"content": "x"}}, "$.event.part.part_kind", "required field is missing"),
        ({**TEXT_START, "part": {"content": "x", "part_kind": "hologram"}}, "$.event.part.part_kind",
         "unknown part kind 'hologram'"),
        ({**TEXT_START, "part": {"content": 5, "part_kind": "text"}}, "$.event.part.content", "expected a string"),
        ({**TEXT_START, "part": {"part_kind": "text"}}, "$.event.part.content", "required field is missing"),
        ({**TEXT_START, "part": {"tool_name": "t", "part_kind": "tool-call"}}, "$.event.part.tool_call_id",
         "required field is missing"),
        ({**TEXT_START, "part": {"tool_name": "t", "tool_call_id": "c", "args": 5, "part_kind": "tool-call"}},
         "$.event.part.args", "expected a string, an object or null"),
        ({"index": 0, "delta": {"content_delta": None, "part_delta_kind": "text"}, "event_kind": "part_delta"},
         "$.event.delta.content_delta", "expected a string"),
        ({"index": 0, "delta": {"part_delta_kind": "warp"}, "event_kind": "part_delta"},
         "$.event.delta.part_delta_kind", "unknown part delta kind"),
        ({"part": {"tool_name": "t", "content": 1, "tool_call_id": "c", "timestamp": "noon", "part_kind":
                   "tool-return"}, "event_kind": "function_tool_result"}, "$.event.part.timestamp",
         "invalid datetime"),
        ({"part": {"tool_name": "t", "content": 1, "tool_call_id": "c", "timestamp": "2025-06-01T00:00:00Z",
                   "outcome": "meh", "part_kind": "tool-return"}, "event_kind": "function_tool_result"},
         "$.event.part.outcome", "expected one of"),
        ({"part": {"tool_name": "t", "content": ["a"], "tool_call_id": "c", "timestamp": "2025-06-01T00:00:00Z",
                   "metadata": {"a13n.tool-content": {"result_index": 3}}, "part_kind": "tool-return"},
          "event_kind": "function_tool_result"}, "$.event.part.metadata.a13n.tool-content.result_index",
         "outside the content"),
        ({"kind": "a13n.input.text", "event_kind": "capability", "input_id": "i", "source": "alien",
          "content": "c"}, "$.event.source", "unknown input source 'alien'"),
        ({**TEXT_START, "part": {"content": "x", "provider_details": [1], "part_kind": "text"}},
         "$.event.part.provider_details", "expected an object or null, got array"),
        ({**TEXT_START, "part": {"content": "x", "citations": ["c"], "part_kind": "text"}},
         "$.event.part.citations[0]", "expected an object, got string"),
        ({**TEXT_START, "previous_part_kind": "poem"}, "$.event.previous_part_kind", "unknown part kind 'poem'"),
        ({"index": 0, "delta": {"content_delta": "x", "citations_delta": 3, "part_delta_kind": "text"},
          "event_kind": "part_delta"}, "$.event.delta.citations_delta", "expected an array or null, got integer"),
        ({"kind": "a13n.shell.status", "event_kind": "capability", "process_id": None, "phase": "p",
          "exit_code": "0"}, "$.event.exit_code", "expected an integer or null, got string"),
        ({"kind": "a13n.context.handoff_summary", "event_kind": "capability", "operation_id": "o",
          "summary": "s"}, "$.event.files", "required field is missing"),
        ({"requests": {"calls": [[]], "approvals": [], "metadata": {}}, "event_kind": "deferred_tool_requests"},
         "$.event.requests.calls[0]", "expected a tool call object, got array"),
        ({"requests": {"calls": [], "approvals": [None], "metadata": {}}, "event_kind": "deferred_tool_requests"},
         "$.event.requests.approvals[0]", "expected a tool call object, got null"),
        ({"schema_version": "1", "kind": "weather", "payload": {}}, "$.event.kind", "unknown extension kind"),
        ({"schema_version": "1", "kind": "context"}, "$.event.payload", "required field is missing"),
        ({"schema_version": "1", "kind": "context", "payload": 1, "extra": 2}, "$.event.extra",
         "unexpected field"),
        ({"schema_version": "", "kind": "context", "payload": 1}, "$.event.schema_version", "1 to 32"),
        ({"schema_version": "1", "kind": "context", "payload": {"text": "x" * 65_530}}, "$.event.payload",
         "over the 65536-byte limit"),
    ],
)
def test_inner_event_errors(event: dict[str, Any], path: str, reason: str) -> None:
    error = _event_error(event)
    assert error.path == path
    assert reason in error.reason
    assert str(error) == f"{path}: {error.reason}"


def test_payload_limit_is_measured_after_redaction_in_utf8() -> None:
    at_limit = {"t": "é" * ((65_536 - len('{"t":""}')) // 2)}
    assert len(json.dumps(at_limit, ensure_ascii=False, separators=(",", ":")).encode()) == 65_536
    decode_item(line(event={"schema_version": "1", "kind": "context", "payload": at_limit}))
    over = {"t": at_limit["t"] + "é"}
    assert "over the" in _event_error({"schema_version": "1", "kind": "context", "payload": over}).reason
    shrunk = {"secret": "x" * 70_000}
    decoded = decode_item(line(event={"schema_version": "1", "kind": "context", "payload": shrunk}))
    assert isinstance(decoded.event, ExtensionEvent) and decoded.event.payload == {"secret": "[REDACTED]"}


def _result(**result: Any) -> DecodeError:
    return _error(json.dumps({**BASE, "result": {"usage": USAGE, **result}}))


FAILURE = {"code": "x", "message": "It broke."}
DEFERRED = {"calls": [], "approvals": [], "metadata": {}}


@pytest.mark.parametrize(
    ("result", "path", "reason"),
    [
        ({"status": "paused"}, "$.result.status", "expected one of"),
        ({"status": "completed", "failure": FAILURE}, "$.result.failure", "must be null when status is 'completed'"),
        ({"status": "completed", "deferred": DEFERRED}, "$.result.deferred", "must be null"),
        ({"status": "failed"}, "$.result.failure", "required field is missing"),
        ({"status": "failed", "failure": FAILURE, "output": 1}, "$.result.output", "must be null"),
        ({"status": "failed", "failure": {"code": "", "message": "m"}}, "$.result.failure.code", "must not be empty"),
        ({"status": "failed", "failure": {**FAILURE, "retry_hint": "later"}}, "$.result.failure.retry_hint",
         "expected one of"),
        ({"status": "suspended", "deferred": DEFERRED}, "$.result.suspend_reason", "must be 'deferred'"),
        ({"status": "suspended", "suspend_reason": "deferred"}, "$.result.deferred", "required field is missing"),
        ({"status": "suspended", "suspend_reason": "deferred", "deferred": DEFERRED, "output": 1},
         "$.result.output", "must be null"),
        ({"status": "cancelled", "suspend_reason": "deferred"}, "$.result.suspend_reason", "must be null"),
        ({"status": "cancelled", "usage": 3}, "$.result.usage", "expected an object"),
        ({"status": "cancelled", "usage": {"tokens": 1}}, "$.result.usage.tokens", "unexpected field"),
        ({"status": "cancelled", "usage": {"cost": "cheap"}}, "$.result.usage.cost", "expected a decimal number"),
        ({"status": "suspended", "suspend_reason": "deferred", "deferred": {"approvals": [
            {"model_call": {"tool_name": "m", "tool_call_id": "m1"}, "target_call": {"tool_name": "t",
                                                                                      "tool_call_id": "t1"}}]}},
         "$.result.deferred.approvals[0].target_identity", "required field is missing"),
        ({"status": "suspended", "suspend_reason": "deferred", "deferred": {"calls": [
            {"model_call": {"tool_name": "m"}, "target_call": {"tool_name": "t", "tool_call_id": "t1"},
             "target_identity": "x"}]}},
         "$.result.deferred.calls[0].model_call.tool_call_id", "required field is missing"),
        ({"status": "cancelled", "usage": {"input_tokens": "many"}}, "$.result.usage.input_tokens",
         "expected an integer"),
    ],
)
def test_result_errors(result: dict[str, Any], path: str, reason: str) -> None:
    error = _result(**result)
    assert error.path == path
    assert reason in error.reason


def test_integers_beyond_64_bits_decode_exactly() -> None:
    numbers = [2**70 + 1, -(2**63) - 1, 2**64, 2**63 - 1, -(2**63), 123456789012345678]
    item = decode_item(line(event={"schema_version": "1", "kind": "usage", "payload": {"n": numbers}}))
    assert isinstance(item.event, ExtensionEvent)
    assert item.event.payload["n"] == numbers
    assert all(type(n) is int for n in item.event.payload["n"])


def test_lone_surrogates_are_not_json_text() -> None:
    escaped = _error(line(event={"schema_version": "1", "kind": "usage", "payload": "\ud800"}))
    assert (escaped.path, escaped.reason.startswith("not valid JSON")) == ("$", True)
    raw = _error('{"thread_id": "\ud800"}')
    assert (raw.path, raw.reason.startswith("not valid UTF-8 text")) == ("$", True)


@st.composite
def _canonical_times(draw: st.DrawFn) -> str:
    stamp = draw(st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)))
    fraction = draw(st.sampled_from(["", ".000000", ".100000", f".{stamp.microsecond:06d}"]))
    offset = draw(st.one_of(
        st.sampled_from(["Z", "+00:00", "-00:00"]),
        st.builds(lambda sign, h, m: f"{sign}{h:02d}:{m:02d}", st.sampled_from("+-"), st.integers(0, 23),
                  st.integers(0, 59)),
    ))  # fmt: skip
    return stamp.strftime("%Y-%m-%dT%H:%M:%S").rjust(19, "0") + fraction + offset


@given(text=_canonical_times())
def test_an_item_carries_the_isoformat_of_its_time_exactly_as_the_datetime_would_print_it(text: str) -> None:
    item = decode_item(line(occurred_at=text))
    read_off = item._iso  # set by the decoder when the text round-trips, else computed on first use
    assert item.occurred_iso == datetime.fromisoformat(text).isoformat()
    assert item.occurred_at == datetime.fromisoformat(text)
    assert bool(read_off) == (".000000" not in text and not text.endswith("-00:00"))
