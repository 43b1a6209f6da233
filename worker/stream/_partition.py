"""Per-partition stream table: dedupe and gap verdicts, the event counter, and record building."""

from __future__ import annotations

from collections import OrderedDict

from ag_ui.core import BaseEvent, RunErrorEvent
from pydantic import ValidationError

from worker._value import Value
from worker.errors import AguiObservationError, ConfigError, DecodeError, GapError, WorkerError
from worker.settings import GapPolicy, OpenStreamPolicy
from worker.stream._build import dead_letter_record, output_record
from worker.stream._core import StreamCore, StreamObserver, WireItem, default_core
from worker.stream._records import DeadLetterReason, OutboundRecord, Outcome, SourceRecord, Verdict

__all__ = ["SOURCE_GAP_CODE", "PartitionState"]

SOURCE_GAP_CODE = "source_gap"

_R = DeadLetterReason


class _Stream(Value):
    """One open root stream; `observer is None` once a gap closed it (it then waits for its terminal)."""

    __slots__ = ("first_offset", "last", "n", "observer", "thread_id")
    _FIELDS = ("observer", "first_offset", "thread_id", "n", "last")

    def __init__(
        self, observer: StreamObserver | None, first_offset: int, thread_id: str, n: int = 0,
        last: dict[str, int] | None = None,
    ) -> None:  # fmt: skip
        self.observer = observer
        self.first_offset = first_offset
        self.thread_id = thread_id
        self.n = n
        self.last: dict[str, int] = {} if last is None else last  # run id -> last accepted sequence

    def __reduce__(self) -> tuple[type[_Stream], tuple[object, ...]]:
        return _Stream, (self.observer, self.first_offset, self.thread_id, self.n, self.last)


class _Step:
    """The record being processed, its decoded key (root run id) and whether to build outbound records."""

    __slots__ = ("key", "publish", "record")

    def __init__(self, record: SourceRecord, key: str, publish: bool) -> None:
        self.record = record
        self.key = key
        self.publish = publish

    def dead(self, verdict: Verdict, reason: DeadLetterReason, message: str) -> Outcome:
        records = (dead_letter_record(self.record, reason, message),) if self.publish else ()
        return Outcome(verdict, records, self.key, reason)


class PartitionState:
    """Kafka-free state of one source partition; `process` is a pure function of the records fed so far.

    Memory is bounded: at most `max_open_streams` open streams (a new stream beyond it is dead-lettered
    as "open-stream-cap", or raises WorkerError under the halt policy) and `closed_stream_memory`
    remembered closed keys (oldest forgotten first); no stream keeps an event log. Replaying from
    `replay_from(C)` rebuilds the state at `C` except the memory of streams that ended before that offset
    (and cap decisions, when the cap was reached).
    """

    __slots__ = (
        "_closed",
        "_closed_memory",
        "_core",
        "_gap_policy",
        "_last_offset",
        "_max_open",
        "_open_policy",
        "_streams",
        "partition",
        "topic",
    )

    def __init__(
        self,
        topic: str,
        partition: int,
        *,
        gap_policy: GapPolicy = GapPolicy.CLOSE_RUN,
        max_open_streams: int = 100_000,
        open_stream_policy: OpenStreamPolicy = OpenStreamPolicy.DEAD_LETTER,
        closed_stream_memory: int = 10_000,
        core: StreamCore | None = None,
    ) -> None:
        if max_open_streams < 1:
            raise ConfigError(f"max_open_streams must be >= 1, got {max_open_streams}")
        if closed_stream_memory < 0:
            raise ConfigError(f"closed_stream_memory must be >= 0, got {closed_stream_memory}")
        self.topic = topic
        self.partition = partition
        self._gap_policy = GapPolicy(gap_policy)
        self._max_open = max_open_streams
        self._open_policy = OpenStreamPolicy(open_stream_policy)
        self._closed_memory = closed_stream_memory
        self._core = core if core is not None else default_core()
        self._streams: OrderedDict[str, _Stream] = OrderedDict()  # in first-offset order
        self._closed: OrderedDict[str, int] = OrderedDict()  # key -> last root sequence, oldest first
        self._last_offset: int | None = None

    @property
    def open_streams(self) -> int:
        """Streams holding state, including those closed by a gap and still waiting for their terminal."""
        return len(self._streams)

    @property
    def remembered_streams(self) -> int:
        """Closed keys remembered to recognise late records (at most `closed_stream_memory`)."""
        return len(self._closed)

    @property
    def last_offset(self) -> int | None:
        """Offset of the last record processed, or None before the first."""
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
        changes the state. A record that fails to decode or that its observer refuses, for whatever reason, is
        dead-lettered. Any other exception leaves the state undefined: rebuild it.
        """
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
        outcome = self._classify(record, publish)
        self._last_offset = record.offset
        return outcome

    def _classify(self, record: SourceRecord, publish: bool) -> Outcome:
        key = _decode_key(record.key)
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
        except DecodeError as exc:
            return step.dead(Verdict.DEAD_LETTERED, _R.DECODE_ERROR,
                             f"value under key {key!r} is not a Harness wire item: {exc}")
        except Exception as exc:  # a decoder bug: decoding changes no state, so the record goes, not the partition
            return step.dead(Verdict.DEAD_LETTERED, _R.DECODE_ERROR,
                             f"value under key {key!r} failed to decode: {type(exc).__name__}: {exc}")
        stream = self._streams.get(key)
        if stream is None:
            return self._start(step, item)
        if stream.observer is None:
            return self._after_gap(step, item)
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
                self._remember(key, seq)
            return step.dead(Verdict.GAP, _R.STREAM_START_MISSING,
                             f"stream {key} is not open and its item has sequence {seq}, not 0: "
                             "its beginning is missing")
        if len(self._streams) >= self._max_open:
            message = (f"stream {key} cannot open: {self.topic}[{self.partition}] already holds "
                       f"max_open_streams={self._max_open} open streams")
            if self._open_policy is OpenStreamPolicy.HALT:
                raise WorkerError(f"{message} (offset {step.record.offset}, open-stream policy halt)")
            return step.dead(Verdict.DEAD_LETTERED, _R.OPEN_STREAM_CAP, message)
        observer = self._core.new_observer()
        stream = _Stream(observer=observer, first_offset=step.record.offset, thread_id=item.thread_id)
        self._streams[key] = stream
        return self._continue(step, item, stream, observer)

    def _continue(self, step: _Step, item: WireItem, stream: _Stream, observer: StreamObserver) -> Outcome:
        run, seq = item.run_id, item.sequence
        last = stream.last.get(run, -1)
        if seq <= last:
            return step.dead(Verdict.DUPLICATE, _R.DUPLICATE,
                             f"run {run} sequence {seq} duplicates an accepted item (last accepted {last})")
        if seq > last + 1:
            return self._gap(step, item, stream, expected=last + 1)
        try:
            events = observer.observe(item)
        except (AguiObservationError, ValidationError) as exc:
            return _refused(step, item, stream, _R.OBSERVATION_ERROR, exc)
        except TypeError as exc:
            return _refused(step, item, stream, _R.TYPE_ERROR, exc)
        except Exception as exc:  # an observer bug: observe is atomic, so the stream's state is unchanged
            return _refused(step, item, stream, _R.OBSERVATION_ERROR, exc)
        stream.last[run] = seq
        records = self._outputs(step, item, stream.n, events) if step.publish else ()
        stream.n += len(events)
        if run == step.key and self._core.is_terminal(item):
            self._close(step.key, seq)
        return Outcome(Verdict.PROCESSED, records, step.key, None)

    def _gap(self, step: _Step, item: WireItem, stream: _Stream, *, expected: int) -> Outcome:
        key, run, seq = step.key, item.run_id, item.sequence
        if self._gap_policy is GapPolicy.HALT:
            raise GapError(
                f"source gap in stream {key}, run {run}: expected sequence {expected}, received {seq} "
                f"at offset {step.record.offset} of {self.topic}[{self.partition}] (gap policy halt)"
            )
        message = f"source gap in run {run}: expected sequence {expected}, received {seq}"
        event = RunErrorEvent(message=message, code=SOURCE_GAP_CODE, timestamp=self._core.timestamp_ms(item))
        records: tuple[OutboundRecord, ...] = ()
        if step.publish:
            records = (
                output_record(event, self._core.encode_event(event), root_run_id=key, n=stream.n,
                              thread_id=stream.thread_id, source=step.record, source_sequence=seq),
                dead_letter_record(step.record, _R.GAP, f"{message}; stream {key} closed with RUN_ERROR"),
            )
        stream.n += 1
        stream.observer = None
        stream.last.clear()
        if run == key and self._core.is_terminal(item):
            self._close(key, seq)
        return Outcome(Verdict.GAP, records, key, _R.GAP)

    def _after_gap(self, step: _Step, item: WireItem) -> Outcome:
        terminal = item.run_id == step.key and self._core.is_terminal(item)
        if terminal:
            self._close(step.key, item.sequence)
        what = "its terminal, which releases the stream" if terminal else "not published"
        return step.dead(Verdict.DEAD_LETTERED, _R.RUN_CLOSED_BY_GAP,
                         f"stream {step.key} was closed by a source gap; run {item.run_id} "
                         f"sequence {item.sequence} is {what}")

    def _outputs(
        self, step: _Step, item: WireItem, n: int, events: tuple[BaseEvent, ...]
    ) -> tuple[OutboundRecord, ...]:
        encode = self._core.encode_event
        return tuple(
            output_record(event, encode(event), root_run_id=step.key, n=n + i, thread_id=item.thread_id,
                          source=step.record, source_sequence=item.sequence)
            for i, event in enumerate(events)
        )

    def _close(self, key: str, last_root_sequence: int) -> None:
        self._streams.pop(key, None)
        self._remember(key, last_root_sequence)

    def _recall(self, key: str) -> int | None:
        return self._closed.get(key)

    def _remember(self, key: str, last_root_sequence: int) -> None:
        if self._closed_memory == 0:
            return
        self._closed[key] = last_root_sequence
        while len(self._closed) > self._closed_memory:
            self._closed.popitem(last=False)


def _refused(
    step: _Step, item: WireItem, stream: _Stream, reason: DeadLetterReason, exc: Exception
) -> Outcome:
    # The item arrived in order, so it counts as delivered: the next item of its run is no gap.
    stream.last[item.run_id] = item.sequence
    return step.dead(Verdict.DEAD_LETTERED, reason,
                     f"observer refused run {item.run_id} sequence {item.sequence}: "
                     f"{type(exc).__name__}: {exc}")


def _decode_key(key: bytes | None) -> str | None:
    if not key:
        return None
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _show(key: bytes | None) -> str:
    return "null" if key is None else repr(key[:120])
