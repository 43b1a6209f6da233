"""`python -m worker ...` with, every EVERY_S seconds (0: never), a JSON line of what its heap holds: resident memory,
what Python's small-object allocator (pymalloc) and glibc's malloc hold and keep free, the objects of each
garbage-collector generation by type, the buffers of 256 KiB or more by what holds them and, with tracemalloc on,
the traced bytes by allocating line; and every TRIM_S seconds (0: never) glibc's `malloc_trim(0)`, from a thread of
its own (ctypes lets the interpreter run meanwhile), to see what giving free memory back does.

    python -P bench/_heap_trace.py OUT EVERY_S TRACEMALLOC(0|1) TRIM_S -- -m worker run ...

Used by `bench/soak.py --heap`; a dump holds the interpreter (the GIL) for as long as it takes, and tracemalloc
slows every allocation and keeps its own table of them in malloc's heap: a traced process's figures are for finding
what grows, not for its speed or its resident memory.
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import re
import runpy
import sys
import tempfile
import threading
import time
import tracemalloc
from collections import Counter
from pathlib import Path

_TOP = 400  # allocating lines kept per dump
_LARGE = 256 * 1024  # a buffer this large is reported with the type of what holds it


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def _malloc() -> dict[str, int]:
    """glibc's mallinfo2: `arena` bytes of its heaps, `hblkhd` mmapped blocks, `uordblks` in use, `fordblks` free
    but kept."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
        info = libc.mallinfo2()
    except (OSError, AttributeError):
        return {}
    return {name: int(getattr(info, name)) for name in ("arena", "hblkhd", "uordblks", "fordblks")}


def _pymalloc() -> dict[str, int]:
    """pymalloc's arenas (bytes), the bytes of its allocated blocks, of its free blocks in used pools, and of its
    unused pools, from `sys._debugmallocstats` (which writes to the C stderr)."""
    saved = os.dup(2)
    with tempfile.TemporaryFile() as out:
        os.dup2(out.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        text = out.read().decode(errors="replace")

    def figure(pattern: str) -> int:
        match = re.search(pattern + r"\s*=\s*([\d,]+)", text)
        return int(match.group(1).replace(",", "")) if match else 0

    return {"arenas": figure(r"arenas \* \d+ bytes/arena"), "allocated": figure(r"# bytes in allocated blocks"),
            "available": figure(r"# bytes in available blocks"), "unused_pools": figure(r"unused pools \* \d+ bytes")}


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _large() -> dict[str, list[int]]:
    """Buffers of `_LARGE` bytes or more held by a collector-tracked object: count and bytes by holder."""
    holders: Counter[str] = Counter()
    held: Counter[str] = Counter()
    for holder in gc.get_objects():
        for referent in gc.get_referents(holder):
            if isinstance(referent, bytes | bytearray) and len(referent) >= _LARGE:
                name = type(holder).__qualname__
                if isinstance(holder, dict | list | tuple):
                    name += " in " + "/".join(sorted({type(o).__qualname__ for o in gc.get_referrers(holder)}))
                holders[name] += 1
                held[name] += len(referent)
    return {name: [holders[name], held[name]] for name in holders}


def _dump(out: Path, started: float) -> None:
    generations = []
    for generation in range(3):
        kinds = Counter(type(o).__name__ for o in gc.get_objects(generation))
        generations.append({"objects": sum(kinds.values()), "types": dict(kinds.most_common(40))})
    record: dict[str, object] = {
        "t": round(time.monotonic() - started, 1), "rss": _rss(), "malloc": _malloc(), "pymalloc": _pymalloc(),
        "gc_count": gc.get_count(), "gc_frozen": gc.get_freeze_count(), "generations": generations,
        "large": _large(),
    }
    if tracemalloc.is_tracing():
        record["traced"] = tracemalloc.get_traced_memory()[0]
        lines = tracemalloc.take_snapshot().statistics("lineno")
        record["lines"] = [[f"{s.traceback[0].filename}:{s.traceback[0].lineno}", s.size, s.count]
                           for s in lines[:_TOP]]  # fmt: skip
    with out.open("a") as f:
        f.write(json.dumps(record) + "\n")


def main() -> None:
    out, every, traced, trim = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3] == "1", float(sys.argv[4])
    args = sys.argv[sys.argv.index("--") + 1 :]
    if args[:1] != ["-m"]:
        raise SystemExit("usage: _heap_trace.py OUT EVERY_S TRACEMALLOC TRIM_S -- -m MODULE ARGS...")
    if traced:
        tracemalloc.start(1)
    started = time.monotonic()

    def dumps() -> None:
        while True:
            time.sleep(every)
            try:
                _dump(out, started)
            except Exception as exc:  # a dump that fails must not end the process
                print(f"heap trace: {exc!r}", file=sys.stderr)

    def trims() -> None:
        libc = ctypes.CDLL("libc.so.6")
        while True:
            time.sleep(trim)
            libc.malloc_trim(0)

    if every:
        threading.Thread(target=dumps, name="heap-trace", daemon=True).start()
    if trim:
        threading.Thread(target=trims, name="heap-trim", daemon=True).start()
    sys.argv = [args[1], *args[2:]]
    runpy.run_module(args[1], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
