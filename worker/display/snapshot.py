"""Checkpoint models of the display fold: the items plus everything an intact suffix needs to continue."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from worker.display.fragments import FragmentState
from worker.display.items import Item, StreamPosition
from worker.display.memory import MemorySource
from worker.observe import ObserverContinuation

__all__ = ["ArgumentStream", "DisplayContinuation", "DisplaySnapshot"]


class ArgumentStream(BaseModel):
    """The streamed arguments of one tool-call part, folded into the single observation item `key`.

    `stream` identifies the part (event name, thread, run, source event without its text); only the event
    right after `sequence` may continue it. `event` is the grown observation, None once over the bound.
    """

    model_config = ConfigDict(extra="forbid")
    stream: JsonValue
    key: str
    at: datetime
    sequence: int = Field(ge=0)
    event: dict[str, Any] | None
    size: int = Field(ge=0)


class DisplayContinuation(BaseModel):
    """Parser state at a cut: position, ordinals, scope context, argument stream, fragments, observer."""

    model_config = ConfigDict(extra="forbid")
    run_id: str
    position: StreamPosition
    next_ordinal: int = Field(ge=1)
    full_content: bool = False
    retain_content: bool = Field(default=False, exclude_if=lambda flag: not flag)
    response_groups: dict[str, str] = Field(default_factory=dict)
    memory_sources: dict[str, tuple[MemorySource, ...]] = Field(
        default_factory=dict, exclude_if=lambda sources: not sources
    )
    arguments: ArgumentStream | None = None
    fragments: FragmentState = Field(default_factory=FragmentState)
    observer: ObserverContinuation = Field(default_factory=ObserverContinuation)


class DisplaySnapshot(BaseModel):
    """All items (completed and still open) with the continuation that resumes the fold after them."""

    model_config = ConfigDict(extra="forbid")
    items: list[Item]
    continuation: DisplayContinuation
