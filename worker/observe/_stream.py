"""HarnessAguiStreamObserver: a root stream with inline child runs, each with its own part state (spec §1b.7)."""

from __future__ import annotations

from typing import Any, cast

from ag_ui.core import (
    BaseEvent,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    SubagentErrorEvent,
    SubagentFinishedEvent,
    SubagentStartedEvent,
)
from ag_ui.core.events import SubagentFinishedSuccessOutcome

from worker.errors import AguiObservationError
from worker.observe._convert import harness_custom
from worker.observe._delegation import InlineDelegation
from worker.observe._observer import Commit, HarnessAguiObserver, convert_run_item
from worker.observe._parts import close_parts
from worker.observe._state import Draft, RunState
from worker.wire import ExtensionEvent, HarnessEvent, HarnessItem

__all__ = ["HarnessAguiStreamObserver", "announced_child"]

_RUN_EVENTS = (RunStartedEvent, RunFinishedEvent, RunErrorEvent)


def _attribute(events: list[BaseEvent], run_id: str) -> list[BaseEvent]:
    for event in events:
        if "subagent_run_id" in type(event).model_fields:
            cast(Any, event).subagent_run_id = run_id
    return events


def announced_child(item: object) -> str | None:
    """The child run an inline delegation `started` item announces (its `child_run_id`), else None."""
    if not isinstance(item, HarnessEvent):
        return None
    source = item.event
    if not isinstance(source, ExtensionEvent) or source.kind != "delegation":
        return None
    payload = source.payload
    if not isinstance(payload, dict) or payload.get("type") != "inline_delegation":
        return None
    if payload.get("action") != "started":
        return None
    child = payload.get("child_run_id")
    return child if isinstance(child, str) else None


def _without_run_events(events: list[BaseEvent]) -> list[BaseEvent]:
    return [event for event in events if not isinstance(event, _RUN_EVENTS)]


class HarnessAguiStreamObserver(HarnessAguiObserver):
    """Observes a root run and its forwarded inline children; only the root owns RUN_* events."""

    __slots__ = ()

    def _check_correlation(self, item: HarnessItem) -> None:
        expected = self._state.threads.get(item.run_id)
        if expected is not None and item.thread_id != expected:
            raise AguiObservationError(
                f"Harness Thread correlation changed for a Run ({item.run_id}: {expected} to {item.thread_id})"
            )

    def _convert(self, item: HarnessItem, ts: int) -> tuple[list[BaseEvent], Commit]:
        state = self._state
        root = self._run_id or item.run_id
        run_id = item.run_id
        is_child = run_id != root
        steps: list[Commit] = []
        if run_id not in state.threads:
            steps.append(lambda: state.threads.__setitem__(run_id, item.thread_id))
        target = state
        if is_child:
            child = state.children.get(run_id)
            if child is None:
                child = RunState()
                new_child = child
                steps.append(lambda: state.children.__setitem__(run_id, new_child))
            target = child
        source = item.event if isinstance(item, HarnessEvent) else None
        if (
            isinstance(source, ExtensionEvent)
            and source.kind == "delegation"
            and isinstance(source.payload, dict)
            and source.payload.get("type") == "inline_delegation"
        ):
            assert isinstance(item, HarnessEvent)
            events = self._delegation(item, ts, source, root=root, is_child=is_child, steps=steps)
        else:
            draft = Draft(target)
            events = convert_run_item(item, ts, draft)
            if not steps:  # the common case: a known run, no bookkeeping beyond its own parts
                return (_attribute(_without_run_events(events), run_id) if is_child else events), draft.commit
            steps.append(draft.commit)
            if is_child:
                events = _attribute(_without_run_events(events), run_id)

        def commit() -> None:
            for step in steps:
                step()

        return events, commit

    def _delegation(
        self, item: HarnessEvent, ts: int, source: ExtensionEvent, *, root: str, is_child: bool, steps: list[Commit]
    ) -> list[BaseEvent]:
        payload = InlineDelegation.model_validate(source.payload)
        child_id = payload.child_run_id
        custom = harness_custom(item, ts, source)
        if child_id is None:  # no child run exists yet: the fact only, unattributed (as upstream)
            return [custom]
        if is_child:
            custom.subagent_run_id = item.run_id
        state = self._state
        events: list[BaseEvent] = []
        if payload.action == "started":
            events.append(
                SubagentStartedEvent(
                    timestamp=ts,
                    subagent_run_id=child_id,
                    name=payload.subagent,
                    parent_tool_call_id=payload.parent_tool_call_id,
                    parent_subagent_run_id=payload.parent_run_id if payload.parent_run_id != root else None,
                )
            )

            def open_child() -> None:
                state.children.setdefault(child_id, RunState())

            steps.append(open_child)
        else:
            child = state.children.get(child_id)
            if child is not None:
                events.extend(_attribute(close_parts(ts, Draft(child)), child_id))
            if payload.action == "completed":
                events.append(
                    SubagentFinishedEvent(
                        timestamp=ts, subagent_run_id=child_id, outcome=SubagentFinishedSuccessOutcome()
                    )
                )
            else:
                events.append(
                    SubagentErrorEvent(
                        timestamp=ts,
                        subagent_run_id=child_id,
                        message=f"Inline delegation {payload.status}.",
                        code=payload.status,
                    )
                )

            def release_child() -> None:
                state.children.pop(child_id, None)

            steps.append(release_child)
        events.append(custom)
        return events
