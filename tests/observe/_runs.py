"""Hypothesis strategies for synthetic Harness runs (wire dicts), with inline children and terminals."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from hypothesis import strategies as st

from worker.wire import HarnessItem, decode_item

THREAD = "thread_prop"
ROOT = "run-root"
CHILD = "run-child"
GRANDCHILD = "run-grandchild"
_TEXT = st.text(alphabet=st.sampled_from(["a", "b", " ", "é", "\n", "\u2028", '"', "😀"]), max_size=6)
_INDEX = st.integers(0, 2)
_CALL_ID = st.sampled_from(["call_1", "call_2"])


def _part(kind: str, content: str, *, part_id: str | None = None, signature: str | None = None,
          args: Any = None, call_id: str = "call_1") -> dict[str, Any]:
    if kind == "text":
        return {"content": content, "id": part_id, "provider_name": None, "provider_details": None,
                "citations": None, "part_kind": "text"}
    if kind == "thinking":
        return {"content": content, "id": None, "signature": signature, "provider_name": None,
                "provider_details": None, "part_kind": "thinking"}
    return {"tool_name": "tool", "args": args, "tool_call_id": call_id, "tool_kind": None, "id": None,
            "provider_name": None, "provider_details": None, "part_kind": "tool-call"}


@st.composite
def _event(draw: st.DrawFn) -> dict[str, Any]:
    choice = draw(st.sampled_from(
        ["request", "start", "start", "delta", "delta", "delta", "end", "end", "result", "extension", "input"]
    ))
    index = draw(_INDEX)
    if choice == "request":
        payload = {"type": "model_request_started", "request_id": "model-request-1",
                   "request_index": draw(st.integers(0, 3)), "message_count": 1}
        return {"schema_version": "1", "kind": "lifecycle", "payload": payload}
    if choice == "extension":
        payload = {"type": draw(st.sampled_from(["x", "y"])), "token": draw(_TEXT), "n": draw(st.integers())}
        return {"schema_version": "1", "kind": draw(st.sampled_from(["context", "tool", "usage"])),
                "payload": payload}
    if choice == "input":
        return {"kind": "a13n.input.text", "capability_id": None, "tool_call_id": None, "tool_name": None,
                "event_kind": "capability", "input_id": "in-1",
                "source": draw(st.sampled_from(["user", "steering", "context"])), "content": draw(_TEXT),
                "metadata": {"display": True, "source_id": None, "media": False}}
    kind = draw(st.sampled_from(["text", "thinking", "tool"]))
    if choice == "delta":
        if kind == "text":
            delta = {"content_delta": draw(_TEXT), "provider_name": None, "provider_details": None,
                     "citations_delta": None, "part_delta_kind": "text"}
        elif kind == "thinking":
            delta = {"content_delta": draw(st.none() | _TEXT), "signature_delta": draw(st.none() | _TEXT),
                     "provider_name": None, "provider_details": None, "part_delta_kind": "thinking"}
        else:
            delta = {"tool_name_delta": draw(st.none() | _TEXT), "args_delta": draw(st.none() | _TEXT),
                     "tool_call_id": draw(st.none() | _CALL_ID), "provider_name": None,
                     "provider_details": None, "part_delta_kind": "tool_call"}
        return {"index": index, "delta": delta, "event_kind": "part_delta"}
    if choice == "result":
        outcome = draw(st.sampled_from(["success", "failed", "retried"]))
        content = draw(st.sampled_from([{"temp": 21}, "ok", [1, "two"], None]))
        part = {"tool_name": "tool", "content": content, "tool_call_id": draw(_CALL_ID), "tool_kind": None,
                "metadata": None, "timestamp": "2025-06-01T12:00:00Z", "outcome": outcome, "retry": None,
                "part_kind": "tool-return"}
        return {"part": part, "content": None, "event_kind": "function_tool_result"}
    part = _part(
        {"tool": "tool-call"}.get(kind, kind), draw(_TEXT),
        part_id=draw(st.none() | st.just("msg_1")), signature=draw(st.none() | _TEXT),
        args=draw(st.none() | st.just('{"a":1}') | st.just({"b": [1, 2]})), call_id=draw(_CALL_ID),
    )
    if choice == "start":
        return {"index": index, "part": part, "previous_part_kind": None, "event_kind": "part_start"}
    return {"index": index, "part": part, "next_part_kind": None, "event_kind": "part_end"}


def _terminal(status: str) -> dict[str, Any]:
    usage = {"input_tokens": 3, "output_tokens": 4, "cache_read_tokens": 0, "cache_write_tokens": 0,
             "details": {"reasoning_tokens": 1}}
    result: dict[str, Any] = {"status": status, "output": None, "usage": usage, "failure": None,
                              "suspend_reason": None, "deferred": None}
    if status == "completed":
        result["output"] = {"answer": 1}
    if status == "failed":
        result["failure"] = {"code": "boom", "message": "It failed.", "retry_hint": "none", "details": {}}
    return result


@st.composite
def wire_runs(draw: st.DrawFn, *, children: bool = True) -> list[dict[str, Any]]:
    """One root stream: run_started, then mixed root/child items, maybe delegation, maybe a terminal."""
    sequences = {ROOT: 0, CHILD: 0, GRANDCHILD: 0}
    stamp = [1_748_779_200_000_000]

    def item(run: str, body: dict[str, Any], key: str = "event") -> dict[str, Any]:
        stamp[0] += draw(st.integers(1, 2_000_000))
        seconds, micros = divmod(stamp[0], 1_000_000)
        at = datetime.fromtimestamp(seconds, UTC).replace(microsecond=micros).isoformat().replace("+00:00", "Z")
        out = {"thread_id": THREAD, "run_id": run, "sequence": sequences[run], "occurred_at": at, key: body}
        sequences[run] += 1
        return out

    out = [item(ROOT, {"schema_version": "1", "kind": "lifecycle", "payload": {"type": "run_started"}})]
    for _ in range(draw(st.integers(0, 30))):
        run = draw(st.sampled_from([ROOT, ROOT, CHILD, GRANDCHILD])) if children else ROOT
        if children and draw(st.integers(0, 10)) == 0:
            action = draw(st.sampled_from(["started", "completed", "failed"]))
            parent, child = draw(st.sampled_from([(ROOT, CHILD), (CHILD, GRANDCHILD)]))
            payload = {"type": "inline_delegation", "invocation_id": "delegation-1", "action": action,
                       "child_instance_id": "helper-1", "subagent": "helper", "status": action,
                       "parent_run_id": parent, "parent_agent_instance_id": "agent-1",
                       "parent_tool_call_id": draw(st.none() | st.just("call_1")),
                       "child_run_id": draw(st.just(child) | st.none())}
            out.append(item(parent, {"schema_version": "1", "kind": "delegation", "payload": payload}))
            continue
        out.append(item(run, draw(_event())))
    status = draw(st.sampled_from([None, "completed", "failed", "cancelled"]))
    if status is not None:
        out.append(item(ROOT, _terminal(status), key="result"))
    return out


def decode_all(run: list[dict[str, Any]]) -> list[HarnessItem]:
    return [decode_item(json.dumps(line)) for line in run]
