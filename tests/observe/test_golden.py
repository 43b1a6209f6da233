"""Every golden run converts to the reference output, in stream and plain mode, byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from worker.convert import convert_lines
from worker.observe import HarnessAguiStreamObserver, ObserverContinuation, encode_event
from worker.wire import decode_item

GOLDEN = Path(__file__).resolve().parent.parent / "data" / "golden"
RUNS = sorted(p.name.removesuffix(".jsonl") for p in GOLDEN.glob("*.jsonl") if p.name.count(".") == 1)
EXAMPLES = sorted(p.name.removesuffix(".jsonl") for p in (GOLDEN / "examples").glob("*.jsonl")
                  if ".agui." not in p.name)


def _lines(path: Path) -> list[bytes]:
    return [line for line in path.read_bytes().split(b"\n") if line]


def _comparable(line: bytes) -> object:
    value = json.loads(line)
    if "error" in value:
        error = value["error"]
        kind = "DecodeError" if error["type"] in ("ValidationError", "DecodeError") else error["type"]
        return {"error": {"src": error["src"], "type": kind}}
    return value


def test_corpus_is_present() -> None:
    assert len(RUNS) == 112 and len(EXAMPLES) == 2


@pytest.mark.parametrize("mode", ["stream", "plain"])
@pytest.mark.parametrize("run", RUNS)
def test_golden_run(run: str, mode: str) -> None:
    source = (GOLDEN / f"{run}.jsonl").read_bytes()
    expected = _lines(GOLDEN / f"{run}.{'stream.agui' if mode == 'stream' else 'agui'}.jsonl")
    got, failed = convert_lines(source, observer=mode)
    assert [_comparable(line) for line in got] == [_comparable(line) for line in expected]
    assert failed == sum(line.startswith(b'{"error"') for line in expected)
    assert [a for a in got if not a.startswith(b'{"error"')] == [b for b in expected if not b.startswith(b'{"error"')]


@pytest.mark.parametrize("run", EXAMPLES)
def test_examples_match_their_annotations(run: str) -> None:
    observer = HarnessAguiStreamObserver(retain_events=False)
    got = []
    for src, line in enumerate((GOLDEN / "examples" / f"{run}.jsonl").read_bytes().split(b"\n")):
        if line.strip():
            got.extend({"src": src, "agui": json.loads(encode_event(e))} for e in observer.observe(decode_item(line)))
    annotated = [json.loads(line) for line in _lines(GOLDEN / "examples" / f"{run}.agui.annotated.jsonl")]
    assert got == annotated


@pytest.mark.parametrize("run", ["s09_big_fragments", "s08_extensions", "r0007", "c03_child_nested"])
def test_encode_event_equals_pydantic_dump(run: str) -> None:
    observer = HarnessAguiStreamObserver(retain_events=False)
    count = 0
    for line in _lines(GOLDEN / f"{run}.jsonl"):
        try:
            events = observer.observe(decode_item(line))
        except ValueError:
            continue
        for event in events:
            count += 1
            assert encode_event(event) == event.model_dump_json(by_alias=True, exclude_none=True).encode()
    assert count > 10


@pytest.mark.parametrize(("name", "errors"), [("edges", 2), ("edges2", 3)])
def test_edge_cases_match_the_reference(name: str, errors: int) -> None:
    edges = GOLDEN / "edges"
    got, failed = convert_lines((edges / f"{name}.jsonl").read_bytes())
    expected = _lines(edges / f"{name}.stream.agui.jsonl")

    def src_only(line: bytes) -> object:
        value = json.loads(line)
        return {"error": value["error"]["src"]} if "error" in value else value

    assert [src_only(line) for line in got] == [src_only(line) for line in expected]
    assert failed == errors


@pytest.mark.parametrize("run", RUNS)
def test_restore_mid_run_continues_byte_identically(run: str) -> None:
    items = []
    for line in _lines(GOLDEN / f"{run}.jsonl"):
        try:
            items.append(decode_item(line))
        except ValueError:
            continue

    def outputs(observer: HarnessAguiStreamObserver, chunk: list) -> list[bytes | str]:
        out: list[bytes | str] = []
        for item in chunk:
            try:
                out.extend(encode_event(e) for e in observer.observe(item))
            except ValueError as exc:
                out.append(type(exc).__name__)
        return out

    whole = outputs(HarnessAguiStreamObserver(retain_events=False), items)
    for cut in (len(items) // 3, 2 * len(items) // 3):
        first = HarnessAguiStreamObserver(retain_events=False)
        head = outputs(first, items[:cut])
        text = first.export().model_dump_json()
        restored = HarnessAguiStreamObserver.restore(ObserverContinuation.model_validate_json(text))
        assert head + outputs(restored, items[cut:]) == whole


DAMAGED = sorted(p.name.removesuffix(".jsonl") for p in (GOLDEN / "damaged").glob("*.jsonl") if ".agui." not in p.name)


@pytest.mark.parametrize("mode", ["stream", "plain"])
@pytest.mark.parametrize("run", DAMAGED)
def test_damaged_runs_fail_on_the_same_lines_and_convert_the_rest_identically(run: str, mode: str) -> None:
    folder = GOLDEN / "damaged"
    got, _ = convert_lines((folder / f"{run}.jsonl").read_bytes(), observer=mode)
    expected = _lines(folder / f"{run}.{'stream.agui' if mode == 'stream' else 'agui'}.jsonl")

    def src_only(line: bytes) -> object:
        value = json.loads(line)
        return {"error": value["error"]["src"]} if "error" in value else value

    assert [src_only(line) for line in got] == [src_only(line) for line in expected]
    assert any(line.startswith(b'{"error"') for line in got)
