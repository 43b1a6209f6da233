"""Resume, export/restore and atomicity hold at every cut of generated runs and of golden runs."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.observe._runs import decode_all, wire_runs
from tests.observe._support import accepted, aiter_of, feed
from worker.observe import (
    HarnessAguiObserver,
    HarnessAguiStreamObserver,
    ObserverContinuation,
    encode_event,
)
from worker.wire import decode_item

GOLDEN = Path(__file__).resolve().parent.parent / "data" / "golden"
GOLDEN_RUNS = sorted(p.name for p in GOLDEN.glob("*.jsonl") if p.name.count(".") == 1)
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
OBSERVERS = st.sampled_from([HarnessAguiStreamObserver, HarnessAguiObserver])


def _golden_items(name: str) -> list:
    text = (GOLDEN / name).read_text(encoding="utf-8")
    return [decode_item(line) for line in text.split("\n") if line.strip()]


@SETTINGS
@given(run=wire_runs(), cut=st.integers(0, 40), cls=OBSERVERS)
async def test_resume_prefix_then_suffix_equals_uninterrupted(run, cut, cls) -> None:
    items = accepted(cls, decode_all(run))
    cut = min(cut, len(items))
    whole = cls()
    expected = feed(whole, items)
    resumed = cls()
    await resumed.resume(aiter_of(items[:cut]))
    assert feed(resumed, items[cut:]) == expected[cut:]
    assert [encode_event(e) for e in resumed.snapshot()] == [encode_event(e) for e in whole.snapshot()]
    assert resumed.export() == whole.export()
    assert resumed.event_count == whole.event_count


@SETTINGS
@given(run=wire_runs(), cut=st.integers(0, 40), cls=OBSERVERS)
def test_export_json_restore_at_any_cut_equals_uninterrupted(run, cut, cls) -> None:
    items = decode_all(run)
    cut = min(cut, len(items))
    whole = cls(retain_events=False)
    expected = feed(whole, items)
    first = cls(retain_events=False)
    feed(first, items[:cut])
    text = first.export().model_dump_json()
    restored = cls.restore(ObserverContinuation.model_validate_json(text))
    assert restored.thread_id == first.thread_id and restored.run_id == first.run_id
    assert feed(restored, items[cut:]) == expected[cut:]
    assert restored.export() == whole.export()
    assert json.loads(restored.export().model_dump_json()) == json.loads(whole.export().model_dump_json())


@SETTINGS
@given(run=wire_runs(), data=st.data())
def test_refused_items_leave_no_trace(run, data) -> None:
    items = decode_all(run)
    observer = HarnessAguiStreamObserver()
    for item in items:
        before = (observer.export(), observer.event_count, observer.thread_id, observer.run_id)
        frames_before = [encode_event(e) for e in observer.snapshot()]
        outcome = feed(observer, [item])[0]
        if isinstance(outcome, str):
            assert (observer.export(), observer.event_count, observer.thread_id, observer.run_id) == before
            assert [encode_event(e) for e in observer.snapshot()] == frames_before
    foreign = decode_item(json.dumps({**run[0], "thread_id": "thread_other", "sequence": 0}))
    position = data.draw(st.integers(1, len(items)))
    plain_items = [i for i in items if i.run_id == items[0].run_id]
    clean, noisy = HarnessAguiObserver(), HarnessAguiObserver()
    expected = feed(clean, plain_items)
    got = feed(noisy, plain_items[:position])
    refused = feed(noisy, [foreign])[0]
    assert isinstance(refused, str) and "correlation" in refused
    got += feed(noisy, plain_items[position:])
    assert got == expected
    assert noisy.export() == clean.export()


@settings(max_examples=15, deadline=None)
@given(name=st.sampled_from(GOLDEN_RUNS), cut=st.floats(0, 1))
async def test_golden_resume_and_restore_at_cut(name, cut) -> None:
    items = accepted(HarnessAguiStreamObserver, _golden_items(name))
    at = int(cut * len(items))
    whole = HarnessAguiStreamObserver(retain_events=False)
    expected = feed(whole, items)
    resumed = HarnessAguiStreamObserver(retain_events=False)
    await resumed.resume(aiter_of(items[:at]))
    assert feed(resumed, items[at:]) == expected[at:]
    restored = HarnessAguiStreamObserver.restore(
        ObserverContinuation.model_validate_json(resumed.export().model_dump_json())
    )
    assert restored.export() == resumed.export()
