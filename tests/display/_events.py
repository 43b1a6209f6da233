"""Small builders of AG-UI event dicts, shaped as the observer emits them."""

from __future__ import annotations

from typing import Any

from pydantic import JsonValue

BASE_TS = 1748779200000


def text(kind: str, message_id: str, ts: int, delta: str | None = None, **extra: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"type": f"TEXT_MESSAGE_{kind}", "timestamp": ts, "messageId": message_id}
    if kind == "START":
        event["role"] = "assistant"
    if delta is not None:
        event["delta"] = delta
    return {**event, **extra}


def tool(kind: str, call_id: str, ts: int, **fields: Any) -> dict[str, Any]:
    return {"type": f"TOOL_CALL_{kind}", "timestamp": ts, "toolCallId": call_id, **fields}


def custom(name: str, event: JsonValue, ts: int, sequence: int = 1, **extra: Any) -> dict[str, Any]:
    value = {
        "thread_id": "thread_t",
        "run_id": "run-t",
        "sequence": sequence,
        "occurred_at": "2025-06-01T12:00:00+00:00",
        "event": event,
    }
    return {"type": "CUSTOM", "timestamp": ts, **extra, "name": name, "value": value}


def args_delta(index: int, text_delta: str, ts: int, sequence: int = 1) -> dict[str, Any]:
    delta = {
        "tool_name_delta": None,
        "args_delta": text_delta,
        "tool_call_id": None,
        "provider_name": None,
        "provider_details": None,
        "part_delta_kind": "tool_call",
    }
    source = {"index": index, "delta": delta, "event_kind": "part_delta"}
    return custom("a13n.pydantic_ai.part_delta", source, ts, sequence)
