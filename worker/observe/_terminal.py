"""The terminal item of a run to RUN_FINISHED or RUN_ERROR (spec §1b.6)."""

from __future__ import annotations

from typing import Any

from ag_ui.core import BaseEvent, Interrupt, RunErrorEvent, RunFinishedEvent, TokenUsage
from ag_ui.core.events import RunFinishedCancelledOutcome, RunFinishedInterruptOutcome, RunFinishedSuccessOutcome

from worker.wire import HarnessRunResultEvent

__all__ = ["terminal_event"]

_CLIENT_TOOL = "a13n.harness.client-tool"


def _usage(usage: dict[str, Any]) -> list[TokenUsage] | None:
    inputs, outputs = usage.get("input_tokens", 0), usage.get("output_tokens", 0)
    cache_read, cache_write = usage.get("cache_read_tokens", 0), usage.get("cache_write_tokens", 0)
    if inputs + outputs == 0 and cache_read == 0 and cache_write == 0:
        return None
    reasoning = usage.get("details", {}).get("reasoning_tokens")
    return [
        TokenUsage(
            input_tokens=inputs,
            output_tokens=outputs,
            total_tokens=inputs + outputs,
            reasoning_tokens=reasoning if isinstance(reasoning, int) else None,
            cached_input_tokens=cache_read,
            cache_write_input_tokens=cache_write,
        )
    ]


def _tool_name(call: dict[str, Any], metadata: Any) -> Any:
    marker = metadata.get(_CLIENT_TOOL) if isinstance(metadata, dict) else None
    name = marker.get("declared_name") if isinstance(marker, dict) else None
    return name if isinstance(name, str) and name else call["tool_name"]


def _interrupts(deferred: dict[str, Any]) -> list[Interrupt]:
    metadata = deferred.get("metadata", {})
    out = []
    for reason, calls in (("approval", deferred.get("approvals", [])), ("external", deferred.get("calls", []))):
        for entry in calls:
            target = entry["target_call"]
            target_id = target["tool_call_id"]
            tool_metadata = metadata.get(target_id)
            out.append(
                Interrupt(
                    id=target_id,
                    tool_call_id=entry["model_call"]["tool_call_id"],
                    reason=reason,
                    metadata={
                        "tool_name": _tool_name(target, tool_metadata or {}) if reason == "external"
                        else target["tool_name"],
                        "args": target.get("args"),
                        "tool_metadata": tool_metadata,
                    },
                )
            )
    return out


def terminal_event(item: HarnessRunResultEvent, ts: int) -> BaseEvent:
    """RUN_FINISHED (success, interrupt, cancelled) or RUN_ERROR, with rawEvent naming the source item."""
    result = item.result
    usage = _usage(result.usage)
    raw: dict[str, Any] = {
        "thread_id": item.thread_id,
        "run_id": item.run_id,
        "sequence": item.sequence,
        "occurred_at": item.occurred_iso,
        "status": result.status,
    }
    ids = {"thread_id": item.thread_id, "run_id": item.run_id}
    if result.status == "completed":
        return RunFinishedEvent(
            timestamp=ts, raw_event=raw, **ids, result=result.output, outcome=RunFinishedSuccessOutcome(), usage=usage
        )
    if result.status == "suspended":
        assert result.deferred is not None
        outcome = RunFinishedInterruptOutcome(interrupts=_interrupts(result.deferred))
        return RunFinishedEvent(timestamp=ts, raw_event=raw, **ids, outcome=outcome, usage=usage)
    if result.status == "failed":
        assert result.failure is not None
        raw["failure"] = result.failure
        return RunErrorEvent(
            timestamp=ts, raw_event=raw, message=result.failure["message"], code=result.failure["code"], usage=usage
        )
    return RunFinishedEvent(timestamp=ts, raw_event=raw, **ids, outcome=RunFinishedCancelledOutcome(), usage=usage)
