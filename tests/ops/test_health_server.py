"""The health/metrics HTTP server on a real socket bound to an ephemeral port."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from worker.ops.health import Health, HealthServer
from worker.ops.metrics import Metrics


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def _request(port: int, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(raw)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    await writer.wait_closed()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0].startswith("HTTP/1.1 ")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split(" ")[1]), headers, body


async def _get(port: int, path: str) -> tuple[int, dict[str, str], bytes]:
    return await _request(port, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())


Served = tuple[HealthServer, Health, FakeClock]


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    clock = FakeClock()
    health = Health(liveness_timeout_s=10, clock=clock)
    metrics = Metrics(version="0.0.1")
    metrics.assigned_partitions.set(3)
    server = HealthServer(metrics.render, health, "127.0.0.1", 0)
    await server.start()
    try:
        yield server, health, clock
    finally:
        await server.stop()


async def test_metrics_endpoint_serves_prometheus_text(served: Served) -> None:
    server, _, _ = served
    assert server.port > 0
    status, headers, body = await _get(server.port, "/metrics")
    assert status == 200
    assert headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert int(headers["content-length"]) == len(body)
    assert b"harness_agui_assigned_partitions 3.0\n" in body
    assert b'harness_agui_worker_info{version="0.0.1"} 1.0' in body


async def test_livez_follows_the_beat(served: Served) -> None:
    server, health, clock = served
    status, _, body = await _get(server.port, "/livez")
    assert (status, body) == (200, b"ok\n")
    clock.now += 11
    status, _, body = await _get(server.port, "/livez")
    assert status == 503 and b"no progress" in body
    health.beat()
    assert (await _get(server.port, "/livez"))[0] == 200


async def test_readyz_follows_membership_and_partitions(served: Served) -> None:
    server, health, _ = served
    status, _, body = await _get(server.port, "/readyz")
    assert status == 503 and b"not a consumer group member" in body
    health.set_member(True)
    status, _, body = await _get(server.port, "/readyz")
    assert status == 503 and b"waiting for the group's assignment" in body
    health.set_assigned(True)
    health.set_partition("src", 0, "rebuilding")
    status, _, body = await _get(server.port, "/readyz")
    assert status == 503 and b"src/0:rebuilding" in body
    health.set_partition("src", 0, "ready")
    assert (await _get(server.port, "/readyz?verbose=1"))[0] == 200


async def test_unknown_path_method_and_garbage(served: Served) -> None:
    server, _, _ = served
    assert (await _get(server.port, "/"))[0] == 404
    assert (await _get(server.port, "/metrics/extra"))[0] == 404
    status, headers, _ = await _request(server.port, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
    assert status == 405 and headers["allow"] == "GET, HEAD"
    assert (await _request(server.port, b"hello\r\n\r\n"))[0] == 400
    assert (await _request(server.port, b"GET /livez HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n"))[0] == 431


async def test_head_sends_headers_without_body(served: Served) -> None:
    server, _, _ = served
    status, headers, body = await _request(server.port, b"HEAD /metrics HTTP/1.1\r\n\r\n")
    assert status == 200 and int(headers["content-length"]) > 0 and body == b""


async def test_stop_closes_the_port_and_port_needs_start() -> None:
    server = HealthServer(Metrics().render, Health(), "127.0.0.1", 0)
    with pytest.raises(RuntimeError, match="not started"):
        _ = server.port
    await server.start()
    port = server.port
    await server.stop()
    await server.stop()  # idempotent
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)


async def test_stop_drops_an_idle_connection() -> None:
    server = HealthServer(Metrics().render, Health(), "127.0.0.1", 0)
    await server.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    await asyncio.sleep(0)  # let the server accept it
    await asyncio.wait_for(server.stop(), 10)
    assert await asyncio.wait_for(reader.read(), 10) == b""
    writer.close()


class BrokenMetrics(Metrics):
    def render(self) -> bytes:
        raise RuntimeError("collector exploded")


async def test_a_failing_handler_answers_500_and_keeps_serving() -> None:
    server = HealthServer(BrokenMetrics().render, Health(), "127.0.0.1", 0)
    await server.start()
    try:
        status, _, body = await _get(server.port, "/metrics")
        assert status == 500 and b"/metrics" in body
        assert (await _get(server.port, "/livez"))[0] == 200
    finally:
        await server.stop()
