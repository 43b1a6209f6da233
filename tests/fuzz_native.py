"""Differential fuzzing of the native per-record path through its Python API (atheris, guided by the coverage of
the reference decoder and observers): a record the native decoder accepts decodes to the item `decode_item` makes,
one it refuses goes to the reference (which raises), and the item converts to the same frames, or the same refusal,
in both builds' stream and plain observers, fed twice. A native panic surfaces as NativePanicError and fails it.

    .venv/bin/python -P tests/fuzz_native.py --seconds 30    # scripts/test.sh runs it so; exit 1 on a difference
    .venv/bin/python -P tests/fuzz_native.py crash-<sha1>    # run one input again

Seeded with every line of the golden sources; a failing input is written to the working directory (crash-<sha1>,
or where -artifact_prefix says). -P: the installed package, not the checkout's worker/.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import atheris

with atheris.instrument_imports(include=["worker.wire", "worker.observe"]):
    from worker.errors import DecodeError
    from worker.observe import HarnessAguiObserver, HarnessAguiStreamObserver
    from worker.wire import decode_item, timestamp_ms

from worker import _native_core as native  # type: ignore[attr-defined]

sys.path.append(str(Path(__file__).resolve().parent.parent))  # for the tests' support: `worker` stays installed
from tests.observe._parity import observed_by_both

GOLDEN = Path(__file__).resolve().parent / "data" / "golden"


def _dump(item: Any) -> str:
    return json.dumps(item.dump())


def check(record: bytes) -> None:
    """Both builds read and convert `record` alike (AssertionError naming the difference otherwise)."""
    ours = native.decode(record)
    try:
        reference = decode_item(record)
    except (DecodeError, RecursionError):
        assert ours is None, f"the native decoder accepts what the reference refuses: {record[:200]!r}"
        return
    stamp = timestamp_ms(reference)
    imported = native.import_item(reference, stamp)
    if ours is not None:
        assert _dump(ours) == _dump(imported), f"the decoders read differently: {record[:200]!r}"
    item = ours if ours is not None else imported
    for stream in (True, False):
        theirs = (HarnessAguiStreamObserver if stream else HarnessAguiObserver)(retain_events=False)
        mine = native.Observer(stream)
        for _ in range(2):
            expected, got = observed_by_both(theirs, reference, mine, item)
            assert got == expected, f"the observers differ on {record[:200]!r}"


def _seed(directory: Path) -> None:
    sources = sorted(p for p in GOLDEN.rglob("*.jsonl") if ".agui." not in p.name and ".display." not in p.name)
    for i, line in enumerate(ln for path in sources for ln in path.read_bytes().split(b"\n") if ln.strip()):
        (directory / f"golden-{i:05d}").write_bytes(line)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -P tests/fuzz_native.py", description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=30)
    args, rest = parser.parse_known_args()
    with tempfile.TemporaryDirectory(prefix="harness-agui-fuzz-") as corpus:
        _seed(Path(corpus))
        argv = [sys.argv[0], *rest, f"-max_total_time={args.seconds}", "-rss_limit_mb=4096", "-print_final_stats=1",
                corpus]  # fmt: skip
        atheris.Setup(argv, check)
        atheris.Fuzz()


if __name__ == "__main__":
    main()
