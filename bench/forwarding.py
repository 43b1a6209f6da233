"""The forwarding hop without a broker: CPU per delivered event of a replica that relays `EventSource` streams of
runs another replica owns, and the delay the hop adds.

    .venv/bin/python bench/forwarding.py [--runs 200] [--subscribers 1000] [--rate 1000] [--duration 20]
        [--nice -10]

Three processes besides this one, each measured from /proc:

- the owner stand-in: an aiohttp server on 127.0.0.1 answering `GET /runs/{id}/events` with the run's frames as
  the owner writes them (`id: <run>:<n>`, one `data:` line of a text delta), `--rate` frames per second over
  `--runs` runs at random, each frame stamped with the wall-clock time it was made (`sentAt`), every run ending
  with RUN_FINISHED after `--duration` seconds;
- the relaying replica: the real `GatewayApi` with its `Forwarder` and `Relays`, wired without Kafka (an `Owners`
  whose map gives every partition to the stand-in and none to this replica), so every stream goes the non-owner's
  way: one stream to the owner per run, fanned out to that run's connections here;
- the readers: `--subscribers` connections through the relaying replica spread evenly over the runs (the first of
  each run opens its relay, the others follow it), and one direct reader per run on the stand-in itself, all on one
  event loop, so the client's own delays fall alike on both.

The added delay of an event at a subscriber is its arrival through the relaying replica minus its arrival at the
run's direct reader. CPU per delivered event is the relaying process's CPU while the stand-in produces and the
streams end, over the events its subscribers received.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # for devtools: `worker` stays the installed package

import aiohttp  # noqa: E402
from aiohttp import web  # noqa: E402

from bench._latency import p50_p99_ms  # noqa: E402
from devtools.kafka_cluster import free_port  # noqa: E402

__all__ = ["main"]

CLK_TCK = os.sysconf("SC_CLK_TCK")
PARTITIONS = 12
_THREAD_HEADER = "X-Harness-Gateway-Thread"
_DELTA = "Kafka keeps every record of a partition in order; the gateway reads them once. " * 2


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def _machine_busy_s() -> float:
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / CLK_TCK


def _renice(pid: int, nice: int) -> None:
    """Set the scheduling priority of every thread of `pid`."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(ProcessLookupError):
            os.setpriority(os.PRIO_PROCESS, int(task.name), nice)


def _run_ids(runs: int) -> list[str]:
    return [f"fwd-{i:04d}" for i in range(runs)]


async def _stdin_line() -> str:
    return await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)


# ---- the owner stand-in ---------------------------------------------------------------------------------------


class _Connection:
    """One stream of the stand-in: the frames not yet written, and a wake-up for its writer."""

    __slots__ = ("pending", "wake")

    def __init__(self, backlog: list[bytes]) -> None:
        self.pending = list(backlog)
        self.wake = asyncio.Event()


class _Run:
    __slots__ = ("connections", "ended", "frames")

    def __init__(self) -> None:
        self.frames: list[bytes] = []
        self.connections: list[_Connection] = []
        self.ended = False

    def add(self, frame: bytes) -> None:
        self.frames.append(frame)
        for connection in self.connections:
            connection.pending.append(frame)
            connection.wake.set()


async def _owner(port: int, runs: int, rate: float, duration: float) -> None:
    """Serve the runs' streams; prints `ready`, makes the frames after a line on stdin, prints `done` once every
    stream has ended."""
    ids = _run_ids(runs)
    state = {run_id: _Run() for run_id in ids}

    async def events(request: web.Request) -> web.StreamResponse:
        run_id = request.match_info["run_id"]
        run = state.get(run_id)
        if run is None:
            return web.json_response({"error": "unknown-run", "message": run_id}, status=404)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                               _THREAD_HEADER: f"t-{run_id}"})  # fmt: skip
        await response.prepare(request)
        connection = _Connection(run.frames)
        run.connections.append(connection)
        try:
            while True:
                if connection.pending:
                    chunk = b"".join(connection.pending)
                    connection.pending.clear()
                    await response.write(chunk)
                    continue
                if run.ended:
                    break
                connection.wake.clear()
                await connection.wake.wait()
            await response.write_eof()
        finally:
            run.connections.remove(connection)
        return response

    app = web.Application()
    app.router.add_get("/runs/{run_id}/events", events)
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, backlog=4096).start()
    print("ready", flush=True)
    await _stdin_line()
    rng = random.Random(11)
    seqs = dict.fromkeys(ids, 0)
    total = int(rate * duration)
    started = time.monotonic()
    for i in range(total):
        ahead = started + i / rate - time.monotonic()
        if ahead > 0:
            await asyncio.sleep(ahead)
        run_id = ids[rng.randrange(runs)]
        seq = seqs[run_id]
        seqs[run_id] = seq + 1
        state[run_id].add(b'id: %s:%d\ndata: {"type":"TEXT_MESSAGE_CONTENT","messageId":"%s-m1","delta":"%s",'
                          b'"sentAt":%.6f}\n\n' % (run_id.encode(), seq, run_id.encode(),
                                                   _DELTA[: 40 + seq % 80].encode(), time.time()))  # fmt: skip
    for run_id in ids:
        run = state[run_id]
        run.add(b'id: %s:%d\ndata: {"type":"RUN_FINISHED","threadId":"t-%s","runId":"%s","sentAt":%.6f}\n\n'
                % (run_id.encode(), seqs[run_id], run_id.encode(), run_id.encode(), time.time()))  # fmt: skip
        run.ended = True
        for connection in run.connections:
            connection.wake.set()
    while any(run.connections for run in state.values()):  # noqa: ASYNC110 - the writers end on their own
        await asyncio.sleep(0.05)
    print(json.dumps({"frames": total + runs, "seconds": round(time.monotonic() - started, 2)}), flush=True)
    await _stdin_line()
    await runner.cleanup()


# ---- the relaying replica -------------------------------------------------------------------------------------


def _metric(body: bytes, name: str) -> float:
    return sum(float(line.split()[-1]) for line in body.decode().splitlines()
               if line.startswith((name + " ", name + "{")))  # fmt: skip


async def _relay(port: int, owner_url: str) -> None:
    """The real API of a replica that owns no partition, every run's owner being the stand-in; prints `ready`,
    then its metrics' totals as one JSON line for each line on stdin, until stdin ends."""
    from worker._heap import freeze_heap  # noqa: PLC0415
    from worker.gateway.api import GatewayApi  # noqa: PLC0415
    from worker.gateway.directory import RunDirectory  # noqa: PLC0415
    from worker.gateway.hub import Hub  # noqa: PLC0415
    from worker.gateway.metrics import GatewayMetrics  # noqa: PLC0415
    from worker.gateway.reader import HistoryReader  # noqa: PLC0415
    from worker.gateway.routing import Owners, PeerKey, Router  # noqa: PLC0415
    from worker.gateway.settings import GatewaySettings  # noqa: PLC0415
    from worker.gateway.streams import RunStreams  # noqa: PLC0415

    settings = GatewaySettings(bootstrap_servers="127.0.0.1:9", display_topic="agui.display", insecure_no_auth=True,
                               advertised_url=f"http://127.0.0.1:{port}", http_port=port)  # fmt: skip
    metrics = GatewayMetrics()
    hub = Hub(max_runs=settings.max_tracked_runs, max_recent=settings.recent_events_per_run,
              window_s=settings.recent_window_ms / 1000, queue_events=settings.connection_queue_events)  # fmt: skip
    directory = RunDirectory(settings.max_indexed_runs, settings.display_cache_bytes)
    owners = Owners(settings.peer_url)
    owners.partitions = PARTITIONS
    owners.assign(dict.fromkeys(range(PARTITIONS), owner_url), [])
    streams = RunStreams(owners, hub, directory, HistoryReader(settings, 1), metrics,
                         keepalive_s=settings.keepalive_ms / 1000, backfill_events=settings.recent_events_per_run)
    router = Router(owners, PeerKey(None), metrics, wait_s=settings.forward_wait_ms / 1000,
                    retry_after_s=settings.retry_after_s, relay_bound=settings.recent_events_per_run,
                    queue_events=settings.connection_queue_events)  # fmt: skip
    api = GatewayApi(settings, streams, metrics, None, router)
    await router.start()
    freeze_heap()
    runner = web.AppRunner(api.application(), handle_signals=False, access_log=None, handler_cancellation=True)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, backlog=4096).start()
    print("ready", flush=True)
    most = 0
    try:
        while line := await _stdin_line():
            most = max(most, router.relays_open)
            body = metrics.render()
            print(json.dumps({
                "relays open": router.relays_open, "most relays open": most,
                "relayed streams": _metric(body, "harness_agui_gateway_relayed_streams_total"),
                "forwarded ok": _metric(body, 'harness_agui_gateway_forwarded_requests_total{outcome="ok"}'),
                "slow-client drops": _metric(body, "harness_agui_gateway_slow_client_drops_total"),
                "stream errors": _metric(body, "harness_agui_gateway_failed_requests_total"),
                "line": line.strip(),
            }), flush=True)  # fmt: skip
    finally:
        await runner.cleanup()
        await router.close()


# ---- the readers ----------------------------------------------------------------------------------------------


class _Reads:
    """Arrivals (monotonic seconds) by event id: each direct reader's, and every subscriber's through the relay."""

    def __init__(self) -> None:
        self.direct: dict[bytes, float] = {}
        self.sent: dict[bytes, float] = {}  # the stand-in's stamp, wall clock
        self.direct_wall: dict[bytes, float] = {}
        self.relayed: list[tuple[bytes, float, float]] = []  # id, arrival, arrival by the wall clock
        self.opened = 0
        self.failed: list[str] = []
        self.ended_by_comment = 0  # relayed streams whose last frame was a comment (the relay's early end)


async def _read(session: aiohttp.ClientSession, url: str, reads: _Reads, direct: bool) -> None:
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=None)) as resp:
            if resp.status != 200:
                reads.failed.append(f"{url}: {resp.status} {(await resp.read())[:200]!r}")
                return
            reads.opened += 1
            buffer = b""
            last = b""
            async for chunk in resp.content.iter_any():
                now, wall = time.monotonic(), time.time()
                buffer += chunk
                *frames, buffer = buffer.split(b"\n\n")
                for frame in frames:
                    last = frame
                    if not frame.startswith(b"id: "):
                        continue
                    ident = frame[4 : frame.index(b"\n")]
                    if direct:
                        reads.direct[ident] = now
                        reads.direct_wall[ident] = wall
                        stamp = frame.rindex(b'"sentAt":') + 9
                        reads.sent[ident] = float(frame[stamp : frame.index(b"}", stamp)])
                    else:
                        reads.relayed.append((ident, now, wall))
            if not direct and last.startswith(b":"):
                reads.ended_by_comment += 1
    except (aiohttp.ClientError, OSError) as exc:
        reads.failed.append(f"{url}: {exc!r}")


async def _client(owner_url: str, relay_url: str, runs: int, per_run: int) -> None:
    """Open the direct readers and the first subscriber of each run (it opens the run's relay), prints `opened`;
    on a line on stdin opens the other subscribers (they follow the relays), prints `followed`; prints the figures
    once every stream has ended."""
    ids = _run_ids(runs)
    reads = _Reads()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        tasks = [asyncio.create_task(_read(session, f"{owner_url}/runs/{run}/events", reads, True)) for run in ids]
        tasks += [asyncio.create_task(_read(session, f"{relay_url}/runs/{run}/events", reads, False)) for run in ids]
        while reads.opened + len(reads.failed) < runs:  # noqa: ASYNC110 - counts kept by the readers
            await asyncio.sleep(0.05)
        print("opened", flush=True)
        await _stdin_line()
        tasks += [asyncio.create_task(_read(session, f"{relay_url}/runs/{run}/events", reads, False))
                  for run in ids for _ in range(per_run - 1)]  # fmt: skip
        print("followed", flush=True)
        await asyncio.gather(*tasks)
    added = [at - reads.direct[ident] for ident, at, _ in reads.relayed if ident in reads.direct]
    through = [wall - reads.sent[ident] for ident, _, wall in reads.relayed if ident in reads.sent]
    direct = [reads.direct_wall[ident] - reads.sent[ident] for ident in reads.direct]
    expected = len(reads.direct) * per_run
    print(json.dumps({
        "direct events": len(reads.direct), "relayed events": len(reads.relayed), "expected relayed": expected,
        "failed streams": reads.failed[:3], "failed count": len(reads.failed),
        "ended by comment": reads.ended_by_comment,
        "added": p50_p99_ms(added, 2), "added max": round(1000 * max(added, default=float("nan")), 2),
        "added negative share": round(sum(1 for a in added if a < 0) / max(1, len(added)), 3),
        "made to direct arrival": p50_p99_ms(direct, 2), "made to relayed arrival": p50_p99_ms(through, 2),
    }), flush=True)  # fmt: skip


# ---- the bench ------------------------------------------------------------------------------------------------


def _start(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, __file__, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE)


async def _line(proc: subprocess.Popen[bytes]) -> str:
    assert proc.stdout is not None
    line = await asyncio.get_running_loop().run_in_executor(None, proc.stdout.readline)
    if not line:
        raise RuntimeError(f"{proc.args[2:4]} ended early with status {proc.wait()}")
    return line.decode()


def _send(proc: subprocess.Popen[bytes], text: str = "go") -> None:
    assert proc.stdin is not None
    proc.stdin.write(text.encode() + b"\n")
    proc.stdin.flush()


async def _until(relay: subprocess.Popen[bytes], figure: str, value: int) -> dict[str, float]:
    """The relaying replica's totals once `figure` reached `value` (within 60 s)."""
    deadline = time.monotonic() + 60
    while True:
        _send(relay, "stats")
        totals: dict[str, float] = json.loads(await _line(relay))
        if totals[figure] >= value:
            return totals
        if time.monotonic() > deadline:
            raise RuntimeError(f"the relaying replica has {figure} {totals[figure]}, not {value}, after 60 s")
        await asyncio.sleep(0.1)


async def _bench(args: argparse.Namespace) -> dict[str, object]:
    owner_port, relay_port = free_port(), free_port()
    owner_url, relay_url = f"http://127.0.0.1:{owner_port}", f"http://127.0.0.1:{relay_port}"
    per_run = max(1, args.subscribers // args.runs)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        owner = _start("--owner", str(owner_port), str(args.runs), str(args.rate), str(args.duration))
        relay = _start("--relay", str(relay_port), owner_url)
        procs += [owner, relay]
        await _line(owner)
        await _line(relay)
        client = _start("--client", owner_url, relay_url, str(args.runs), str(per_run))
        procs.append(client)
        await _line(client)
        await _until(relay, "relays open", args.runs)
        _send(client)
        await _line(client)
        connected = await _until(relay, "relayed streams", args.runs * (per_run - 1))
        pids = {"relaying replica": relay.pid, "owner stand-in": owner.pid, "readers": client.pid}
        if args.nice:
            for pid in pids.values():
                _renice(pid, args.nice)
        before = {name: _cpu_s(pid) for name, pid in pids.items()}
        machine, wall = _machine_busy_s(), time.monotonic()
        _send(owner)
        made = json.loads(await _line(owner))
        readers = json.loads(await _line(client))
        wall = time.monotonic() - wall
        spent = {name: _cpu_s(pid) - before[name] for name, pid in pids.items()}
        busy = (_machine_busy_s() - machine) / wall
        _send(relay, "ended")
        ended = json.loads(await _line(relay))
    finally:
        for proc in procs:
            with contextlib.suppress(OSError, ValueError):
                proc.stdin.close()  # type: ignore[union-attr]
        for proc in procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
    delivered = readers["relayed events"]
    shares = ", ".join(f"{name} {seconds / wall:.2f}" for name, seconds in spent.items())
    rest = max(0.0, busy - sum(spent.values()) / wall)
    return {
        "runs, subscribers through the relaying replica, direct readers": (args.runs, per_run * args.runs, args.runs),
        "streams to the owner while connected (relays), streams that followed one": (
            connected["relays open"], connected["relayed streams"]),
        "frames made, seconds (making and ending)": (made["frames"], round(wall, 1)),
        "events delivered through the relay (expected)": (delivered, readers["expected relayed"]),
        "relaying replica's CPU per delivered event us": round(1e6 * spent["relaying replica"] / max(1, delivered), 1),
        "relaying replica's CPU per frame from the owner us": round(
            1e6 * spent["relaying replica"] / max(1, readers["direct events"]), 1),
        "owner stand-in's CPU per frame written (to the direct readers and the relays) us": round(
            1e6 * spent["owner stand-in"] / max(1, 2 * readers["direct events"]), 1),
        "added delay p50 / p99 ms (relayed arrival minus direct arrival)": tuple(readers["added"]),
        "added delay max ms; share of events through the relay first": (
            readers["added max"], readers["added negative share"]),
        "made to arrival p50 / p99 ms, direct; through the relay": (
            tuple(readers["made to direct arrival"]), tuple(readers["made to relayed arrival"])),
        "cores busy": f"{busy:.2f} of {os.cpu_count()}: {shares}, the rest {rest:.2f}",
        "slow-client drops, failed streams": (ended["slow-client drops"], readers["failed count"]),
        "relayed streams whose last frame was a comment (not the run's last event)": readers["ended by comment"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--subscribers", type=int, default=1000, help="connections through the relaying replica")
    parser.add_argument("--rate", type=float, default=1000, help="frames per second the owner makes, all runs")
    parser.add_argument("--duration", type=float, default=20)
    parser.add_argument("--nice", type=int, default=0, help=(
        "while measuring, the scheduling priority of the three processes; -10 puts them ahead of the rest of the "
        "host (negative values need root)"))
    parser.add_argument("--owner", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--relay", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--client", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.owner:
        port, runs, rate, duration = args.owner
        asyncio.run(_owner(int(port), int(runs), float(rate), float(duration)))
        return 0
    if args.relay:
        port, owner_url = args.relay
        asyncio.run(_relay(int(port), owner_url))
        return 0
    if args.client:
        owner_url, relay_url, runs, per_run = args.client
        asyncio.run(_client(owner_url, relay_url, int(runs), int(per_run)))
        return 0
    figures = asyncio.run(_bench(args))
    print(f"bench.forwarding ({os.cpu_count()} cores; the relaying replica is the installed package's GatewayApi, "
          "Forwarder and Relays without Kafka)")  # fmt: skip
    for name, value in figures.items():
        print(f"  {name}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
