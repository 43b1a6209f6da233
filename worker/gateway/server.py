"""`python -m worker gateway`: settings, logging, the topic tail, the HTTP API, probes and metrics, the drain."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import time

from aiohttp import web

from worker._heap import collect_cycles, freeze_heap
from worker.cli import quiet_client_logs, readable_settings, settings_from_args, settings_parser
from worker.client import reach_brokers
from worker.errors import ConfigError
from worker.gateway.api import GatewayApi
from worker.gateway.directory import RunDirectory
from worker.gateway.hub import Hub
from worker.gateway.keys import check_keys, read_key
from worker.gateway.metrics import GatewayMetrics
from worker.gateway.reader import HistoryReader, TopicTail
from worker.gateway.routing import Owners, PeerKey, Router
from worker.gateway.settings import GatewaySettings
from worker.gateway.streams import RunStreams
from worker.gateway.thread_streams import ThreadStreams
from worker.gateway.threads import ThreadIndex
from worker.gateway.tokens import TokenCheck, mint_jwt
from worker.ops.health import HealthServer
from worker.ops.loop import LoopMonitor

__all__ = ["main_gateway"]

_log = logging.getLogger("worker.gateway")
_LIVENESS_S = 60.0
_SWEEP_S = 1.0


class _Probes:
    """The gateway's probes: live while the tail's loop beats; ready only while the API listens, the display topic
    was read and no drain has begun."""

    def __init__(self, tail: TopicTail, api: GatewayApi, listening: asyncio.Event) -> None:
        self._tail = tail
        self._api = api
        self._listening = listening

    def live(self) -> tuple[bool, str]:
        alive = time.monotonic() - self._tail.last_beat < _LIVENESS_S
        return alive, "live" if alive else "tail loop stalled"

    def ready(self) -> tuple[bool, str]:
        if self._api.draining:
            return False, "draining"
        if not self._tail.ready:
            return False, "waiting for the gateway group's assignment, or reading its display partitions"
        if not self._listening.is_set():
            return False, "not listening yet"
        return True, "ready"


async def _site(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, handle_signals=False, access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=4096)
    await site.start()
    return runner, int(runner.addresses[0][1]) if runner.addresses else port


async def _sweep(hub: Hub, directory: RunDirectory, metrics: GatewayMetrics, stop: asyncio.Event, *,
                 owners: Owners, router: Router, tail: TopicTail, threads: ThreadIndex | None) -> None:  # fmt: skip
    while not stop.is_set():
        if threads is not None:
            metrics.thread_index_runs.set(threads.runs)
        hub.sweep()
        metrics.behind.set(await tail.behind())
        metrics.relays.set(router.relays_open)
        metrics.partitions.labels(state="serving").set(owners.serving)
        metrics.partitions.labels(state="loading").set(len(owners.mine) - owners.serving)
        metrics.topic_partitions.set(owners.partitions)
        metrics.tracked_runs.set(len(hub))
        metrics.indexed_runs.set(len(directory))
        metrics.cache_bytes.set(directory.cached_bytes)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), _SWEEP_S)


async def _serve(settings: GatewaySettings) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    tokens = None if settings.insecure_no_auth else TokenCheck.from_settings(settings)
    peer_key = settings.peer_key_file or settings.auth_key_file
    peers = PeerKey(read_key(peer_key) if peer_key else None)
    if peer_key is None and not settings.insecure_no_auth:
        _log.warning("requests forwarded between gateway replicas are not signed: set peer_key_file (a key shared "
                     "by the replicas) so that only a replica can mark a request as forwarded")  # fmt: skip
    if tokens is None:
        _log.warning("INSECURE: --insecure-no-auth serves every run to anyone who can reach port %d; never use it "
                     "on a shared network", settings.http_port)
    metrics = GatewayMetrics()
    directory = RunDirectory(settings.max_indexed_runs, settings.display_cache_bytes)
    hub = Hub(max_runs=settings.max_tracked_runs, max_recent=settings.recent_events_per_run,
              window_s=settings.recent_window_ms / 1000, queue_events=settings.connection_queue_events)
    owners = Owners(settings.peer_url)
    index = ThreadIndex(settings.max_thread_runs, on_notice=metrics.thread_notice.observe) \
        if settings.thread_index_topic else None  # fmt: skip
    tail = TopicTail(settings, hub, directory, owners, threads=index, on_batch=metrics.records.inc)
    history = HistoryReader(settings, settings.history_readers)
    streams = RunStreams(owners, hub, directory, history, metrics, keepalive_s=settings.keepalive_ms / 1000,
                         backfill_events=settings.recent_events_per_run)  # fmt: skip
    router = Router(owners, peers, metrics, wait_s=settings.forward_wait_ms / 1000,
                    retry_after_s=settings.retry_after_s, relay_bound=settings.recent_events_per_run,
                    queue_events=settings.connection_queue_events)  # fmt: skip
    threads = ThreadStreams(index, metrics, keepalive_s=settings.keepalive_ms / 1000) if index is not None else None
    api = GatewayApi(settings, streams, metrics, tokens, router, threads=threads)
    probes = None
    listening = asyncio.Event()
    if settings.metrics_port:
        probes = HealthServer(metrics.render, _Probes(tail, api, listening), settings.metrics_host,
                              settings.metrics_port)  # fmt: skip
        await probes.start()
        _log.info("metrics and probes on port %d", probes.port)
    try:
        refused = metrics.authentication_failures
        if await reach_brokers(settings, stop, tail.beat, on_refusal=lambda cause: refused.labels(cause).inc()) \
                is None or not await tail.start(stop):  # fmt: skip
            return 0
        await history.start()
        await router.start()
    except BaseException:
        if probes is not None:
            await probes.stop()
        raise
    tasks = [asyncio.create_task(tail.run(stop)),
             asyncio.create_task(_sweep(hub, directory, metrics, stop, owners=owners, router=router, tail=tail,
                                        threads=index)),
             asyncio.create_task(LoopMonitor(metrics.loop, settings.stall_warning_ms / 1000).run(stop)),
             asyncio.create_task(collect_cycles(stop))]  # fmt: skip
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait([stopping, asyncio.create_task(tail.read.wait())], return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()  # listen only once the run directory is read: before, a known run could be answered 404
    # What is loaded by now (the modules, the run directory) is frozen and collections are rare: a default-tuned
    # collector scans the whole heap every few seconds, and every stream waits for it.
    freeze_heap()
    runner, port = await _site(api.application(), settings.http_host, settings.http_port)
    listening.set()
    _log.info("gateway serving runs on port %d as %s", port, owners.url,
              extra={"output_topic": settings.output_topic, "display_topic": settings.display_topic,
                     "gateway_group_id": settings.group})  # fmt: skip
    try:
        await stop.wait()
        _log.info("draining %d streams", api.connections)
        await api.drain(settings.drain_timeout_ms / 1000)
    finally:
        await runner.cleanup()
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await router.close()
        await history.stop()
        await tail.stop()
        if tokens is not None:
            await tokens.close()
        if probes is not None:
            await probes.stop()
    _log.info("gateway stopped cleanly")
    return 0


def _mint(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker gateway token",
                                     description="Print an access token (an HS256 JWT) for one run or one thread.")
    parser.add_argument("--auth-key-file", required=True, help="the file holding one of the gateway's HMAC keys")
    scope = parser.add_mutually_exclusive_group(required=True)
    scope.add_argument("--run-id", help="grant this run")
    scope.add_argument("--thread-id", help="grant every run of this thread")
    parser.add_argument("--ttl", type=int, default=3600, help="lifetime in seconds (default 3600)")
    parser.add_argument("--kid", help="the key's name (its file name in auth_keys_dir); none for auth_key_file")
    parser.add_argument("--audience", help="the gateway's auth_audience, when it has one")
    parser.add_argument("--issuer", help="the gateway's auth_issuer, when it has one")
    args = parser.parse_args(argv)
    try:
        key = read_key(args.auth_key_file)
        token = mint_jwt(key, "run" if args.run_id else "thread", args.run_id or args.thread_id, args.ttl,
                         kid=args.kid, audience=args.audience, issuer=args.issuer)  # fmt: skip
    except ConfigError as exc:
        print(f"worker gateway token: {exc}", file=sys.stderr)
        return 2
    print(token)
    return 0


def _check(argv: list[str]) -> int:
    """`python -m worker gateway check`: exit status 0 when every check passed, 1 when one failed, 2 for settings
    that cannot work."""
    from worker.tools.check import Check, add_check_flags, check_gateway, print_checks  # noqa: PLC0415

    parser = settings_parser(GatewaySettings, argparse.ArgumentParser(
        prog="python -m worker gateway check",
        description="Check, changing nothing, that the gateway may read its topics and that they fit together.",
    ))  # fmt: skip
    add_check_flags(parser)
    args = parser.parse_args(argv)
    settings = readable_settings(args, GatewaySettings, "gateway check")
    if settings is None:
        return 2

    quiet_client_logs()
    rows = asyncio.run(check_gateway(settings, settings.output_topic, settings.display_topic, settings.group,
                                     index_topic=settings.thread_index_topic,
                                     timeout_s=args.timeout_ms / 1000))  # fmt: skip
    keys = asyncio.run(check_keys(settings.auth_key_file, settings.auth_keys_dir, settings.auth_jwks_url))
    return print_checks([*rows, *(Check(what, "pass" if ok else "fail", detail) for what, ok, detail in keys)],
                        args.json)


def main_gateway(argv: list[str] | None = None) -> int:
    """Entry point of `python -m worker gateway` (and `gateway token`); returns the exit status: 2, with one line
    naming what to fix, for settings that cannot work."""
    args_list = list(sys.argv[2:] if argv is None else argv)
    if args_list and args_list[0] == "token":
        return _mint(args_list[1:])
    if args_list and args_list[0] == "check":
        return _check(args_list[1:])
    parser = settings_parser(GatewaySettings, argparse.ArgumentParser(prog="python -m worker gateway"))
    args = parser.parse_args(args_list)
    try:
        settings = settings_from_args(args, GatewaySettings)
    except ConfigError as exc:
        print(f"worker gateway: {exc}", file=sys.stderr)
        return 2
    from worker.ops import configure_logging  # noqa: PLC0415

    configure_logging(settings.log_format, settings.log_level)
    try:
        settings.check_files()
        return asyncio.run(_serve(settings))
    except ConfigError as exc:
        print(f"worker gateway: {exc}", file=sys.stderr)
        return 2
