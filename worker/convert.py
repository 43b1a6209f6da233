"""`python -m worker convert`: wire JSONL to AG-UI JSONL, one output line per event or per failing line."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from types import ModuleType
from typing import BinaryIO

import orjson
from pydantic import ValidationError

from worker._native import core as native_module
from worker.errors import AguiObservationError, DecodeError
from worker.observe import HarnessAguiObserver, HarnessAguiStreamObserver, encode_event
from worker.wire import decode_item

__all__ = ["convert_lines", "convert_paths", "error_line"]

_EXPECTED = (DecodeError, AguiObservationError, TypeError, ValidationError)


def error_line(src: int, exc: BaseException) -> bytes:
    """The output line that stands in for source line `src`."""
    kind = type(exc).__name__ if not isinstance(exc, DecodeError | AguiObservationError) else (
        "DecodeError" if isinstance(exc, DecodeError) else "AguiObservationError"
    )
    return orjson.dumps({"error": {"src": src, "type": kind, "message": str(exc)}})


def _source_lines(data: bytes) -> Iterator[tuple[int, bytes]]:
    for index, line in enumerate(data.split(b"\n")):
        if line.strip() and not line.startswith(b"#"):
            yield index, line


def convert_lines(data: bytes, *, observer: str = "stream", display: bool = False) -> tuple[list[bytes], int]:
    """Output lines for one source document and how many source lines failed (the native core's where the
    installation has it)."""
    if display:
        return _convert_display(data)
    native = native_module()
    if native is not None:
        return _convert_native(native, data, stream=observer == "stream")
    cls = HarnessAguiStreamObserver if observer == "stream" else HarnessAguiObserver
    obs = cls(retain_events=False)
    out: list[bytes] = []
    failed = 0
    for index, line in _source_lines(data):
        try:
            events = obs.observe(decode_item(line))
        except _EXPECTED as exc:
            out.append(error_line(index, exc))
            failed += 1
            continue
        out.extend(encode_event(event) for event in events)
    return out, failed


def _convert_native(native: ModuleType, data: bytes, *, stream: bool) -> tuple[list[bytes], int]:
    obs = native.Observer(stream)
    out: list[bytes] = []
    failed = 0
    for index, line in _source_lines(data):
        try:
            _, values = obs.observe(native.decode_record(line))
        except _EXPECTED as exc:
            out.append(error_line(index, exc))
            failed += 1
            continue
        out.extend(values)
    return out, failed


def _convert_display(data: bytes) -> tuple[list[bytes], int]:
    from worker.display import DisplayFold  # noqa: PLC0415 - only `--display` needs the fold

    fold: DisplayFold | None = None
    out: list[bytes] = []
    failed = 0
    for index, line in _source_lines(data):
        try:
            item = decode_item(line)
            fold = fold if fold is not None else DisplayFold(item.run_id)
            records = fold.fold(fold.events(item), source=item)
        except _EXPECTED as exc:
            out.append(error_line(index, exc))
            failed += 1
            continue
        out.extend(record.model_dump_json().encode() for record in records)
    if fold is not None:
        out.append(b'{"snapshot":' + fold.export().model_dump_json().encode() + b"}")
    return out, failed


def _write(stream: BinaryIO, lines: Iterable[bytes]) -> None:
    for line in lines:
        stream.write(line)
        stream.write(b"\n")


def convert_paths(
    paths: list[str], *, observer: str, display: bool, out_dir: str | None,
    stdin: BinaryIO | None = None, stdout: BinaryIO | None = None,
) -> int:
    """Convert each path (or stdin) and return the exit status: 1 if any line failed, else 0."""
    convert: Callable[[bytes], tuple[list[bytes], int]] = lambda data: convert_lines(  # noqa: E731
        data, observer=observer, display=display
    )
    failed = 0
    if not paths:
        lines, failed = convert((stdin or sys.stdin.buffer).read())
        target = stdout or sys.stdout.buffer
        _write(target, lines)
        target.flush()
        return 1 if failed else 0
    directory = Path(out_dir) if out_dir else None
    if directory is not None:
        directory.mkdir(parents=True, exist_ok=True)
    for name in paths:
        try:
            data = Path(name).read_bytes()
        except OSError as exc:
            print(f"convert: cannot read {name}: {exc.strerror or exc}", file=sys.stderr)
            return 2
        lines, count = convert(data)
        failed += count
        if directory is None:
            target = stdout or sys.stdout.buffer
            _write(target, lines)
            target.flush()
        else:
            with (directory / Path(name).name).open("wb") as handle:
                _write(handle, lines)
    return 1 if failed else 0
