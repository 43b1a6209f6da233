"""`python -m worker run`: settings from flags and environment, logging, metrics and probes, signals, the run loop."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from typing import Any, TypeVar, overload

from pydantic import SecretStr, ValidationError
from pydantic_settings import BaseSettings

from worker._heap import freeze_heap
from worker._native import describe
from worker._signals import hold_stop_requests
from worker.errors import ConfigError
from worker.settings import Settings, is_secret

__all__ = ["build_parser", "main_run", "settings_from_args"]

_log = logging.getLogger("worker")
_S = TypeVar("_S", bound=BaseSettings)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def build_parser(
    parser: argparse.ArgumentParser | None = None, model: type[BaseSettings] = Settings
) -> argparse.ArgumentParser:
    """One flag per field of `model` (`--source-topic` for `source_topic`); a flag beats `WORKER_SOURCE_TOPIC`.
    A secret (a SecretStr field) gets no flag: a command line is visible to anyone who can list processes."""
    # No abbreviations: `--sasl-password <secret>` must be refused, not taken for `--sasl-password-file`.
    parser = parser or argparse.ArgumentParser(prog="python -m worker run", allow_abbrev=False)
    prefix = str(model.model_config.get("env_prefix", ""))
    for name, info in model.model_fields.items():
        if is_secret(info):
            continue
        default = info.default.value if hasattr(info.default, "value") else info.default
        help_text = f"{info.description} [env {prefix}{name.upper()}; default {default!r}]"
        if info.annotation is bool:
            parser.add_argument(_flag(name), dest=name, action=argparse.BooleanOptionalAction, default=None,
                                help=help_text)
        else:
            parser.add_argument(_flag(name), dest=name, default=None, metavar=name.upper(), help=help_text)
    return parser


@overload
def settings_from_args(args: argparse.Namespace) -> Settings: ...


@overload
def settings_from_args(args: argparse.Namespace, model: type[_S]) -> _S: ...


def settings_from_args(args: argparse.Namespace, model: type[BaseSettings] = Settings) -> BaseSettings:
    """Flags given on the command line override the environment, which overrides the defaults."""
    given: dict[str, Any] = {k: v for k, v in vars(args).items() if k in model.model_fields and v is not None}
    try:
        return model(**given)
    except ValidationError as exc:
        # Inputs are left out: a rejected value may be a password.
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}" for e in exc.errors(include_input=False)
        )
        raise ConfigError(f"invalid settings: {problems}") from None


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
    from worker.kafka import GroupMember  # noqa: PLC0415
    from worker.kafka.startup import reach_brokers  # noqa: PLC0415
    from worker.ops import Health, HealthServer, LoopMonitor, Metrics  # noqa: PLC0415

    metrics = Metrics()
    health = Health()
    monitoring = asyncio.Event()  # set once everything else has stopped
    monitor = asyncio.create_task(LoopMonitor(metrics.loop, settings.stall_warning_ms / 1000).run(monitoring))
    server = HealthServer(metrics, health, settings.metrics_host, settings.metrics_port) \
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
    `early` holds the stop requests received before this was called (`hold_stop_requests`)."""
    args = build_parser(parser).parse_args(argv)
    try:
        settings = settings_from_args(args)
        settings.check_files()
        if settings.processor is not None:
            from worker.stream import load_processor  # noqa: PLC0415 - the conversion core loads only for `run`

            load_processor(settings.processor)
    except ConfigError as exc:
        print(f"worker: {exc}", file=sys.stderr)
        return 2
    if early is None:  # called in-process: stop requests are held from here on
        early = hold_stop_requests()
    from worker.ops import configure_logging  # noqa: PLC0415

    configure_logging(settings.log_format, settings.log_level)
    try:
        return asyncio.run(_serve(settings, early))
    except ConfigError as exc:
        print(f"worker: {exc}", file=sys.stderr)
        return 2
