"""`python -m worker run`: settings from flags and environment, logging, metrics and probes, signals, the run loop."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from typing import Any

from pydantic import SecretStr
from pydantic_settings import BaseSettings

from worker._heap import freeze_heap
from worker._native import describe
from worker._signals import record_stop_requests
from worker.cli import settings_from_args, settings_parser
from worker.errors import ConfigError
from worker.settings import Settings

__all__ = ["main_run", "run_parser"]

_log = logging.getLogger("worker")


def run_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    """The flags of `python -m worker run`: one per setting but the secrets."""
    return settings_parser(Settings, parser or argparse.ArgumentParser(prog="python -m worker run"))


def _safe(settings: BaseSettings) -> dict[str, Any]:
    return {k: ("***" if isinstance(v, SecretStr) else v) for k, v in settings.model_dump().items()}


def _check_memory(settings: Settings, partitions: int | None) -> None:
    """Warn, with the numbers, when the settings' worst case does not fit the memory limit the worker runs under."""
    from worker.ops.capacity import WorstCase, memory_limit  # noqa: PLC0415

    limit = memory_limit()
    if limit is None or not partitions:
        return
    worst = WorstCase(partitions, settings.max_open_streams, settings.closed_stream_memory,
                      display=bool(settings.display_topic))
    warning = worst.warning(limit)
    if warning is not None:
        _log.warning(warning, extra={"memory_limit_bytes": limit, "worst_case_bytes": worst.total})


async def _serve(settings: Settings, early: list[int]) -> int:
    # The Kafka stack loads here, after the early signal handler is in place (see main_run).
    from worker.client import reach_brokers  # noqa: PLC0415
    from worker.live import GroupMember  # noqa: PLC0415
    from worker.ops import Health, HealthServer, LoopMonitor, Metrics  # noqa: PLC0415

    metrics = Metrics()
    health = Health()
    monitoring = asyncio.Event()  # set once everything else has stopped
    monitor = asyncio.create_task(LoopMonitor(metrics.loop, settings.stall_warning_ms / 1000).run(monitoring))
    server = HealthServer(metrics.render, health, settings.metrics_host, settings.metrics_port) \
        if settings.metrics_port else None
    if server is not None:
        await server.start()
        _log.info("metrics and probes on port %d", server.port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if early:
        stop.set()
    member = GroupMember(settings, metrics, health)
    # What is loaded by now lives as long as the process: frozen, no full collection scans it again (with the
    # conversion core and the Kafka client loaded, one took 30 ms, a stall of every partition).
    freeze_heap()
    _log.info("worker starting", extra={"settings": _safe(settings), "conversion_core": describe()})
    try:
        refused = metrics.authentication_failures_total
        partitions = await reach_brokers(settings, stop, health.beat, topics=(settings.source_topic,),
                                         on_refusal=lambda cause: refused.labels(cause).inc())  # fmt: skip
        if partitions is not None:
            _check_memory(settings, partitions.get(settings.source_topic))
            await member.run(stop)
    finally:
        if server is not None:
            await server.stop()
        monitoring.set()
        await monitor
    _log.info("worker stopped cleanly")
    return 0


def main_run(
    argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None, *, early: list[int] | None = None
) -> int:
    """Entry point of `python -m worker run`; returns the process exit status: 2, with one line naming what to
    fix, for settings, a processor or topics that cannot work (at start, or once a topic check finds so).
    `early` lists the stop requests received before this was called (`record_stop_requests`)."""
    args = run_parser(parser).parse_args(argv)
    try:
        settings = settings_from_args(args, Settings)
        settings.check_files()
        if settings.processor is not None:
            from worker.stream import load_processor  # noqa: PLC0415 - the conversion core loads only for `run`

            load_processor(settings.processor)
    except ConfigError as exc:
        print(f"worker: {exc}", file=sys.stderr)
        return 2
    if early is None:  # called in-process: stop requests are recorded from here on
        early = record_stop_requests()
    from worker.ops import configure_logging  # noqa: PLC0415

    configure_logging(settings.log_format, settings.log_level)
    try:
        return asyncio.run(_serve(settings, early))
    except ConfigError as exc:
        print(f"worker: {exc}", file=sys.stderr)
        return 2
