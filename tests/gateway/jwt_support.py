"""JWT-test plumbing: an identity provider's signing keys and their JWKS served on loopback, and tokens minted
with PyJWT or with the `jose` package under Node."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jwt
from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from tests.gateway.support import node_results, start_node

AUDIENCE = "agui-gateway"
ISSUER = "https://idp.example"


@dataclass
class SigningKey:
    """A key pair of the identity provider, named `kid`, signing `alg` (RS256 or ES256)."""

    kid: str
    alg: str
    private: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey = field(init=False)

    def __post_init__(self) -> None:
        self.private = (rsa.generate_private_key(public_exponent=65537, key_size=2048) if self.alg == "RS256"
                        else ec.generate_private_key(ec.SECP256R1()))  # fmt: skip

    def _jwk(self, key: Any) -> dict[str, Any]:
        text = (RSAAlgorithm if self.alg == "RS256" else ECAlgorithm).to_jwk(key)
        return {**json.loads(text), "kid": self.kid, "alg": self.alg}

    def public_jwk(self) -> dict[str, Any]:
        return {**self._jwk(self.private.public_key()), "use": "sig"}

    def private_jwk(self) -> dict[str, Any]:
        return self._jwk(self.private)

    def public_pem(self) -> bytes:
        return self.private.public_key().public_bytes(serialization.Encoding.PEM,
                                                      serialization.PublicFormat.SubjectPublicKeyInfo)  # fmt: skip


@dataclass
class JwksServer:
    """`GET /jwks` on 127.0.0.1 in the running event loop: the public JWKs of `keys` (plus `extra` raw JWKs) after
    `delay_s`, or 503 while `down`; `fetches` counts the requests."""

    keys: list[SigningKey]
    extra: list[dict[str, Any]] = field(default_factory=list)
    down: bool = False
    delay_s: float = 0.0
    fetches: int = 0
    _runner: web.AppRunner | None = None
    port: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/jwks"

    async def _serve(self, request: web.Request) -> web.Response:
        self.fetches += 1
        await asyncio.sleep(self.delay_s)
        if self.down:
            return web.json_response({"error": "unavailable"}, status=503)
        return web.json_response({"keys": [k.public_jwk() for k in self.keys] + self.extra})

    async def __aenter__(self) -> JwksServer:
        app = web.Application()
        app.router.add_get("/jwks", self._serve)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


def claims(*, ttl_s: int = 600, **values: Any) -> dict[str, Any]:
    """A JWT payload expiring in `ttl_s`, with the gateway's audience and issuer unless `values` says otherwise
    (a value None leaves the claim out)."""
    now = int(time.time())
    payload = {"iss": ISSUER, "aud": AUDIENCE, "iat": now, "exp": now + ttl_s, **values}
    return {name: value for name, value in payload.items() if value is not None}


def mint(key: bytes | SigningKey, payload: dict[str, Any], *, kid: str | None = None, alg: str | None = None) -> str:
    """A JWT minted with PyJWT: HS256 with an HMAC key, or the signing key's algorithm and kid."""
    if isinstance(key, SigningKey):
        return jwt.encode(payload, key.private, algorithm=alg or key.alg, headers={"kid": kid or key.kid})
    return jwt.encode(payload, key, algorithm=alg or "HS256", headers=None if kid is None else {"kid": kid})


async def node_tokens(tmp_path: Path, jobs: list[dict[str, Any]]) -> dict[str, str]:
    """Label -> JWT minted by tests/gateway/node/tokens.mjs (`jose`) for each job."""
    path = tmp_path / f"token-jobs-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(jobs))
    return {r["label"]: r["token"] for r in await node_results(await start_node("tokens.mjs", str(path)), 60)}
