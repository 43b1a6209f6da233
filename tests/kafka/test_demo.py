"""The README's demo command runs unattended, prints committed AG-UI events and leaves no process behind;
plus the sample producer's id rewriting and interleaving that the demo and the benchmarks rely on."""

from __future__ import annotations

import json
import os
import re
import subprocess
import uuid
from collections import defaultdict
from pathlib import Path

import pytest
from ag_ui.core import EventType

from devtools.demo import format_event
from devtools.sample_runs import interleave, load_samples, make_copy

ROOT = Path(__file__).resolve().parents[2]
RUN_ID = re.compile(r"run-[0-9a-f]{32}")
THREAD_ID = re.compile(r"thread_[0-9a-f]{32}")
AGUI_TYPES = "|".join(re.escape(t.value) for t in EventType)
SAID = re.compile(r"^\[demo\] [a-z0-9]")  # `_say`: "[demo] " and the demo's own words
LIBRARY = re.compile(r"\baiokafka\b|cluster metadata")
EVENT_LINE = re.compile(rf"^(run-[0-9a-f]{{32}}):(\d+)  ({AGUI_TYPES})  (\{{.*)$")


def _processes_mentioning(needle: str) -> list[str]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in cmdline:
            found.append(f"{entry.name}: {cmdline[:200]}")
    return found


@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_demo_prints_committed_events_and_stops_everything() -> None:
    group = f"demo-test-{uuid.uuid4().hex[:12]}"
    done = subprocess.run(
        ["bash", "scripts/demo.sh", "--duration", "40", "--group-id", group],
        cwd=ROOT, capture_output=True, text=True, timeout=280, check=False, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    detail = f"stdout tail:\n{done.stdout[-2000:]}\nstderr:\n{done.stderr[-4000:]}"
    assert done.returncode == 0, detail

    events = [m for m in map(EVENT_LINE.match, done.stdout.splitlines()) if m]
    assert events, f"no committed AG-UI event lines\n{detail}"
    by_run: dict[str, list[int]] = defaultdict(list)
    for m in events:
        by_run[m.group(1)].append(int(m.group(2)))
    for run, ns in by_run.items():  # one partition per run: its events print in id order, from 0, once
        assert ns == list(range(len(ns))), f"{run}: ids {ns[:10]}"
    types = {m.group(3) for m in events}
    assert "RUN_STARTED" in types, types
    # The first screen is the demo's own lines and the events: nothing a client library logs (aiokafka's "Topic
    # agui.display not found in cluster metadata", four times while the worker had not made the topic yet).
    assert len(events) == len(done.stdout.splitlines()), f"stdout holds more than events\n{detail}"
    foreign = [line for line in done.stderr.splitlines() if not SAID.match(line) or LIBRARY.search(line)]
    assert not foreign, f"lines not the demo's own: {foreign[:10]}"
    waits = [line for line in done.stderr.splitlines() if "waiting for" in line]
    assert len(waits) <= 1, waits

    workdir = re.search(r"workdir (\S+)\)", done.stderr)
    assert workdir, f"the demo did not name its broker workdir\n{detail}"
    leftovers = _processes_mentioning(group) + _processes_mentioning(workdir.group(1))
    assert not leftovers, f"processes left behind: {leftovers}"


def test_copies_get_fresh_valid_ids_consistently_on_every_line() -> None:
    nested = next(s for s in load_samples() if s.name == "c03_child_nested")
    first, second = make_copy(nested, "salt", 0), make_copy(nested, "salt", 1)
    assert first.root_run_id != second.root_run_id
    assert make_copy(nested, "salt", 0) == first
    for copy in (first, second):
        text = b"\n".join(copy.lines).decode()
        for old in nested.ids:
            assert re.search(rf"(?<![\w-]){re.escape(old)}(?![\w-])", text) is None, f"{old} survived"
        items = [json.loads(line) for line in copy.lines]
        assert items[0]["run_id"] == copy.root_run_id and items[0]["sequence"] == 0
        assert all(RUN_ID.fullmatch(i["run_id"]) and THREAD_ID.fullmatch(i["thread_id"]) for i in items)
    # the mapping is one-to-one: each old run keeps its own new id, and its thread stays paired with it
    old_pairs = {(json.loads(ln)["run_id"], json.loads(ln)["thread_id"]) for ln in nested.lines}
    new_pairs = {(json.loads(ln)["run_id"], json.loads(ln)["thread_id"]) for ln in first.lines}
    assert len(new_pairs) == len(old_pairs) == 3
    assert len({r for r, _ in new_pairs}) == 3
    delegations = [json.loads(ln) for ln in first.lines if b'"inline_delegation"' in ln]
    child_ids = {i["run_id"] for i in map(json.loads, first.lines)} - {first.root_run_id}
    assert {d["event"]["payload"]["child_run_id"] for d in delegations} <= child_ids


def test_interleave_keeps_each_copy_whole_and_in_order() -> None:
    samples = load_samples()
    produced = list(interleave(samples, runs=25, concurrency=6, salt="s", seed=3))
    per_key: dict[bytes, list[dict[str, object]]] = defaultdict(list)
    for key, value in produced:
        per_key[key].append(json.loads(value))
    assert len(per_key) == 25
    keys_in_order = list(dict.fromkeys(k for k, _ in produced))
    assert keys_in_order[:6] != [k for k, _ in produced[:6]], "the first items should come from several runs"
    expected = [make_copy(samples[i % len(samples)], "s", i) for i in range(25)]
    assert set(per_key) == {e.root_run_id.encode() for e in expected}
    for copy in expected:
        assert per_key[copy.root_run_id.encode()] == [json.loads(ln) for ln in copy.lines]


def test_interleave_can_leave_every_run_open() -> None:
    samples = load_samples()
    produced = list(interleave(samples, runs=len(samples), concurrency=3, salt="s", drop_terminal=True))
    per_key: dict[bytes, list[bytes]] = defaultdict(list)
    for key, value in produced:
        per_key[key].append(value)
    for index, sample in enumerate(samples):
        expected = make_copy(sample, "s", index)
        assert "result" in json.loads(expected.lines[-1])
        assert per_key[expected.root_run_id.encode()] == list(expected.lines[:-1])


def test_format_event_shows_id_type_and_truncated_value() -> None:
    headers = [("agui-event-id", b"run-1:7"), ("agui-type", b"TEXT_MESSAGE_CONTENT")]
    value = json.dumps({"type": "TEXT_MESSAGE_CONTENT", "delta": "x" * 500}).encode()
    line = format_event(headers, value)
    event_id, kind, shown = line.split("  ", 2)
    assert (event_id, kind) == ("run-1:7", "TEXT_MESSAGE_CONTENT")
    assert len(shown) == 160 and shown.endswith("…")
    assert format_event(headers, b'{"type":"X"}').endswith('  {"type":"X"}')


def test_a_copy_converts_to_the_template_output_with_only_the_ids_changed() -> None:
    from worker.observe import HarnessAguiStreamObserver, encode_event  # noqa: PLC0415
    from worker.wire import decode_item  # noqa: PLC0415

    def convert(lines: tuple[bytes, ...]) -> list[bytes]:
        observer = HarnessAguiStreamObserver(retain_events=False)
        return [encode_event(e) for line in lines for e in observer.observe(decode_item(line))]

    for sample in load_samples():
        copy = make_copy(sample, "salt", 3)
        mapping = {old.encode(): new.encode() for old, new in zip(sample.ids, copy.ids, strict=True)}
        old_ids = re.compile(b"|".join(re.escape(old) for old in mapping))
        expected = [old_ids.sub(lambda m, ids=mapping: ids[m.group(0)], e) for e in convert(sample.lines)]
        got = convert(copy.lines)
        assert got, sample.name
        assert got == expected, sample.name
