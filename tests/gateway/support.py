"""Gateway-test plumbing: the gateway as a subprocess, a worker feeding it from golden runs, an SSE reader."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import aiohttp
from aiokafka.partitioner import murmur2

from tests.kafka.conftest import TopicFactory
from tests.kafka.support import ROOT, Run, WorkerProcess, json_log_records, wait_caught_up
from worker.gateway.api import GatewayApi
from worker.gateway.directory import RunDirectory
from worker.gateway.hub import Hub
from worker.gateway.keys import read_key
from worker.gateway.metrics import GatewayMetrics
from worker.gateway.reader import HistoryReader
from worker.gateway.routing import Owners, PeerKey, Router
from worker.gateway.settings import GatewaySettings
from worker.gateway.streams import RunStreams
from worker.gateway.thread_streams import ThreadStreams
from worker.gateway.threads import ThreadIndex
from worker.gateway.tokens import TokenCheck

PARTITIONS = 2


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def never_reading(port: int, path: str) -> socket.socket:
    """A client that asks for a stream and never reads a byte (a tiny receive buffer, so the server notices)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
    sock.connect(("127.0.0.1", port))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n".encode())
    return sock


@dataclass
class Topics:
    """The topics of one worker and the gateway reading its output."""

    source: str
    output: str
    dlq: str
    display: str

    @classmethod
    def create(cls, topic_factory: TopicFactory, partitions: int = PARTITIONS) -> Topics:
        return cls(topic_factory("source", partitions), topic_factory("output", partitions), topic_factory("dlq"),
                   topic_factory("display", partitions, {"cleanup.policy": "compact"}))


def start_worker(tmp_path: Path, bootstrap: str, topics: Topics, *extra: str, name: str = "worker") -> WorkerProcess:
    return WorkerProcess(tmp_path, name, bootstrap, topics.source, topics.output, topics.dlq,
                         f"group-{topics.source}", "--display-topic", topics.display, "--commit-interval-ms", "20",
                         *extra).start()


THREAD_KEY = b"k" * 40  # the key the thread tests' gateways check tokens with


class ThreadSite(NamedTuple):
    """Topics with a thread index, the worker writing them, and the flags of a gateway that serves their threads to
    tokens signed with THREAD_KEY."""

    topics: Topics
    index: str
    worker: WorkerProcess
    flags: tuple[str, ...]


def thread_site(topic_factory: TopicFactory, bootstrap: str, tmp_path: Path,
                partitions: int = PARTITIONS) -> ThreadSite:  # fmt: skip
    """New topics and a thread index of `partitions` partitions, and a worker writing them, started."""
    topics = Topics.create(topic_factory, partitions)
    index = topic_factory("index", partitions, {"cleanup.policy": "compact"})
    key_file = tmp_path / "gateway.key"
    key_file.write_bytes(THREAD_KEY)
    worker = start_worker(tmp_path, bootstrap, topics, "--thread-index-topic", index)
    return ThreadSite(topics, index, worker, ("--thread-index-topic", index, "--auth-key-file", str(key_file)))


def partition_of(key: str, partitions: int = PARTITIONS) -> int:
    """The partition Kafka's default partitioner gives `key`."""
    return int((murmur2(key.encode()) & 0x7FFFFFFF) % partitions)


async def wait_converted(bootstrap: str, topics: Topics, keys: list[str], timeout_s: float = 90,
                         partitions: int = PARTITIONS) -> None:  # fmt: skip
    """Until the worker committed every source record produced so far of the partitions of `keys` (among the source
    topic's `partitions`)."""
    await wait_caught_up(bootstrap, f"group-{topics.source}", topics.source, timeout_s,
                         partitions={partition_of(key, partitions) for key in keys})


@dataclass
class GatewayProcess:
    """`python -m worker gateway` as a child process on fixed ports, its log in a file."""

    log_dir: Path
    bootstrap: str
    topics: Topics
    extra: tuple[str, ...] = ()
    name: str = "gateway"
    port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"{self.name}.log"

    def start(self, *, ready_timeout_s: float | None = 60) -> GatewayProcess:
        """Start the process and wait until `/readyz` answers 200 (not at all when `ready_timeout_s` is None)."""
        args = [sys.executable, "-m", "worker", "gateway", "--bootstrap-servers", self.bootstrap,
                "--output-topic", self.topics.output, "--display-topic", self.topics.display,
                "--http-port", str(self.port), "--metrics-port", str(self.metrics_port), "--log-format", "json",
                "--advertised-url", self.url, *self.extra]
        if not any(a in self.extra for a in ("--auth-key-file", "--insecure-no-auth")):
            args.append("--insecure-no-auth")
        log = self.log_path.open("ab")
        (self.log_dir / f"{self.name}.argv").write_text("\0".join(args))
        self.proc = subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
        if ready_timeout_s is not None:
            self.wait_ready(ready_timeout_s)
        return self

    def probe(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}{path}", timeout=5) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()
        except OSError as err:
            return 0, str(err)

    def wait_ready(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"gateway exited {self.proc.returncode}: {self.log()[-3000:]}")
            if self.probe("/readyz")[0] == 200:
                return
            time.sleep(0.1)
        raise AssertionError(f"gateway not ready within {timeout_s} s: {self.log()[-3000:]}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout_s: float = 30) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout_s)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_records(self) -> list[dict[str, Any]]:
        """The JSON lines of the log (`--log-format json`)."""
        return json_log_records(self.log())

    def owned(self) -> set[int]:
        """The partitions of the replica's latest gateway group assignment, from its log (none before the first)."""
        assigned = [r for r in self.log_records() if str(r.get("msg", "")).startswith("gateway group assignment")]
        return set(assigned[-1]["partitions"]) if assigned else set()

    def metric(self, name: str, **labels: str) -> float:
        from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415

        status, body = self.probe("/metrics")
        assert status == 200, body
        return sum(s.value for fam in text_string_to_metric_families(body) for s in fam.samples
                   if s.name == name and labels.items() <= s.labels.items())


def in_process_api(*, owner: str = "", **settings: Any) -> tuple[GatewayApi, Router]:
    """The gateway's API and its router (to start, for forwarding), without Kafka, over one partition with nothing
    in it: this replica's, read (or, with `owner`, the replica at that URL's); `settings` over a plain insecure
    replica's."""
    values: dict[str, Any] = {"bootstrap_servers": "127.0.0.1:9", "display_topic": "agui.display",
                              "advertised_url": "http://127.0.0.1:9", "insecure_no_auth": True} | settings  # fmt: skip
    config = GatewaySettings(**values)
    metrics = GatewayMetrics()
    owners = Owners(config.peer_url)
    owners.partitions = 1
    owners.assign({0: owner or config.peer_url}, [] if owner else [0])
    owners.loaded(owners.mine)
    hub = Hub(max_runs=10, max_recent=10, window_s=1, queue_events=16)
    streams = RunStreams(owners, hub, RunDirectory(10, 1024), HistoryReader(config, 1), metrics)
    peers = PeerKey(read_key(config.peer_key_file) if config.peer_key_file else None)
    router = Router(owners, peers, metrics, wait_s=0.1, retry_after_s=config.retry_after_s, relay_bound=10,
                    queue_events=16)  # fmt: skip
    tokens = None if config.insecure_no_auth else TokenCheck.from_settings(config)
    threads = ThreadStreams(ThreadIndex(10), metrics)  # an index with no thread in it
    return GatewayApi(config, streams, metrics, tokens, router, threads=threads), router


def until_one_partition_each(gateways: list[GatewayProcess], timeout_s: float = 60) -> None:
    """Until each of the replicas serves one partition (two replicas, two partitions)."""
    deadline = time.monotonic() + timeout_s
    while [g.metric("harness_agui_gateway_partitions", state="serving") for g in gateways] != [1.0] * len(gateways):
        assert time.monotonic() < deadline, "the replicas did not take one partition each"
        time.sleep(0.2)


_T = TypeVar("_T")


def run_scenario(scenario: Coroutine[Any, Any, _T], gateway: GatewayProcess, worker: WorkerProcess) -> _T:
    """`scenario`'s result; on any failure the gateway's log tail is printed first; both processes are killed
    whatever happens."""
    try:
        return asyncio.run(scenario)
    except BaseException:
        print(gateway.log()[-4000:])
        raise
    finally:
        gateway.kill()
        worker.kill()


@dataclass(frozen=True)
class Frame:
    """One server-sent event as a browser would dispatch it (`id` None when the frame had no `id:` line)."""

    id: str | None
    data: str
    comment: bool = False

    def event(self) -> dict[str, object]:
        value = json.loads(self.data)
        assert isinstance(value, dict)
        return value


def parse_frames(buffer: bytes) -> tuple[list[Frame], bytes]:
    """The complete frames at the start of `buffer` (split on a blank line, LF only) and the rest."""
    frames = []
    while b"\n\n" in buffer:
        block, buffer = buffer.split(b"\n\n", 1)
        lines = block.decode().split("\n")
        ident: str | None = None
        data: list[str] = []
        for line in lines:
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "id":
                ident = value
            elif name == "data":
                data.append(value)
            elif name == "":
                pass  # a comment
            else:
                raise AssertionError(f"unexpected SSE field {name!r} in {block!r}")
        frames.append(Frame(ident, "\n".join(data), comment=not data and ident is None))
    return frames, buffer


async def data_frames(resp: aiohttp.ClientResponse) -> AsyncIterator[Frame]:
    """The data frames of an event stream's body as each completes (comments left out); it is LF-framed."""
    buffer = b""
    async for chunk in resp.content.iter_any():
        assert b"\r" not in chunk, "frames must be LF-framed"
        got, buffer = parse_frames(buffer + chunk)
        for frame in got:
            if not frame.comment:
                yield frame


async def read_stream(
    session: aiohttp.ClientSession, url: str, *, method: str = "GET", headers: dict[str, str] | None = None,
    body: object = None, limit: int | None = None, timeout_s: float = 60,
) -> tuple[int, list[Frame], bool]:
    """Read a stream until it ends (or `limit` data frames came): status, data frames, and whether it ended by
    itself. A non-200 answer returns its JSON body as the one frame's data."""
    frames: list[Frame] = []
    async with asyncio.timeout(timeout_s):
        async with session.request(method, url, headers=headers, json=body) as resp:
            if resp.status != 200:
                return resp.status, [Frame(None, await resp.text())], True
            assert resp.headers["Content-Type"].startswith("text/event-stream"), resp.headers
            async for frame in data_frames(resp):
                frames.append(frame)
                if len(frames) == limit:
                    return resp.status, frames, False
            return resp.status, frames, True


def node_modules() -> Path:
    """Where scripts/install-tools.sh put the pinned Node packages of tests/gateway/node."""
    lock = Path(__file__).parent / "node" / "package-lock.json"
    cache = Path(os.environ.get("HARNESS_WORKER_CACHE", Path.home() / ".cache" / "harness-agui-worker"))
    found = cache / f"gateway-node-{hashlib.sha256(lock.read_bytes()).hexdigest()[:16]}" / "node_modules"
    assert (found / "@ag-ui" / "client").is_dir(), f"{found} is missing: run scripts/install-tools.sh"
    return found


THREAD_AGENT_MARK = "<!-- the thread agent: compiled and run by tests/gateway/test_thread_agent.py -->\n```ts\n"


def compile_thread_agent(work: Path) -> Path:
    """The TypeScript thread agent of docs/gateway.md, type-checked (strict) and compiled by the pinned TypeScript
    against the pinned `@ag-ui/client`: the path of its JavaScript module, in `work`."""
    code = (ROOT / "docs" / "gateway.md").read_text().split(THREAD_AGENT_MARK, 1)[1].split("```", 1)[0]
    work.mkdir(parents=True, exist_ok=True)
    if not (work / "node_modules").exists():
        (work / "node_modules").symlink_to(node_modules())
    (work / "thread-agent.mts").write_text(code)
    done = subprocess.run(["node", str(node_modules() / "typescript" / "bin" / "tsc"), "--strict", "--target", "es2022",
                           "--lib", "es2022,dom", "--module", "nodenext", "--moduleResolution", "nodenext",
                           "--skipLibCheck", "--noEmitOnError", "thread-agent.mts"],
                          cwd=work, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, f"the thread agent of docs/gateway.md does not compile: {done.stdout}{done.stderr}"
    return work / "thread-agent.mjs"


async def reference_messages(work: Path, label: str, runs: list[Run], thread_id: str) -> dict[str, Any]:
    """What the official HttpAgent makes of these runs' reference events fed to it as one stream, in this order:
    whether `verifyEvents` accepted it and the messages it ended with."""
    path = work / f"{label}.reference.jsonl"
    path.write_bytes(b"\n".join(event for run in runs for event in run.events) + b"\n")
    jobs = work / f"{label}.reference.json"
    jobs.write_text(json.dumps([{"label": label, "reference": str(path), "threadId": thread_id, "runId": "reference"}]))
    (result,) = await node_results(await start_node("agent.mjs", str(jobs)), 120)
    return result


async def start_node(script: str, *args: str) -> asyncio.subprocess.Process:
    """`node tests/gateway/node/<script> args...` with the pinned packages, stdout piped. Its temporary directory is
    where scripts/install-tools.sh inflated @sparticuz/chromium (when it did), so `chromium.executablePath()` finds
    the browser there."""
    modules = node_modules()
    env = {**os.environ, "GATEWAY_NODE_MODULES": str(modules)}
    if (modules.parent / "chromium").is_dir():
        env["TMPDIR"] = str(modules.parent / "chromium")
    return await asyncio.create_subprocess_exec(
        "node", str(Path(__file__).parent / "node" / script), *args, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=env, limit=64 * 1024 * 1024,
    )


async def node_results(process: asyncio.subprocess.Process, timeout_s: float) -> list[dict[str, Any]]:
    """The JSON lines a Node script printed, once it exited 0."""
    async with asyncio.timeout(timeout_s):
        out, err = await process.communicate()
    assert process.returncode == 0, f"node exited {process.returncode}: {err.decode()[-3000:]}"
    return [json.loads(line) for line in out.decode().split("\n") if line.strip()]


def thread_of(run: Run) -> str:
    """The thread of a golden run (its first source line's)."""
    return str(json.loads(run.lines[0])["thread_id"])


async def reference_results(tmp_path: Path, runs: list[Run]) -> dict[str, dict[str, Any]]:
    """What the official HttpAgent makes of each run's reference conversion fed to it whole, by run key: whether
    `verifyEvents` accepted it and the messages it ended with."""
    references = []
    for run in runs:
        path = tmp_path / f"{run.key}.reference.jsonl"
        path.write_bytes(b"\n".join(run.events) + b"\n")
        references.append({"label": run.key, "reference": str(path), "threadId": thread_of(run), "runId": run.key})
    jobs = tmp_path / "reference.json"
    jobs.write_text(json.dumps(references))
    return {r["label"]: r for r in await node_results(await start_node("agent.mjs", str(jobs)), 120)}


async def wait_known(session: aiohttp.ClientSession, gateway: GatewayProcess, keys: list[str],
                     headers: dict[str, str] | None = None) -> None:  # fmt: skip
    """Until the gateway has a display record of every run in `keys`."""
    for key in keys:
        for _ in range(300):
            async with session.get(f"{gateway.url}/runs/{key}/display", headers=headers) as resp:
                if resp.status == 200:
                    break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError(f"run {key} never appeared in the gateway's display topic")
