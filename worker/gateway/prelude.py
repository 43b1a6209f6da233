"""The late-join prelude: a run's latest display snapshot told as AG-UI events a client can verify and continue.

RUN_STARTED, MESSAGES_SNAPSHOT with the messages an AG-UI client holds after the events the snapshot covers, then
every open subagent, message, reasoning block and tool call re-opened with its own START (same id), so the live
deltas after the snapshot's `agui-seq` continue them. The worker emits no STATE events, so there is no
STATE_SNAPSHOT.

A display is bounded (long texts cut, finished items evicted to fit the topic's record limit) and keeps what a
client ignores (authored inputs, native tool parts), so not every snapshot gives the client's messages exactly.
`exact` says whether it does; the caller replays the run from its first event instead where the output topic
still holds it, and otherwise sends this prelude with a CUSTOM notice that names what is missing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from worker.contract import TERMINAL_TYPES
from worker.gateway.directory import DisplayPointer

__all__ = ["PRELUDE_NOTICE", "Prelude", "build_prelude"]

PRELUDE_NOTICE = "harness-agui.gateway.prelude"
_SUBAGENT_ENDS = ("SUBAGENT_FINISHED", "SUBAGENT_ERROR")


@dataclass
class Prelude:
    """The prelude's events for a snapshot covering events up to `seq`; `finished` when the run's terminal event
    is among them (it is then the last event), `reasons` why the messages may differ from the client's."""

    seq: int
    events: list[dict[str, Any]]
    finished: bool
    reasons: list[str] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return not self.reasons


def _with_subagent(target: dict[str, Any], content: dict[str, Any]) -> dict[str, Any]:
    subagent = content.get("subagentRunId")
    if subagent is not None:
        target["subagentRunId"] = subagent
    return target


class _Messages:
    """The client's message list as it grows: messages pushed at their first event, tool results inserted after
    the assistant message that carries their call."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.by_id: dict[str, dict[str, Any]] = {}
        self.results_per_parent: dict[str, int] = {}

    def push(self, message: dict[str, Any]) -> None:
        self.messages.append(message)
        self.by_id.setdefault(message["id"], message)

    def tool_call(self, content: dict[str, Any]) -> None:
        call_id = content["toolCallId"]
        parent_id = content.get("parentMessageId")
        parent = self.by_id.get(parent_id) if isinstance(parent_id, str) else None
        if parent is None or parent.get("role") != "assistant":
            message_id = call_id if parent is not None or not isinstance(parent_id, str) else parent_id
            parent = _with_subagent({"id": message_id, "role": "assistant", "toolCalls": []}, content)
            self.push(parent)
        parent.setdefault("toolCalls", []).append(
            {"id": call_id, "type": "function", "function": {"name": content.get("toolCallName", ""),
                                                             "arguments": content.get("arguments", "")}}
        )  # fmt: skip

    def tool_result(self, content: dict[str, Any], result: Any) -> str | None:
        """Insert the result's tool message; a reason when its place depends on an order the display lost."""
        call_id = content["toolCallId"]
        message = _with_subagent({"id": content.get("messageId", ""), "toolCallId": call_id,
                                  "role": content.get("role") or "tool", "content": result}, content)  # fmt: skip
        place = next((i for i, m in enumerate(self.messages)
                      if m.get("role") == "assistant" and any(c["id"] == call_id for c in m.get("toolCalls", ()))),
                     None)  # fmt: skip
        if place is None:
            self.messages.append(message)
            return None
        parent_id = self.messages[place]["id"]
        self.results_per_parent[parent_id] = self.results_per_parent.get(parent_id, 0) + 1
        place += 1
        while place < len(self.messages) and self.messages[place].get("role") == "tool":
            place += 1
        self.messages.insert(place, message)
        if self.results_per_parent[parent_id] > 1:
            return f"several tool results of message {parent_id}: their order is not in the display"
        return None


def build_prelude(run_id: str, pointer: DisplayPointer, value: bytes) -> Prelude:
    """The prelude of the display record `value` (whose `agui-seq` is `pointer.seq`)."""
    snapshot = orjson.loads(value)
    reasons: list[str] = []
    if snapshot.get("evicted"):
        reasons.append(f"{snapshot['evicted'].get('count', 0)} finished items were evicted from the display")
    started: dict[str, Any] | None = None
    terminal: dict[str, Any] | None = None
    subagents: dict[str, dict[str, Any]] = {}
    messages = _Messages()
    reopened: list[dict[str, Any]] = []
    results: list[tuple[dict[str, Any], Any]] = []
    for item in snapshot.get("items", ()):
        kind, content, open_ = item["kind"], item["content"], item["state"] == "in_progress"
        if content.get("truncated"):
            reasons.append(f"item {item['ordinal']} was cut to the display's field bound")
        if kind == "observation":
            event_type = content.get("type")
            if event_type == "RUN_STARTED" and started is None:
                started = content
            elif event_type in TERMINAL_TYPES:
                terminal = content
            elif event_type == "SUBAGENT_STARTED":
                subagents[content.get("subagentRunId", "")] = content
            elif event_type in _SUBAGENT_ENDS:
                subagents.pop(content.get("subagentRunId", ""), None)
            continue
        if "input_source" in content or "provider" in content:
            continue  # an authored input or a native tool part: CUSTOM events, no client message
        if "metadata" in content:
            reasons.append(f"item {item['ordinal']} carries metadata, which a client merges across events")
        if kind in ("text_message", "reasoning_message"):
            message_id = content.get("messageId")
            if not isinstance(message_id, str):
                reasons.append(f"item {item['ordinal']} holds an encrypted value of an entity it does not name")
                continue
            role = "reasoning" if kind == "reasoning_message" else content.get("role") or "assistant"
            message = _with_subagent({"id": message_id, "role": role, "content": content.get("text", "")}, content)
            if "encrypted_value" in content:
                message["encryptedValue"] = content["encrypted_value"]
            messages.push(message)
            if open_:
                start_type = "REASONING_MESSAGE_START" if kind == "reasoning_message" else "TEXT_MESSAGE_START"
                reopened.append(_with_subagent({"type": start_type, "messageId": message_id, "role": role}, content))
        elif kind == "tool_call" and "toolCallId" in content:
            messages.tool_call(content)
            if open_ and not content.get("arguments_complete"):
                start = {"type": "TOOL_CALL_START", "toolCallId": content["toolCallId"],
                         "toolCallName": content.get("toolCallName", "")}  # fmt: skip
                if "parentMessageId" in content:
                    start["parentMessageId"] = content["parentMessageId"]
                reopened.append(_with_subagent(start, content))
            if "result" in content or "result_parts" in content:
                results.append((content, content["result"] if "result" in content else content["result_parts"]))
    for content, result in results:
        reason = messages.tool_result(content, result)
        if reason is not None:
            reasons.append(reason)
    if started is None:
        started = {"type": "RUN_STARTED", "threadId": pointer.thread_id, "runId": run_id}
    events: list[dict[str, Any]] = [started, {"type": "MESSAGES_SNAPSHOT", "messages": messages.messages}]
    if reasons:
        events.append({"type": "CUSTOM", "name": PRELUDE_NOTICE,
                       "value": {"aguiSeq": pointer.seq, "exact": False, "reasons": reasons[:20]}})  # fmt: skip
    if terminal is None:
        events.extend(subagents.values())
        events.extend(reopened)
    else:
        events.append(terminal)
    return Prelude(pointer.seq, events, terminal is not None, reasons)
