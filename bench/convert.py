"""Throughput of decode + stream observer + encode_event on the golden corpus, memory per open stream,
and (when /root/refvenv has a13n-stream-protocol) the same throughput for the reference, with the ratio.

Usage: .venv/bin/python bench/convert.py [--corpus DIR] [--repeat N] [--streams N]
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from worker.observe import HarnessAguiStreamObserver, encode_event  # noqa: E402
from worker.wire import decode_item  # noqa: E402

REFERENCE_PYTHON = Path("/root/refvenv/bin/python")

# Runs inside the reference venv: decode each golden line into the reference's HarnessEvent /
# HarnessRunResultEvent (conversion-spec §1a), observe with HarnessAguiStreamObserver(retain_events=False),
# and dump every event with model_dump_json(by_alias=True, exclude_none=True).
REFERENCE_SCRIPT = r'''
import json, sys, time, warnings
from datetime import datetime
from pydantic import TypeAdapter
from pydantic_ai.messages import AgentStreamEvent
from a13n_harness import HarnessEvent, HarnessExtensionEvent, HarnessRunResult, HarnessRunResultEvent
from a13n_harness.state import HarnessState
from a13n_harness.usage import RunUsageSummary
from a13n_harness.result import SafeFailure
from a13n_harness.tools.deferred import DeferredToolRequests
import a13n_harness.toolsets.events, a13n_harness.capabilities.context
from a13n_stream_protocol import HarnessAguiStreamObserver

warnings.simplefilter("ignore")
when = TypeAdapter(datetime)
agent_event = TypeAdapter(AgentStreamEvent)
deferred_adapter = TypeAdapter(DeferredToolRequests)


def decode(line):
    data = json.loads(line)
    at = when.validate_python(data["occurred_at"])
    ids = (data["thread_id"], data["run_id"], data["sequence"], at)
    if "event" in data:
        raw = data["event"]
        event = agent_event.validate_python(raw) if "event_kind" in raw else HarnessExtensionEvent.model_validate(raw)
        return HarnessEvent(*ids, event)
    r = data["result"]
    status = r["status"]
    kept = status in ("completed", "suspended")
    state = HarnessState(schema_version="1", thread_id=data["thread_id"]) if kept else None
    result = HarnessRunResult(
        thread_id=data["thread_id"], run_id=data["run_id"], status=status, output=r.get("output"), state=state,
        usage=RunUsageSummary.model_validate(r["usage"]),
        failure=SafeFailure.model_validate(r["failure"]) if r.get("failure") else None,
        suspend_reason=r.get("suspend_reason"),
        deferred=deferred_adapter.validate_python(r["deferred"]) if r.get("deferred") else None,
    )
    return HarnessRunResultEvent(*ids, result)


def once(runs):
    for lines in runs:
        observer = HarnessAguiStreamObserver(retain_events=False)
        for line in lines:
            try:
                for event in observer.observe(decode(line)):
                    event.model_dump_json(by_alias=True, exclude_none=True)
            except Exception:
                pass


runs = json.loads(sys.stdin.read())
repeat = int(sys.argv[1])
once(runs)
best = float("inf")
for _ in range(repeat):
    start = time.process_time()
    once(runs)
    best = min(best, time.process_time() - start)
print(json.dumps({"items": sum(len(lines) for lines in runs), "seconds": best}))
'''


def load_runs(corpus: Path) -> list[list[bytes]]:
    runs = []
    for path in sorted(corpus.glob("*.jsonl")):
        if ".agui." in path.name or ".display." in path.name:
            continue
        lines = [line for line in path.read_bytes().split(b"\n") if line.strip() and not line.startswith(b"#")]
        runs.append(lines)
    return runs


def once(runs: list[list[bytes]]) -> None:
    for lines in runs:
        observer = HarnessAguiStreamObserver(retain_events=False)
        for line in lines:
            try:
                for event in observer.observe(decode_item(line)):
                    encode_event(event)
            except (ValueError, TypeError):
                pass


def throughput(runs: list[list[bytes]], repeat: int) -> float:
    """Items per CPU-second of the best of `repeat` passes (CPU time and best-of resist a busy machine)."""
    once(runs)
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        once(runs)
        best = min(best, time.process_time() - start)
    return sum(len(lines) for lines in runs) / best


def memory_per_stream(runs: list[list[bytes]], streams: int) -> float:
    """Bytes retained per open stream observer, each fed the first half of a golden run."""
    items = [[decode_item(line) for line in lines[: max(1, len(lines) // 2)]] for lines in runs]
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    observers = []
    for n in range(streams):
        observer = HarnessAguiStreamObserver(retain_events=False)
        for item in items[n % len(items)]:
            with contextlib.suppress(ValueError, TypeError):
                observer.observe(item)
        observers.append(observer)
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return (after - before) / streams


def reference_throughput(runs: list[list[bytes]], repeat: int) -> float | None:
    if not REFERENCE_PYTHON.exists():
        return None
    payload = json.dumps([[line.decode() for line in lines] for lines in runs])
    proc = subprocess.run(
        [str(REFERENCE_PYTHON), "-c", REFERENCE_SCRIPT, str(repeat)],
        input=payload, capture_output=True, text=True, check=False,
    )
    if proc.returncode != 0:
        print(f"reference run failed: {proc.stderr.strip()[-500:]}")
        return None
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return float(result["items"] / result["seconds"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpus", type=Path, default=ROOT / "tests" / "data" / "golden")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--reference-repeat", type=int, default=3)
    parser.add_argument("--streams", type=int, default=1000)
    args = parser.parse_args()
    runs = load_runs(args.corpus)
    total = sum(len(lines) for lines in runs)
    size = sum(len(line) for lines in runs for line in lines)
    print(f"corpus: {len(runs)} runs, {total} items, {size} bytes")
    ours = throughput(runs, args.repeat)
    what = f"decode + stream observer + encode_event, best of {args.repeat} passes, CPU time"
    print(f"worker:    {ours:,.0f} items/s ({what})")
    per_stream = memory_per_stream(runs, args.streams)
    print(f"memory:    {per_stream:,.0f} bytes per open stream observer ({args.streams} streams, mid-run)")
    ref = reference_throughput(runs, args.reference_repeat)
    if ref is None:
        print("reference: not available (/root/refvenv/bin/python with a13n_stream_protocol)")
        return
    print(f"reference: {ref:,.0f} items/s (best of {args.reference_repeat} passes, CPU time)")
    print(f"ratio:     {ours / ref:.1f}x")


if __name__ == "__main__":
    main()
