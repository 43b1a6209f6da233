"""Export models of the display fold: the items plus everything an intact suffix needs to continue."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from worker.display.fragments import FragmentState
from worker.display.items import Item, StreamPosition
from worker.display.memory import MemorySource
from worker.observe import ObserverContinuation

__all__ = ["ArgumentStream", "DisplayContinuation", "DisplaySnapshot", "Eviction"]


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


class Eviction(BaseModel):
    """Items paged out of a fold for good: how many, their ordinals (inclusive, merged ranges), and the ids of
    those a later event could still name, which the fold refuses to recreate; `refused` counts such events."""

    model_config = ConfigDict(extra="forbid")
    count: int = Field(ge=1)
    ordinals: list[tuple[int, int]]
    ids: list[str] = Field(default_factory=list)
    refused: int = Field(default=0, ge=0)


class DisplaySnapshot(BaseModel):
    """The items still held (completed and open) with the continuation that resumes the fold after them, and
    what was evicted before (absent when nothing was)."""

    model_config = ConfigDict(extra="forbid")
    items: list[Item]
    continuation: DisplayContinuation
    evicted: Eviction | None = Field(default=None, exclude_if=lambda evicted: evicted is None)
