"""Observer API: resume gate, snapshots, correlation, part conflicts and inline children."""

from __future__ import annotations

import asyncio
import json
import pickle
from collections.abc import AsyncIterator

import pytest
from ag_ui.core import EventType

from tests.observe._items import (
    extension,
    item,
    started,
    terminal,
    text_delta,
    text_start,
    thinking_delta,
    tool_end,
)
from tests.observe._support import aiter_of
from worker.errors import AguiObservationError
from worker.observe import HarnessAguiObserver, HarnessAguiStreamObserver, ObserverContinuation, encode_event

FRESH = ObserverContinuation().model_dump()


def _types(events) -> list[str]:
    return [e.type.value for e in events]


async def test_failed_resume_leaves_the_observer_fresh_and_retryable() -> None:
    async def broken() -> AsyncIterator:
        yield started()
        yield text_delta(1)
        raise RuntimeError("history lost")

    observer = HarnessAguiStreamObserver()
    with pytest.raises(RuntimeError, match="history lost"):
        await observer.resume(broken())
    assert observer.thread_id is None and observer.run_id is None and observer.event_count == 0
    assert observer.export().model_dump() == FRESH
    await observer.resume(aiter_of([started(), text_delta(1)]))
    assert observer.run_id == "run-t" and observer.event_count == 3


async def test_refused_history_item_fails_the_resume() -> None:
    observer = HarnessAguiStreamObserver()
    with pytest.raises(AguiObservationError, match="kind changed"):
        await observer.resume(aiter_of([started(), text_delta(1), thinking_delta(2)]))
    assert observer.export().model_dump() == FRESH


async def test_cancelled_resume_leaves_the_observer_fresh_and_gates_calls_meanwhile() -> None:
    gate = asyncio.Event()

    async def slow() -> AsyncIterator:
        yield started()
        await gate.wait()
        yield text_delta(1)

    observer = HarnessAguiStreamObserver()
    task = asyncio.create_task(observer.resume(slow()))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    with pytest.raises(AguiObservationError, match="while observer resumption is in progress"):
        observer.observe(started())
    with pytest.raises(AguiObservationError, match="Cannot export while"):
        observer.export()
    with pytest.raises(AguiObservationError, match="already in progress"):
        await observer.resume(aiter_of([]))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert observer.export().model_dump() == FRESH
    await observer.resume(aiter_of([started()]))
    assert observer.thread_id == "thread_t"


async def test_resume_requires_an_async_iterable_and_a_fresh_observer() -> None:
    observer = HarnessAguiStreamObserver()
    with pytest.raises(TypeError, match="async iterable"):
        await observer.resume([started()])  # type: ignore[arg-type]
    observer.observe(started())
    with pytest.raises(AguiObservationError, match="fresh observer"):
        await observer.resume(aiter_of([]))
    resumed = HarnessAguiStreamObserver()
    await resumed.resume(aiter_of([]))
    with pytest.raises(AguiObservationError, match="fresh observer"):
        await resumed.resume(aiter_of([]))
    restored = HarnessAguiStreamObserver.restore(observer.export())
    with pytest.raises(AguiObservationError, match="fresh observer"):
        await restored.resume(aiter_of([]))


def test_snapshot_ranges_and_retention() -> None:
    observer = HarnessAguiObserver()
    observer.observe(started())
    observer.observe(text_delta(1))
    assert observer.event_count == 3
    assert _types(observer.snapshot(start=1, stop=2)) == ["TEXT_MESSAGE_START"]
    assert _types(observer.snapshot()) == ["RUN_STARTED", "TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT"]
    for start, stop in [(-1, None), (2, 1), (0, 4)]:
        with pytest.raises(ValueError, match="outside"):
            observer.snapshot(start=start, stop=stop)
    lean = HarnessAguiObserver(retain_events=False)
    lean.observe(started())
    assert lean.event_count == 0
    with pytest.raises(AguiObservationError, match="retain_events=True"):
        lean.snapshot()
    assert HarnessAguiStreamObserver.restore(observer.export()).event_count == 0


def test_snapshot_frames_are_detached() -> None:
    observer = HarnessAguiObserver()
    (returned,) = observer.observe(started())
    returned.thread_id = "changed"  # type: ignore[attr-defined]
    observer.snapshot()[0].thread_id = "changed too"  # type: ignore[attr-defined]
    assert observer.snapshot()[0].thread_id == "thread_t"  # type: ignore[attr-defined]


def test_observe_rejects_non_items() -> None:
    with pytest.raises(TypeError, match="HarnessEvent or HarnessRunResultEvent"):
        HarnessAguiObserver().observe({"thread_id": "t"})  # type: ignore[arg-type]


def test_plain_observer_checks_thread_then_run() -> None:
    observer = HarnessAguiObserver()
    observer.observe(started())
    with pytest.raises(AguiObservationError, match="Thread correlation changed within one observer"):
        observer.observe(started(1, thread="thread_u", run="run-u"))
    with pytest.raises(AguiObservationError, match="Run correlation changed within one observer"):
        observer.observe(started(1, run="run-u"))
    assert observer.run_id == "run-t"


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ([text_delta(1), thinking_delta(2)], "part kind changed"),
        ([thinking_delta(1), text_delta(2)], "part kind changed"),
        ([text_start(1), tool_end(2, index=0)], "part kind changed"),
        ([item(1, {"index": 0, "part": {"content": "", "id": "msg_a", "part_kind": "text"},
                   "event_kind": "part_start"}),
          item(2, {"index": 0, "part": {"content": "", "id": "msg_b", "part_kind": "text"},
                   "event_kind": "part_end"})], "part identity changed"),
        ([item(1, {"index": 0, "part": {"tool_name": "t", "tool_call_id": "call_x", "part_kind": "tool-call"},
                   "event_kind": "part_start"}),
          item(2, {"index": 0, "delta": {"args_delta": "{}", "tool_call_id": "call_y", "part_delta_kind": "tool_call"},
                   "event_kind": "part_delta"})], "tool-call identity changed"),
    ],
)
def test_part_conflicts_are_refused(items: list, message: str) -> None:
    observer = HarnessAguiStreamObserver()
    observer.observe(started())
    observer.observe(items[0])
    before = observer.export()
    with pytest.raises(AguiObservationError, match=message):
        observer.observe(items[1])
    assert observer.export() == before


def test_inline_child_is_attributed_and_owns_no_run_events() -> None:
    observer = HarnessAguiStreamObserver(retain_events=False)
    observer.observe(started())
    payload = {"type": "inline_delegation", "invocation_id": "delegation-1", "action": "started",
               "child_instance_id": "c1", "subagent": "helper", "status": "running", "parent_run_id": "run-t",
               "parent_agent_instance_id": "a1", "parent_tool_call_id": "call_1", "child_run_id": "run-c"}
    opened = observer.observe(extension(1, "delegation", payload))
    assert _types(opened) == ["SUBAGENT_STARTED", "CUSTOM"]
    assert opened[0].subagent_run_id == "run-c" and opened[0].parent_tool_call_id == "call_1"  # type: ignore[attr-defined]
    assert observer.observe(started(0, run="run-c")) == ()
    child = observer.observe(text_delta(1, run="run-c"))
    assert [e.subagent_run_id for e in child] == ["run-c", "run-c"]  # type: ignore[attr-defined]
    assert child[0].message_id == "run-c:request-0:part-0:text"  # type: ignore[attr-defined]
    assert _types(observer.observe(terminal(2, run="run-c"))) == ["TEXT_MESSAGE_END"]
    observer.observe(text_delta(3, run="run-c"))
    with pytest.raises(AguiObservationError, match="Thread correlation changed for a Run"):
        observer.observe(text_delta(4, run="run-c", thread="thread_x"))
    closed = observer.observe(extension(5, "delegation", {**payload, "action": "failed", "status": "crashed"}))
    assert _types(closed) == ["TEXT_MESSAGE_END", "SUBAGENT_ERROR", "CUSTOM"]
    assert closed[1].message == "Inline delegation crashed." and closed[1].code == "crashed"  # type: ignore[attr-defined]
    state = json.loads(observer.export().model_dump_json())["state"]
    assert state["children"] == {} and state["threads"] == {"run-t": "thread_t", "run-c": "thread_t"}
    root_end = observer.observe(terminal(6))
    assert _types(root_end) == ["RUN_FINISHED"]


def test_malformed_inline_delegation_is_a_validation_error_for_the_stream_observer_only() -> None:
    from pydantic import ValidationError  # noqa: PLC0415

    bad = extension(1, "delegation", {"type": "inline_delegation", "action": "started"})
    stream = HarnessAguiStreamObserver()
    stream.observe(started())
    with pytest.raises(ValidationError):
        stream.observe(bad)
    plain = HarnessAguiObserver()
    plain.observe(started())
    assert _types(plain.observe(bad)) == ["CUSTOM"]


def test_terminal_closes_open_parts_with_its_timestamp_and_discards_tool_cursors() -> None:
    observer = HarnessAguiObserver(retain_events=False)
    observer.observe(started())
    observer.observe(text_delta(1, index=0))
    observer.observe(thinking_delta(2, index=1))
    observer.observe(item(3, {"index": 2, "part": {"tool_name": "t", "tool_call_id": "c", "part_kind": "tool-call"},
                              "event_kind": "part_start"}))
    end = observer.observe(terminal(4))
    assert _types(end) == ["TEXT_MESSAGE_END", "REASONING_MESSAGE_END", "RUN_FINISHED"]
    assert len({e.timestamp for e in end}) == 1
    assert json.loads(encode_event(end[-1]))["result"] == "done"
    assert observer.export().state.parts == {}


def test_request_index_sets_ids_of_parts_started_afterwards() -> None:
    observer = HarnessAguiObserver(retain_events=False)
    observer.observe(started())
    observer.observe(text_delta(1, index=0))
    lifecycle = {"type": "model_request_started", "request_id": "model-request-2", "request_index": 4}
    assert _types(observer.observe(extension(2, "lifecycle", lifecycle))) == ["CUSTOM"]
    assert observer.observe(text_delta(3, index=0))[0].message_id == "run-t:request-0:part-0:text"  # type: ignore[attr-defined]
    assert observer.observe(text_delta(4, index=1))[0].message_id == "run-t:request-4:part-1:text"  # type: ignore[attr-defined]
    assert EventType.TEXT_MESSAGE_START.value == "TEXT_MESSAGE_START"


@pytest.mark.parametrize("cls", [HarnessAguiObserver, HarnessAguiStreamObserver])
def test_a_pickled_observer_keeps_its_kind_journal_and_state_and_goes_on_alike(cls: type[HarnessAguiObserver]) -> None:
    """Replay helpers hand observers back pickled: the copy must be the same observer, not a lookalike."""
    observer = cls(retain_events=True)
    for one in (started(), text_start(1), text_delta(2)):
        observer.observe(one)
    copy = pickle.loads(pickle.dumps(observer, pickle.HIGHEST_PROTOCOL))
    assert type(copy) is cls
    assert (copy.thread_id, copy.run_id, copy.event_count) == (observer.thread_id, observer.run_id, 3)
    assert copy.export() == observer.export()
    assert copy.snapshot() == observer.snapshot()
    assert copy.observe(terminal(3)) == observer.observe(terminal(3))
    assert copy.export() == observer.export()
