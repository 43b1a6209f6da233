"""Output records never exceed the record limit: an event that would closes its stream, the same way in replay."""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.stream._cores import REAL_CORES, REFERENCE_CORE, observed_values
from tests.stream._fakes import FAKE_CORE
from tests.stream._support import TOPIC, golden_source, header, image, item, records
from worker.errors import ConfigError, DecodeError
from worker.stream import (
    EVENT_TOO_LARGE_CODE,
    DeadLetterReason,
    Destination,
    OutboundRecord,
    Outcome,
    PartitionState,
    SourceRecord,
    StreamCore,
    Verdict,
    default_core,
    record_size,
)

A, B = "run-a", "run-b"
LIMIT = 4096
_BYTES = st.binary(max_size=300)


@settings(max_examples=300, deadline=None)
@given(key=st.none() | _BYTES, value=st.none() | st.binary(max_size=20_000),
       headers=st.lists(st.tuples(st.text(max_size=40), _BYTES), max_size=8))  # fmt: skip
def test_record_size_is_what_the_producer_estimates_for_a_record(
    key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes]]
) -> None:
    record = OutboundRecord(Destination.OUTPUT, key, value, tuple(headers), "CUSTOM", None)
    expected = DefaultRecordBatchBuilder.estimate_size_in_bytes(key, value, list(headers))  # type: ignore[arg-type]
    assert record_size(record) == expected


def state(core: StreamCore = FAKE_CORE, **kw: Any) -> PartitionState:
    return PartitionState(TOPIC, 0, core=core, max_record_bytes=LIMIT, **kw)


def test_limits_below_the_minimum_are_refused() -> None:
    with pytest.raises(ConfigError, match="max_record_bytes must be >= 1024"):
        PartitionState(TOPIC, 0, max_record_bytes=1023)


def test_an_event_over_the_limit_closes_its_stream_with_a_run_error_and_dead_letters_its_record() -> None:
    st = state()
    big = item(A, 1, pad="x" * LIMIT, emit=2)
    recs = records([(A, item(A, 0)), (A, big), (A, item(A, 2)), (A, item(A, 3, terminal=True)), (A, item(A, 0))])
    outs = [st.process(r) for r in recs]
    assert [(o.verdict, o.reason) for o in outs] == [
        (Verdict.PROCESSED, None), (Verdict.DEAD_LETTERED, DeadLetterReason.TOO_LARGE),
        (Verdict.DEAD_LETTERED, DeadLetterReason.RUN_CLOSED_BY_GAP),
        (Verdict.DEAD_LETTERED, DeadLetterReason.RUN_CLOSED_BY_GAP), (Verdict.DUPLICATE, DeadLetterReason.DUPLICATE),
    ]  # fmt: skip
    error, dead = outs[1].records
    # none of the item's events is published: the RUN_ERROR takes the number of its first
    assert header(error.headers, "agui-event-id") == f"{A}:2"
    body = orjson.loads(error.value or b"")
    assert (body["type"], body["code"]) == ("RUN_ERROR", EVENT_TOO_LARGE_CODE)
    assert body["message"].startswith(f"event 2 (CUSTOM) of run {A} sequence 1 would be a ")
    assert body["message"].endswith(f"-byte output record, over the limit of {LIMIT} bytes")
    assert (dead.destination, dead.value, header(dead.headers, "dlq-reason")) == (Destination.DEAD_LETTER, big,
                                                                                "too-large")  # fmt: skip
    assert header(dead.headers, "dlq-message").endswith(f"; stream {A} closed with RUN_ERROR")
    assert "closed by an event too large to publish" in header(outs[2].records[0].headers, "dlq-message")
    assert "which releases the stream" in header(outs[3].records[0].headers, "dlq-message")
    assert st.open_streams == 0


def test_every_published_record_fits_the_limit() -> None:
    st = state()
    recs = records([(A, item(A, s, pad="y" * (s * 700), terminal=s == 9)) for s in range(10)])
    published = [r for rec in recs for r in st.process(rec).records if r.destination is Destination.OUTPUT]
    assert published
    assert max(record_size(r) for r in published) <= LIMIT
    assert any(r.event_type == "RUN_ERROR" for r in published)


def test_a_run_error_that_would_not_fit_either_is_left_out() -> None:
    child = "c" * 1200  # the RUN_ERROR names the run whose event was too large
    st = PartitionState(TOPIC, 0, core=FAKE_CORE, max_record_bytes=1024)
    outs = [st.process(r) for r in records([(A, item(A, 0, announce=child)), (A, item(child, 0, thread="t"))])]
    (dead,) = outs[1].records
    assert (dead.destination, outs[1].reason) == (Destination.DEAD_LETTER, DeadLetterReason.TOO_LARGE)
    assert header(dead.headers, "dlq-message").startswith("event 2 (CUSTOM) of run ccc")
    assert st.process(records([(A, item(A, 1))], start=2)[0]).reason == DeadLetterReason.RUN_CLOSED_BY_GAP


def _counting(core: StreamCore) -> tuple[StreamCore, list[int]]:
    encoded: list[int] = []

    def encode(event: Any) -> bytes:
        encoded.append(1)
        return core.encode_event(event)

    return dataclasses.replace(core, encode_event=encode), encoded


def test_replay_encodes_no_event_of_values_too_small_to_exceed_the_limit() -> None:
    core, encoded = _counting(FAKE_CORE)
    st = state(core=core)
    outs = [st.process(r, publish=False) for r in records([(A, item(A, s, pad="p" * 500)) for s in range(20)])]
    assert {o.verdict for o in outs} == {Verdict.PROCESSED}
    assert encoded == []


def test_replay_and_live_decide_alike_and_replay_publishes_nothing() -> None:
    pairs = [(k, item(k, s, pad="q" * (900 * s), terminal=s == 5)) for s in range(6) for k in (A, B)]
    pairs += [(A, item(A, 3)), (B, item(B, 0))]
    live, replay = state(), state()
    for rec in records(pairs):
        a, b = live.process(rec), replay.process(rec, publish=False)
        assert (a.verdict, a.reason) == (b.verdict, b.reason)
        assert b.records == ()
    assert image(live, len(pairs)) == image(replay, len(pairs))


def _real(*payloads: dict[str, Any]) -> list[bytes]:
    base = {"thread_id": "thread_x", "run_id": "run-x", "occurred_at": "2025-06-01T00:00:00Z"}
    return [orjson.dumps({**base, "sequence": i, **p}) for i, p in enumerate(payloads)]


def _run_started() -> dict[str, Any]:
    return {"event": {"schema_version": "1", "kind": "lifecycle", "payload": {"type": "run_started"}}}


def _tool_result(content: Any, outcome: str = "success") -> dict[str, Any]:
    part = {"tool_name": "calc", "content": content, "tool_call_id": "call_1", "tool_kind": None, "metadata": None,
            "timestamp": "2025-06-01T00:00:00Z", "outcome": outcome, "retry": None, "part_kind": "tool-return"}
    return {"event": {"part": part, "content": None, "event_kind": "function_tool_result"}}


def _extension(payload: Any) -> dict[str, Any]:
    return {"event": {"schema_version": "1", "kind": "context", "payload": {"type": "context_snapshot", **payload}}}


def _tool_call_end(args: Any) -> dict[str, Any]:
    part = {"tool_name": "t", "args": args, "tool_call_id": "c", "part_kind": "tool-call"}
    return {"event": {"index": 0, "part": part, "next_part_kind": None, "event_kind": "part_end"}}


def _text_start(part_id: str, content: str) -> dict[str, Any]:
    part = {"content": content, "id": part_id, "part_kind": "text"}
    return {"event": {"index": 0, "part": part, "previous_part_kind": None, "event_kind": "part_start"}}


def _text_delta(text: str) -> dict[str, Any]:
    return {"event": {"index": 0, "delta": {"content_delta": text, "part_delta_kind": "text"},
                      "event_kind": "part_delta"}}  # fmt: skip


def _deferred(calls: int) -> dict[str, Any]:
    call = {"tool_name": "t", "tool_call_id": "c"}
    requests = {"calls": [call] * calls, "approvals": [], "metadata": {}}
    return {"event": {"requests": requests, "event_kind": "deferred_tool_requests"}}


_FLOATS = st.sampled_from([1e15, 1e-7, 5e-324, 1.5e300, 0.1, -0.0, 123456789012.0, 2.5e-5])
_DENSE = st.text(alphabet='"\\\x00\x01\x1f\u2028é😀 ', max_size=40)
_SENSITIVE = st.sampled_from(["token", "api_key", "password", "secret", "a_grant", "x-credential"])
_SCALARS = _FLOATS | st.integers(-(2**63), 2**63 - 1) | _DENSE | st.booleans() | st.none()
_JSON = st.recursive(_SCALARS, lambda inner: st.lists(inner, max_size=6) | st.dictionaries(
    _SENSITIVE | _DENSE, inner, max_size=6), max_leaves=40)  # fmt: skip


def _items_of(value: Any, text: str) -> list[list[bytes]]:
    return [
        _real(_run_started(), _tool_result(value)),
        _real(_run_started(), _tool_result(value, outcome="failed")),
        _real(_run_started(), _extension({"data": value, "token": 0, "api_key": 0})),
        _real(_run_started(), _tool_call_end(value if isinstance(value, dict) else {"v": value})),
        _real(_run_started(), _deferred(len(text) + 1)),
        _real(_run_started(), _text_start(text * 50 or "p", text), _text_delta(text or "d"), _text_delta("e")),
    ]


@pytest.mark.parametrize("core", [REFERENCE_CORE])  # the native core measures every record instead
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=_JSON, text=_DENSE)
def test_the_reference_cores_bound_holds_for_events_of_adversarial_items(
    core: StreamCore, value: Any, text: str
) -> None:
    worst = 0.0
    for run in _items_of(value, text):
        observer, widest = core.new_observer(), 0
        for line in run:
            try:
                decoded = core.decode(line)
                values = observed_values(core, observer, decoded)
            except (DecodeError, ValueError, TypeError):
                continue
            bound = core.event_bound(decoded, widest)
            assert bound is not None
            for event in values:
                size = len(event)
                assert size <= bound, (line, event)
                worst = max(worst, (size - 2 * widest) / len(line))
            widest = max(widest, len(line))
    assert worst < 8  # far from the 16x the bound allows


def test_the_reference_core_measures_every_terminal_item() -> None:
    lines = golden_source("s04_suspended")
    terminal = REFERENCE_CORE.decode(lines[-1])
    assert REFERENCE_CORE.is_terminal(terminal)
    assert REFERENCE_CORE.event_bound(terminal, 0) is None
    assert REFERENCE_CORE.event_bound(REFERENCE_CORE.decode(lines[0]), 0) is not None


def _golden_partition() -> list[SourceRecord]:
    names = ["s09_big_fragments", "s01_hello", "c01_child_completed", "r0095", "s04_suspended"]
    sources = [(orjson.loads(golden_source(n)[0])["run_id"], golden_source(n)) for n in names]
    pairs = [(root, lines[i]) for i in range(max(len(s) for _, s in sources)) for root, lines in sources
             if i < len(lines)]  # fmt: skip
    return records(pairs)


@pytest.mark.parametrize("real", REAL_CORES)
@pytest.mark.parametrize("limit", [2048, 16_384, 100_000, 1 << 20])
def test_golden_runs_under_a_limit_decide_alike_live_and_in_replay(limit: int, real: StreamCore) -> None:
    recs = _golden_partition()
    live = PartitionState(TOPIC, 0, core=real, max_record_bytes=limit)
    core, encoded = _counting(real)
    replay = PartitionState(TOPIC, 0, core=core, max_record_bytes=limit)
    outcomes: list[Outcome] = []
    for rec in recs:
        a, b = live.process(rec), replay.process(rec, publish=False)
        assert (a.verdict, a.reason) == (b.verdict, b.reason)
        outcomes.append(a)
    assert image(live, len(recs)) == image(replay, len(recs))
    published = [r for o in outcomes for r in o.records if r.destination is Destination.OUTPUT]
    assert max(record_size(r) for r in published) <= limit
    too_large = sum(o.reason == DeadLetterReason.TOO_LARGE for o in outcomes)
    if limit == 1 << 20:
        assert too_large == 0
        assert len(encoded) < len(published) // 2  # terminal items, and items over 1/16 of the limit
    if limit == 2048:
        assert too_large >= 2


def test_with_a_processor_the_real_core_measures_every_event_and_replay_decides_alike() -> None:
    def inflate(item: Any, event: Any) -> Any:
        if getattr(event, "type", None) == "TEXT_MESSAGE_CONTENT":
            event.delta = event.delta * 200  # a processor may make a small item's event as large as it likes
        return event

    core = default_core(processor=inflate)
    lines = _real(_run_started(), _text_start("p", "hello"), _text_delta("more"))
    assert core.event_bound(core.decode(lines[1]), 0) is None
    live = PartitionState(TOPIC, 0, core=core, max_record_bytes=1024)
    replay = PartitionState(TOPIC, 0, core=core, max_record_bytes=1024)
    recs = records([("run-x", line) for line in lines])
    outs = [(live.process(r).reason, replay.process(r, publish=False).reason) for r in recs]
    too_large, closed = (DeadLetterReason.TOO_LARGE,) * 2, (DeadLetterReason.RUN_CLOSED_BY_GAP,) * 2
    assert outs == [(None, None), too_large, closed]
