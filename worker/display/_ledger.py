"""The fold's item ledger: items by id in first-seen order, dense ordinals, position, per-scope context, paging."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import orjson
from pydantic import JsonValue, TypeAdapter

from worker.display._ids import hashed_id, item_id
from worker.display._json import ORJSON_AGREES, loads_object
from worker.display.bounding import MAX_OBSERVATION_BYTES, OMITTED, ContentPolicy, json_size_exceeds
from worker.display.items import Item, ItemKind, ItemRef, ItemState, StreamPosition
from worker.display.memory import MemorySource
from worker.display.snapshot import Eviction

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
FINISHED: Final[frozenset[ItemState]] = frozenset({"completed", "failed"})
ROOT_SCOPE: Final = "root"
_MEMORY: Final = TypeAdapter(dict[str, tuple[MemorySource, ...]])  # the continuation's `memory_sources`
_AT: Final[dict[int, datetime]] = {}
# JSON of the datetimes written lately, by identity: each entry holds its datetime, so its id is not reused while kept.
_AT_JSON: Final[dict[int, tuple[datetime, str]]] = {}


def event_time(event: dict[str, Any]) -> datetime:
    """The event's own epoch-millisecond `timestamp` as a UTC datetime; the epoch when it carries none."""
    stamp = event.get("timestamp")
    if not isinstance(stamp, int):
        return _EPOCH
    at = _AT.get(stamp)
    if at is None:
        if len(_AT) >= 4096:
            _AT.clear()
        at = _AT[stamp] = _EPOCH + timedelta(0, 0, 0, stamp)  # milliseconds, given by position (no keyword parsing)
    return at


def _time_json(at: datetime) -> str:
    """`at` as orjson writes it in an item (UTC as `Z`); remembered by the datetime object's identity (the datetimes
    `event_time` makes are shared), which a hash of an aware datetime would cost a conversion to find."""
    found = _AT_JSON.get(id(at))
    if found is not None and found[0] is at:
        return found[1]
    if len(_AT_JSON) >= 4096:
        _AT_JSON.clear()
    text = orjson.dumps(at, option=orjson.OPT_UTC_Z).decode()
    _AT_JSON[id(at)] = (at, text)
    return text


def _text_json(text: str) -> str:
    return orjson.dumps(text).decode()


def scope_of(subagent_run_id: object) -> str:
    """The context scope of an event: its subagent run id, or the root."""
    return subagent_run_id if isinstance(subagent_run_id, str) and subagent_run_id else ROOT_SCOPE


class Entry:
    """One item as the ledger holds it: plain fields, its `Item` model and JSON built on demand and kept
    until the next change."""

    __slots__ = (
        "content", "ended", "first", "index", "json", "key", "kind", "last", "made", "model", "ordinal", "refs",
        "started", "state",
    )  # fmt: skip

    def __init__(  # noqa: PLR0917  # built per new item
        self, key: str, ordinal: int, kind: ItemKind, first: str, started: datetime, refs: dict[str, Any],
        *, made: bool = False,
    ) -> None:  # fmt: skip
        self.key = key
        self.ordinal = ordinal
        self.kind: ItemKind = kind
        self.state: ItemState = "in_progress"
        self.first = first
        self.last = first
        self.started = started
        self.ended: datetime | None = None
        self.content: dict[str, JsonValue] | None = {}  # None once only `json` holds it (a finished item)
        self.refs = refs
        self.model: Item | None = None
        self.json: bytes | None = None
        self.index = 0  # its place in the ledger's order
        # Made by the ledger, its id (`itm_` and hex, as `item_id` makes them) and stream ids (`attempt-sequence`)
        # need no JSON escapes; an item read back from a snapshot has its own.
        self.made = made

    @classmethod
    def of(cls, item: Item) -> Entry:
        entry = cls(item.id, item.ordinal, item.kind, item.first_stream_id, item.started_at, item.content_refs)
        entry.state = item.state
        entry.last = item.last_stream_id
        entry.ended = item.ended_at
        entry.content = item.content
        return entry

    def contents(self) -> dict[str, JsonValue]:
        """The item's content (read back from its JSON when only that is kept)."""
        if self.content is None:
            assert self.json is not None, "an item's content is released only once its JSON is written"
            content: dict[str, JsonValue] = loads_object(self.json)["content"]
            return content
        return self.content

    def item(self) -> Item:
        """The validated (hence detached) model of this entry."""
        if self.model is None:
            self.model = Item(
                id=self.key,
                ordinal=self.ordinal,
                kind=self.kind,
                state=self.state,
                first_stream_id=self.first,
                last_stream_id=self.last,
                started_at=self.started,
                ended_at=self.ended,
                content=self.contents(),
                content_refs=self.refs,
            )
        return self.model

    def to_json(self, content_json: bytes | None = None) -> bytes:
        """The item's JSON, byte for byte as `Item.model_dump_json()` writes it (orjson writes the same text for
        these fields when `ORJSON_AGREES`; anything it cannot write goes through the model). `content_json` is
        the content's JSON when the caller has it already."""
        if self.json is None:
            if ORJSON_AGREES and not self.refs:
                try:  # a plain try: a suppress() context costs a call in and out on every item written
                    self.json = self._joined(orjson.dumps(self.content) if content_json is None else content_json)
                except (TypeError, orjson.JSONEncodeError):
                    self.json = None  # written through the model below
            if self.json is None:
                item = self.item()
                self.json = item.__pydantic_serializer__.to_json(item)
        return self.json

    def _joined(self, content_json: bytes) -> bytes:
        """The item's JSON around its content's, the fields in the model's order."""
        started = _time_json(self.started)
        at = self.ended
        ended = "null" if at is None else started if at is self.started else _time_json(at)
        if self.made:
            head = (f'{{"id":"{self.key}","ordinal":{self.ordinal},"kind":"{self.kind}","state":"{self.state}",'
                    f'"first_stream_id":"{self.first}","last_stream_id":"{self.last}",'
                    f'"started_at":{started},"ended_at":{ended},"content":')  # fmt: skip
        else:
            head = (f'{{"id":{_text_json(self.key)},"ordinal":{self.ordinal},"kind":"{self.kind}",'
                    f'"state":"{self.state}","first_stream_id":{_text_json(self.first)},'
                    f'"last_stream_id":{_text_json(self.last)},"started_at":{started},'
                    f'"ended_at":{ended},"content":')  # fmt: skip
        return b"".join((head.encode(), content_json, b"}"))


class Ledger:
    """Owns every item; `put` replaces an item whole, keeping its ordinal, first stream id and start time.

    An evicted item is gone for good: a later change to it is refused (counted in `refused`), never recreated.
    """

    def __init__(  # noqa: PLR0917  # the fold's constructor arguments, in its order
        self, run_id: str, attempt: int, items: Iterable[Item], first: int, policy: ContentPolicy,
        evicted: Eviction | None = None,
    ) -> None:  # fmt: skip
        self.run_id = run_id
        self.attempt = attempt
        self._observations = f"{run_id}\0observation\0{attempt}:"  # what `item_id` hashes, but the sequence
        self.policy = policy
        self.entries: dict[str, Entry] = {item.id: Entry.of(item.model_copy(deep=True)) for item in items}
        self.order: list[Entry] = list(self.entries.values())  # by ordinal, with each item's JSON beside it
        self.jsons: list[bytes | None] = [None] * len(self.order)
        self.stale: set[int] = set(range(len(self.order)))
        for index, entry in enumerate(self.order):
            entry.index = index
        self.next_ordinal = first + len(self.entries)
        self.sequence = 0
        self.response_groups: dict[str, str] = {}
        self.memory_sources: dict[str, tuple[MemorySource, ...]] = {}
        self._memory_json: tuple[tuple[tuple[str, tuple[MemorySource, ...]], ...], bytes] = ((), b"{}")
        self.evicted_count = 0 if evicted is None else evicted.count
        self.evicted_ordinals: list[list[int]] = [] if evicted is None else [list(r) for r in evicted.ordinals]
        self.evicted_ids: dict[str, None] = {} if evicted is None else dict.fromkeys(evicted.ids)
        self.refused = 0 if evicted is None else evicted.refused
        self._last_key: tuple[str, str, str] = ("", "", "")
        # Write a finished item's JSON as it is put, keeping only that: a fold that builds no per-event records
        # then holds few live containers (they cost every garbage collection a traversal).
        self.finished_as_json = False

    @property
    def position(self) -> StreamPosition:
        return StreamPosition(attempt=self.attempt, sequence=self.sequence)

    def key(self, kind: ItemKind, source_id: str, subagent_run_id: object = None) -> str:
        """The id of the item of `kind` for `source_id`, qualified by a subagent run id when there is one."""
        scoped = f"{subagent_run_id}:{source_id}" if subagent_run_id else source_id
        last_kind, last_scoped, last_key = self._last_key
        if last_kind == kind and last_scoped == scoped:
            return last_key
        key = item_id(self.run_id, kind, scoped)
        self._last_key = (kind, scoped, key)
        return key

    def observation_key(self) -> str:
        """The id of an observation made by the event at the current position."""
        return hashed_id(self._observations + str(self.sequence))

    def content_of(self, key: str) -> dict[str, JsonValue]:
        """An item's content to change and `put` back (empty for a new item): the ledger's own dict, which no model
        or JSON of the item shares (the item's JSON is written anew when it is put)."""
        found = self.entries.get(key)
        return found.contents() if found is not None else {}

    def open_content(self, key: str) -> dict[str, JsonValue] | None:
        """The content of item `key` while it is in progress (the ledger's own dict, changed in place and then
        `touch`ed); None for an item that is new, finished or evicted."""
        found = self.entries.get(key)
        if found is None or found.state != "in_progress":
            return None
        return found.content

    def touch(self, key: str) -> None:
        """Record that the in-progress item `key` changed (its content, in place) at the current position: what
        `put` records for it with its own kind, state and content."""
        entry = self.entries[key]
        entry.model = None
        entry.json = None
        entry.last = f"{self.attempt}-{self.sequence}"
        entry.ended = None
        self.stale.add(entry.index)

    def state_of(self, key: str) -> ItemState:
        found = self.entries.get(key)
        return found.state if found is not None else "in_progress"

    def group(self, scope: str) -> str | None:
        return self.response_groups.get(scope)

    def put(
        self, key: str, kind: ItemKind, state: ItemState, content: dict[str, JsonValue],
        at: datetime | dict[str, Any], *, growing: bool = False,
    ) -> str | None:  # fmt: skip
        """Store the item `key` as given; returns `key`, or None when the item was evicted (the change is refused).
        `at` is the time of the change, or the event whose `event_time` it is (read only when the item starts or
        finishes, the only times an item keeps). A `growing` item (the next event may change it again) keeps its
        content even when finished.

        The ledger keeps `content` itself (and the values in it), so callers pass a dict they no longer change; a
        `growing` item's values may change only right before it is put again.
        """
        entry = self.entries.get(key)
        here = f"{self.attempt}-{self.sequence}"
        finished = state in FINISHED
        if isinstance(at, dict) and (entry is None or finished):
            at = event_time(at)
        if entry is None:
            if key in self.evicted_ids:
                self.refused += 1
                return None
            assert isinstance(at, datetime), "made from the event above"
            made = key.startswith("itm_") and key.isascii() and key[4:].isalnum()  # a restored stream may name any key
            entry = self.entries[key] = Entry(key, self.next_ordinal, kind, here, at, {}, made=made)
            self.next_ordinal += 1
            entry.index = len(self.order)
            self.order.append(entry)
            self.jsons.append(None)
        else:
            entry.model = None
            entry.json = None
        entry.kind = kind
        entry.state = state
        entry.last = here
        entry.ended = at if finished and isinstance(at, datetime) else None
        entry.content = content
        if self.finished_as_json and finished and not growing:
            self.jsons[entry.index] = entry.to_json()
            self.stale.discard(entry.index)
            entry.content = None
            entry.model = None
        else:
            self.stale.add(entry.index)
        return key

    def observe(
        self, content: dict[str, JsonValue], at: datetime, *, bounded: bool, content_json: bytes | None = None
    ) -> str | None:
        """Store the completed observation the event at the current position makes; with `bounded` (see
        `ContentPolicy.bounds_observation`) its content's `value` is `OMITTED` when over MAX_OBSERVATION_BYTES.
        Kept as JSON (`finished_as_json`), its JSON is written at once, the content's text (`content_json` when
        the caller has it, as orjson writes `content`) serving the bound as well."""
        key = self.observation_key()
        if not (self.finished_as_json and ORJSON_AGREES) or key in self.entries or key in self.evicted_ids:
            if bounded and json_size_exceeds(content["value"], MAX_OBSERVATION_BYTES):
                content["value"] = dict(OMITTED)
            return self.put(key, "observation", "completed", content, at)
        text = content_json
        if text is None:
            try:
                text = orjson.dumps(content)
            except (TypeError, orjson.JSONEncodeError):
                text = None
        # The value's own text is shorter than the content's: within a sixth of the bound, it is within the bound.
        oversize = text is None or 6 * len(text) > MAX_OBSERVATION_BYTES
        if bounded and oversize and json_size_exceeds(content["value"], MAX_OBSERVATION_BYTES):
            content["value"] = dict(OMITTED)
            text = None
        here = f"{self.attempt}-{self.sequence}"
        entry = self.entries[key] = Entry(key, self.next_ordinal, "observation", here, at, {}, made=True)  # its own id
        self.next_ordinal += 1
        entry.index = len(self.order)
        self.order.append(entry)
        entry.state = "completed"
        entry.ended = at
        entry.content = content
        self.jsons.append(entry.to_json(text))
        entry.content = None
        return key

    def memory_json(self) -> bytes:
        """`memory_sources` as the continuation's model writes it, written anew only when it changed."""
        current = tuple(self.memory_sources.items())
        if current != self._memory_json[0]:  # the same source objects stay: compared by identity
            self._memory_json = (current, _MEMORY.dump_json(self.memory_sources))
        return self._memory_json[1]

    def ref(self, key: str) -> ItemRef:
        """The reference to item `key` as it stands."""
        entry = self.entries[key]
        content = entry.contents()
        group = content.get("responseGroup")
        failure = content.get("failure")
        return ItemRef(
            id=key,
            kind=entry.kind,
            state=entry.state,
            ordinal=entry.ordinal,
            response_group=group if isinstance(group, str) else None,
            failure=failure if isinstance(failure, dict) else None,
        )

    def refuse(self) -> None:
        """Count a change addressed to an evicted item."""
        self.refused += 1

    def evict(self, keys: Iterable[str]) -> int:
        """Remove the items `keys` for good, recording their ordinals and (except observations, whose ids no later
        event can name) their ids; returns how many were removed."""
        removed = 0
        for key in keys:
            entry = self.entries.pop(key)
            if entry.kind != "observation":
                self.evicted_ids[key] = None
            ranges = self.evicted_ordinals
            if ranges and ranges[-1][1] + 1 == entry.ordinal:
                ranges[-1][1] = entry.ordinal
            else:
                ranges.append([entry.ordinal, entry.ordinal])
            removed += 1
        if removed:
            self.evicted_ordinals = _merged(self.evicted_ordinals)
            self.evicted_count += removed
            self.order = list(self.entries.values())
            self.jsons = [entry.json for entry in self.order]
            self.stale = set()
            for index, entry in enumerate(self.order):
                entry.index = index
                if entry.json is None:
                    self.stale.add(index)
        return removed

    def items_json(self) -> bytes:
        """The JSON array of every item, in order; only items changed since the last call are written anew."""
        jsons, order = self.jsons, self.order
        for index in self.stale:
            entry = order[index]
            jsons[index] = entry.to_json()
            if entry.state in FINISHED:  # rarely changed again: its JSON alone is kept, the content read back if it is
                entry.content = None
                entry.model = None
        self.stale.clear()
        return b"".join((b"[", b",".join(jsons), b"]"))  # type: ignore[arg-type]  # every stale place was filled

    def eviction(self) -> Eviction | None:
        """What was evicted so far, or None when nothing was."""
        if not self.evicted_count:
            return None
        return Eviction(
            count=self.evicted_count,
            ordinals=[(low, high) for low, high in self.evicted_ordinals],
            ids=list(self.evicted_ids),
            refused=self.refused,
        )


def _merged(ranges: list[list[int]]) -> list[list[int]]:
    """Inclusive ordinal ranges sorted and joined where they touch."""
    out: list[list[int]] = []
    for low, high in sorted(ranges):
        if out and low <= out[-1][1] + 1:
            out[-1][1] = max(out[-1][1], high)
        else:
            out.append([low, high])
    return out
