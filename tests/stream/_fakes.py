"""A small fake conversion core: reads the wire envelope, and an observer whose events expose its state."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from ag_ui.core import BaseEvent, CustomEvent, RunStartedEvent
from pydantic import BaseModel

from worker.errors import AguiObservationError, DecodeError
from worker.stream import StreamCore, StreamObserver


@dataclass(frozen=True, slots=True)
class FakeItem:
    thread_id: str
    run_id: str
    sequence: int
    occurred_ms: int
    terminal: bool
    refuse: str | None
    emit: int
    announce: str | None = None  # a child run this item announces in its stream
    pad: str | None = None  # copied into each CUSTOM, to make events large
    size: int = 0  # the length of the value it was decoded from


def _announced(data: dict[str, Any]) -> str | None:
    """A fake `announce` field, or the child of a golden run's inline delegation `started` event."""
    if isinstance(data.get("announce"), str):
        return str(data["announce"])
    event = data.get("event")
    payload = event.get("payload") if isinstance(event, dict) else None
    if isinstance(payload, dict) and payload.get("type") == "inline_delegation" and payload.get("action") == "started":
        child = payload.get("child_run_id")
        return child if isinstance(child, str) else None
    return None


def fake_decode(value: bytes) -> FakeItem:
    try:
        data = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise DecodeError("$", f"not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise DecodeError("$", "not an object")
    for name in ("thread_id", "run_id"):
        if not isinstance(data.get(name), str) or not data[name]:
            raise DecodeError(f"$.{name}", "must be a non-blank string")
    seq = data.get("sequence")
    if type(seq) is not int or seq < 0:
        raise DecodeError("$.sequence", f"must be an int >= 0, got {seq!r}")
    if data.get("decoder") == "crash":
        raise KeyError("a decoder bug")
    if ("event" in data) == ("result" in data):
        raise DecodeError("$", "exactly one of event and result must be present")
    try:
        occurred = datetime.fromisoformat(data["occurred_at"])
    except (KeyError, TypeError, ValueError) as exc:
        raise DecodeError("$.occurred_at", "must be an ISO datetime") from exc
    return FakeItem(
        thread_id=data["thread_id"],
        run_id=data["run_id"],
        sequence=seq,
        occurred_ms=int(occurred.timestamp() * 1000),
        terminal="result" in data,
        refuse=data.get("refuse"),
        emit=int(data.get("emit", 1)),
        announce=_announced(data),
        pad=data.get("pad"),
        size=len(value),
    )


class _Payload(BaseModel):
    required: int


class FakeObserver:
    """Emits RUN_STARTED for its first item, then `emit` CUSTOMs per item carrying its running count."""

    def __init__(self) -> None:
        self.accepted = 0
        self.threads: dict[str, str] = {}

    def observe(self, item: Any, /) -> tuple[BaseEvent, ...]:
        if not isinstance(item, FakeItem):
            raise TypeError(f"not an item: {type(item).__name__}")
        if item.refuse == "agui":
            raise AguiObservationError("fake refusal")
        if item.refuse == "type":
            raise TypeError("fake type refusal")
        if item.refuse == "validation":
            _Payload.model_validate({})
        if item.refuse == "crash":
            raise RuntimeError("an observer bug")
        if self.threads.get(item.run_id, item.thread_id) != item.thread_id:
            raise AguiObservationError("Harness Thread correlation changed for a Run")
        events: list[BaseEvent] = []
        ts = item.occurred_ms
        if self.accepted == 0:
            events.append(RunStartedEvent(thread_id=item.thread_id, run_id=item.run_id, timestamp=ts))
        value: dict[str, object] = {"run": item.run_id, "seq": item.sequence, "count": self.accepted}
        if item.pad is not None:
            value["pad"] = item.pad
        events.extend(CustomEvent(name=f"fake.{i}", value=value, timestamp=ts) for i in range(item.emit))
        self.threads.setdefault(item.run_id, item.thread_id)
        self.accepted += 1
        return tuple(events)


def fake_encode(event: BaseEvent) -> bytes:
    return event.model_dump_json(by_alias=True, exclude_none=True).encode()


def _new_observer() -> StreamObserver:
    return FakeObserver()


def fake_export(observer: StreamObserver) -> object:
    assert isinstance(observer, FakeObserver)
    return {"accepted": observer.accepted, "threads": dict(observer.threads)}


def fake_restore(data: Any) -> StreamObserver:
    if not isinstance(data, dict) or set(data) != {"accepted", "threads"} or type(data["accepted"]) is not int:
        raise ValueError(f"not a fake observer's continuation: {data!r}")
    observer = FakeObserver()
    observer.accepted, observer.threads = data["accepted"], dict(data["threads"])
    return observer


def fake_event_bound(item: Any, widest: int) -> int | None:
    """Each fake event copies at most the run id, thread id and pad of its own item once."""
    del widest
    return 2 * item.size + 512 if item.size else None


FAKE_CORE = StreamCore(
    decode=fake_decode,
    timestamp_ms=lambda item: item.occurred_ms,
    is_terminal=lambda item: item.terminal,
    new_observer=_new_observer,
    encode_event=fake_encode,
    export_observer=fake_export,
    restore_observer=fake_restore,
    announced_run=lambda item: item.announce,
    event_bound=fake_event_bound,
)
