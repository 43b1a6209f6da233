"""The event-loop monitor: lag measured into its histogram, collections timed by generation, and a turn that
blocks the loop logged once, naming the work noted in progress and the CPU the loop's thread got."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable

import pytest
from prometheus_client import CollectorRegistry

from worker.ops.loop import LoopMetrics, LoopMonitor, working_on


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    got = registry.get_sample_value(name, labels)
    return 0.0 if got is None else got


def _spin(seconds: float) -> None:
    """Hold the loop's thread busy until it has run `seconds` of CPU (longer on a busy host)."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


async def _monitored(block: Callable[[], None], stall_s: float = 0.1) -> CollectorRegistry:
    """Run a monitor, let it tick, run `block` in one turn of the loop, let it tick again."""
    registry = CollectorRegistry()
    stop = asyncio.Event()
    monitor = asyncio.create_task(LoopMonitor(LoopMetrics(registry, "test_"), stall_s).run(stop))
    await asyncio.sleep(0.05)
    block()
    await asyncio.sleep(0.05)
    stop.set()
    await monitor
    return registry


def _stalls(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "worker.loop" and r.levelno == logging.WARNING]


def test_a_blocked_turn_is_measured_and_logged_naming_the_noted_work(caplog: pytest.LogCaptureFixture) -> None:
    def block() -> None:
        with working_on("cutting a checkpoint of %d runs of partition %d", 10_000, 3):
            _spin(0.16)

    with caplog.at_level(logging.WARNING, logger="worker.loop"):
        registry = asyncio.run(_monitored(block))
    # the monitor's timer fell due within its 10 ms period after the block began: it waited at least 150 ms
    assert _value(registry, "test_event_loop_lag_seconds_bucket", le="0.1") < _value(
        registry, "test_event_loop_lag_seconds_count")
    assert _value(registry, "test_event_loop_lag_seconds_sum") >= 0.15
    (stall,) = _stalls(caplog)
    fields = stall.__dict__
    assert fields["work"] == "cutting a checkpoint of 10000 runs of partition 3"
    assert 0.16 <= fields["work_seconds"] < 5
    assert 0.15 <= fields["lag_seconds"] <= fields["wall_seconds"]
    assert fields["cpu_seconds"] >= 0.15  # the loop's thread spun: the process blocked its own loop
    assert "cutting a checkpoint of 10000 runs of partition 3" in stall.getMessage()


def test_a_loop_held_without_cpu_says_so_and_names_no_work(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="worker.loop"):
        asyncio.run(_monitored(lambda: time.sleep(0.15)))
    (stall,) = _stalls(caplog)
    assert stall.__dict__["work"] == "none"
    assert stall.__dict__["gc_generation"] == -1 and "generations" not in stall.getMessage()
    assert stall.__dict__["lag_seconds"] >= 0.14
    assert stall.__dict__["cpu_seconds"] < 0.05  # held, not working: a starved or sleeping thread


def test_short_turns_and_a_threshold_of_zero_log_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="worker.loop"):
        registry = asyncio.run(_monitored(lambda: _spin(0.02), stall_s=1.0))
        unlogged = asyncio.run(_monitored(lambda: _spin(0.15), stall_s=0))
    assert _stalls(caplog) == []
    assert _value(registry, "test_event_loop_lag_seconds_count") >= 5
    assert _value(unlogged, "test_event_loop_lag_seconds_sum") >= 0.14  # measured all the same


def test_collections_are_timed_by_generation_while_the_monitor_runs() -> None:
    callbacks = len(gc.callbacks)
    registry = asyncio.run(_monitored(lambda: (gc.collect(0), gc.collect(2))))
    assert _value(registry, "test_gc_duration_seconds_count", generation="0") >= 1
    assert _value(registry, "test_gc_duration_seconds_count", generation="2") >= 1
    assert _value(registry, "test_gc_duration_seconds_sum", generation="2") > 0
    timed = _value(registry, "test_gc_duration_seconds_count", generation="2")
    gc.collect(2)  # the monitor has stopped: its callback is gone
    assert len(gc.callbacks) == callbacks
    assert _value(registry, "test_gc_duration_seconds_count", generation="2") == timed


def test_a_stall_names_the_oldest_generation_collected_in_it(caplog: pytest.LogCaptureFixture) -> None:
    def block() -> None:
        with working_on("converting records of %s", "t[0]"):
            _spin(0.12)
            gc.collect(1)

    with caplog.at_level(logging.WARNING, logger="worker.loop"):
        asyncio.run(_monitored(block))
    (stall,) = _stalls(caplog)
    assert stall.__dict__["gc_generation"] == 1 and stall.__dict__["gc_seconds"] > 0
    assert "(generations 0 to 1)" in stall.getMessage()
