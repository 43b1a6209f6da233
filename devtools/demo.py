"""The demo: a local broker, the worker, the gateway, a sample producer, and the AG-UI events printed once committed.

Starts a single-node Kafka (unless `--bootstrap-servers` names one), creates the source, output, display and
dead-letter topics, runs `python -P -m worker run` and `python -P -m worker gateway` (the installed package) as
subprocesses (the gateway without access control, on 127.0.0.1), produces sample runs, prints the viewer page's
URL of the first run, and prints each committed output record as `<agui-event-id>  <type>  <value>`. Ctrl-C (or
SIGTERM, or `--duration` seconds of pipeline time) stops the producer, then the worker (SIGTERM, waited for), then
the broker. It exits 0 when at least one committed event was printed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import logging
import shutil
import signal
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import TextIO

from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient

from devtools.kafka_cluster import KafkaCluster, create_topic_on, free_port
from devtools.sample_runs import produce

__all__ = ["format_event", "main", "run_demo"]

_ROOT = Path(__file__).resolve().parent.parent
_PR_SET_PDEATHSIG = 1
_VALUE_CHARS = 160


def _say(message: str) -> None:
    print(f"[demo] {message}", file=sys.stderr, flush=True)


def format_event(headers: list[tuple[str, bytes]] | tuple[tuple[str, bytes], ...], value: bytes | None) -> str:
    """`<agui-event-id>  <type>  <value>`: id and type from the record's headers, value cut to 160 chars."""
    h = {k: v.decode("utf-8", "replace") for k, v in headers}
    text = (value or b"").decode("utf-8", "replace").replace("\n", "\\n")
    if len(text) > _VALUE_CHARS:
        text = text[: _VALUE_CHARS - 1] + "…"
    return f"{h.get('agui-event-id', '?')}  {h.get('agui-type', '?')}  {text}"



def _term_with_parent() -> None:
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


async def _create_topics(bootstrap: str, names: list[str], partitions: int) -> None:
    """Create the topics that do not exist yet and wait until each partition has a leader."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
    finally:
        await admin.close()
    for name in names:
        if name not in existing:
            await asyncio.to_thread(create_topic_on, bootstrap, name, partitions, 1)


async def _topic_made(bootstrap: str, topic: str, maker: str, stop: asyncio.Event) -> bool:
    """Whether `topic` exists before `stop`: the brokers' topic list is asked (a consumer subscribed to a topic not
    made yet has the client complain on every metadata refresh), and a wait is said once."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15000)
    await admin.start()
    said = False
    try:
        while not stop.is_set():
            if topic in await admin.list_topics():
                return True
            if not said:
                _say(f"waiting for {maker} to create {topic}")
                said = True
            await asyncio.sleep(0.5)
        return False
    finally:
        await admin.close()


async def _print_committed(
    bootstrap: str, topic: str, out: TextIO, counts: Counter[str], *,
    ready: asyncio.Event, stop: asyncio.Event, from_start: bool,
) -> None:  # fmt: skip
    """Print each committed record of `topic` (from the start, or from now) until `stop` and a final drain."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False,
        auto_offset_reset="earliest" if from_start else "latest", group_id=None, client_id="harness-demo-printer",
    )  # fmt: skip
    await consumer.start()
    try:
        for _ in range(100):  # the group-less subscription assigns every partition once metadata arrives
            if consumer.assignment():
                break
            await asyncio.sleep(0.1)
        for tp in consumer.assignment():
            await consumer.position(tp)  # resolve "latest" now, before anything is produced
        ready.set()
        idle = 0
        while not stop.is_set() or idle < 3:
            batches = await consumer.getmany(timeout_ms=300)
            idle = 0 if batches else idle + 1
            for recs in batches.values():
                for rec in recs:
                    line = format_event(rec.headers, rec.value)
                    counts[line.split("  ", 2)[1]] += 1
                    print(line, file=out, flush=True)
    finally:
        await consumer.stop()


async def _stop_worker(proc: asyncio.subprocess.Process, grace_s: float) -> int:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), grace_s)
        except TimeoutError:
            _say(f"worker did not stop within {grace_s:.0f} s: killing it")
            proc.kill()
            await proc.wait()
    return int(proc.returncode or 0)


# ---- the gateway (begin; owned by the gateway) ----
async def _start_gateway(
    bootstrap: str, args: argparse.Namespace, logdir: Path
) -> tuple[asyncio.subprocess.Process, int]:
    """`python -m worker gateway` on 127.0.0.1, without access control (a laptop demo)."""
    port = free_port()
    command = [
        sys.executable, "-P", "-m", "worker", "gateway", "--bootstrap-servers", bootstrap,
        "--output-topic", args.output_topic, "--display-topic", args.display_topic, "--insecure-no-auth",
        "--http-host", "127.0.0.1", "--http-port", str(port), "--metrics-port", "0", "--log-format", "text",
    ]  # fmt: skip
    with (logdir / "gateway.log").open("wb") as log:
        gateway = await asyncio.create_subprocess_exec(
            *command, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log, cwd=_ROOT,
            start_new_session=True, preexec_fn=_term_with_parent,
        )  # fmt: skip
    _say(f"gateway pid {gateway.pid}, http://127.0.0.1:{port}/runs/<run id>/events, log {logdir / 'gateway.log'}")
    return gateway, port


def _gateway_serves(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return int(answer.status) == 200
    except (OSError, urllib.error.URLError):
        return False


async def _announce_viewer(bootstrap: str, display_topic: str, port: int, stop: asyncio.Event) -> None:
    """Print the viewer page's URL of the first run that reaches the display topic, once the gateway serves that
    run's display (it reads the topic on its own, so the URL never answers 404)."""
    if not await _topic_made(bootstrap, display_topic, "the worker", stop):
        return
    consumer = AIOKafkaConsumer(display_topic, bootstrap_servers=bootstrap, isolation_level="read_committed",
                                enable_auto_commit=False, auto_offset_reset="earliest", group_id=None)  # fmt: skip
    await consumer.start()
    run_id = None
    try:
        while run_id is None and not stop.is_set():
            for records in (await consumer.getmany(timeout_ms=300)).values():
                run_id = next((record.key.decode() for record in records if record.key), run_id)
    finally:
        await consumer.stop()
    base = f"http://127.0.0.1:{port}"
    while run_id is not None and not stop.is_set():
        if await asyncio.to_thread(_gateway_serves, f"{base}/runs/{run_id}/display"):
            _say(f"watch a run in a browser: {base}/view/{run_id}")
            return
        await asyncio.sleep(0.2)
# ---- the gateway (end) ----


async def run_demo(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """The whole demo; returns the exit status (0 when at least one committed event was printed)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    cluster: KafkaCluster | None = None
    logdir = Path(tempfile.mkdtemp(prefix="harness-demo-"))
    worker: asyncio.subprocess.Process | None = None
    gateway: asyncio.subprocess.Process | None = None
    announcer: asyncio.Task[None] | None = None
    counts: Counter[str] = Counter()
    printer_stop = asyncio.Event()
    printer: asyncio.Task[None] | None = None
    producer: asyncio.Task[object] | None = None
    worker_failed = False
    try:
        bootstrap = args.bootstrap_servers
        if bootstrap is None:
            _say("starting a single-node Kafka broker (first run resolves its jars with Maven)")
            began = time.monotonic()
            cluster = await KafkaCluster.start_async(1)
            bootstrap = cluster.bootstrap_servers
            _say(f"broker {bootstrap} ready in {time.monotonic() - began:.1f} s (workdir {cluster.workdir})")
        if stop.is_set():
            return 130
        topics = [args.source_topic, args.output_topic, args.dlq_topic]
        await _create_topics(bootstrap, topics, args.partitions)
        _say(f"topics {', '.join(topics)} ({args.partitions} partitions; the worker creates {args.display_topic})")

        port = free_port()
        log_path = logdir / "worker.log"
        command = [
            sys.executable, "-P", "-m", "worker", "run", "--bootstrap-servers", bootstrap,
            "--source-topic", args.source_topic, "--output-topic", args.output_topic,
            "--dlq-topic", args.dlq_topic, "--display-topic", args.display_topic,
            "--group-id", args.group_id, "--transactional-id-prefix", args.group_id,
            "--metrics-host", "127.0.0.1", "--metrics-port", str(port), "--log-format", "text",
        ]  # fmt: skip
        with log_path.open("wb") as log:
            worker = await asyncio.create_subprocess_exec(
                *command, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log, cwd=_ROOT,
                start_new_session=True, preexec_fn=_term_with_parent,
            )  # fmt: skip
        _say(f"worker pid {worker.pid}, metrics http://127.0.0.1:{port}/metrics, log {log_path}")
        gateway, gateway_port = await _start_gateway(bootstrap, args, logdir)
        announcer = asyncio.create_task(_announce_viewer(bootstrap, args.display_topic, gateway_port, stop))

        ready = asyncio.Event()
        printer = asyncio.create_task(
            _print_committed(
                bootstrap,
                args.output_topic,
                out,
                counts,
                ready=ready,
                stop=printer_stop,
                from_start=cluster is not None,
            )
        )
        await asyncio.wait_for(ready.wait(), 30)
        producer = asyncio.create_task(produce(
            bootstrap, args.source_topic, runs=args.runs or None, rate=args.rate,
            concurrency=args.concurrency, stop=stop,
        ))  # fmt: skip
        _say(f"producing sample runs at {args.rate:g} items/s; printing committed AG-UI events (Ctrl-C stops)")

        waiters = [asyncio.create_task(stop.wait()), asyncio.create_task(worker.wait()), printer]
        done, _ = await asyncio.wait(waiters, timeout=args.duration, return_when=asyncio.FIRST_COMPLETED)
        for task in waiters[:2]:
            task.cancel()
        if worker.returncode is not None:
            worker_failed = True
            _say(f"worker exited early with status {worker.returncode}")
        if printer in done:
            printer.result()  # re-raise the printer's failure
        _say("stopping: producer, then worker" + (", then broker" if cluster is not None else ""))
    finally:
        stop.set()
        if producer is not None:
            with contextlib.suppress(Exception):
                stats = await producer
                _say(f"produced {getattr(stats, 'items', '?')} items of {getattr(stats, 'keys', '?')} runs")
        if announcer is not None:
            announcer.cancel()
        if gateway is not None:
            await _stop_worker(gateway, args.shutdown_timeout)
        if worker is not None:
            status = await _stop_worker(worker, args.shutdown_timeout)
            if status not in (0, -signal.SIGTERM) or worker_failed:
                worker_failed = True
                _say(f"worker exit status {status}; last log lines:")
                lines = (logdir / "worker.log").read_text(errors="replace").splitlines()[-25:]
                print("\n".join(lines), file=sys.stderr)
        printer_stop.set()
        if printer is not None:
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(printer, 10)
        if cluster is not None:
            await cluster.stop_async()
            _say("broker stopped")
        if not worker_failed:
            shutil.rmtree(logdir, ignore_errors=True)
    total = sum(counts.values())
    summary = ", ".join(f"{t} {n}" for t, n in counts.most_common())
    _say(f"{total} committed AG-UI events printed ({summary or 'none'})")
    return 0 if total > 0 and not worker_failed else 1


def build_parser() -> argparse.ArgumentParser:
    """The demo's flags; every default works on a machine with Java 17 and Maven."""
    p = argparse.ArgumentParser(prog="python -m devtools.demo", description=__doc__.split("\n")[0])
    p.add_argument(
        "--duration",
        type=float,
        default=None,
        help="stop after this many seconds of pipeline time (default: until Ctrl-C)",
    )
    p.add_argument("--bootstrap-servers", default=None, help="use this broker instead of starting one")
    p.add_argument("--source-topic", default="harness.events")
    p.add_argument("--output-topic", default="agui.events")
    p.add_argument("--dlq-topic", default="harness.events.dlq")
    p.add_argument("--display-topic", default="agui.display", help="the display topic the gateway serves from")
    p.add_argument("--group-id", default="harness-agui-demo")
    p.add_argument("--partitions", type=int, default=3)
    p.add_argument("--rate", type=float, default=20.0, help="source items per second")
    p.add_argument("--concurrency", type=int, default=4, help="sample runs in flight at once")
    p.add_argument("--runs", type=int, default=0, help="stop producing after this many runs (0: no limit)")
    p.add_argument("--shutdown-timeout", type=float, default=30.0, help="seconds to wait for the worker to stop")
    return p


def main(argv: list[str] | None = None) -> int:
    """CLI entry point of the demo."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="[demo] %(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:  # the client's own lines are its internals: the demo says its own
        handler.addFilter(lambda record: not record.name.startswith("aiokafka"))
    return asyncio.run(run_demo(args))


if __name__ == "__main__":
    sys.exit(main())
