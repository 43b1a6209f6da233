"""`python -m worker convert`: stdin/stdout, files to an output directory, error lines and exit status."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "data" / "golden"
PYTHON = str(ROOT / ".venv" / "bin" / "python") if (ROOT / ".venv" / "bin" / "python").exists() else sys.executable


def _run(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([PYTHON, "-m", "worker", "convert", *args], input=stdin, capture_output=True,
                          cwd=ROOT, check=False, timeout=120)


def _without_message(line: bytes) -> object:
    value = json.loads(line) if line else None
    if isinstance(value, dict) and "error" in value:
        assert value["error"]["message"].startswith("Harness Thread correlation changed within one observer")
        del value["error"]["message"]
    return value


def test_stdin_to_stdout_defaults_to_the_stream_observer() -> None:
    source = (GOLDEN / "c01_child_completed.jsonl").read_bytes()
    proc = _run(stdin=source)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (GOLDEN / "c01_child_completed.stream.agui.jsonl").read_bytes()


def test_files_write_one_output_per_input_and_plain_mode_reports_errors(tmp_path: Path) -> None:
    names = ["s01_hello.jsonl", "c02_child_failed.jsonl"]
    proc = _run("--observer", "plain", "--out-dir", str(tmp_path), *(str(GOLDEN / n) for n in names))
    assert proc.returncode == 1  # the child items of c02 are correlation errors for the plain observer
    for name in names:
        got = (tmp_path / name).read_bytes().split(b"\n")
        expected = (GOLDEN / name.replace(".jsonl", ".agui.jsonl")).read_bytes().split(b"\n")
        assert [_without_message(g) for g in got] == [_without_message(e) for e in expected]


def test_error_lines_stand_in_for_failing_lines_and_count_every_line() -> None:
    good = (GOLDEN / "s01_hello.jsonl").read_bytes().split(b"\n")
    source = b"\n".join([b"# a comment", good[0], b"", b"{broken", b"[1]", good[1], b"   "])
    proc = _run(stdin=source)
    assert proc.returncode == 1
    lines = [json.loads(line) for line in proc.stdout.split(b"\n") if line]
    errors = [line["error"] for line in lines if "error" in line]
    assert [(e["src"], e["type"]) for e in errors] == [(3, "DecodeError"), (4, "DecodeError")]
    assert errors[0]["message"].startswith("$: not valid JSON")
    assert errors[1]["message"] == "$: expected a JSON object, got array"
    assert lines[0]["type"] == "RUN_STARTED" and "error" not in lines[-1]
    assert lines.index({"error": errors[0]}) == 1


def test_observer_errors_are_reported_with_their_class() -> None:
    proc = _run(str(GOLDEN / "s07_errors.jsonl"))
    assert proc.returncode == 1
    errors = [json.loads(line)["error"] for line in proc.stdout.split(b"\n") if line.startswith(b'{"error"')]
    assert {e["type"] for e in errors} == {"AguiObservationError"}
    assert [e["src"] for e in errors] == [3, 4, 5, 8]


def test_clean_files_exit_zero_and_bad_arguments_exit_two(tmp_path: Path) -> None:
    proc = _run("--out-dir", str(tmp_path), str(GOLDEN / "examples" / "ex1_text.jsonl"))
    assert proc.returncode == 0 and proc.stdout == b""
    assert (tmp_path / "ex1_text.jsonl").read_bytes().count(b"\n") == 8
    assert _run("--observer", "fancy").returncode == 2
    missing = _run(str(tmp_path / "absent.jsonl"))
    assert missing.returncode == 2 and b"cannot read" in missing.stderr


def test_display_mode_matches_the_display_corpus() -> None:
    display = ROOT / "tests" / "data" / "golden"
    proc = _run("--display", str(display / "c01_child_completed.jsonl"))
    expected = (display / "c01_child_completed.display.jsonl").read_bytes().split(b"\n")
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(x) for x in proc.stdout.split(b"\n") if x] == [json.loads(x) for x in expected if x]
