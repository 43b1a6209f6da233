"""JWTs at a running gateway over a real broker and worker: tokens minted by `jose` under Node and by PyJWT
(HS256 with the gateway's keys, RS256 and ES256 by an identity provider whose JWKS is served here) open a run's
stream; each bad token is refused with its code before the run is looked up; a key the provider publishes later
is accepted without a restart; v1 tokens still work."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import aiohttp
import pytest

from tests.gateway.jwt_support import AUDIENCE, ISSUER, JwksServer, SigningKey, claims, mint, node_tokens
from tests.gateway.support import (
    GatewayProcess,
    Topics,
    read_stream,
    run_scenario,
    start_worker,
    wait_converted,
    wait_known,
)
from tests.kafka.conftest import TopicFactory
from tests.kafka.support import corpus, interleave, produce
from worker.gateway import mint_token

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

KEY = b"k" * 48
ROTATED_KEY = b"r" * 32


def test_jwts_from_node_and_python_open_streams_and_bad_ones_are_refused_before_the_run_is_looked_up(
    kafka_bootstrap: str, topic_factory: TopicFactory, tmp_path: Path
) -> None:
    topics = Topics.create(topic_factory)
    (tmp_path / "gateway.key").write_bytes(KEY)
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "2026-01").write_bytes(ROTATED_KEY)
    runs = corpus(names=["s01_hello", "s02_tool_roundtrip"])
    run = runs[0]
    thread = str(json.loads(run.lines[0])["thread_id"])
    rsa_key, ec_key = SigningKey("idp-1", "RS256"), SigningKey("idp-2", "ES256")
    later_key = SigningKey("idp-3", "RS256")
    worker = start_worker(tmp_path, kafka_bootstrap, topics)
    gateway = GatewayProcess(tmp_path, kafka_bootstrap, topics)

    async def scenario() -> None:
        await produce(kafka_bootstrap, topics.source, interleave(runs))
        await wait_converted(kafka_bootstrap, topics, [r.key for r in runs])
        node = await node_tokens(tmp_path, [
            {"label": "jose HS256 thread", "alg": "HS256", "secret": ROTATED_KEY.decode(), "kid": "2026-01",
             "claims": claims(thread_id=thread)},
            {"label": "jose RS256", "alg": "RS256", "jwk": rsa_key.private_jwk(), "kid": rsa_key.kid,
             "claims": claims(run_id=run.key)},
            {"label": "jose ES256", "alg": "ES256", "jwk": ec_key.private_jwk(), "kid": ec_key.kid,
             "claims": claims(run_id=run.key)},
            {"label": "jose unsigned", "alg": "none", "claims": claims(run_id=run.key)},
            {"label": "jose confusion", "alg": "HS256", "secret": rsa_key.public_pem().decode(), "kid": rsa_key.kid,
             "claims": claims(run_id=run.key)},
        ])  # fmt: skip
        async with JwksServer([rsa_key, ec_key]) as idp:
            gateway.extra = ("--auth-key-file", str(tmp_path / "gateway.key"), "--auth-keys-dir",
                             str(tmp_path / "keys"), "--auth-jwks-url", idp.url, "--auth-audience", AUDIENCE,
                             "--auth-issuer", ISSUER, "--auth-keys-min-refresh-s", "1")  # fmt: skip
            await asyncio.to_thread(gateway.start)
            now = int(time.time())
            accepted = {**{label: node[label] for label in ("jose HS256 thread", "jose RS256", "jose ES256")},
                        "PyJWT HS256": mint(KEY, claims(run_id=run.key)),
                        "PyJWT ES256": mint(ec_key, claims(thread_id=thread)),
                        "v1": mint_token(KEY, "run", run.key, 600)}  # fmt: skip
            refused = {
                "jose unsigned": (node["jose unsigned"], "unsigned-token"),
                "jose confusion": (node["jose confusion"], "wrong-algorithm"),
                "PyJWT expired": (mint(rsa_key, claims(run_id=run.key, exp=now - 600)), "expired-token"),
                "PyJWT not yet valid": (mint(KEY, claims(run_id=run.key, nbf=now + 600)), "premature-token"),
                "PyJWT another audience": (mint(rsa_key, claims(run_id=run.key, aud="other")), "wrong-audience"),
                "PyJWT another issuer": (mint(ec_key, claims(run_id=run.key, iss="https://x.example")),
                                         "wrong-issuer"),
                "PyJWT unknown kid": (mint(KEY, claims(run_id=run.key), kid="2025-12"), "unknown-key"),
            }
            async with aiohttp.ClientSession() as session:
                await wait_known(session, gateway, [run.key], headers={"Authorization": f"Bearer {accepted['v1']}"})
                for label, token in accepted.items():
                    status, frames, ended = await read_stream(session, f"{gateway.url}/runs/{run.key}/events",
                                                              headers={"Authorization": f"Bearer {token}"})
                    assert (label, status, ended, [f.data.encode() for f in frames]) == (label, 200, True, run.events)
                for label, (token, code) in refused.items():
                    for target in (run.key, "run-that-does-not-exist"):  # refused before the run is looked up
                        async with session.get(f"{gateway.url}/runs/{target}/display?token={token}") as resp:
                            body = await resp.json()
                            assert (label, resp.status, body["error"]) == (label, 401, code), body
                            assert body["message"]

                idp.keys.append(later_key)  # the provider rotates: a new kid, no restart of the gateway
                await asyncio.sleep(1.1)  # the rate limit of re-reads on an unknown kid (1 s here)
                token = mint(later_key, claims(run_id=run.key))
                async with session.get(f"{gateway.url}/runs/{run.key}/display",
                                       headers={"Authorization": f"Bearer {token}"}) as resp:  # fmt: skip
                    assert resp.status == 200, await resp.text()
            assert gateway.metric("harness_agui_gateway_failed_requests_total", code="wrong-algorithm") == 2
            assert "Traceback" not in gateway.log()
            assert gateway.stop() == 0, gateway.log()[-3000:]

    run_scenario(scenario(), gateway, worker)
