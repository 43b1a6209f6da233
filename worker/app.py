"""`python -m worker run`: settings from flags and environment, logging, metrics and probes, signals, the run loop."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, overload

from pydantic import SecretStr, ValidationError
from pydantic_settings import BaseSettings

from worker._heap import freeze_heap
from worker._native import describe
from worker._signals import record_stop_requests
from worker.errors import ConfigError
from worker.settings import Settings, is_secret

if TYPE_CHECKING:
    from worker.kafka.preflight import Check

__all__ = ["add_check_flags", "build_parser", "main_check", "main_index", "main_inspect", "main_run", "print_checks",
           "quiet_client_logs", "settings_from_args"]  # fmt: skip

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
    from worker.client import reach_brokers  # noqa: PLC0415
    from worker.kafka import GroupMember  # noqa: PLC0415
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
    `early` lists the stop requests received before this was called (`record_stop_requests`)."""
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
    if early is None:  # called in-process: stop requests are recorded from here on
        early = record_stop_requests()
    from worker.ops import configure_logging  # noqa: PLC0415

    configure_logging(settings.log_format, settings.log_level)
    try:
        return asyncio.run(_serve(settings, early))
    except ConfigError as exc:
        print(f"worker: {exc}", file=sys.stderr)
        return 2


_MARKS = {"pass": "✓", "fail": "✗", "skip": "-"}


def add_check_flags(parser: argparse.ArgumentParser) -> None:
    """The flags `check` and `gateway check` take beside the settings."""
    parser.add_argument("--json", action="store_true", help="print the checks as one JSON object")
    parser.add_argument("--timeout-ms", type=int, default=30_000, metavar="MS",
                        help="longest wait for the brokers' answers to one check (default 30000)")


def print_checks(rows: Sequence[Check], as_json: bool) -> int:
    """Print the checks, one row each (what, ✓, ✗ or - for not asked, what was found or the problem and its fix),
    or as JSON; returns the exit status: 0 when none failed, else 1."""
    ok = all(row.status != "fail" for row in rows)
    if as_json:
        text = json.dumps({"ok": ok, "checks": [row.as_json() for row in rows]}, ensure_ascii=False, indent=2)
    else:
        width = min(max((len(row.what) for row in rows), default=0), 64)
        lines = [f"{_MARKS[row.status]} {row.what:<{width}}  {row.detail}" for row in rows]
        failed = sum(row.status == "fail" for row in rows)
        lines.append(f"{len(rows)} checks: " + ("all passed" if ok else f"{failed} failed"))
        text = "\n".join(lines)
    sys.stdout.buffer.write(text.encode() + b"\n")
    sys.stdout.flush()
    return 0 if ok else 1


def quiet_client_logs() -> None:
    """Warnings and errors reach standard error, but none of the Kafka client's own: what they say is in the answer
    (a refused handshake's cause is read from them, so they are still made)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handler.addFilter(lambda record: not record.name.startswith("aiokafka"))
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(logging.WARNING)


def _readable_settings(args: argparse.Namespace, command: str) -> Settings | None:
    """`run`'s settings from the parsed flags and the environment, their files readable; None after one line
    naming what to fix."""
    try:
        settings = settings_from_args(args)
        settings.check_files()
    except ConfigError as exc:
        print(f"worker {command}: {exc}", file=sys.stderr)
        return None
    return settings


def main_check(argv: list[str] | None = None) -> int:
    """Entry point of `python -m worker check`: the checks of `worker/kafka/preflight.py` for `run`'s settings;
    exit status 0 when every check passed, 1 when one failed, 2 for settings that cannot work."""
    parser = build_parser(argparse.ArgumentParser(
        prog="python -m worker check", allow_abbrev=False,
        description="Check, changing nothing, that the cluster is ready for these settings of `run`.",
    ))  # fmt: skip
    add_check_flags(parser)
    parser.add_argument("--cgroup-root", default="/sys/fs/cgroup", metavar="DIR",
                        help="where the cgroup file system is mounted: the memory limit is read there "
                        "(default /sys/fs/cgroup)")  # fmt: skip
    args = parser.parse_args(argv)
    settings = _readable_settings(args, "check")
    if settings is None:
        return 2
    from worker.kafka.preflight import check_worker  # noqa: PLC0415 - the Kafka stack loads only for `check`

    quiet_client_logs()
    try:
        rows = asyncio.run(check_worker(settings, cgroup_root=Path(args.cgroup_root), timeout_s=args.timeout_ms / 1000))
    except ConfigError as exc:
        print(f"worker check: {exc}", file=sys.stderr)
        return 2
    return print_checks(rows, args.json)


def main_inspect(argv: list[str] | None = None) -> int:
    """Entry point of `python -m worker inspect`: what the group holds (`worker/kafka/inspection.py`), as text or
    JSON; exit status 0 when it was read, 1 when the brokers could not answer it in time, 2 for settings that cannot
    work."""
    parser = build_parser(argparse.ArgumentParser(
        prog="python -m worker inspect", allow_abbrev=False,
        description="Show, changing nothing, what a group of workers holds: offsets, lag, checkpoints, open runs; "
        "or where one run stands, or one thread's runs.",
    ))  # fmt: skip
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--run", default=None, metavar="ID", help="show where the run with this root run id stands")
    which.add_argument("--thread", default=None, metavar="ID",
                       help="list this thread's runs in start order, as the thread index topic holds them")
    parser.add_argument("--max-runs", type=int, default=20, metavar="N",
                        help="open runs listed per partition, oldest first (default 20)")
    parser.add_argument("--json", action="store_true", help="print one JSON object (docs/inspect.schema.json)")
    parser.add_argument("--timeout-ms", type=int, default=60_000, metavar="MS",
                        help="longest the whole inspection may take (default 60000)")
    args = parser.parse_args(argv)
    settings = _readable_settings(args, "inspect")
    if settings is None:
        return 2
    from worker.client import reach_once  # noqa: PLC0415
    from worker.errors import KafkaWorkerError  # noqa: PLC0415
    from worker.kafka.inspection import inspect_group, inspect_run, inspect_thread  # noqa: PLC0415

    quiet_client_logs()
    timeout_s = args.timeout_ms / 1000

    async def inspect() -> dict[str, Any]:
        await reach_once(settings, timeout_s=timeout_s)
        if args.run is not None:
            return await inspect_run(settings, args.run, timeout_s=timeout_s)
        if args.thread is not None:
            return await inspect_thread(settings, args.thread, timeout_s=timeout_s)
        return await inspect_group(settings, max_runs=args.max_runs, timeout_s=timeout_s)

    try:
        found = asyncio.run(inspect())
    except (ConfigError, KafkaWorkerError, TimeoutError) as exc:
        print(f"worker inspect: {exc}", file=sys.stderr)
        return 1
    if args.json:
        text = json.dumps(found, ensure_ascii=False, indent=2)
    else:
        from worker.ops.inspection import describe_group, describe_run, describe_thread  # noqa: PLC0415

        text = describe_run(found) if args.run is not None else \
            describe_thread(found) if args.thread is not None else describe_group(found)  # fmt: skip
    sys.stdout.buffer.write(text.encode() + b"\n")
    sys.stdout.flush()
    return 0


def main_index(argv: list[str] | None = None) -> int:
    """Entry point of `python -m worker index`: the thread index records missing for the runs the output topic holds,
    written (`worker/kafka/indexing.py`); exit status 0 when done, 1 when the brokers failed it, 2 for settings that
    cannot work."""
    parser = build_parser(argparse.ArgumentParser(
        prog="python -m worker index", allow_abbrev=False,
        description="Write the thread index from the output topic: a start record for every run whose first event "
        "it holds and an end record for every run whose terminal event it holds, where the index lacks them "
        "(runs published before --thread-index-topic was on). A second run writes nothing.",
    ))  # fmt: skip
    parser.add_argument("--dry-run", action="store_true", help="count what would be written, write nothing")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    settings = _readable_settings(args, "index")
    if settings is None:
        return 2
    from worker.client import reach_once  # noqa: PLC0415
    from worker.errors import KafkaWorkerError  # noqa: PLC0415
    from worker.kafka.indexing import backfill_index  # noqa: PLC0415

    quiet_client_logs()

    async def index() -> dict[str, Any]:
        await reach_once(settings, timeout_s=30.0)
        return (await backfill_index(settings, dry_run=args.dry_run)).as_json()

    try:
        done = asyncio.run(index())
    except ConfigError as exc:
        print(f"worker index: {exc}", file=sys.stderr)
        return 2
    except (KafkaWorkerError, TimeoutError) as exc:
        print(f"worker index: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(done))
    else:
        verb = "would write" if args.dry_run else "wrote"
        print(f"{done['runs']} runs on the output topic: {verb} {done['starts_written']} start and "
              f"{done['ends_written']} end records; {done['already_indexed']} were in the index already; "
              f"{done['without_event_0']} runs have no event 0 left (not indexed)")
    return 0
