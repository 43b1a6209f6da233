"""A minimal OIDC issuer for the secured broker's tests: a JWKS endpoint the brokers validate JWTs against, and a
client-credentials token endpoint that signs them (RS256), on loopback in a thread of the test process."""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.parse
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

__all__ = ["OidcIssuer"]

_KID = "test-key-1"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _uint(value: int) -> str:
    return _b64url(value.to_bytes((value.bit_length() + 7) // 8, "big"))


@dataclass
class OidcIssuer:
    """Serves `/jwks` and `/token`; `clients` maps client ids to secrets, and a token's `sub` is its client id.
    `token_seconds` is every token's lifetime; `requests` counts the token requests answered with a token."""

    audience: str = "kafka"
    clients: dict[str, str] = field(default_factory=dict)
    token_seconds: int = 3600
    requests: int = 0
    refused: int = 0

    def __post_init__(self) -> None:
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._lock = threading.Lock()
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/jwks":
                    self._reply(200, issuer.jwks())
                else:
                    self._reply(404, {"error": "not_found"})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                form = urllib.parse.parse_qs(self.rfile.read(length).decode())
                status, body = issuer.answer(self.headers.get("Authorization", ""), form)
                self._reply(status, body)

            def _reply(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="oidc-issuer", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def issuer(self) -> str:
        return self.url

    @property
    def jwks_url(self) -> str:
        return f"{self.url}/jwks"

    @property
    def token_url(self) -> str:
        return f"{self.url}/token"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def jwks(self) -> dict[str, Any]:
        numbers = self._key.public_key().public_numbers()
        return {"keys": [{"kty": "RSA", "use": "sig", "alg": "RS256", "kid": _KID, "n": _uint(numbers.n),
                          "e": _uint(numbers.e)}]}  # fmt: skip

    def token(self, subject: str, *, seconds: int | None = None, scope: str = "") -> str:
        """A signed JWT for `subject`, as the token endpoint issues it."""
        now = int(time.time())
        claims = {"sub": subject, "aud": self.audience, "iss": self.issuer, "iat": now, "jti": uuid.uuid4().hex,
                  "exp": now + (self.token_seconds if seconds is None else seconds)}  # fmt: skip
        if scope:
            claims["scope"] = scope
        header = {"alg": "RS256", "typ": "JWT", "kid": _KID}
        signed = f"{_b64url(json.dumps(header).encode())}.{_b64url(json.dumps(claims).encode())}"
        signature = self._key.sign(signed.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signed}.{_b64url(signature)}"

    def answer(self, authorization: str, form: dict[str, list[str]]) -> tuple[int, dict[str, Any]]:
        """The token endpoint: a client-credentials grant, the client authenticated by HTTP Basic or the form."""
        client_id, secret = (form.get("client_id", [""])[0], form.get("client_secret", [""])[0])
        if authorization.startswith("Basic "):
            pair = base64.b64decode(authorization.removeprefix("Basic ")).decode()
            client_id, _, secret = (urllib.parse.unquote_plus(part) for part in pair.partition(":"))
        with self._lock:
            if form.get("grant_type") != ["client_credentials"]:
                self.refused += 1
                return 400, {"error": "unsupported_grant_type"}
            if not client_id or self.clients.get(client_id) != secret:
                self.refused += 1
                return 401, {"error": "invalid_client", "error_description": "client authentication failed"}
            self.requests += 1
        scope = form.get("scope", [""])[0]
        return 200, {"access_token": self.token(client_id, scope=scope), "token_type": "Bearer",
                     "expires_in": self.token_seconds}  # fmt: skip
