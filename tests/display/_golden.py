"""The golden display corpus (tests/data/golden) and the CLI flow that must reproduce it."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from worker.display import DisplayFold, DisplaySnapshot
from worker.errors import AguiObservationError, DecodeError
from worker.wire import decode_item

DATA = Path(__file__).resolve().parent.parent / "data" / "golden"
RUNS = sorted(path.name.removesuffix(".display.jsonl") for path in DATA.glob("*.display.jsonl"))


def _lines(path: Path) -> list[str]:
    # Split on newlines only: the corpus holds raw U+2028/U+2029 inside JSON strings.
    return [line for line in path.read_text(encoding="utf-8").split("\n") if line]


def source_lines(run: str) -> list[str]:
    return _lines(DATA / f"{run}.jsonl")


def expected(run: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in _lines(DATA / f"{run}.display.jsonl")]


def expected_lines(run: str) -> list[str]:
    return _lines(DATA / f"{run}.display.jsonl")


def _error(index: int, error: Exception) -> str:
    kind = "ValidationError" if isinstance(error, ValidationError | DecodeError) else type(error).__name__
    line = {"error": {"src": index, "type": kind, "message": str(error)}}
    return json.dumps(line, ensure_ascii=False, separators=(",", ":"))


def fold_run(lines: Sequence[str], cuts: Iterable[int] = ()) -> list[str]:
    """Display output lines of `lines`; after each event count in `cuts`, export to JSON and restore."""
    pending = sorted(set(cuts))
    fold: DisplayFold | None = None
    folded = 0
    out: list[str] = []

    def cut_here(current: DisplayFold) -> DisplayFold:
        while pending and pending[0] <= folded:
            pending.pop(0)
            snapshot = DisplaySnapshot.model_validate_json(current.export().model_dump_json())
            current = DisplayFold.restore(snapshot)
        return current

    for index, line in enumerate(lines):
        try:
            item = decode_item(line)
        except (DecodeError, ValidationError) as error:
            out.append(_error(index, error))
            continue
        fold = fold if fold is not None else DisplayFold(item.run_id)
        fold = cut_here(fold)
        try:
            events = fold.events(item)
        except AguiObservationError as error:
            out.append(_error(index, error))
            continue
        start = 0
        while start < len(events):
            stop = min([cut for cut in pending if cut > folded] + [folded + len(events) - start]) - folded
            chunk = events[start : start + stop]
            last = start + stop == len(events)
            out.extend(record.model_dump_json() for record in fold.fold(chunk, source=item if last else None))
            start += stop
            folded += stop
            fold = cut_here(fold)
    assert fold is not None, "a golden run has at least one decodable item"
    out.append('{"snapshot":' + fold.export().model_dump_json() + "}")
    return out


def event_count(run: str) -> int:
    return sum(1 for record in expected(run) if "sequence" in record)
