"""Throughput of the worker's conversion core (`default_core()`: decode, stream observer, encoded events) on the
golden corpus, memory per open stream, the same throughput from the pure-Python reference core when the core is
native, and (when /root/refvenv has
a13n-stream-protocol) the same throughput for the reference, with the ratios.

Usage: .venv/bin/python bench/convert.py [--corpus DIR] [--repeat N] [--streams N]
Passes alternate between the two pipelines; each side reports its best pass in CPU time.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # for bench and devtools: `worker` stays the installed package

from worker._native import PURE_ENV, describe, native  # noqa: E402
from worker.stream import StreamCore, default_core  # noqa: E402

CORE = default_core()

REFERENCE_PYTHON = Path("/root/refvenv/bin/python")

# The sidecar protocol: after the corpus line, one warm-up pass and "ready", then one timed pass per "go" line,
# so the caller can interleave the sidecar's passes with its own.
_SERVE = r'''
once(runs)
print("ready", flush=True)
for command in sys.stdin:
    start = time.process_time()
    once(runs)
    print(json.dumps({"items": sum(len(lines) for lines in runs), "seconds": time.process_time() - start}), flush=True)
'''
# This bench's own pipeline from the installation's pure-Python sources (HARNESS_AGUI_PURE=1), beside the native one.
PURE_SCRIPT = r'''
import json, sys, time
sys.path.append(sys.argv[1])
import worker._native
from bench.convert import once
if worker._native.native():
    raise SystemExit("the pure sidecar runs the native module: " + worker._native.describe())
runs = [[line.encode() for line in lines] for lines in json.loads(sys.stdin.readline())]
''' + _SERVE

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


runs = json.loads(sys.stdin.readline())
''' + _SERVE


def load_runs(corpus: Path) -> list[list[bytes]]:
    runs = []
    for path in sorted(corpus.glob("*.jsonl")):
        if ".agui." in path.name or ".display." in path.name:
            continue
        lines = [line for line in path.read_bytes().split(b"\n") if line.strip() and not line.startswith(b"#")]
        runs.append(lines)
    return runs


def _observe(core: StreamCore, observer: Any, line: bytes) -> list[bytes]:
    item = core.decode(line)
    if core.observe_records is not None:  # values only: no records, no limit
        values = core.observe_records(observer, item, (b"", 0, 0), 0, False, None, True)[2]
        return values if values is not None else []
    return [core.encode_event(event) for event in observer.observe(item)]


def once(runs: list[list[bytes]]) -> None:
    for lines in runs:
        observer = CORE.new_observer()
        for line in lines:
            try:  # noqa: SIM105  (a suppress context would cost the timed loop a call per item)
                _observe(CORE, observer, line)
            except (ValueError, TypeError):
                pass


def one_pass(runs: list[list[bytes]]) -> float:
    """CPU seconds of one pass over the corpus."""
    start = time.process_time()
    once(runs)
    return time.process_time() - start


def _resident() -> int:
    """This process's resident bytes (native allocations included, which tracemalloc does not see)."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory_per_stream(runs: list[list[bytes]], streams: int) -> float:
    """Bytes retained per open stream observer, each fed the first half of a golden run: Python objects traced, and
    the growth of the resident set beyond them (the native observers' state)."""
    halves = [lines[: max(1, len(lines) // 2)] for lines in runs]
    gc.collect()
    tracemalloc.start()
    before, resident = tracemalloc.get_traced_memory()[0], _resident()
    observers = []
    for n in range(streams):
        observer = CORE.new_observer()
        for line in halves[n % len(halves)]:
            with contextlib.suppress(ValueError, TypeError):
                _observe(CORE, observer, line)
        observers.append(observer)
    gc.collect()
    traced = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    grown = _resident() - resident
    return max(traced, grown) / streams


class Sidecar:
    """A pipeline in a long-lived subprocess, timed one pass at a time."""

    def __init__(self, runs: list[list[bytes]], command: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=None if env is None else {**os.environ, **env},
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps([[line.decode() for line in lines] for lines in runs]) + "\n")
        self.proc.stdin.flush()
        ready = self.proc.stdout.readline().strip()
        if ready != "ready":
            detail = self.proc.stderr.read()[-500:] if self.proc.stderr else ""
            raise RuntimeError(f"{command[0]} did not start: {ready!r} {detail}")

    def one_pass(self) -> float:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return float(json.loads(self.proc.stdout.readline())["seconds"])

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--corpus", type=Path, default=ROOT / "tests" / "data" / "golden")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--streams", type=int, default=1000)
    args = parser.parse_args()
    runs = load_runs(args.corpus)
    total = sum(len(lines) for lines in runs)
    size = sum(len(line) for lines in runs for line in lines)
    print(f"corpus: {len(runs)} runs, {total} items, {size} bytes")
    print(f"core:      {describe()}")
    reference = pure = None
    if REFERENCE_PYTHON.exists():
        try:
            reference = Sidecar(runs, [str(REFERENCE_PYTHON), "-c", REFERENCE_SCRIPT])
        except (OSError, RuntimeError) as exc:
            print(f"reference unavailable: {exc}")
    if native():
        pure = Sidecar(runs, [sys.executable, "-c", PURE_SCRIPT, str(ROOT)], env={PURE_ENV: "1"})
    once(runs)
    ours: list[float] = []
    theirs: list[float] = []
    sources: list[float] = []
    for _ in range(args.repeat):  # interleaved, so load from other processes hits every side alike
        ours.append(one_pass(runs))
        if reference is not None:
            theirs.append(reference.one_pass())
        if pure is not None:
            sources.append(pure.one_pass())
    rate = total / min(ours)
    what = f"default_core(): decode, stream observer, encoded events; best of {args.repeat} passes, CPU time"
    print(f"worker:    {rate:,.0f} items/s ({what})")
    if pure is not None:
        pure.close()
        pure_rate = total / min(sources)
        print(f"pure:      {pure_rate:,.0f} items/s, the pure-Python reference core (same passes, interleaved): "
              f"native runs {rate / pure_rate:.2f}x")
    per_stream = memory_per_stream(runs, args.streams)
    print(f"memory:    {per_stream:,.0f} bytes per open stream observer ({args.streams} streams, mid-run)")
    if reference is None:
        print("reference: not available (/root/refvenv/bin/python with a13n_stream_protocol)")
        return
    reference.close()
    ref_rate = total / min(theirs)
    print(f"reference: {ref_rate:,.0f} items/s (same passes, interleaved)")
    print(f"ratio:     {rate / ref_rate:.1f}x")


if __name__ == "__main__":
    main()
