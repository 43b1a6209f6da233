"""Bad input against a real broker and worker: unknown run, malformed cursor, bad or expired token, oversized or
malformed POST body, clients that never read. Each gets a clear answer; the others are served meanwhile."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest

from tests.gateway.support import (
    GatewayProcess,
    Topics,
    never_reading,
    read_stream,
    run_scenario,
    start_worker,
    wait_converted,
    wait_known,
)
from tests.kafka.conftest import TopicFactory
from tests.kafka.support import Run, corpus, interleave, produce
from worker.gateway import mint_token

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

KEY = b"k" * 48


async def _json(session: aiohttp.ClientSession, method: str, url: str, **kwargs: object) -> tuple[int, dict]:
    async with session.request(method, url, **kwargs) as resp:  # type: ignore[arg-type]
        return resp.status, await resp.json()


def test_bad_requests_get_clear_answers_and_a_client_that_never_reads_is_dropped(
    kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    topics = Topics.create(topic_factory)
    key_file = tmp_path / "gateway.key"
    key_file.write_bytes(KEY + b"\n")
    finished = corpus(names=["s01_hello", "r0002"])
    big = corpus(3, names=["s09_big_fragments", "r0005"])[2:]  # live, large events
    worker = start_worker(tmp_path, kafka_bootstrap, topics)
    gateway = GatewayProcess(tmp_path, kafka_bootstrap, topics,
                             ("--auth-key-file", str(key_file), "--connection-queue-events", "16"))  # fmt: skip

    def auth(subject: str, scope: str = "run", ttl: int = 600) -> dict[str, str]:
        return {"Authorization": f"Bearer {mint_token(KEY, scope, subject, ttl)}"}  # type: ignore[arg-type]

    async def scenario() -> None:
        await produce(kafka_bootstrap, topics.source, interleave(finished))
        await wait_converted(kafka_bootstrap, topics, [r.key for r in finished])
        gateway.start()
        run = finished[0]
        url = f"{gateway.url}/runs/{run.key}"
        async with aiohttp.ClientSession() as session:
            await wait_known(session, gateway, [run.key], headers=auth(run.key))
            cases = [
                ("GET", f"{url}/events", {}, 401, "no-token"),
                ("GET", f"{url}/events", {"headers": {"Authorization": "Bearer v1.run.x.1.y"}}, 401, "bad-token"),
                ("GET", f"{url}/events",
                 {"headers": {"Authorization": f"Bearer {mint_token(KEY, 'run', run.key, 1, now=0)}"}}, 401,
                 "expired-token"),
                ("GET", f"{url}/events", {"headers": auth(finished[1].key)}, 403, "forbidden"),
                ("GET", f"{url}/events?token={mint_token(KEY, 'run', 'other', 60)}", {}, 403, "forbidden"),
                ("GET", f"{gateway.url}/runs/run-nope/events", {"headers": auth("run-nope")}, 404, "unknown-run"),
                ("GET", f"{url}/events", {"headers": {**auth(run.key), "Last-Event-ID": "garbage"}}, 400, "bad-cursor"),
                ("GET", f"{url}/events?after=-3", {"headers": auth(run.key)}, 400, "bad-cursor"),
                ("POST", url, {"headers": auth(run.key), "data": b"{not json"}, 400, "bad-body"),
                ("POST", url, {"headers": auth(run.key), "json": {"threadId": "t", "runId": "another"}}, 400,
                 "bad-body"),
                ("POST", url, {"headers": auth(run.key), "data": b"[" + b"1," * 600_000 + b"1]"}, 413,
                 "body-too-large"),
            ]
            for method, target, kwargs, status, code in cases:
                got, body = await _json(session, method, target, **kwargs)
                assert (got, body.get("error")) == (status, code), (method, target, got, body)
                assert body["message"], body

            # A thread token grants the run; a query token works for EventSource.
            thread = (await _json(session, "GET", f"{url}/display", headers=auth(run.key)))[1]["threadId"]
            status, frames, ended = await read_stream(session, f"{url}/events", headers=auth(thread, "thread"))
            assert status == 200 and ended and len(frames) == len(run.events)
            token = mint_token(KEY, "run", run.key, 60)
            status, frames, ended = await read_stream(session, f"{url}/events?token={token}")
            assert status == 200 and ended and len(frames) == len(run.events)

            # A client that never reads is dropped; a reading client of the same runs gets every event.
            await produce(kafka_bootstrap, topics.source, [(r.key.encode(), r.lines[0]) for r in big])
            await wait_converted(kafka_bootstrap, topics, [r.key for r in big])
            for r in big:
                await wait_known(session, gateway, [r.key], headers=auth(r.key))
            stalled = [never_reading(gateway.port, f"/runs/{r.key}/events?token={mint_token(KEY, 'run', r.key, 600)}")
                       for r in big]  # fmt: skip
            readers = [asyncio.create_task(read_stream(session, f"{gateway.url}/runs/{r.key}/events",
                                                       headers=auth(r.key))) for r in big]  # fmt: skip
            await asyncio.sleep(0.5)
            await produce(kafka_bootstrap, topics.source, interleave([Run(r.key, r.lines[1:]) for r in big]),
                          pace_s=0.01)
            for r, reader in zip(big, readers, strict=True):
                status, frames, ended = await reader
                assert status == 200 and ended and [f.data.encode() for f in frames] == r.events
            # The golden runs are too small to fill the loopback socket buffers of a client that never reads, so
            # whether it is dropped is not asserted here (tests/gateway/test_fanout.py drops one by its bound).
            for sock in stalled:
                sock.close()
            # Still serving.
            status, frames, ended = await read_stream(session, f"{url}/events", headers=auth(run.key))
            assert status == 200 and ended and len(frames) == len(run.events)
            assert gateway.metric("harness_agui_gateway_failed_requests_total", code="bad-token") >= 1

    run_scenario(scenario(), gateway, worker)
