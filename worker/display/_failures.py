"""Recognising, from its source item, a tool result the observer did not present (denied, failed, retried)."""

from __future__ import annotations

import json
from typing import Any

from worker.observe import execution_value, tool_result_content
from worker.wire import AgentEvent, HarnessEvent, HarnessItem

_RESULT_KINDS = frozenset({"function_tool_result", "output_tool_result"})
# Characters of the tool's answer a failure message keeps.
MAX_FAILURE_CHARS = 4096


def _message(value: Any) -> str:
    content = tool_result_content(value)
    if isinstance(content, str):
        return content
    return json.dumps([part.model_dump(mode="json", by_alias=True) for part in content])


def failed_tool_call(source: HarnessItem) -> tuple[str, str, str] | None:
    """(tool call id, failure message, run id) for a non-success tool result item; None for anything else."""
    if not isinstance(source, HarnessEvent) or not isinstance(source.event, AgentEvent):
        return None
    if source.event.event_kind not in _RESULT_KINDS:
        return None
    part = source.event.data.get("part")
    if not isinstance(part, dict):
        return None
    returned = part.get("part_kind") == "tool-return"
    if returned and part.get("outcome") == "success":
        return None
    value = execution_value(part.get("content"), part.get("metadata")) if returned else part.get("content")
    call_id = part.get("tool_call_id")
    if not isinstance(call_id, str):
        return None
    return call_id, _message(value)[:MAX_FAILURE_CHARS], source.run_id
