"""Small hand-written wire items for focused observer tests."""

from __future__ import annotations

import json
from typing import Any

from worker.wire import HarnessItem, decode_item

THREAD, RUN = "thread_t", "run-t"


def item(seq: int, event: dict[str, Any] | None = None, *, result: dict[str, Any] | None = None,
         run: str = RUN, thread: str = THREAD) -> HarnessItem:
    body: dict[str, Any] = {"thread_id": thread, "run_id": run, "sequence": seq,
                            "occurred_at": f"2025-06-01T12:00:{seq % 60:02d}.5Z"}
    if result is not None:
        body["result"] = result
    else:
        body["event"] = event
    return decode_item(json.dumps(body))


def started(seq: int = 0, **kw: Any) -> HarnessItem:
    return item(seq, {"schema_version": "1", "kind": "lifecycle", "payload": {"type": "run_started"}}, **kw)


def text_start(seq: int, index: int = 0, content: str = "", **kw: Any) -> HarnessItem:
    part = {"content": content, "part_kind": "text"}
    return item(seq, {"index": index, "part": part, "event_kind": "part_start"}, **kw)


def text_delta(seq: int, index: int = 0, text: str = "hi", **kw: Any) -> HarnessItem:
    return item(seq, {"index": index, "delta": {"content_delta": text, "part_delta_kind": "text"},
                      "event_kind": "part_delta"}, **kw)


def thinking_delta(seq: int, index: int = 0, text: str | None = "hm", signature: str | None = None,
                   **kw: Any) -> HarnessItem:
    delta = {"content_delta": text, "signature_delta": signature, "part_delta_kind": "thinking"}
    return item(seq, {"index": index, "delta": delta, "event_kind": "part_delta"}, **kw)


def tool_end(seq: int, index: int = 1, args: Any = '{"a":1}', call_id: str = "call_1", **kw: Any) -> HarnessItem:
    part = {"tool_name": "get", "args": args, "tool_call_id": call_id, "part_kind": "tool-call"}
    return item(seq, {"index": index, "part": part, "event_kind": "part_end"}, **kw)


def tool_result(seq: int, content: Any = "ok", outcome: str = "success", **kw: Any) -> HarnessItem:
    part = {"tool_name": "get", "content": content, "tool_call_id": "call_1", "timestamp": "2025-06-01T12:00:00Z",
            "outcome": outcome, "part_kind": "tool-return"}
    return item(seq, {"part": part, "event_kind": "function_tool_result"}, **kw)


def extension(seq: int, kind: str = "context", payload: Any = None, **kw: Any) -> HarnessItem:
    return item(seq, {"schema_version": "1", "kind": kind, "payload": payload or {"type": "x"}}, **kw)


def terminal(seq: int, status: str = "completed", **kw: Any) -> HarnessItem:
    usage = {"input_tokens": 1, "output_tokens": 2}
    result: dict[str, Any] = {"status": status, "usage": usage}
    if status == "completed":
        result["output"] = "done"
    if status == "failed":
        result["failure"] = {"code": "boom", "message": "It failed."}
    return item(seq, result=result, **kw)
