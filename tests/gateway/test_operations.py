"""Operations against a real broker and worker: keep-alive comments on a quiet stream, CORS, the connection limit
(503 with Retry-After), the metrics of what was sent, the drain on SIGTERM (streams closed with a comment, `HttpAgent`
streams with RUN_ERROR), the loud warning of --insecure-no-auth, a client that never reads dropped and counted
while a reading one of the same run gets every event, and the stall lines at the gateway's own --stall-warning-ms."""

from __future__ import annotations

import asyncio
import json
import re
import socket
from pathlib import Path

import aiohttp
import pytest

from tests.gateway.support import (
    GatewayProcess,
    Topics,
    never_reading,
    parse_frames,
    run_scenario,
    start_worker,
    wait_converted,
    wait_known,
)
from tests.kafka.conftest import TopicFactory
from tests.kafka.support import GOLDEN, Run, converted, corpus, produce, read_lines, rekey

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

ORIGIN = "https://app.example"


class _Raw:
    """One stream's raw bytes as they arrive, read by a task."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response
        self.data = b""
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for chunk in self.response.content.iter_any():
            self.data += chunk

    def frames(self) -> list[bytes]:
        return self.data.split(b"\n\n")[:-1]

    def ids(self) -> list[str]:
        return [f.id for f in parse_frames(self.data)[0] if f.id is not None]


async def _open(session: aiohttp.ClientSession, url: str, **kwargs: object) -> _Raw:
    response = await session.request(kwargs.pop("method", "GET"), url, **kwargs)  # type: ignore[arg-type]
    assert response.status == 200, await response.text()
    return _Raw(response)


def test_keep_alive_cors_limit_metrics_and_drain(
    kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    topics = Topics.create(topic_factory)
    first, second = corpus(names=["s02_tool_roundtrip", "s01_hello"])
    worker = start_worker(tmp_path, kafka_bootstrap, topics)
    gateway = GatewayProcess(tmp_path, kafka_bootstrap, topics, (
        "--keepalive-ms", "300", "--max-connections", "3", "--retry-after-s", "7", "--cors-origins", ORIGIN,
        "--drain-timeout-ms", "5000"))  # fmt: skip

    async def scenario() -> None:
        gateway.start()
        warnings = [r for r in gateway.log_records() if r.get("level") == "WARNING" and "INSECURE" in r["msg"]]
        assert warnings and "serves every run to anyone" in warnings[0]["msg"]
        await produce(kafka_bootstrap, topics.source, [(r.key.encode(), r.lines[0]) for r in (first, second)])
        await wait_converted(kafka_bootstrap, topics, [first.key, second.key])
        async with aiohttp.ClientSession() as session:
            await wait_known(session, gateway, [first.key, second.key])
            events = f"{gateway.url}/runs/{first.key}/events"

            # CORS: a preflight allows the cursor and the token header, for the configured origin only.
            async with session.options(events, headers={
                "Origin": ORIGIN, "Access-Control-Request-Method": "GET",
                "Access-Control-Request-Headers": "last-event-id, authorization"}) as resp:  # fmt: skip
                assert resp.status == 204
                assert resp.headers["Access-Control-Allow-Origin"] == ORIGIN
                allowed = {h.strip().lower() for h in resp.headers["Access-Control-Allow-Headers"].split(",")}
                assert {"last-event-id", "authorization"} <= allowed
            async with session.options(events, headers={"Origin": "https://elsewhere.example",
                                                        "Access-Control-Request-Method": "GET"}) as resp:
                assert "Access-Control-Allow-Origin" not in resp.headers

            # Streams: CORS on the stream itself; a quiet live run gets `: keep-alive` comments, LF-framed.
            watched = await _open(session, events, headers={"Origin": ORIGIN})
            assert watched.response.headers["Access-Control-Allow-Origin"] == ORIGIN
            assert watched.response.headers["Content-Type"].startswith("text/event-stream")
            other = await _open(session, events)
            agent_body = {"threadId": json.loads(second.lines[0])["thread_id"], "runId": second.key}
            quiet = await _open(session, f"{gateway.url}/runs/{second.key}/events")
            await asyncio.sleep(1.5)
            assert b"\r" not in watched.data
            assert watched.frames().count(b": keep-alive") >= 3, watched.data[-300:]
            assert gateway.metric("harness_agui_gateway_connections") == 3

            # The limit: a fourth stream is refused with Retry-After, and counted.
            async with session.get(f"{gateway.url}/runs/{second.key}/events") as resp:
                assert resp.status == 503 and resp.headers["Retry-After"] == "7"
                assert (await resp.json())["error"] == "busy"
            assert gateway.metric("harness_agui_gateway_refused_connections_total") == 1

            # The rest of the first run: both its streams end after its terminal event, and what was written is
            # what the metrics count.
            await produce(kafka_bootstrap, topics.source, [(first.key.encode(), line) for line in first.lines[1:]],
                          pace_s=0.005)  # fmt: skip
            await asyncio.wait_for(asyncio.gather(watched.task, other.task), 60)
            expected = [f"{first.key}:{n}" for n in range(len(first.events))]
            assert watched.ids() == expected and other.ids() == expected
            sent = len(watched.ids()) + len(other.ids()) + len(quiet.ids())
            assert gateway.metric("harness_agui_gateway_events_sent_total") == sent
            live = gateway.metric("harness_agui_gateway_delivery_latency_seconds_count")
            assert 0 < live <= sent

            # The drain: SIGTERM ends an EventSource stream with a comment and an HttpAgent stream with RUN_ERROR.
            agent = await _open(session, f"{gateway.url}/runs/{second.key}", method="POST", json=agent_body,
                                headers={"Accept": "text/event-stream"})  # fmt: skip
            await asyncio.sleep(0.5)
            assert gateway.metric("harness_agui_gateway_connections") == 2
            gateway.proc.send_signal(15)  # type: ignore[union-attr]
            await asyncio.wait_for(asyncio.gather(quiet.task, agent.task), 20)
            assert quiet.frames()[-1] == b": gateway draining: reconnect"
            drained = [f for f in parse_frames(agent.data)[0] if not f.comment]
            assert drained[-1].id is None and drained[-1].event()["type"] == "RUN_ERROR"
            assert drained[-1].event()["code"] == "GATEWAY_DRAINING"
        assert gateway.proc.wait(30) == 0  # type: ignore[union-attr]
        assert "gateway stopped cleanly" in gateway.log()

    run_scenario(scenario(), gateway, worker)


def _long_run(deltas: int, size: int) -> Run:
    """A run of one text message streamed in `deltas` parts of `size` characters (s09's shape, its deltas
    repeated), under a new root run id."""
    lines = read_lines(GOLDEN / "s09_big_fragments.jsonl")
    delta = json.loads(lines[13])
    delta["event"]["delta"]["content_delta"] = "z" * size
    body = [json.loads(line) for line in lines[:13]] + [delta] * deltas + [json.loads(line) for line in lines[19:]]
    out = []
    for number, item in enumerate(body):
        out.append(json.dumps({**item, "sequence": number}, separators=(",", ":")).encode())
    key, renamed = rekey(out, "long")
    return converted(key, renamed)


def _drain_socket(sock: socket.socket) -> bytes:
    """Everything the server sent until it closed the connection (a reset counts as closed)."""
    sock.settimeout(10)
    data = b""
    while True:
        try:
            chunk = sock.recv(1 << 20)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


def test_a_client_that_never_reads_is_dropped_and_counted_while_a_reader_gets_the_whole_run(
    kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    topics = Topics.create(topic_factory)
    run = _long_run(64, 64 * 1024)
    worker = start_worker(tmp_path, kafka_bootstrap, topics)
    gateway = GatewayProcess(tmp_path, kafka_bootstrap, topics, ("--connection-queue-events", "16"))

    async def scenario() -> None:
        gateway.start()
        await produce(kafka_bootstrap, topics.source, [(run.key.encode(), run.lines[0])])
        await wait_converted(kafka_bootstrap, topics, [run.key])
        async with aiohttp.ClientSession() as session:
            await wait_known(session, gateway, [run.key])
            stalled = never_reading(gateway.port, f"/runs/{run.key}/events")
            reader = await _open(session, f"{gateway.url}/runs/{run.key}/events")
            await asyncio.sleep(0.5)
            assert gateway.metric("harness_agui_gateway_connections") == 2
            # Paced, so events keep coming while the writer of the client that never reads waits on its socket (a
            # burst read in one fetch is not slowness).
            await produce(kafka_bootstrap, topics.source, [(run.key.encode(), line) for line in run.lines[1:]],
                          pace_s=0.02)  # fmt: skip
            await asyncio.wait_for(reader.task, 120)
            assert reader.ids() == [f"{run.key}:{n}" for n in range(len(run.events))]
            assert [f.data.encode() for f in parse_frames(reader.data)[0] if f.id] == run.events
            assert gateway.metric("harness_agui_gateway_slow_client_drops_total") == 1
            assert gateway.metric("harness_agui_gateway_connections") == 0
        received = await asyncio.get_running_loop().run_in_executor(None, _drain_socket, stalled)
        stalled.close()
        assert received.startswith(b"HTTP/1.1 200")
        assert not received.endswith(b"0\r\n\r\n"), "a dropped stream must not end cleanly"
        ids = re.findall(rb"id: [^\n]*:(\d+)\n", received)
        assert len(ids) < len(run.events), "the client that never read was not cut off"

    run_scenario(scenario(), gateway, worker)


def test_a_gateway_logs_the_turns_that_hold_its_loop_past_its_own_stall_warning_ms(
    tmp_path: Path, kafka_bootstrap: str, topic_factory: TopicFactory
) -> None:
    """`--stall-warning-ms` reaches the gateway's loop monitor: at 1 ms, starting (reading the topics, the
    collection that freezes the loaded heap) holds the loop long enough to be logged, with that threshold."""
    gateway = GatewayProcess(tmp_path, kafka_bootstrap, Topics.create(topic_factory), ("--stall-warning-ms", "1"))
    try:
        gateway.start()
    finally:
        assert gateway.stop() == 0
    stalls = [r for r in gateway.log_records() if str(r.get("msg", "")).startswith("event loop blocked")]
    assert stalls, gateway.log()
    assert all(r["level"] == "WARNING" and "(warning from 1 ms)" in r["msg"] for r in stalls), stalls
    assert all(r["lag_seconds"] >= 0.001 for r in stalls), stalls
