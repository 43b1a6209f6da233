"""How long the event loop's turns take: a task that wakes every few milliseconds measures how late it ran (the
wait any ready callback had), the garbage collector's pauses are timed, and a turn that blocked the loop longer
than a threshold is logged with the work noted in progress (`working_on`) and the CPU the loop's thread got."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from typing import Any, Final

from prometheus_client import CollectorRegistry, Histogram

__all__ = ["STALL_WARNING_S", "LoopMetrics", "LoopMonitor", "working_on"]

STALL_WARNING_S: Final = 0.1
_TICK_S: Final = 0.01  # the monitor's period: a lag reads at most this much shorter than the turn that caused it
_LAG_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_GC_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
_GENERATIONS: Final = ("0", "1", "2")
_log = logging.getLogger("worker.loop")


class LoopMetrics:
    """The event loop's lag and the garbage collector's pauses by generation (each series there from the start),
    in `registry` under `prefix`."""

    def __init__(self, registry: CollectorRegistry, prefix: str) -> None:
        self.lag_seconds = Histogram(
            f"{prefix}event_loop_lag_seconds",
            "How late the event loop ran a callback that was due: the rest of the turn blocking it then.",
            registry=registry, buckets=_LAG_BUCKETS,
        )  # fmt: skip
        self.gc_seconds = Histogram(
            f"{prefix}gc_duration_seconds", "Pauses of the process for a garbage collection, by generation.",
            ["generation"], registry=registry, buckets=_GC_BUCKETS,
        )  # fmt: skip
        self.gc_by_generation = tuple(self.gc_seconds.labels(generation) for generation in _GENERATIONS)


class _Noted:
    """The longest block noted by `working_on` since the monitor last woke (one per process)."""

    seconds = 0.0
    what: tuple[Any, ...] = ()

    @classmethod
    def take(cls) -> tuple[float, tuple[Any, ...]]:
        """The longest noted block and its description, forgotten from here on."""
        taken = cls.seconds, cls.what
        cls.seconds, cls.what = 0.0, ()
        return taken


class working_on:  # used as a statement: `with working_on("converting %s", where):`
    """Notes a block of work that does not await (one turn of the loop, or part of one) as the work in progress:
    a stall of the loop names the longest such block since the monitor last woke. `what` is a log message and its
    arguments, formatted only when a stall is logged."""

    __slots__ = ("_began", "_what")

    def __init__(self, *what: Any) -> None:
        self._what = what
        self._began = 0.0

    def __enter__(self) -> None:
        self._began = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        took = time.perf_counter() - self._began
        if took > _Noted.seconds:
            _Noted.seconds, _Noted.what = took, self._what


class LoopMonitor:
    """Measures the running loop's lag every `tick_s` into `metrics`, times each garbage collection, and logs a
    WARNING for a lag of `stall_s` or more (0: never) naming the longest noted work, the collections and the CPU
    the loop's thread got in that stretch (far less than the stretch: the host starved the process)."""

    def __init__(self, metrics: LoopMetrics, stall_s: float = STALL_WARNING_S, tick_s: float = _TICK_S) -> None:
        self._metrics = metrics
        self._stall_s = stall_s
        self._tick_s = tick_s
        self._gc_began = 0.0
        self._gc_seconds = 0.0  # collections since the monitor last woke
        self._gc_generation = -1  # the oldest generation collected since then; -1: none

    async def run(self, stop: asyncio.Event) -> None:
        """Measure until `stop` is set."""
        loop = asyncio.get_running_loop()
        gc.callbacks.append(self._on_gc)
        try:
            _Noted.take()
            while not stop.is_set():
                due = loop.time() + self._tick_s
                cpu_before, wall_before = time.thread_time(), time.perf_counter()
                await asyncio.sleep(self._tick_s)
                lag = max(0.0, loop.time() - due)
                self._metrics.lag_seconds.observe(lag)
                noted = _Noted.take()
                gc_s, self._gc_seconds = self._gc_seconds, 0.0
                generation, self._gc_generation = self._gc_generation, -1
                if self._stall_s and lag >= self._stall_s:
                    window = (time.thread_time() - cpu_before, time.perf_counter() - wall_before)
                    self._stalled(lag, noted, (gc_s, generation), window)
        finally:
            gc.callbacks.remove(self._on_gc)

    def _stalled(self, lag: float, noted: tuple[float, tuple[Any, ...]], collected: tuple[float, int],
                 window: tuple[float, float]) -> None:  # fmt: skip
        """`noted`: the longest noted work and its description; `collected`: the collections' time and the oldest
        generation collected (-1: none); `window`: the loop thread's CPU and the wall time since the monitor's
        previous wake."""
        (noted_s, what), (gc_s, generation), (cpu_s, wall_s) = noted, collected, window
        work = (what[0] % what[1:] if len(what) > 1 else str(what[0])) if what else "none"
        _log.warning(
            "event loop blocked %.0f ms (warning from %.0f ms); the longest work noted: %s, %.0f ms; garbage "
            "collection %.0f ms%s; the loop's thread ran %.0f ms of CPU in these %.0f ms",
            lag * 1000, self._stall_s * 1000, work, noted_s * 1000, gc_s * 1000,
            f" (generations 0 to {generation})" if generation >= 0 else "", cpu_s * 1000, wall_s * 1000,
            extra={"lag_seconds": round(lag, 4), "work": work, "work_seconds": round(noted_s, 4),
                   "gc_seconds": round(gc_s, 4), "gc_generation": generation, "cpu_seconds": round(cpu_s, 4),
                   "wall_seconds": round(wall_s, 4)},
        )  # fmt: skip

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_began = time.perf_counter()
            return
        took = time.perf_counter() - self._gc_began
        generation = min(info.get("generation", 2), 2)
        self._gc_seconds += took
        self._gc_generation = max(self._gc_generation, generation)
        self._metrics.gc_by_generation[generation].observe(took)
