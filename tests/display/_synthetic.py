"""Source runs (wire JSONL lines) that exercise what the golden corpus does not: content bounds, fragmented
CUSTOMs beside bounded events, failed tool results carrying media, and many tool calls (for eviction)."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from worker.display import MAX_FIELD_CHARS

START = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
BIG = "y" * (MAX_FIELD_CHARS + 100)
HTTP_IMAGE = {
    "url": "https://example.com/a.png",
    "force_download": False,
    "vendor_metadata": None,
    "kind": "image-url",
    "media_type": "image/png",
    "identifier": "abc",
}
DATA_IMAGE = {**HTTP_IMAGE, "url": "data:image/png;base64,iVBORw0KGgo="}
BINARY = {
    "data": base64.b64encode(b"\x89PNG-not-really").decode(),
    "media_type": "image/png",
    "kind": "binary",
    "identifier": "bin1",
    "vendor_metadata": None,
}
UPLOADED = {"file_id": "file-1", "provider_name": "anthropic", "media_type": "application/pdf", "kind": "uploaded-file"}
# A tool's plain answer shaped exactly like the payload-free description of binary media.
LOOKALIKE = {"kind": "binary", "media_type": "image/png", "size_bytes": 16, "payload_omitted": True}


class Run:
    """Builds one run's source lines; each item is `step_ms` after the previous one."""

    def __init__(self, run_id: str, *, step_ms: int = 300) -> None:
        self.run_id = run_id
        self.thread_id = f"thread_{run_id}"
        self.step = timedelta(milliseconds=step_ms)
        self.lines: list[str] = []

    def _envelope(self, body: dict[str, Any]) -> None:
        sequence = len(self.lines)
        at = (START + self.step * sequence).isoformat().replace("+00:00", "Z")
        line = {"thread_id": self.thread_id, "run_id": self.run_id, "sequence": sequence, "occurred_at": at, **body}
        self.lines.append(json.dumps(line, ensure_ascii=False))

    def lifecycle(self, payload: dict[str, Any]) -> Run:
        self._envelope({"event": {"schema_version": "1", "kind": "lifecycle", "payload": payload}})
        return self

    def extension(self, kind: str, payload: dict[str, Any]) -> Run:
        self._envelope({"event": {"schema_version": "1", "kind": kind, "payload": payload}})
        return self

    def started(self) -> Run:
        return self.lifecycle({"type": "run_started"})

    def request(self, index: int) -> Run:
        return self.lifecycle({"type": "model_request_started", "request_id": f"req-{index}", "request_index": index})

    def text(self, index: int, content: str) -> Run:
        part = {"content": content, "id": None, "provider_name": None, "provider_details": None, "citations": None,
                "part_kind": "text"}  # fmt: skip
        self._envelope({"event": {"index": index, "part": part, "next_part_kind": None, "event_kind": "part_end"}})
        return self

    def tool_call(self, index: int, call_id: str, args: str, name: str = "write") -> Run:
        part = {"tool_name": name, "args": args, "tool_call_id": call_id, "tool_kind": None, "id": None,
                "provider_name": None, "provider_details": None, "part_kind": "tool-call"}  # fmt: skip
        self._envelope({"event": {"index": index, "part": part, "next_part_kind": None, "event_kind": "part_end"}})
        return self

    def tool_result(
        self, call_id: str, content: Any, outcome: str = "success", *, metadata: Any = None, name: str = "write"
    ) -> Run:
        part = {"tool_name": name, "content": content, "tool_call_id": call_id, "tool_kind": None,
                "metadata": metadata, "timestamp": "2025-06-01T12:00:02Z", "outcome": outcome, "retry": None,
                "part_kind": "tool-return"}  # fmt: skip
        self._envelope({"event": {"part": part, "content": None, "event_kind": "function_tool_result"}})
        return self

    def retry_prompt(self, call_id: str, content: Any, name: str = "write") -> Run:
        part = {"content": content, "tool_name": name, "tool_call_id": call_id, "timestamp": "2025-06-01T12:00:02Z",
                "part_kind": "retry-prompt"}  # fmt: skip
        self._envelope({"event": {"part": part, "content": None, "event_kind": "function_tool_result"}})
        return self

    def edit_applied(self, call_id: str) -> Run:
        event = {"kind": "a13n.filesystem.edit_applied", "capability_id": None, "tool_call_id": call_id,
                 "tool_name": "write", "event_kind": "capability", "file_path": "/a", "before": "x", "after": "y"}
        self._envelope({"event": event})
        return self

    def finished(self, status: str = "completed") -> list[str]:
        usage = {"input_tokens": 1, "cache_write_tokens": 0, "cache_read_tokens": 0, "output_tokens": 1,
                 "input_audio_tokens": 0, "cache_audio_read_tokens": 0, "output_audio_tokens": 0,
                 "audio_seconds": "0", "cost": "0", "details": {}, "requests": 1, "tool_calls": 0,
                 "provider_receipts": 0, "unknown_cost_records": 0, "incomplete_requests": 0,
                 "model_usage_coverage": "all"}  # fmt: skip
        result = {"status": status, "output": "done", "usage": usage, "failure": None, "suspend_reason": None,
                  "deferred": None}  # fmt: skip
        self._envelope({"result": result})
        return self.lines


def bounds_run() -> list[str]:
    """Huge arguments and results (cut by the bounds), a result part list over the bound, a CUSTOM observation
    big enough to be sent in fragments, and long text."""
    run = Run("run-bounds").started().request(0)
    run.tool_call(0, "call_args", BIG).tool_result("call_args", BIG)
    run.tool_call(1, "call_parts", "{}").tool_result("call_parts", [HTTP_IMAGE, BIG])
    run.tool_call(2, "call_small", "{}").tool_result("call_small", [HTTP_IMAGE, "caption"])
    run.extension("context", {"type": "note", "blob": "é" * 30000})
    run.request(1).text(0, "z" * (MAX_FIELD_CHARS + 5))
    return run.finished()


def failures_run() -> list[str]:
    """Failed, denied and retried tool results, with and without native media, one through a result marker."""
    run = Run("run-failures").started().request(0)
    cases: list[tuple[str, Any, str]] = [
        ("call_text", "Tool raised: boom", "failed"),
        ("call_denied", "The user denied this call.", "denied"),
        ("call_binary", [BINARY, "caption"], "failed"),
        ("call_binary_only", BINARY, "failed"),
        ("call_data_url", [DATA_IMAGE], "interrupted"),
        ("call_http", [HTTP_IMAGE, {"note": "n"}], "failed"),
        ("call_uploaded", UPLOADED, "denied"),
        ("call_json", {"error": {"code": 3, "nested": [BINARY]}}, "failed"),
        ("call_long", "w" * 6000, "failed"),
    ]
    for index, (call_id, content, outcome) in enumerate(cases):
        run.tool_call(index, call_id, "{}").tool_result(call_id, content, outcome)
    run.tool_call(20, "call_marked", "{}")
    run.tool_result("call_marked", ["ignored", [BINARY, "shot"]], "failed",
                    metadata={"a13n.tool-content": {"result_index": 1}})  # fmt: skip
    run.tool_call(21, "call_retry", "{}").retry_prompt("call_retry", "Please pass a path.")
    run.tool_call(22, "call_retry_media", "{}").retry_prompt("call_retry_media", [BINARY])
    return run.finished()


def lookalike_run() -> list[str]:
    """A failed tool whose plain answer looks like a payload-free binary description: the one failure message an
    output topic cannot tell apart from media."""
    run = Run("run-lookalike").started().request(0)
    run.tool_call(0, "call_lookalike", "{}").tool_result("call_lookalike", [LOOKALIKE], "failed")
    return run.finished()


def long_run(calls: int = 40, *, step_ms: int = 300) -> list[str]:
    """Many tool calls with sizeable results (a run whose display outgrows a small topic limit), one call's
    supplement arriving long after its result, and a call left open at the end."""
    run = Run("run-long", step_ms=step_ms).started()
    for index in range(calls):
        run.request(index).text(0, f"step {index} " + "t" * 200)
        run.tool_call(1, f"call_{index}", json.dumps({"n": index, "pad": "a" * 100}))
        run.tool_result(f"call_{index}", "r" * 400)
    run.edit_applied("call_0")
    run.tool_call(2, "call_open", "{}")
    return run.finished()


SYNTHETIC = {
    "bounds": bounds_run,
    "failures": failures_run,
    "lookalike": lookalike_run,
    "long": long_run,
}
