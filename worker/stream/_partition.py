"""Per-partition stream table: dedupe and gap verdicts, the event counter, record building, and checkpoints.

The changelog's change tracking and format live in `_changelog.py`, the display projections' batch in
`_display_batch.py`; this module decides what each record means and what it publishes."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypedDict, Unpack

from ag_ui.core import BaseEvent, RunErrorEvent
from pydantic import ValidationError

from worker.contract import TERMINAL_TYPES
from worker.display.projection import DEFAULT_MAX_MESSAGE_BYTES, MIN_DISPLAY_BYTES, DisplayProjection
from worker.errors import AguiObservationError, ConfigError, DecodeError, GapError, WorkerError
from worker.stream._build import dead_letter_record, index_record, output_record, output_records, record_size
from worker.stream._changelog import Changelog, ChangeTracker, read_state
from worker.stream._core import StreamCore, StreamObserver, WireItem, default_core
from worker.stream._display_batch import DisplayBatch
from worker.stream._policies import GapPolicy, OpenStreamPolicy
from worker.stream._records import DeadLetterReason, OutboundRecord, Outcome, SourceRecord, Verdict
from worker.stream._table import EVENT_TOO_LARGE_CODE, SOURCE_GAP_CODE, EndedStreams, OpenStream

__all__ = [
    "EVENT_TOO_LARGE_CODE", "MIN_RECORD_BYTES", "SOURCE_GAP_CODE", "PartitionState", "StateOptions",
]

MIN_RECORD_BYTES = 1024  # the smallest output-record limit accepted: room for a RUN_ERROR and its headers
# Output-record bytes besides the encoded event, per byte of the key and of the thread id (the key appears in
# the key and the event id; a thread id's character takes at most 6 bytes, `\udc80`), plus a fixed allowance
# for the framing, the header names and their numbers.
_KEY_COPIES = 2
_THREAD_BYTES_PER_CHAR = 6
_HEADER_ALLOWANCE = 512

_R = DeadLetterReason


PART_S: Final = 0.005  # the work of one part of a checkpoint or a restore, about: a caller yields between parts


class StateOptions(TypedDict, total=False):
    """The keyword options of a PartitionState, as `PartitionState.options` returns them (all of them); any left out
    takes the constructor's default."""

    gap_policy: GapPolicy
    max_open_streams: int
    open_stream_policy: OpenStreamPolicy
    closed_stream_memory: int
    max_record_bytes: int | None
    display_interval_ms: int | None
    display_max_bytes: int
    thread_index: bool


@dataclass(frozen=True, slots=True)
class _Settings:
    """A state's options, checked once (`StateOptions` names them)."""

    gap_policy: GapPolicy = GapPolicy.CLOSE_RUN
    max_open_streams: int = 100_000
    open_stream_policy: OpenStreamPolicy = OpenStreamPolicy.DEAD_LETTER
    closed_stream_memory: int = 10_000
    max_record_bytes: int | None = None
    display_interval_ms: int | None = None
    display_max_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    thread_index: bool = False

    def __post_init__(self) -> None:
        if self.max_open_streams < 1:
            raise ConfigError(f"max_open_streams must be >= 1, got {self.max_open_streams}")
        if self.closed_stream_memory < 0:
            raise ConfigError(f"closed_stream_memory must be >= 0, got {self.closed_stream_memory}")
        if self.max_record_bytes is not None and self.max_record_bytes < MIN_RECORD_BYTES:
            raise ConfigError(f"max_record_bytes must be >= {MIN_RECORD_BYTES}, got {self.max_record_bytes}")
        if self.display_interval_ms is not None and self.display_interval_ms < 0:
            raise ConfigError(f"display_interval_ms must be >= 0, got {self.display_interval_ms}")
        if self.display_max_bytes < MIN_DISPLAY_BYTES:
            raise ConfigError(f"display_max_bytes must be >= {MIN_DISPLAY_BYTES}, got {self.display_max_bytes}")
        object.__setattr__(self, "gap_policy", GapPolicy(self.gap_policy))
        object.__setattr__(self, "open_stream_policy", OpenStreamPolicy(self.open_stream_policy))

    def options(self) -> StateOptions:
        return StateOptions(
            gap_policy=self.gap_policy, max_open_streams=self.max_open_streams,
            open_stream_policy=self.open_stream_policy, closed_stream_memory=self.closed_stream_memory,
            max_record_bytes=self.max_record_bytes, display_interval_ms=self.display_interval_ms,
            display_max_bytes=self.display_max_bytes, thread_index=self.thread_index,
        )  # fmt: skip


class _Step:
    """The record being processed, its decoded key (root run id) and whether to build outbound records."""

    __slots__ = ("key", "publish", "record")

    def __init__(self, record: SourceRecord, key: str, publish: bool) -> None:
        self.record = record
        self.key = key
        self.publish = publish

    def dead(
        self, verdict: Verdict, reason: DeadLetterReason, message: str, error: BaseException | None = None
    ) -> Outcome:
        records = (dead_letter_record(self.record, reason, message, error),) if self.publish else ()
        return Outcome(verdict, records, self.key, reason, error)


class PartitionState:
    """Kafka-free state of one source partition; `process` is a pure function of the records fed so far.

    Memory is bounded: at most `max_open_streams` open streams (a new stream beyond it is dead-lettered
    as "open-stream-cap", or raises WorkerError under the halt policy) and `closed_stream_memory`
    remembered ended keys (oldest forgotten first); no stream keeps an event log. With `max_record_bytes`, no
    output record is larger (`record_size`): an event that would be closes its stream with a RUN_ERROR.

    With `thread_index` (the thread index topic on), the outcome that publishes a stream's first event carries the
    run's start record after its output records, and the one that publishes its terminal event the run's end record
    (`worker/contract.py`): both follow from the records alone, so a rebuilt worker writes the same ones.

    With `display_interval_ms` (the display topic on), every open stream has a `DisplayProjection` fed the events
    it publishes, in replay as live; the display record it makes (at most `display_max_bytes`) follows those
    events in their Outcome, its cadence measured on source record timestamps.

    `checkpoint` returns the changelog records that bring a compacted changelog to this state, and `restore`
    rebuilds exactly this state from them. Replaying from `replay_from(C)` instead rebuilds the state at `C`
    except the memory of streams that ended before that offset (and cap decisions, when the cap was reached).
    """

    __slots__ = (
        "_changes", "_core", "_display", "_ended", "_last_offset", "_settings", "_streams", "partition", "topic",
    )

    def __init__(
        self, topic: str, partition: int, *, core: StreamCore | None = None, **options: Unpack[StateOptions]
    ) -> None:
        settings = _Settings(**options)
        self.topic = topic
        self.partition = partition
        self._settings = settings
        interval = settings.display_interval_ms
        self._display = DisplayBatch(interval, settings.display_max_bytes) if interval is not None else None
        self._core = core if core is not None else default_core()
        self._streams: OrderedDict[str, OpenStream] = OrderedDict()  # in first-offset order
        self._ended = EndedStreams(settings.closed_stream_memory)
        self._last_offset: int | None = None
        self._changes = ChangeTracker(topic, partition)

    @property
    def options(self) -> StateOptions:
        """The keyword options this state was built with (`PartitionState(topic, p, **state.options)`)."""
        return self._settings.options()

    @property
    def shows_display(self) -> bool:
        """Whether open streams keep display projections (the display topic is on)."""
        return self._display is not None

    def take_display_tally(self) -> tuple[int, int]:
        """(items evicted, display records withheld) by the records processed with publishing since the last call."""
        return self._display.take_tally() if self._display is not None else (0, 0)

    @property
    def core(self) -> StreamCore:
        """The conversion core this state decodes, observes and encodes with."""
        return self._core

    @property
    def checkpointed(self) -> int:
        """The source offset of the last checkpoint taken or restored; -1 when the changelog is not known to hold
        this state (none yet, or a state rebuilt without it)."""
        return self._changes.checkpointed

    @property
    def open_streams(self) -> int:
        """Streams holding state, including those closed by a RUN_ERROR and still waiting for their terminal."""
        return len(self._streams)

    @property
    def remembered_streams(self) -> int:
        """Ended keys remembered to recognise late records (at most `closed_stream_memory`)."""
        return len(self._ended)

    @property
    def last_offset(self) -> int | None:
        """Offset of the last record processed (a checkpoint at K counts as K - 1), or None before any."""
        return self._last_offset

    def replay_from(self, next_offset: int) -> int:
        """Return the lowest first-offset among open streams, else `next_offset`: where a rebuild starts."""
        for stream in self._streams.values():
            return min(stream.first_offset, next_offset)
        return next_offset

    def process(self, record: SourceRecord, *, publish: bool = True) -> Outcome:
        """Classify `record`, advance the state and return what to publish (nothing when `publish` is False).

        Raises WorkerError for a record of another partition or a non-increasing offset, GapError for a gap
        under the halt policy, WorkerError at the open-stream cap under the halt policy; none of these
        changes the state. A record that fails to decode or that its observer refuses is dead-lettered, and so
        is one whose decoding, observing or encoding raised anything else (`internal-error`, the exception in
        the Outcome): decode and observe change nothing when they fail; after an encoding failure the stream has
        moved on as if the events were published, as a replay (which encodes only to measure) moves it, so their
        ids stay unused.
        Any other exception is a bug of this module and leaves the state undefined.
        """
        outcomes, error = self.process_batch((record,), publish=publish)
        if error is not None:
            raise error
        return outcomes[0]

    def process_batch(
        self, records: Sequence[SourceRecord], *, publish: bool = True
    ) -> tuple[list[Outcome], Exception | None]:
        """`process` of each record in order: the same outcomes, display records included, with the display
        projections' folding done after the whole batch's conversion (each stage's code stays warm).

        Stops at the first record `process` raises for, returning the outcomes of the records before it and that
        exception (None when every record was processed). An exception from a display fold is a bug: it returns
        the outcomes before its record, the state past them and undefined."""
        outcomes: list[Outcome] = []
        error: Exception | None = None
        batch = self._display
        try:
            for record in records:  # checked, classified, then its offset is the last processed
                if record.topic != self.topic or record.partition != self.partition:
                    raise WorkerError(
                        f"record of {record.topic}[{record.partition}] fed to the state of "
                        f"{self.topic}[{self.partition}]"
                    )
                if self._last_offset is not None and record.offset <= self._last_offset:
                    raise WorkerError(
                        f"offsets of {self.topic}[{self.partition}] must increase: got {record.offset} "
                        f"after {self._last_offset}"
                    )
                if batch is not None:
                    batch.outcome = len(outcomes)  # the folds this record offers belong to its outcome
                outcomes.append(self._classify(record, publish))
                self._last_offset = record.offset
        except Exception as exc:  # returned to the caller, which decides (raise, halt or fail)
            error = exc
        if batch is None:
            return outcomes, error
        outcomes, failed = batch.fold(outcomes, publish, records)
        return outcomes, failed if failed is not None else error

    def _classify(self, record: SourceRecord, publish: bool) -> Outcome:
        raw = record.key
        try:  # a non-empty UTF-8 root run id, else None
            key = raw.decode("utf-8") if raw else None
        except UnicodeDecodeError:
            key = None
        if key is None:
            message = f"record key {_show(record.key)} is not a non-empty UTF-8 root run id"
            records = (dead_letter_record(record, _R.BAD_KEY, message),) if publish else ()
            return Outcome(Verdict.DEAD_LETTERED, records, None, _R.BAD_KEY)
        step = _Step(record, key, publish)
        if record.value is None:
            return step.dead(Verdict.DEAD_LETTERED, _R.DECODE_ERROR,
                             f"value under key {key!r} is null (a tombstone), not a Harness wire item")
        try:
            item = self._core.decode(record.value)
        except (DecodeError, AguiObservationError, ValidationError, TypeError) as exc:
            return step.dead(Verdict.DEAD_LETTERED, _R.DECODE_ERROR,
                             f"value under key {key!r} is not a Harness wire item: {exc}")
        except Exception as exc:  # a decoder bug: decoding changes no state, so the record goes, not the partition
            return step.dead(Verdict.DEAD_LETTERED, _R.INTERNAL_ERROR,
                             f"value under key {key!r} failed to decode: {type(exc).__name__}: {exc}", exc)
        stream = self._streams.get(key)
        if stream is None:
            return self._start(step, item)
        if stream.observer is None:  # a closed stream may have lost an announcement: it cannot tell mis-keyed items
            return self._after_close(step, item, stream)
        run = item.run_id
        if run != key and run not in stream.last:
            return step.dead(Verdict.DEAD_LETTERED, _R.MIS_KEYED,
                             f"key {key!r} holds an open stream, and its item of run {run!r} (sequence "
                             f"{item.sequence}) is neither that root run nor a child announced in it")
        return self._continue(step, item, stream, stream.observer)

    def _start(self, step: _Step, item: WireItem) -> Outcome:
        key, run, seq = step.key, item.run_id, item.sequence
        remembered = self._recall(key)
        if remembered is not None:
            if run == key and seq <= remembered:
                return step.dead(Verdict.DUPLICATE, _R.DUPLICATE,
                                 f"stream {key} ended at sequence {remembered}; {seq} is a late duplicate")
            return step.dead(Verdict.DEAD_LETTERED, _R.STREAM_CLOSED,
                             f"stream {key} ended at sequence {remembered}; late item {run} #{seq}")
        if run != key:
            return step.dead(Verdict.DEAD_LETTERED, _R.MIS_KEYED,
                             f"key {key!r} has no open stream; its item is of run {run!r} (sequence {seq})")
        if seq != 0:
            if self._core.is_terminal(item):
                self._remember(key, seq, step.record.offset)
            return step.dead(Verdict.GAP, _R.STREAM_START_MISSING,
                             f"stream {key} is not open and its item has sequence {seq}, not 0: "
                             "its beginning is missing")
        cap = self._settings.max_open_streams
        if len(self._streams) >= cap:
            message = (f"stream {key} cannot open: {self.topic}[{self.partition}] already holds "
                       f"max_open_streams={cap} open streams")
            if self._settings.open_stream_policy is OpenStreamPolicy.HALT:
                raise WorkerError(f"{message} (offset {step.record.offset}, open-stream policy halt)")
            return step.dead(Verdict.DEAD_LETTERED, _R.OPEN_STREAM_CAP, message)
        observer = self._core.new_observer()
        stream = OpenStream(observer=observer, first_offset=step.record.offset, thread_id=item.thread_id)
        if self._display is not None:
            stream.display = self._display.projection(key, item.thread_id, observer)
        self._streams[key] = stream
        return self._continue(step, item, stream, observer)

    def _continue(self, step: _Step, item: WireItem, stream: OpenStream, observer: StreamObserver) -> Outcome:
        run, seq = item.run_id, item.sequence
        last = stream.last.get(run, -1)
        if seq <= last:
            return step.dead(Verdict.DUPLICATE, _R.DUPLICATE,
                             f"run {run} sequence {seq} duplicates an accepted item (last accepted {last})")
        if seq > last + 1:
            return self._gap(step, item, stream, expected=last + 1)
        self._changes.changed(step.key)  # whatever follows, the item counts as delivered
        observe_records = self._core.observe_records
        display = stream.display
        limit = self._settings.max_record_bytes
        events: tuple[BaseEvent, ...] | None = None
        records: tuple[OutboundRecord, ...] = ()
        values: list[bytes] | None = None
        over: tuple[int, int, str] | None = None
        terminal, announced = False, None
        try:
            if observe_records is None:
                events = observer.observe(item)
            else:  # a core encoding as it observes: records, sizes and values, no event objects
                source = step.record
                count, records, values, over, terminal, announced = observe_records(
                    observer, item, (source.key, source.partition, source.offset), stream.n, step.publish, limit,
                    display is not None,
                )  # fmt: skip
        except (AguiObservationError, ValidationError) as exc:
            return _refused(step, item, stream, _R.OBSERVATION_ERROR, exc)
        except TypeError as exc:
            return _refused(step, item, stream, _R.TYPE_ERROR, exc)
        except Exception as exc:  # a conversion bug: observe is atomic, so the stream's state is unchanged
            return _refused(step, item, stream, _R.INTERNAL_ERROR, exc)
        stream.last[run] = seq
        if events is not None:
            terminal, announced = self._core.is_terminal(item), self._core.announced_run(item)
        if announced is not None and announced not in stream.last:
            stream.last[announced] = -1
        data: list[dict[str, Any] | None] | None = None
        failed: Exception | None = None
        if events is not None:
            count = len(events)
            records, values, data, over, failed = self._records(step, item, stream, events, limit=limit,
                                                                       display=display is not None)
        if over is not None:
            index, size, event_type = over
            message = (f"event {stream.n + index} ({event_type}) of run {run} sequence {seq} would be a "
                       f"{size}-byte output record, over the limit of {limit} bytes")
            return self._close_with_run_error(step, item, stream, message, code=EVENT_TOO_LARGE_CODE,
                                              verdict=Verdict.DEAD_LETTERED, reason=_R.TOO_LARGE)
        if records and failed is None and self._settings.thread_index:
            records = self._indexed(records, step.key, item, stream.thread_id, stream.n)
        n = stream.n
        stream.widest = max(stream.widest, len(step.record.value or b""))
        stream.n += count
        ended = terminal and run == step.key
        batch = self._display
        if display is not None and batch is not None:  # see _show, inlined on this path
            batch.offer(display, count if events is None else events, n, step.record.timestamp_ms,
                        values if failed is None else None, data, ended, item, observer)
            if ended:
                stream.display = None
        if ended:
            self._close(step.key, seq, step.record.offset)
        if failed is not None:
            return step.dead(Verdict.DEAD_LETTERED, _R.INTERNAL_ERROR,
                             f"events {n} to {n + count - 1} of run {run} sequence {seq} could not be "
                             f"encoded and are skipped: {type(failed).__name__}: {failed}", failed)
        return Outcome(Verdict.PROCESSED, records, step.key, None)

    def _records(
        self, step: _Step, item: WireItem, stream: OpenStream, events: tuple[BaseEvent, ...], *, limit: int | None,
        display: bool,
    ) -> tuple[
        tuple[OutboundRecord, ...], list[bytes] | None, list[dict[str, Any] | None] | None, tuple[int, int, str] | None,
        Exception | None,
    ]:  # fmt: skip
        """What `observe_records` gives for `events` (the record values and, for the display, their JSON objects)
        and the exception that stopped encoding them, if any: the events are measured only when the core's bound
        cannot prove they fit."""
        count = len(events)
        measure = limit is not None and count > 0 and not self._surely_fit(step, item, stream)
        if not (step.publish or measure or (display and count)):
            return (), None, None, None, None
        records: tuple[OutboundRecord, ...] = ()
        values: list[bytes] | None = None
        data: list[dict[str, Any] | None] | None = None
        try:
            values, data = self._encode(events, display=display)
            if step.publish or measure:
                records = output_records([event.type for event in events], values, root_run_id=step.key,
                                         first=stream.n, thread_id=item.thread_id, source=step.record,
                                         source_sequence=item.sequence)  # fmt: skip
        except Exception as exc:  # see process(): the stream moves on as if they were published
            return (), values, data, None, exc
        if measure and limit is not None:
            for index, record in enumerate(records):
                size = record_size(record)
                if size > limit:
                    return (), values, data, (index, size, record.event_type or ""), None
        return (records if step.publish else ()), values, data, None, None

    def _indexed(
        self, records: tuple[OutboundRecord, ...], run_id: str, item: WireItem, thread_id: str, n: int
    ) -> tuple[OutboundRecord, ...]:
        """`records` (run `run_id`'s output records from event `n` on) followed by the run's start record when they
        begin with its event 0, and its end record when one of them is a terminal event."""
        index: list[OutboundRecord] = []
        if n == 0:
            index.append(index_record(run_id, thread_id, 0, self._core.timestamp_ms(item), None))
        for offset, record in enumerate(records):
            if record.event_type in TERMINAL_TYPES:
                index.append(index_record(run_id, thread_id, n + offset, self._core.timestamp_ms(item),
                                          record.event_type))  # fmt: skip
                break
        return (*records, *index) if index else records

    def _encode(
        self, events: tuple[BaseEvent, ...], *, display: bool
    ) -> tuple[list[bytes], list[dict[str, Any] | None] | None]:
        """The events' record values and, for the display when the core gives them, their JSON objects."""
        both = self._core.encode_data if display else None
        if both is None:
            encode = self._core.encode_event
            return [encode(event) for event in events], None
        pairs = [both(event) for event in events]
        return [value for value, _ in pairs], [data for _, data in pairs]

    def _show(
        self, step: _Step, stream: OpenStream, display: DisplayProjection, events: tuple[BaseEvent, ...] | int,
        first: int, *, values: list[bytes] | None, data: list[dict[str, Any] | None] | None, ended: bool,
        source: WireItem | None, observer: StreamObserver,
    ) -> None:  # fmt: skip
        """Offer the events to the stream's display projection (`DisplayBatch.offer`); the display record due after
        them joins the record's outcome, last, at the end of the batch. A projection that `ended` is let go."""
        assert self._display is not None
        self._display.offer(display, events, first, step.record.timestamp_ms, values, data, ended, source, observer)
        if ended:
            stream.display = None

    def _surely_fit(self, step: _Step, item: WireItem, stream: OpenStream) -> bool:
        """Whether the core's bound proves every event of `item` fits the record limit, without encoding one."""
        bound, limit = self._core.event_bound(item, stream.widest), self._settings.max_record_bytes
        if bound is None or limit is None:
            return False
        key = step.record.key
        overhead = (_KEY_COPIES * (len(key) if key is not None else 0)
                    + _THREAD_BYTES_PER_CHAR * len(item.thread_id) + _HEADER_ALLOWANCE)  # fmt: skip
        return bound + overhead <= limit

    def _close_with_run_error(
        self, step: _Step, item: WireItem, stream: OpenStream, message: str, *, code: str, verdict: Verdict,
        reason: DeadLetterReason,
    ) -> Outcome:  # fmt: skip
        """Close the stream with the RUN_ERROR `code` as its event `n`: it converts nothing more, and its terminal,
        when this item is it, ends it."""
        key, run, seq = step.key, item.run_id, item.sequence
        records: tuple[OutboundRecord, ...] = ()
        if step.publish or stream.display is not None:
            records = self._run_error(step, item, stream, message, code=code, reason=reason)
        self._changes.changed(key)
        stream.n += 1
        stream.observer = None
        stream.closed_by = code
        stream.last.clear()
        if run == key and self._core.is_terminal(item):
            self._close(key, seq, step.record.offset)
        return Outcome(verdict, records, key, reason)

    def _run_error(
        self, step: _Step, item: WireItem, stream: OpenStream, message: str, *, code: str, reason: DeadLetterReason
    ) -> tuple[OutboundRecord, ...]:
        """The RUN_ERROR `code` closing the stream as event `n` and the dead letter of the record that closed it
        (the stream's last display record joins them at the end of the batch); the RUN_ERROR is left out when it
        would itself exceed the record limit. Nothing when not publishing, but the display projection ends either
        way."""
        event = RunErrorEvent(message=message, code=code, timestamp=self._core.timestamp_ms(item))
        (value,), data = self._encode((event,), display=stream.display is not None)
        error = output_record(event.type, value, root_run_id=step.key, n=stream.n, thread_id=stream.thread_id,
                              source=step.record, source_sequence=item.sequence)  # fmt: skip
        limit = self._settings.max_record_bytes
        fits = limit is None or record_size(error) <= limit
        display, observer = stream.display, stream.observer
        if display is not None and observer is not None:
            self._show(step, stream, display, (event,), stream.n, values=[value] if fits else None, data=data,
                       ended=True, source=None, observer=observer)  # fmt: skip
        stream.display = None
        if not step.publish:
            return ()
        if not fits:
            return (dead_letter_record(step.record, reason, f"{message}; stream {step.key} closed, its RUN_ERROR "
                                       f"over the limit of {limit} bytes too"),)  # fmt: skip
        letter = dead_letter_record(step.record, reason, f"{message}; stream {step.key} closed with RUN_ERROR")
        if self._settings.thread_index:
            return (*self._indexed((error,), step.key, item, stream.thread_id, stream.n), letter)
        return (error, letter)

    def _gap(self, step: _Step, item: WireItem, stream: OpenStream, *, expected: int) -> Outcome:
        key, run, seq = step.key, item.run_id, item.sequence
        if self._settings.gap_policy is GapPolicy.HALT:
            raise GapError(
                f"source gap in stream {key}, run {run}: expected sequence {expected}, received {seq} "
                f"at offset {step.record.offset} of {self.topic}[{self.partition}] (gap policy halt)"
            )
        message = f"source gap in run {run}: expected sequence {expected}, received {seq}"
        return self._close_with_run_error(step, item, stream, message, code=SOURCE_GAP_CODE, verdict=Verdict.GAP,
                                          reason=_R.GAP)

    def _after_close(self, step: _Step, item: WireItem, stream: OpenStream) -> Outcome:
        terminal = item.run_id == step.key and self._core.is_terminal(item)
        if terminal:
            self._close(step.key, item.sequence, step.record.offset)
        what = "its terminal, which releases the stream" if terminal else "not published"
        cause = "a source gap" if stream.closed_by == SOURCE_GAP_CODE else "an event too large to publish"
        return step.dead(Verdict.DEAD_LETTERED, _R.RUN_CLOSED_BY_GAP,
                         f"stream {step.key} was closed by {cause}; run {item.run_id} "
                         f"sequence {item.sequence} is {what}")

    def _close(self, key: str, last_root_sequence: int, at: int) -> None:
        stream = self._streams.pop(key, None)
        if stream is not None:
            self._changes.closed(key, stream.first_offset)
        self._remember(key, last_root_sequence, at)

    def _recall(self, key: str) -> int | None:
        return self._ended.recall(key)

    def _remember(self, key: str, last_root_sequence: int, at: int) -> None:
        self._changes.remembered(key, self._ended.remember(key, last_root_sequence, at))

    # ---- changelog ------------------------------------------------------------------------------------

    def checkpoint_parts(self, offset: int, part_s: float = PART_S) -> Iterator[Changelog]:
        """The changelog records (key, value; None for a tombstone) that bring the changelog from the previous
        checkpoint to this state at source offset `offset`: each key changed since, once, and the partition record
        last; `offset` is the next offset to process, every record below it counts as processed. In order, in parts
        that take about `part_s` each to encode: the caller may let other work run between parts as long as nothing
        changes this state until the last part is taken, which marks the state checkpointed."""
        self._check_offset(offset)
        return self._checkpoint_parts(offset, part_s)

    def _checkpoint_parts(self, offset: int, part_s: float) -> Iterator[Changelog]:
        parts = self._changes.checkpoint_parts(offset, self._streams, self._ended, self._core.export_observer,
                                               display=self._display is not None, part_s=part_s)  # fmt: skip
        part = next(parts)
        for following in parts:
            yield part
            part = following
        if offset > 0 and (self._last_offset is None or self._last_offset < offset - 1):
            self._last_offset = offset - 1  # the tracker marked the checkpoint when its last part was taken
        yield part

    def _check_offset(self, offset: int) -> None:
        checkpointed = self._changes.checkpointed
        if offset < checkpointed or (self._last_offset is not None and offset <= self._last_offset):
            raise WorkerError(
                f"a checkpoint of {self.topic}[{self.partition}] at offset {offset} would go back: the last "
                f"processed offset is {self._last_offset}, the last checkpoint's {checkpointed}"
            )

    def adopt_changelog_keys(self, keys: Iterable[bytes]) -> None:
        """Declare that the changelog holds exactly `keys` (a state rebuilt without it): the next checkpoint
        writes every live key and a tombstone for every other key among them."""
        self._changes.adopt(keys, self._streams, self._ended)

    def adopt_replay(
        self, streams: Iterable[tuple[str, OpenStream]], ended: EndedStreams, last_offset: int | None
    ) -> None:
        """Take over open streams (any order) and an ended-stream memory built by a replay elsewhere."""
        if self._streams or len(self._ended) or self._last_offset is not None:
            raise WorkerError(f"only fresh state adopts a replay, not that of {self.topic}[{self.partition}]")
        if ended.capacity != self._ended.capacity:
            raise WorkerError(f"ended-stream memory of {ended.capacity} keys, not {self._ended.capacity}")
        self._streams = OrderedDict(sorted(streams, key=lambda pair: pair[1].first_offset))
        self._ended = ended
        self._last_offset = last_offset
        self.adopt_changelog_keys(())

    @classmethod
    def restore_in_parts(
        cls, topic: str, partition: int, values: Mapping[bytes, bytes], options: StateOptions, *,
        core: StreamCore | None = None, part_s: float = PART_S,
    ) -> Generator[None, None, tuple[PartitionState, int]]:  # fmt: skip
        """Yields after each part of about `part_s` of the work (the caller may let other work run then), and
        returns the state a changelog partition holds (`values`: its latest value per key, tombstoned keys left
        out) and the source offset K it covers: process from K on.

        Raises CheckpointVersionError for a format this release does not read, CheckpointError when the
        changelog is empty, unreadable or inconsistent, and, with the display on, when a converting stream has no
        display state (it was written with the display off): only a replay from the stream's start rebuilds its
        projection. More remembered streams than `closed_stream_memory` are forgotten oldest first (tombstoned at
        the next checkpoint); open streams above the cap stay. Restored projections keep the interval and size
        limit they were exported with.
        """
        state = cls(topic, partition, core=core, **options)
        stored = yield from read_state(values, topic, partition, state._core.restore_observer,
                                       display=state.shows_display, part_s=part_s)  # fmt: skip
        offset = stored.header.offset
        state._streams = OrderedDict(stored.streams)
        state._changes.checkpointed = offset
        state._last_offset = offset - 1 if offset > 0 else None
        for at, key, sequence in stored.ended:
            state._remember(key, sequence, at)
        state._changes.restored()
        return state, offset

def _refused(
    step: _Step, item: WireItem, stream: OpenStream, reason: DeadLetterReason, exc: Exception
) -> Outcome:
    # The item arrived in order, so it counts as delivered: the next item of its run is no gap.
    stream.last[item.run_id] = item.sequence
    error = exc if reason is _R.INTERNAL_ERROR else None
    return step.dead(Verdict.DEAD_LETTERED, reason,
                     f"{'observer refused' if error is None else 'conversion failed on'} run {item.run_id} sequence "
                     f"{item.sequence}: {type(exc).__name__}: {exc}", error)


def _show(key: bytes | None) -> str:
    return "null" if key is None else repr(key[:120])
