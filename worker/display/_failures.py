"""Recognising a tool result the observer did not present (denied, failed, retried), from its source item or from
the CUSTOM event the observer made of it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from worker.observe import execution_value, public_tool_result_content, tool_result_content
from worker.wire import AgentEvent, HarnessEvent, HarnessItem

_RESULT_KINDS = frozenset({"function_tool_result", "output_tool_result"})
_RESULT_NAMES = frozenset(f"a13n.pydantic_ai.{kind}" for kind in _RESULT_KINDS)
# Characters of the tool's answer a failure message keeps.
MAX_FAILURE_CHARS = 4096


def _message(content: str | list[Any]) -> str:
    if isinstance(content, str):
        return content
    return json.dumps([part.model_dump(mode="json", by_alias=True) for part in content])


def _failure(part: Any, *, public: bool) -> tuple[str, str] | None:
    """(tool call id, failure message) of a non-success result part; `public` when its content is the observer's
    payload-free projection of the execution value."""
    if not isinstance(part, dict):
        return None
    returned = part.get("part_kind") == "tool-return"
    if returned and part.get("outcome") == "success":
        return None
    call_id = part.get("tool_call_id")
    if not isinstance(call_id, str):
        return None
    if returned and public:
        content = public_tool_result_content(part.get("content"))
    elif returned:
        content = tool_result_content(execution_value(part.get("content"), part.get("metadata")))
    else:
        content = tool_result_content(part.get("content"))
    return call_id, _message(content)[:MAX_FAILURE_CHARS]


def failed_tool_call(source: HarnessItem) -> tuple[str, str, str] | None:
    """(tool call id, failure message, run id) for a non-success tool result item; None for anything else."""
    if not isinstance(source, HarnessEvent) or not isinstance(source.event, AgentEvent):
        return None
    if source.event.event_kind not in _RESULT_KINDS:
        return None
    found = _failure(source.event.data.get("part"), public=False)
    return None if found is None else (*found, source.run_id)


def published_failure(event: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """What `failed_tool_call` gives for the source item of `event`, read from the whole CUSTOM event the observer
    made of a non-success tool result (see `public_tool_result_content` for the one case it cannot tell)."""
    if event.get("type") != "CUSTOM" or event.get("name") not in _RESULT_NAMES:
        return None
    value = event.get("value")
    if not isinstance(value, dict):
        return None
    source, run_id = value.get("event"), value.get("run_id")
    if not isinstance(source, dict) or source.get("event_kind") not in _RESULT_KINDS or not isinstance(run_id, str):
        return None
    found = _failure(source.get("part"), public=True)
    return None if found is None else (*found, run_id)
