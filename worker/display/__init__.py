"""Display fold: compact, stably identified display items from a run's AG-UI stream, exported and restored exactly."""

from worker.display._customs import AUTHORED_INPUT_EVENT_NAMES
from worker.display.bounding import (
    MAX_FIELD_CHARS,
    MAX_OBSERVATION_BYTES,
    ContentPolicy,
    bound_event,
    bound_event_json,
    bounding_processor,
    json_size,
)
from worker.display.fold import DisplayFold
from worker.display.fragments import Assembly, CustomEventAssembler, FragmentState
from worker.display.items import (
    ContentRef,
    Item,
    ItemKind,
    ItemRef,
    ItemState,
    Observed,
    StreamPosition,
    item_id,
)
from worker.display.memory import FileSource, MemorySource, RecordSource, memory_sources
from worker.display.projection import (
    DEFAULT_DISPLAY_INTERVAL_MS,
    DEFAULT_MAX_MESSAGE_BYTES,
    DisplayProjection,
    DisplayRecord,
    ExportsContinuation,
    record_overhead,
)
from worker.display.reader import DisplayReader, read_display
from worker.display.snapshot import ArgumentStream, DisplayContinuation, DisplaySnapshot, Eviction

__all__ = [
    "AUTHORED_INPUT_EVENT_NAMES",
    "DEFAULT_DISPLAY_INTERVAL_MS",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "MAX_FIELD_CHARS",
    "MAX_OBSERVATION_BYTES",
    "ArgumentStream",
    "Assembly",
    "ContentPolicy",
    "ContentRef",
    "CustomEventAssembler",
    "DisplayContinuation",
    "DisplayFold",
    "DisplayProjection",
    "DisplayReader",
    "DisplayRecord",
    "DisplaySnapshot",
    "Eviction",
    "ExportsContinuation",
    "FileSource",
    "FragmentState",
    "Item",
    "ItemKind",
    "ItemRef",
    "ItemState",
    "MemorySource",
    "Observed",
    "RecordSource",
    "StreamPosition",
    "bound_event",
    "bound_event_json",
    "bounding_processor",
    "item_id",
    "json_size",
    "memory_sources",
    "read_display",
    "record_overhead",
]
